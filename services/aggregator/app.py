"""HTTP surface of the aggregator: the DAP-09 and DAP-19 endpoints (digests dap-09.md §4,
dap-19.md §4) and the admin API.

Both versions share paths; the task's version (`TaskDefinition.dap`) picks the method, the
media types and the codec (dap-19.md §15), and the other version's method gets 405. The task's
role decides which routes answer; the other role gets `unrecognizedTask`.
- GET  /hpke_config[?task_id=]   both; `Accept: application/ppm-dap` gets DAP-19's media type
- PUT  /tasks/{task_id}/reports (DAP-09) | POST (DAP-19, bulk)      (leader, `upload_route`)
- PUT  /tasks/{task_id}/aggregation_jobs/{id}            (helper, DAP-09 create)
- POST /tasks/{task_id}/aggregation_jobs                 (helper, DAP-19 create, Location)
- GET  /tasks/{task_id}/aggregation_jobs/{id}            (helper, DAP-19 poll)
- POST|DELETE /tasks/{task_id}/aggregation_jobs/{id}     (helper, continue / delete; both)
- POST /tasks/{task_id}/aggregate_shares                 (helper; both)
- GET|DELETE /tasks/{task_id}/aggregate_shares/{id}      (helper, DAP-19)
- PUT|POST /tasks/{task_id}/collection_jobs/{id}         (leader, DAP-09 create / poll)
- POST /tasks/{task_id}/collection_jobs                  (leader, DAP-19 create, Location)
- GET  /tasks/{task_id}/collection_jobs/{id}             (leader, DAP-19 poll)
- DELETE /tasks/{task_id}/collection_jobs/{id}           (leader; both)

Admin API (Authorization: Bearer <admin token>; 401 without a token, 403 with one not allowed
for the route). The provisioning token (the recipe server's) may only call the first two:
- PUT    /internal/tasks/{task_id}   TaskDefinition JSON -> 201 {"task_id"} created,
                                     200 identical exists, 409 a different one exists,
                                     400 invalid (e.g. a token issuer not in token_issuers)
- GET    /internal/tasks/{task_id}   the definition's public parameters: never the VDAF verify
                                     key or a token (no API hands out a task's secrets)
- DELETE /internal/tasks/{task_id}   204
- GET    /internal/tasks/{task_id}/stats  counts: reports, jobs and collections by state,
                                     refused reports by stage and reason, open batches
- POST   /internal/hpke_keys/rotate  {"config_id": n}: the new key is listed first
- GET    /metrics                    the same counts for every task, Prometheus text format
                                     0.0.4 (admin token too: task ids are not public)
- GET    /healthz                    {"status": "ok"} once the store is migrated, else 503

With taskprov on (`services.aggregator.taskprov`), a request whose DAP-Taskprov header announces
a task this aggregator does not know yet goes to the DAP-19 route, which opts in or refuses.

Request bodies must carry their version's DAP media type (415 `invalidMessage` otherwise).
Blocking work (database, HPKE, VDAF) runs in the thread pool, never on the event loop. Uploads
bypass FastAPI (`upload_route`) and are stored in groups (`uploads`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from services.aggregator import dap19_collection, dap19_helper
from services.aggregator.answer import Answer
from services.aggregator.datastore import Datastore
from services.aggregator.metrics import AggregatorCollector, task_stats
from services.aggregator.service import Aggregator, Task
from services.aggregator.settings import AggregatorSettings
from services.aggregator.upload_route import UploadGate, handle_upload, upload_task_id
from services.aggregator.wire import Wire19
from services.common.auth import DAP_CREDENTIALS, BearerAuth, token_hash
from services.common.clock import Clock, RealClock
from services.common.crypter import crypter_from
from services.common.db import Database
from services.common.health import install_healthz
from services.common.http import http_client
from services.common.limits import install_body_limit
from services.common.metrics import RequestMetrics, install_metrics
from services.common.problems import (
    DapProblemError,
    HttpProblemError,
    ServiceError,
    install_problem_handlers,
)
from services.common.routing import (
    answers_invalid,
    api_router,
    binary_body,
    binary_response,
    created_or_found,
)
from shared import hpke
from shared.codec import DecodeError
from shared.dap import messages as dap
from shared.dap import messages19 as dap19
from shared.dap import taskprov
from shared.dap.ids import TaskId
from shared.dap.problems import ProblemType
from shared.dap.task import TaskDefinition

log = logging.getLogger(__name__)

HTTP_UNSUPPORTED_MEDIA_TYPE = 415
HTTP_METHOD_NOT_ALLOWED = 405
#: Stored (sealed) with the definition, but never in an answer: DAP-09 §4.2 gives the verify key
#: to the aggregators only, and Prio3 derives its proof's query randomness from it, so a client
#: that learned it could make an invalid measurement pass verification.
UNSHOWN_FIELDS = ("vdaf_verify_key",)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _unsupported_media(task_id: str, media_type: str) -> DapProblemError:
    return DapProblemError(
        ProblemType.INVALID_MESSAGE,
        f"expected Content-Type {media_type}",
        task_id=task_id,
        status=HTTP_UNSUPPORTED_MEDIA_TYPE,
    )


async def _body(request: Request, media_type: str, task_id: str) -> bytes:
    if _media_type(request) != media_type:
        raise _unsupported_media(task_id, media_type)
    return await request.body()


async def _body19(request: Request, media_type: str, task_id: str) -> bytes:
    """The body of a DAP-19 request whose `message` is that of `media_type` (parameters read
    leniently, DAP-19 §9.1)."""
    wanted = dap19.media_type_message(media_type)
    if dap19.media_type_message(request.headers.get("content-type", "")) != wanted:
        raise _unsupported_media(task_id, media_type)
    return await request.body()


def _respond(answer: Answer, media_type: str | None = None) -> Response:
    has_body = answer.status in (200, 201) and answer.body
    return Response(
        content=answer.body if has_body else b"",
        status_code=answer.status,
        media_type=(answer.media_type or media_type) if has_body else None,
        headers=answer.headers,
    )


def _not_allowed(task_id: str, allow: str) -> ServiceError:
    """The task's DAP version has no such route (DAP-09 and DAP-19 share paths, §15)."""
    return ServiceError(
        "Method Not Allowed",
        status=HTTP_METHOD_NOT_ALLOWED,
        task_id=task_id,
        headers={"Allow": allow},
    )


