"""Fuzzing every HTTP endpoint of every service (issue #8, item 2).

Requests get malformed bodies (mutated valid messages, random bytes, JSON junk), wrong or
missing media types, bad authentication, and ids that are bad base64url, of the wrong length,
or unknown. Every answer must be below 500, arrive quickly, and, when it is an error, be an
RFC 9457 problem document whose `status` matches the HTTP status. (TestClient re-raises
server exceptions, so a crash fails the test with its traceback.)
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.dap.ids import AggregationJobId, CollectionJobId, ReportId, TaskId
from shared.dap.messages import (
    MEDIA_AGGREGATE_SHARE_REQ,
    MEDIA_AGGREGATION_JOB_CONTINUE_REQ,
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    MEDIA_COLLECT_REQ,
    MEDIA_REPORT,
    AggregateShareReq,
    AggregationJobContinueReq,
    AggregationJobInitReq,
    BatchSelector,
    CollectionReq,
    PartialBatchSelector,
    PrepareContinue,
    Query,
)
from shared.dap.problems import MEDIA_PROBLEM
from shared.privacypass.attestation import DEVICE_ID_HEADER, NONCE_HEADER, SIGNATURE_HEADER
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, TokenRequest
from tests.adversaries.harness import AGGREGATOR_TOKEN, BUCKET, COLLECTOR_TOKEN
from tests.fuzz.apps import (
    ATTESTER_SECRET,
    Services,
    admin_auth,
    analyst_auth,
    collector_admin_auth,
)
from tests.fuzz.test_decoders import hostile
from tests.recipe.helpers import draft_json

HTTP = settings(
    max_examples=16,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
#: Seconds any single answer may take: a hang or a pathological input fails the test.
MAX_SECONDS = 5.0


def check(response: httpx.Response, elapsed: float) -> None:
    assert elapsed < MAX_SECONDS, f"{response.request.url} took {elapsed:.1f}s"
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith(MEDIA_PROBLEM), (
            response.status_code,
            response.headers.get("content-type"),
            response.text[:200],
        )
        doc = response.json()
        assert isinstance(doc, dict) and isinstance(doc.get("type"), str), doc
        assert isinstance(doc.get("title"), str), doc
        assert doc.get("status", response.status_code) == response.status_code, doc


# --- what the fuzzer puts in ids, headers and bodies -----------------------------------------

BAD_IDS = [
    "",
    "a",
    "!!!!",
    "AAAA=",
    "AAAAAAAAAAAAAAAAAAAAAA==",
    "A" * 42,  # 31.5 bytes
    "A" * 44,  # 33 bytes
    "_" * 43,
    "AAAAAAAAAAAAAAAAAAAAAB",  # non-canonical trailing bits
    "..",
    "%00",
    "x" * 3000,
    "\u00e9\u00e8",
    "-1",
    "99999999999999999999999",
]


def ids(size: int, known: str) -> st.SearchStrategy[str]:
    """Known, unknown-but-well-formed, malformed: one of each kind of id."""
    unknown = st.binary(min_size=size, max_size=size).map(
        lambda b: TaskId(b).to_b64url() if size == 32 else AggregationJobId(b).to_b64url()
    )
    return st.one_of(
        st.just(known),
        unknown,
        st.sampled_from(BAD_IDS),
        st.text(max_size=50),
    )


def content_types(good: str | None) -> st.SearchStrategy[str | None]:
    options: list[str | None] = [
        None,
        "",
        "application/octet-stream",
        "application/json",
        "text/plain; charset=utf-8",
        "multipart/form-data; boundary=x",
        "*/*",
    ]
    if good is not None:
        options += [good, good + "; charset=utf-8", good.upper(), f"{good}, application/json"]
        return st.one_of(st.just(good), st.sampled_from(options))
    return st.sampled_from(options)


BAD_AUTH = [
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": "Bearer wrong-token-0123456789abcdef"},
    {"Authorization": "Basic Zm9vOmJhcg=="},
    {"Authorization": "bearer"},
    {"Authorization": "PrivateToken token=AAAA"},
    {"Authorization": "x" * 5000},
    {"DAP-Auth-Token": ""},
    {"DAP-Auth-Token": "wrong-token-0123456789"},
    {"DAP-Auth-Token": "\t"},
]


def auths(good: dict[str, str] | None) -> st.SearchStrategy[dict[str, str]]:
    if good is None:
        return st.sampled_from(BAD_AUTH)
    variants = [good, {k: v + "x" for k, v in good.items()}, {k: v[:-1] for k, v in good.items()}]
    return st.one_of(st.just(good), st.sampled_from(variants + BAD_AUTH))


JSON_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=8,
)


def json_bodies(seeds: list[Any]) -> st.SearchStrategy[bytes]:
    """Mutated JSON documents: a valid one with a member dropped, retyped, or the text mangled."""
    encoded = [json.dumps(s).encode() for s in seeds]

    def drop_or_retype(seed: Any, key_index: int, value: Any) -> bytes:
        if not isinstance(seed, dict) or not seed:
            return json.dumps(value).encode()
        doc = dict(seed)
        key = sorted(doc)[key_index % len(doc)]
        if value is None:
            del doc[key]
        else:
            doc[key] = value
        return json.dumps(doc).encode()

    return st.one_of(
        st.sampled_from(encoded),
        st.builds(drop_or_retype, st.sampled_from(seeds), st.integers(0, 50), JSON_JUNK),
        hostile(encoded),
        JSON_JUNK.map(lambda v: json.dumps(v).encode()),
    )


@dataclass
class Endpoint:
    name: str
    client: Callable[[Services], Any]
    method: str
    path: str  # {task} (32-byte id), {job} (16-byte id), {any} (free text)
    media_type: str | None = None
    auth: Callable[[Services], dict[str, str]] | None = None
    body: Callable[[Services], st.SearchStrategy[bytes]] | None = None
    query: list[str] = field(default_factory=list)
    extra_headers: Callable[[Services], st.SearchStrategy[dict[str, str]]] | None = None


def _agg_auth(_: Services) -> dict[str, str]:
    return {"DAP-Auth-Token": AGGREGATOR_TOKEN}


def _collector_auth(_: Services) -> dict[str, str]:
    return {"Authorization": f"Bearer {COLLECTOR_TOKEN}"}


def _attester(_: Services) -> dict[str, str]:
    return {"Authorization": f"Bearer {ATTESTER_SECRET}"}


def _report_bodies(s: Services) -> st.SearchStrategy[bytes]:
    dep = s.aggregators
    return hostile([dep.seal_report(dep.shard(1)).encode()])


def _init_bodies(s: Services) -> st.SearchStrategy[bytes]:
    dep = s.aggregators
    init = dep.prepare_init(dep.shard(1))
    body = AggregationJobInitReq(b"", PartialBatchSelector.time_interval(), (init,))
    return hostile([body.encode()])


def _continue_bodies(_: Services) -> st.SearchStrategy[bytes]:
    body = AggregationJobContinueReq(1, (PrepareContinue(ReportId(bytes(16)), b"\x02"),))
    return hostile([body.encode()])


def _share_req_bodies(_: Services) -> st.SearchStrategy[bytes]:
    body = AggregateShareReq(BatchSelector.time_interval(BUCKET), b"", 2, bytes(32))
    return hostile([body.encode()])


def _collect_bodies(_: Services) -> st.SearchStrategy[bytes]:
    return hostile([CollectionReq(Query.time_interval(BUCKET), b"").encode()])


def _task_json(s: Services) -> st.SearchStrategy[bytes]:
    definition = s.aggregators.task.definition("helper")
    definition["task_id"] = TaskId.random().to_b64url()
    return json_bodies([definition, s.aggregators.task.definition("leader")])


def _collector_task_json(s: Services) -> st.SearchStrategy[bytes]:
    return json_bodies([s.collector_task])


def _collection_json(s: Services) -> st.SearchStrategy[bytes]:
    query = {"type": "time_interval", "start": BUCKET.start, "duration": BUCKET.duration}
    return json_bodies(
        [
            {"task_id": s.collector_task["task_id"], "query": query},
            {"task_id": s.collector_task["task_id"], "query": {"type": "current_batch"}},
        ]
    )


def _draft_json(_: Services) -> st.SearchStrategy[bytes]:
    return json_bodies([draft_json(recipe_id="keyboard.other", analysis_id="keyboard.other")])


def _token_request_bodies(_: Services) -> st.SearchStrategy[bytes]:
    return hostile([TokenRequest(0x2A, b"\x06" * 256).encode()])


def _enroll_json(s: Services) -> st.SearchStrategy[bytes]:
    return json_bodies([{"certificate": s.device.certificate_pem()}])


def _challenge_json(s: Services) -> st.SearchStrategy[bytes]:
    return json_bodies([{"device_id": s.device_id}])


def _device_headers(s: Services) -> st.SearchStrategy[dict[str, str]]:
    b64 = st.sampled_from([s.device_id, "", "!!", "A" * 43, "A" * 86, "x" * 600])
    return st.fixed_dictionaries(
        {},
        optional={DEVICE_ID_HEADER: b64, NONCE_HEADER: b64, SIGNATURE_HEADER: b64},
    )


def _leader(s: Services) -> Any:
    return s.leader


def _helper(s: Services) -> Any:
    return s.helper


def _dap(role: str, client: Callable[[Services], Any]) -> list[Endpoint]:
    job = "/tasks/{task}/aggregation_jobs/{job}"
    coll = "/tasks/{task}/collection_jobs/{job}"
    return [
        Endpoint(f"{role} GET hpke_config", client, "GET", "/hpke_config", query=["task_id"]),
        Endpoint(
            f"{role} PUT reports",
            client,
            "PUT",
            "/tasks/{task}/reports",
            MEDIA_REPORT,
            body=_report_bodies,
        ),
        Endpoint(
            f"{role} PUT agg job",
            client,
            "PUT",
            job,
            MEDIA_AGGREGATION_JOB_INIT_REQ,
            _agg_auth,
            _init_bodies,
        ),
        Endpoint(
            f"{role} POST agg job",
            client,
            "POST",
            job,
            MEDIA_AGGREGATION_JOB_CONTINUE_REQ,
            _agg_auth,
            _continue_bodies,
        ),
        Endpoint(f"{role} DELETE agg job", client, "DELETE", job, None, _agg_auth),
        Endpoint(
            f"{role} POST aggregate_shares",
            client,
            "POST",
            "/tasks/{task}/aggregate_shares",
            MEDIA_AGGREGATE_SHARE_REQ,
            _agg_auth,
            _share_req_bodies,
        ),
        Endpoint(
            f"{role} PUT collection job",
            client,
            "PUT",
            coll,
            MEDIA_COLLECT_REQ,
            _collector_auth,
            _collect_bodies,
        ),
        Endpoint(f"{role} POST collection job", client, "POST", coll, None, _collector_auth),
        Endpoint(f"{role} DELETE collection job", client, "DELETE", coll, None, _collector_auth),
        Endpoint(
            f"{role} PUT admin task",
            client,
            "PUT",
            "/internal/tasks/{task}",
            "application/json",
            admin_auth,
            _task_json,
        ),
        Endpoint(
            f"{role} GET admin task", client, "GET", "/internal/tasks/{task}", None, admin_auth
        ),
        Endpoint(
            f"{role} GET stats", client, "GET", "/internal/tasks/{task}/stats", None, admin_auth
        ),
        Endpoint(f"{role} GET metrics", client, "GET", "/metrics", None, admin_auth),
        Endpoint(
            f"{role} POST rotate", client, "POST", "/internal/hpke_keys/rotate", None, admin_auth
        ),
        Endpoint(f"{role} PATCH unknown method", client, "PATCH", "/tasks/{task}/reports"),
        Endpoint(f"{role} GET unknown path", client, "GET", "/{any}"),
    ]


def _collector(s: Services) -> Any:
    return s.collector


def _recipes(s: Services) -> Any:
    return s.recipe_server


def _issuer(s: Services) -> Any:
    return s.issuer


ENDPOINTS: list[Endpoint] = [
    *_dap("leader", _leader),
    *_dap("helper", _helper),
    Endpoint(
        "collector PUT task",
        _collector,
        "PUT",
        "/internal/tasks/{task}",
        "application/json",
        collector_admin_auth,
        _collector_task_json,
    ),
    Endpoint(
        "collector POST collections",
        _collector,
        "POST",
        "/collections",
        "application/json",
        collector_admin_auth,
        _collection_json,
    ),
    Endpoint(
        "collector GET task",
        _collector,
        "GET",
        "/internal/tasks/{task}",
        None,
        collector_admin_auth,
    ),
    Endpoint(
        "collector GET collection",
        _collector,
        "GET",
        "/collections/{job}",
        None,
        collector_admin_auth,
    ),
    Endpoint("collector GET unknown", _collector, "GET", "/{any}"),
    Endpoint("collector GET metrics", _collector, "GET", "/metrics", None, collector_admin_auth),
    Endpoint("recipes GET metrics", _recipes, "GET", "/metrics"),
    Endpoint("issuer GET metrics", _issuer, "GET", "/metrics"),
    Endpoint(
        "recipes POST", _recipes, "POST", "/recipes", "application/json", analyst_auth, _draft_json
    ),
    Endpoint("recipes GET list", _recipes, "GET", "/recipes"),
    Endpoint("recipes GET one", _recipes, "GET", "/recipes/{any}", query=["version", "tree_size"]),
    Endpoint("recipes GET sth", _recipes, "GET", "/log/sth/{any}"),
    Endpoint(
        "recipes GET consistency", _recipes, "GET", "/log/consistency", query=["first", "second"]
    ),
    Endpoint(
        "recipes GET inclusion",
        _recipes,
        "GET",
        "/log/inclusion",
        query=["leaf_index", "tree_size", "leaf_hash"],
    ),
    Endpoint("recipes GET keys", _recipes, "GET", "/keys"),
    Endpoint("issuer GET directory", _issuer, "GET", ISSUER_DIRECTORY_PATH),
    Endpoint(
        "issuer POST token-request",
        _issuer,
        "POST",
        "/token-request",
        MEDIA_TOKEN_REQUEST,
        _attester,
        _token_request_bodies,
    ),
    Endpoint(
        "attester POST enroll",
        _issuer,
        "POST",
        "/attester/enroll",
        "application/json",
        None,
        _enroll_json,
    ),
    Endpoint(
        "attester POST challenge",
        _issuer,
        "POST",
        "/attester/challenge",
        "application/json",
        None,
        _challenge_json,
    ),
    Endpoint(
        "attester POST token-request",
        _issuer,
        "POST",
        "/attester/token-request",
        MEDIA_TOKEN_REQUEST,
        None,
        _token_request_bodies,
        extra_headers=_device_headers,
    ),
]

#: Integers around the int64 / uint64 limits (database integers are signed 64-bit).
BIG = ["9223372036854775807", "9223372036854775808", "18446744073709551616", "1" + "0" * 40]
QUERY_VALUES = st.one_of(
    st.sampled_from(["0", "1", "-1", "", "abc", "1e3", "0x10", " 1", *BIG]),
    st.sampled_from(BAD_IDS),
    st.text(max_size=20),
)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.name)
@HTTP
@given(data=st.data())
def test_endpoint_answers_hostile_requests_with_problems(
    svc: Services, endpoint: Endpoint, data: st.DataObject
) -> None:
    # Mostly one thing wrong at a time, so each fault reaches the code behind the others.
    fault = data.draw(st.sampled_from(["body", "body", "body", "id", "ctype", "auth", "all"]))
    tid = svc.aggregators.tid
    path = endpoint.path
    if "{task}" in path:
        known = svc.collector_task["task_id"] if endpoint.name.startswith("collector") else tid
        task = data.draw(ids(32, known), "task id") if fault in ("id", "all") else known
        path = path.replace("{task}", _quote(task))
    if "{job}" in path:
        fresh = CollectionJobId.random().to_b64url()
        job = data.draw(ids(16, fresh), "job id") if fault in ("id", "all") else fresh
        path = path.replace("{job}", _quote(job))
    if "{any}" in path:
        values = QUERY_VALUES | st.just("keyboard.fuzz")
        path = path.replace("{any}", _quote(data.draw(values)))
    params = {
        name: value
        for name in endpoint.query
        if (value := data.draw(st.none() | QUERY_VALUES | st.just(tid), name)) is not None
    }
    headers: dict[str, str] = {}
    content_type = (
        data.draw(content_types(endpoint.media_type), "content type")
        if fault in ("ctype", "all")
        else endpoint.media_type
    )
    if content_type is not None:
        headers["Content-Type"] = content_type
    good_auth = endpoint.auth(svc) if endpoint.auth is not None else None
    if fault in ("auth", "all") or good_auth is None:
        headers.update(data.draw(auths(good_auth), "auth"))
    else:
        headers.update(good_auth)
    if endpoint.extra_headers is not None:
        headers.update(data.draw(endpoint.extra_headers(svc), "headers"))
    body = b""
    if endpoint.body is not None:
        body = data.draw(endpoint.body(svc) | st.binary(max_size=64), "body")
    elif endpoint.method in ("POST", "PUT"):
        body = data.draw(st.binary(max_size=32), "body")
    started = time.monotonic()
    response = endpoint.client(svc).request(
        endpoint.method, path, params=params, headers=headers, content=body
    )
    check(response, time.monotonic() - started)


def test_the_fuzzed_services_still_work(svc: Services) -> None:
    """After all that, the honest paths still answer (nothing was wedged or corrupted)."""
    dep = svc.aggregators
    assert dep.leader.get("/healthz").status_code == 200
    assert dep.helper.get("/healthz").status_code == 200
    assert svc.collector.get("/healthz").status_code == 200
    assert svc.recipe_server.get(f"/recipes/{svc.recipe_id}").status_code == 200
    assert svc.issuer.get(ISSUER_DIRECTORY_PATH).status_code == 200


@pytest.mark.parametrize(
    "endpoint",
    [e for e in ENDPOINTS if e.media_type == "application/json" and e.client is not _collector],
    ids=lambda e: e.name,
)
def test_deeply_nested_json_bodies(svc: Services, endpoint: Endpoint) -> None:
    """100000 nested arrays: a parser's recursion limit must end in a 4xx, not a crash.
    (The collector's two JSON routes fail this: test_known_bugs.py.)"""
    path = endpoint.path.replace("{task}", svc.aggregators.tid)
    headers = {"Content-Type": "application/json"}
    if endpoint.auth is not None:
        headers.update(endpoint.auth(svc))
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    started = time.monotonic()
    response = endpoint.client(svc).request(endpoint.method, path, headers=headers, content=deep)
    check(response, time.monotonic() - started)
    assert 400 <= response.status_code < 500
