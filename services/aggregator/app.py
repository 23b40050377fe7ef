"""HTTP surface of the aggregator: the DAP-09 endpoints (digest §4) and the admin API.

DAP-09 routes (the task's role decides which ones answer; the other role gets
`unrecognizedTask`):
- GET  /hpke_config[?task_id=]                                      §4.4.1
- PUT  /tasks/{task_id}/reports                          (leader)   §4.4.2
- PUT|POST|DELETE /tasks/{task_id}/aggregation_jobs/{id} (helper)   §4.5
- POST /tasks/{task_id}/aggregate_shares                 (helper)   §4.6.2
- PUT|POST|DELETE /tasks/{task_id}/collection_jobs/{id}  (leader)   §4.6.1

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

Request bodies must carry their DAP media type (415 `invalidMessage` otherwise). Blocking work
(database, HPKE, VDAF) runs in the thread pool, never on the event loop. Uploads bypass
FastAPI (`upload_route`) and are stored in groups (`uploads`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from services.aggregator.datastore import Datastore
from services.aggregator.metrics import aggregator_metrics, task_stats
from services.aggregator.service import Aggregator, Answer
from services.aggregator.settings import AggregatorSettings
from services.aggregator.upload_route import UploadGate, handle_upload, upload_task_id
from services.common.auth import hash_token, require_bearer, token_hash
from services.common.clock import Clock, RealClock
from services.common.crypter import crypter_from
from services.common.db import Database
from services.common.health import install_healthz
from services.common.http import http_client
from services.common.limits import install_body_limit
from services.common.metrics import Registry, install_metrics
from services.common.problems import (
    DapProblemError,
    HttpProblemError,
    ServiceError,
    install_problem_handlers,
)
from shared import hpke
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages import (
    MEDIA_AGGREGATE_SHARE,
    MEDIA_AGGREGATE_SHARE_REQ,
    MEDIA_AGGREGATION_JOB_CONTINUE_REQ,
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    MEDIA_AGGREGATION_JOB_RESP,
    MEDIA_COLLECT_REQ,
    MEDIA_COLLECTION,
    MEDIA_HPKE_CONFIG_LIST,
)
from shared.dap.problems import ProblemType
from shared.dap.task import TaskDefinition

log = logging.getLogger(__name__)

HTTP_UNSUPPORTED_MEDIA_TYPE = 415
#: The secrets of a TaskDefinition, never stored in clear (except the leader's outgoing token).
SECRET_FIELDS = ("aggregator_auth_token", "collector_auth_token")
#: Stored (sealed) with the definition, but never in an answer: DAP-09 §4.2 gives the verify key
#: to the aggregators only, and Prio3 derives its proof's query randomness from it, so a client
#: that learned it could make an invalid measurement pass verification.
UNSHOWN_FIELDS = ("vdaf_verify_key",)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def _body(request: Request, media_type: str, task_id: str) -> bytes:
    if _media_type(request) != media_type:
        raise DapProblemError(
            ProblemType.INVALID_MESSAGE,
            f"expected Content-Type {media_type}",
            task_id=task_id,
            status=HTTP_UNSUPPORTED_MEDIA_TYPE,
        )
    return await request.body()


def _respond(answer: Answer, media_type: str | None = None) -> Response:
    has_body = answer.status in (200, 201) and answer.body
    return Response(
        content=answer.body if has_body else b"",
        status_code=answer.status,
        media_type=media_type if has_body else None,
        headers=answer.headers,
    )


class _AggregatorApp(FastAPI):
    """The FastAPI app, with uploads answered before FastAPI's stack (`upload_route`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task_id = upload_task_id(scope)
        if task_id is not None:
            state = self.state
            await handle_upload(state.aggregator, state.upload_gate, task_id, scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def open_aggregator(
    settings: AggregatorSettings,
    *,
    clock: Clock | None = None,
    database: Database | None = None,
    issuer_http: httpx.Client | None = None,
    metrics: Registry | None = None,
) -> Aggregator:
    """The aggregator over the store at `settings.database_url`, migrated and with an HPKE key.

    Every process on one store calls this at start (API and driver-only processes alike):
    migrations and the first key are safe to race."""
    db = database or Database.open(settings.database_url, pool_size=settings.pg_pool_size)
    crypter = crypter_from(settings.datastore_keys, "aggregator")
    ds = Datastore(db, shards=settings.batch_shards, crypter=crypter)
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
    registry = Registry()
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

    async def call(fn: Callable[..., Answer], *args: Any) -> Answer:
        return await run_in_threadpool(fn, *args)

    # --- DAP-09 ------------------------------------------------------------------------------

    @app.get("/hpke_config")
    async def hpke_config(request: Request) -> Response:
        task_id = request.query_params.get("task_id")
        answer = await call(agg.hpke_config_list, task_id)
        return Response(
            content=answer.body,
            status_code=200,
            headers={"Content-Type": MEDIA_HPKE_CONFIG_LIST, "Cache-Control": "max-age=86400"},
        )

    @app.put("/tasks/{task_id}/aggregation_jobs/{job_id}")
    async def aggregation_init(task_id: str, job_id: str, request: Request) -> Response:
        body = await _body(request, MEDIA_AGGREGATION_JOB_INIT_REQ, task_id)
        answer = await call(agg.helper_init, task_id, job_id, request.headers, body)
        return _respond(answer, MEDIA_AGGREGATION_JOB_RESP)

    @app.post("/tasks/{task_id}/aggregation_jobs/{job_id}")
    async def aggregation_continue(task_id: str, job_id: str, request: Request) -> Response:
        body = await _body(request, MEDIA_AGGREGATION_JOB_CONTINUE_REQ, task_id)
        answer = await call(agg.helper_continue, task_id, job_id, request.headers, body)
        return _respond(answer, MEDIA_AGGREGATION_JOB_RESP)

    @app.delete("/tasks/{task_id}/aggregation_jobs/{job_id}")
    async def aggregation_delete(task_id: str, job_id: str, request: Request) -> Response:
        return _respond(await call(agg.helper_delete, task_id, job_id, request.headers))

    @app.post("/tasks/{task_id}/aggregate_shares")
    async def aggregate_shares(task_id: str, request: Request) -> Response:
        body = await _body(request, MEDIA_AGGREGATE_SHARE_REQ, task_id)
        answer = await call(agg.helper_aggregate_share, task_id, request.headers, body)
        return _respond(answer, MEDIA_AGGREGATE_SHARE)

    @app.put("/tasks/{task_id}/collection_jobs/{job_id}")
    async def collection_put(task_id: str, job_id: str, request: Request) -> Response:
        body = await _body(request, MEDIA_COLLECT_REQ, task_id)
        return _respond(await call(agg.put_collection_job, task_id, job_id, request.headers, body))

    @app.post("/tasks/{task_id}/collection_jobs/{job_id}")
    async def collection_poll(task_id: str, job_id: str, request: Request) -> Response:
        answer = await call(agg.poll_collection_job, task_id, job_id, request.headers)
        return _respond(answer, MEDIA_COLLECTION)

    @app.delete("/tasks/{task_id}/collection_jobs/{job_id}")
    async def collection_delete(task_id: str, job_id: str, request: Request) -> Response:
        return _respond(await call(agg.delete_collection_job, task_id, job_id, request.headers))

    # --- admin -------------------------------------------------------------------------------

    admin_hash = token_hash(settings.admin_token)
    provisioner_hash = token_hash(settings.provisioner_token)

    def check_admin(request: Request) -> None:
        require_bearer(request.headers, admin_hash)

    def check_provisioning(request: Request) -> None:
        require_bearer(request.headers, admin_hash, provisioner_hash)

    def put_task(task_id: str, raw: bytes) -> Response:
        try:
            definition = TaskDefinition.model_validate_json(raw)
        except ValidationError as exc:
            # Only locations and messages: the input may hold tokens and keys.
            errors = [
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                for e in exc.errors(include_input=False, include_url=False)
            ]
            detail = "; ".join(errors)
            raise ServiceError(
                "invalid task definition", detail=detail, status=400, task_id=task_id
            ) from None
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
        public = definition.model_dump(mode="json", exclude=set(SECRET_FIELDS))
        leader = definition.role == "leader"
        outcome = ds.put_task(
            definition.id.value,
            definition.role,
            public,
            hash_token(definition.aggregator_auth_token),
            hash_token(definition.collector_auth_token)
            if definition.collector_auth_token
            else None,
            definition.aggregator_auth_token if leader else None,
            clock.now(),
        )
        if outcome == "conflict":
            raise HttpProblemError(409, "a different task with this id exists", task_id=task_id)
        # Known now, though a lookup may just have cached it as unknown.
        agg.forget_task(definition.id.value)
        return JSONResponse({"task_id": task_id}, status_code=201 if outcome == "created" else 200)

    @app.put("/internal/tasks/{task_id}")
    async def admin_put_task(task_id: str, request: Request) -> Response:
        check_provisioning(request)
        raw = await request.body()
        return await run_in_threadpool(put_task, task_id, raw)

    def task_key(task_id: str) -> bytes:
        try:
            return TaskId.from_b64url(task_id).value
        except DecodeError:
            raise HttpProblemError(404, "unknown task", task_id=task_id) from None

    @app.get("/internal/tasks/{task_id}")
    async def admin_get_task(task_id: str, request: Request) -> Response:
        check_provisioning(request)
        record = await run_in_threadpool(ds.get_task, task_key(task_id))
        if record is None:
            raise HttpProblemError(404, "unknown task", task_id=task_id)
        shown = {k: v for k, v in record.definition.items() if k not in UNSHOWN_FIELDS}
        return JSONResponse(shown)

    @app.delete("/internal/tasks/{task_id}")
    async def admin_delete_task(task_id: str, request: Request) -> Response:
        check_admin(request)
        key = task_key(task_id)
        if not await run_in_threadpool(ds.delete_task, key):
            raise HttpProblemError(404, "unknown task", task_id=task_id)
        agg.forget_task(key)
        return Response(status_code=204)

    @app.get("/internal/tasks/{task_id}/stats")
    async def admin_task_stats(task_id: str, request: Request) -> Response:
        check_admin(request)
        key = task_key(task_id)
        record = await run_in_threadpool(ds.get_task, key)
        if record is None:
            raise HttpProblemError(404, "unknown task", task_id=task_id)
        return JSONResponse(await run_in_threadpool(task_stats, ds, record))

    install_metrics(app, aggregator_metrics(ds, registry), admin_hash)

    @app.post("/internal/hpke_keys/rotate")
    async def admin_rotate(request: Request) -> Response:
        check_admin(request)
        config_id = await run_in_threadpool(agg.rotate_keys)
        return JSONResponse({"config_id": config_id})

    install_healthz(app, ds.is_migrated)

    log.debug("aggregator app created (%s)", json.dumps({"db": ds.db.dialect.name}))
    return app