#: The upload route's template, for the request latency of the fast path.
UPLOAD_ROUTE = "/tasks/{task_id}/reports"


class _AggregatorApp(FastAPI):
    """The FastAPI app, with uploads answered before FastAPI's stack (`upload_route`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task_id = upload_task_id(scope)
        if task_id is not None:
            state = self.state
            upload = functools.partial(handle_upload, state.aggregator, state.upload_gate, task_id)
            timer: RequestMetrics = state.request_metrics
            await timer.timed(upload, scope, receive, send, route=UPLOAD_ROUTE)
            return
        await super().__call__(scope, receive, send)


class TaskCreated(BaseModel):
    """The answer to a task definition: created (201) or already there (200)."""

    task_id: str


class KeyRotated(BaseModel):
    """The config id of the new HPKE key, now listed first."""

    config_id: int


def _invalid_definition(task_id: str, exc: RequestValidationError) -> Response:
    # Only locations and messages: the input may hold tokens and keys.
    errors = [
        f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"  # [1:]: FastAPI's "body"
        for e in exc.errors()
    ]
    detail = "; ".join(errors)
    return ServiceError(
        "invalid task definition", detail=detail, status=400, task_id=task_id
    ).response()


def open_aggregator(
    settings: AggregatorSettings,
    *,
    clock: Clock | None = None,
    database: Database | None = None,
    issuer_http: httpx.Client | None = None,
    metrics: CollectorRegistry | None = None,
) -> Aggregator:
    """The aggregator over the store at `settings.database_url`, migrated and with an HPKE key.

    Every process on one store calls this at start (API and driver-only processes alike):
    migrations and the first key are safe to race."""
    db = database or Database.open(settings.database_url, pool_size=settings.pg_pool_size)
    crypter = crypter_from(settings.datastore_keys, "aggregator")
    fresh = settings.fresh_job_cache_mib * 2**20 if settings.run_drivers else 0
    ds = Datastore(db, shards=settings.batch_shards, crypter=crypter, fresh_job_bytes=fresh)
    ds.migrate()
    clock = clock or RealClock()
    ds.add_hpke_key(clock.now(), only_if_none=True)
    # Opening every key now makes wrong datastore keys fail the start, not the first upload.
    ds.hpke_keys()
    http = issuer_http or http_client(settings.transport, timeout=settings.issuer_timeout_s)
    return Aggregator(ds, clock, settings, fetch=http.get, metrics=metrics)


def create_app(
    settings: AggregatorSettings,
    *,
    clock: Clock | None = None,
    database: Database | None = None,
    issuer_http: httpx.Client | None = None,
) -> FastAPI:
    """An aggregator app over the store at `settings.database_url` (migrated here).

    `issuer_http` fetches token issuer directories (tests pass an in-process issuer)."""
    registry = CollectorRegistry()
    agg = open_aggregator(
        settings, clock=clock, database=database, issuer_http=issuer_http, metrics=registry
    )
    ds, clock = agg.ds, agg.clock

    app = _AggregatorApp(title="sagg aggregator", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.aggregator = agg
    app.state.settings = settings
    app.state.upload_gate = UploadGate(settings.upload_pending_max)
    # Uploads bypass this stack and cap their bodies at the task's largest report.
    install_body_limit(app, settings.max_request_body_bytes, dap=True)
    install_problem_handlers(app)
    admin_hash = token_hash(settings.admin_token)
    registry.register(AggregatorCollector(ds))
    app.state.request_metrics = install_metrics(app, registry, admin_hash)
    install_healthz(app, ds.is_migrated)
    app.include_router(_dap_routes(agg))
    admin = BearerAuth(admin_hash)
    provisioning = BearerAuth(admin_hash, token_hash(settings.provisioner_token))
    app.include_router(_provisioning_routes(agg, provisioning))
    app.include_router(_admin_routes(agg, admin))
    log.debug("aggregator app created (%s)", json.dumps({"db": ds.db.dialect.name}))
    return app


#: The DAP requests but uploads (`upload_route`) run on this one thread: aggregation jobs,
#: aggregate shares, collection jobs, HPKE configs. Their work is CPU under the GIL, so more
#: threads run nothing in parallel; they only take the GIL from each other wherever a call
#: lets it go (numpy's larger operations, SQLite, socket reads), a context switch and cold
#: caches for both each time. Against AnyIO's pool, where a helper prepared two jobs at once:
#: helper CPU ~124 -> ~104 us a DAP-19 report, server CPU ~281 -> ~248 (medians of seven
#: alternated runs, #15). None of these handlers waits for another request to this process,
#: so one thread cannot deadlock them.
_dap_requests = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dap-request")


async def _call(fn: Callable[..., Answer], *args: Any) -> Answer:
    return await asyncio.get_running_loop().run_in_executor(
        _dap_requests, functools.partial(fn, *args)
    )


def _dap_routes(agg: Aggregator) -> APIRouter:
    """DAP-09 §4 and DAP-19 §4 (but uploads: `upload_route`) on the same paths: the task's
    version picks the method, the media types and the codec, never the body (digest dap-19.md
    §15); the parties authenticate with the task's tokens, checked by `Aggregator`."""
    router = api_router("dap", response_class=Response)

    async def is_dap19(task_id: str, request: Request) -> bool:
        task = agg.cached_task_by_id_str(task_id)
        if task is None:
            try:
                task = await _call_task(agg, task_id)
            except DapProblemError:
                # Taskprov provisions DAP-19 tasks only: an unknown task a request announces
                # goes to the DAP-19 route, which opts in (or answers the problem).
                if agg.taskprov is not None and taskprov.parse_header(request.headers):
                    return True
                raise
        return isinstance(task.wire, Wire19)

    @router.get(
        "/hpke_config",
        responses=binary_response(dap.MEDIA_HPKE_CONFIG_LIST),
    )
    async def hpke_config(
        request: Request, task_id: Annotated[str | None, Query()] = None
    ) -> Response:
        answer = await _call(agg.hpke_config_list, task_id)
        # The same HpkeConfigList in both versions; a DAP-19 client asks for its media type
        # (DAP-19 §4.4.1 has no task_id to tell the version by).
        dap19_client = "application/ppm-dap" in request.headers.get("accept", "")
        media = dap19.MEDIA_HPKE_CONFIG_LIST if dap19_client else dap.MEDIA_HPKE_CONFIG_LIST
        return Response(
            content=answer.body,
            status_code=200,
            headers={"Content-Type": media, "Cache-Control": "max-age=86400"},
        )

    jobs = "/tasks/{task_id}/aggregation_jobs/{job_id}"
    job_resp = binary_response(dap.MEDIA_AGGREGATION_JOB_RESP, 200, 201)
    init, cont = dap.MEDIA_AGGREGATION_JOB_INIT_REQ, dap.MEDIA_AGGREGATION_JOB_CONTINUE_REQ

    task_auth = list(DAP_CREDENTIALS)

    @router.post(
        "/tasks/{task_id}/aggregation_jobs",
        dependencies=task_auth,
        responses=binary_response(dap19.MEDIA_AGGREGATION_JOB_RESP),
        openapi_extra=binary_body(dap19.MEDIA_AGGREGATION_JOB_INIT_REQ),
    )
    async def aggregation_create(task_id: str, request: Request) -> Response:
        if not await is_dap19(task_id, request):
            raise _not_allowed(task_id, "")
        body = await _body19(request, dap19.MEDIA_AGGREGATION_JOB_INIT_REQ, task_id)
        return _respond(await _call(dap19_helper.helper_init, agg, task_id, request.headers, body))

    @router.put(jobs, dependencies=task_auth, responses=job_resp, openapi_extra=binary_body(init))
    async def aggregation_init(task_id: str, job_id: str, request: Request) -> Response:
        if await is_dap19(task_id, request):
            raise _not_allowed(task_id, "GET, POST, DELETE")
        body = await _body(request, init, task_id)
        answer = await _call(agg.helper_init, task_id, job_id, request.headers, body)
        return _respond(answer, dap.MEDIA_AGGREGATION_JOB_RESP)

    @router.get(jobs, dependencies=task_auth, responses=job_resp)
    async def aggregation_get(task_id: str, job_id: str, request: Request) -> Response:
        if not await is_dap19(task_id, request):
            raise _not_allowed(task_id, "PUT, POST, DELETE")
        answer = await _call(dap19_helper.job_response, agg, task_id, job_id, request.headers)
        return _respond(answer)

    @router.post(jobs, dependencies=task_auth, responses=job_resp, openapi_extra=binary_body(cont))
    async def aggregation_continue(task_id: str, job_id: str, request: Request) -> Response:
        if await is_dap19(task_id, request):
            body = await _body19(request, dap19.MEDIA_AGGREGATION_JOB_CONTINUE_REQ, task_id)
        else:
            body = await _body(request, cont, task_id)
        answer = await _call(agg.helper_continue, task_id, job_id, request.headers, body)
        return _respond(answer, dap.MEDIA_AGGREGATION_JOB_RESP)

    @router.delete(jobs, dependencies=task_auth, status_code=204)
    async def aggregation_delete(task_id: str, job_id: str, request: Request) -> Response:
        return _respond(await _call(agg.helper_delete, task_id, job_id, request.headers))

    @router.post(
        "/tasks/{task_id}/aggregate_shares",
        dependencies=task_auth,
        responses=binary_response(dap.MEDIA_AGGREGATE_SHARE),
        openapi_extra=binary_body(dap.MEDIA_AGGREGATE_SHARE_REQ),
    )
    async def aggregate_shares(task_id: str, request: Request) -> Response:
        if await is_dap19(task_id, request):
            body = await _body19(request, dap19.MEDIA_AGGREGATE_SHARE_REQ, task_id)
            share19 = dap19_helper.aggregate_share
            return _respond(await _call(share19, agg, task_id, request.headers, body))
        body = await _body(request, dap.MEDIA_AGGREGATE_SHARE_REQ, task_id)
        answer = await _call(agg.helper_aggregate_share, task_id, request.headers, body)
        return _respond(answer, dap.MEDIA_AGGREGATE_SHARE)

    shares = "/tasks/{task_id}/aggregate_shares/{share_id}"

    # One route per method: a route with two methods gives both operations one OpenAPI id.
    @router.get(
        shares, dependencies=task_auth, responses=binary_response(dap19.MEDIA_AGGREGATE_SHARE)
    )
    @router.delete(shares, dependencies=task_auth)
    async def aggregate_share_resource(task_id: str, share_id: str, request: Request) -> Response:
        if not await is_dap19(task_id, request):
            raise _not_allowed(task_id, "")
        named = dap19_helper.named_aggregate_share
        answer = await _call(named, agg, task_id, share_id, request.headers, request.method)
        return _respond(answer)

    collections = "/tasks/{task_id}/collection_jobs/{job_id}"

    @router.post(
        "/tasks/{task_id}/collection_jobs",
        dependencies=task_auth,
        status_code=201,
        openapi_extra=binary_body(dap19.MEDIA_COLLECTION_JOB_REQ),
    )
    async def collection_create(task_id: str, request: Request) -> Response:
        if not await is_dap19(task_id, request):
            raise _not_allowed(task_id, "")
        body = await _body19(request, dap19.MEDIA_COLLECTION_JOB_REQ, task_id)
        create = dap19_collection.create_collection_job
        return _respond(await _call(create, agg, task_id, request.headers, body))

    @router.put(
        collections,
        dependencies=task_auth,
        status_code=201,
        openapi_extra=binary_body(dap.MEDIA_COLLECT_REQ),
    )
    async def collection_put(task_id: str, job_id: str, request: Request) -> Response:
        if await is_dap19(task_id, request):
            raise _not_allowed(task_id, "GET, DELETE")
        body = await _body(request, dap.MEDIA_COLLECT_REQ, task_id)
        answer = await _call(agg.put_collection_job, task_id, job_id, request.headers, body)
        return _respond(answer)

    @router.get(
        collections,
        dependencies=task_auth,
        responses=binary_response(dap19.MEDIA_COLLECTION_JOB_RESP, 200),
    )
    async def collection_get(task_id: str, job_id: str, request: Request) -> Response:
        if not await is_dap19(task_id, request):
            raise _not_allowed(task_id, "PUT, POST, DELETE")
        answer = await _call(agg.poll_collection_job, task_id, job_id, request.headers)
        return _respond(answer, dap19.MEDIA_COLLECTION_JOB_RESP)

    @router.post(
        collections,
        dependencies=task_auth,
        responses=binary_response(dap.MEDIA_COLLECTION, 200, 202),
    )
    async def collection_poll(task_id: str, job_id: str, request: Request) -> Response:
        if await is_dap19(task_id, request):
            raise _not_allowed(task_id, "GET, DELETE")
        answer = await _call(agg.poll_collection_job, task_id, job_id, request.headers)
        return _respond(answer, dap.MEDIA_COLLECTION)

    @router.delete(collections, dependencies=task_auth, status_code=204)
    async def collection_delete(task_id: str, job_id: str, request: Request) -> Response:
        return _respond(await _call(agg.delete_collection_job, task_id, job_id, request.headers))

    return router


async def _call_task(agg: Aggregator, task_id: str) -> Task:
    task: Task = await run_in_threadpool(agg.task, task_id)
    return task


def _task_key(task_id: str) -> bytes:
    try:
        return TaskId.from_b64url(task_id).value
    except DecodeError:
        raise HttpProblemError(404, "unknown task", task_id=task_id) from None


def _provisioning_routes(agg: Aggregator, auth: BearerAuth) -> APIRouter:
    """What the recipe server's provisioning token may do too: create and confirm tasks."""
    router = api_router("admin", [auth.dependency])
    ds = agg.ds

    def put_task(task_id: str, definition: TaskDefinition) -> Response:
        if definition.task_id != task_id:
            raise HttpProblemError(400, "task id in the path and the body differ", task_id=task_id)
        config = definition.collector_config
        try:
            hpke.check_suite(config.kem_id, config.kdf_id, config.aead_id)
        except hpke.HpkeError:
            raise HttpProblemError(
                400, "collector HPKE config uses an unsupported suite", task_id=task_id
            ) from None
        tokens = definition.tokens
        if tokens is not None and not agg.issuer_keys.allows(tokens.issuer_url):
            # Refused before anything is stored or fetched: the operator, not whoever
            # provisions tasks, chooses the issuers this aggregator trusts.
            raise HttpProblemError(
                400,
                "the task's token issuer is not one this aggregator is configured to trust "
                "(token_issuers)",
                task_id=task_id,
            )
        outcome = agg.put_task(definition)
        if outcome == "conflict":
            raise HttpProblemError(409, "a different task with this id exists", task_id=task_id)
        return JSONResponse({"task_id": task_id}, status_code=201 if outcome == "created" else 200)

    async def invalid_definition(request: Request, exc: RequestValidationError) -> Response:
        auth.check(request)
        return _invalid_definition(request.path_params["task_id"], exc)

    @router.put("/internal/tasks/{task_id}", **created_or_found(TaskCreated))
    @answers_invalid(invalid_definition)
    async def admin_put_task(task_id: str, definition: TaskDefinition) -> Response:
        return await run_in_threadpool(put_task, task_id, definition)

    @router.get("/internal/tasks/{task_id}", response_model=dict[str, Any])
    async def admin_get_task(task_id: str) -> Response:
        record = await run_in_threadpool(ds.get_task, _task_key(task_id))
        if record is None:
            raise HttpProblemError(404, "unknown task", task_id=task_id)
        shown = {k: v for k, v in record.definition.items() if k not in UNSHOWN_FIELDS}
        return JSONResponse(shown)

    return router


def _admin_routes(agg: Aggregator, auth: BearerAuth) -> APIRouter:
    """The operator's: delete tasks, read their statistics, rotate the HPKE keys."""
    router = api_router("admin", [auth.dependency])
    ds = agg.ds

    @router.delete("/internal/tasks/{task_id}", status_code=204)
    async def admin_delete_task(task_id: str) -> Response:
        key = _task_key(task_id)
        if not await run_in_threadpool(ds.delete_task, key):
            raise HttpProblemError(404, "unknown task", task_id=task_id)
        agg.forget_task(key)
        return Response(status_code=204)

    @router.get("/internal/tasks/{task_id}/stats", response_model=dict[str, Any])
    async def admin_task_stats(task_id: str) -> Response:
        record = await run_in_threadpool(ds.get_task, _task_key(task_id))
        if record is None:
            raise HttpProblemError(404, "unknown task", task_id=task_id)
        return JSONResponse(await run_in_threadpool(task_stats, ds, record))

    @router.post("/internal/hpke_keys/rotate", response_model=KeyRotated)
    async def admin_rotate() -> Response:
        config_id = await run_in_threadpool(agg.rotate_keys)
        return JSONResponse({"config_id": config_id})

    return router
