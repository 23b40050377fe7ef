"""The collector service: FastAPI routes over the store and the collection poller.

API (all but /healthz require ``Authorization: Bearer <admin token>``):
- ``PUT /internal/tasks/{task_id}``: provision a `CollectorTask` (DAP-09 §4.2). The collector
  generates its HPKE key pair for the task (a taskprov task, digest §11, takes the one key
  of `taskprov_hpke_secret` the aggregators seal its shares to) and answers
  ``{"collector_hpke_config": b64url}``:
  201 when created, 200 when the identical task exists, 409 when a different one does. The
  provisioning token (the recipe server's) may call this route and no other.
- ``GET /internal/tasks/{task_id}``: the task without its secrets (`CollectorTaskInfo`: VDAF,
  query type, B, aggregator noise) plus the public ``collector_hpke_config``; never the leader
  token or the HPKE private key. `sagg collect` reads it to decode and account for the noise.
- ``POST /collections``: ``{"task_id", "query"}`` -> 201 ``{"collection_job_id"}``; the poller
  runs the DAP-09 §4.6.1 exchange with the leader in the background. A DAP-19 time-interval
  query this collector has completed answers 200 with that job: the identical request names
  the same leader job (DAP-19 §4.6.1), which the poller deleted once its outcome was stored.
- ``GET /collections/{id}``: the job's state and, once complete, the unsharded aggregate.
- ``GET /metrics``: Prometheus text (`services.collector.metrics`).
- ``GET /healthz``: 200 ``{"status": "ok"}`` when the store answers, else 503.
Errors are RFC 9457 problem documents.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from services.collector.collect import (
    CollectionError,
    CollectQuery,
    TimeIntervalQuery,
    check_query,
    query_json,
)
from services.collector.metrics import CollectorMetrics
from services.collector.poller import CollectionPoller, PollerConfig, millis
from services.collector.settings import CollectorSettings
from services.collector.store import JobRow, PutTaskOutcome, Store, open_store
from services.common.auth import BearerAuth, token_hash
from services.common.clock import Clock, RealClock
from services.common.crypter import crypter_from
from services.common.health import install_healthz
from services.common.http import async_http_client
from services.common.limits import install_body_limit
from services.common.metrics import install_metrics
from services.common.problems import (
    HttpProblemError,
    install_problem_handlers,
)
from services.common.routing import answers_invalid, api_router, created_or_found
from shared import hpke
from shared.b64url import b64url_encode
from shared.codec import DecodeError
from shared.dap.ids import CollectionJobId, TaskId
from shared.dap.messages import HpkeConfig
from shared.dap.task import CollectorTask

__all__ = ["create_app"]

log = logging.getLogger(__name__)

#: The collector's HPKE config id. One key pair per task, so a constant id is unambiguous.
_CONFIG_ID = 1


def _invalid_body(exc: RequestValidationError) -> HttpProblemError:
    """The first of FastAPI's validation errors, as the collector words it."""
    first = exc.errors()[0]
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid" or (first.get("type") == "missing" and loc == ("body",)):
        return HttpProblemError(400, "body is not JSON")
    where = ".".join(str(p) for p in loc[1:])  # [1:]: FastAPI's "body"
    return HttpProblemError(400, f"{where}: {first.get('msg')}" if where else str(first.get("msg")))


class CollectRequest(BaseModel):
    """``POST /collections``: the task and the query of a new collection job."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    query: CollectQuery


class TaskProvisioned(BaseModel):
    """The collector's HPKE config of the task (encoded HpkeConfig, unpadded base64url)."""

    collector_hpke_config: str


class CollectionCreated(BaseModel):
    collection_job_id: str


def job_view(job: JobRow, task: CollectorTask | None) -> dict[str, Any]:
    """The public JSON of a collection job."""
    view: dict[str, Any] = {
        "collection_job_id": job.job_id,
        "task_id": job.task_id,
        "state": job.state.public,
        "query": json.loads(job.query),
    }
    if task is not None:
        view["vdaf"] = task.vdaf.model_dump(exclude_none=True)
    if job.error is not None:
        view["error"] = job.error
    if job.report_count is not None:
        view["report_count"] = job.report_count
    if job.interval_start is not None and job.interval_duration is not None:
        view["interval"] = {"start": job.interval_start, "duration": job.interval_duration}
    if job.batch_id is not None:
        view["batch_id"] = job.batch_id
    if job.result is not None:
        view["result"] = json.loads(job.result)
    return view


def create_app(
    settings: CollectorSettings,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    run_poller: bool = True,
) -> FastAPI:
    """Build the app. `transport` (an httpx transport) and `clock` exist for tests."""
    clock = clock or RealClock()
    # Only the hash is kept in memory beyond this point, as the aggregator does.
    admin_hash = token_hash(settings.admin_token)
    provisioner_hash = token_hash(settings.provisioner_token)
    poller_config = PollerConfig(
        poll_interval=settings.poll_interval,
        max_backoff=settings.max_backoff,
        lease_seconds=settings.lease_seconds,
        max_transient_failures=settings.max_transient_failures,
        batch_size=settings.batch_size,
    )
    state: dict[str, Any] = {}

    def db() -> Store:
        value = state.get("store")
        if value is None:  # routes only run inside the lifespan
            raise HttpProblemError(503, "store not open")
        assert isinstance(value, Store)
        return value

    metrics = CollectorMetrics.create(db)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = store
        if db is None:
            crypter = crypter_from(settings.datastore_keys, "collector")
            db = await asyncio.to_thread(open_store, settings.database_url, crypter)
        http = async_http_client(
            settings.transport,
            transport=transport,
            timeout=settings.request_timeout,
            follow_redirects=False,
        )
        poller = CollectionPoller(db, http, clock, poller_config, requests=metrics.leader_requests)
        state.update(store=db, poller=poller)
        stop = asyncio.Event()
        task = asyncio.create_task(poller.run(stop)) if run_poller else None
        try:
            yield
        finally:
            stop.set()
            if task is not None:
                await task
            await http.aclose()
            if store is None:  # opened here, so closed here
                db.close()

    app = FastAPI(title="sagg collector", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.metrics = metrics
    install_body_limit(app, settings.max_request_body_bytes)
    install_problem_handlers(app)

    def ready() -> bool:
        db().ping()
        return True

    install_healthz(app, ready)
    install_metrics(app, metrics.registry, admin_hash)
    provisioning = BearerAuth(admin_hash, provisioner_hash)
    taskprov_keypair = settings.taskprov_keypair()
    app.include_router(_provisioning_routes(db, clock, provisioning, taskprov_keypair))
    app.include_router(_admin_routes(db, clock, state, BearerAuth(admin_hash)))
    return app


def _provisioning_routes(
    db: Callable[[], Store],
    clock: Clock,
    auth: BearerAuth,
    taskprov_keypair: hpke.HpkeKeyPair | None,
) -> APIRouter:
    """What the recipe server's provisioning token may do too: provision tasks."""
    router = api_router("admin", [auth.dependency])

    def check_task_id(task_id: str) -> None:
        try:
            TaskId.from_b64url(task_id)
        except DecodeError as exc:
            raise HttpProblemError(400, str(exc)) from None

    async def invalid_task(request: Request, exc: RequestValidationError) -> Response:
        auth.check(request)
        check_task_id(request.path_params["task_id"])
        raise _invalid_body(exc)

    @router.put("/internal/tasks/{task_id}", **created_or_found(TaskProvisioned))
    @answers_invalid(invalid_task)
    async def put_task(task_id: str, task: CollectorTask) -> Response:
        check_task_id(task_id)
        if task.task_id != task_id:
            raise HttpProblemError(400, "task_id in the body differs from the URL")

        if not task.taskprov:
            keypair = hpke.generate_keypair(_CONFIG_ID)
        elif taskprov_keypair is not None:
            keypair = taskprov_keypair
        else:
            raise HttpProblemError(
                400, "this collector takes no taskprov task (no taskprov_hpke_secret)"
            )
        config = HpkeConfig(
            keypair.config_id,
            keypair.kem_id,
            keypair.kdf_id,
            keypair.aead_id,
            keypair.public_key,
        )
        outcome, stored = await asyncio.to_thread(
            db().put_task,
            task_id,
            task.model_dump_json(),
            b64url_encode(config.encode()),
            b64url_encode(keypair.private_key_bytes()),
            millis(clock),
            lambda existing: CollectorTask.model_validate_json(existing) == task,
        )
        if outcome is PutTaskOutcome.CONFLICT:
            raise HttpProblemError(409, "a different task with this id exists")
        if outcome is PutTaskOutcome.CREATED:
            log.info("task %s provisioned (%s)", task_id, task.vdaf.describe())
        return JSONResponse(
            {"collector_hpke_config": stored.hpke_config},
            status_code=201 if outcome is PutTaskOutcome.CREATED else 200,
        )

    return router


def _admin_routes(
    db: Callable[[], Store], clock: Clock, state: dict[str, Any], auth: BearerAuth
) -> APIRouter:
    """The analyst's and operator's: read tasks, start and read collections."""
    router = api_router("admin", [auth.dependency])

    @router.get("/internal/tasks/{task_id}", response_model=dict[str, Any])
    async def get_task(task_id: str) -> Response:
        stored = await asyncio.to_thread(db().load_task, task_id)
        if stored is None:
            raise HttpProblemError(404, f"unknown task {task_id}", task_id=task_id)
        info = CollectorTask.model_validate_json(stored.definition).info()
        body = info.model_dump(mode="json", exclude_none=True)
        body["collector_hpke_config"] = stored.hpke_config
        return JSONResponse(body)

    async def invalid_collection(request: Request, exc: RequestValidationError) -> Response:
        auth.check(request)
        raise _invalid_body(exc)

    @router.post(
        "/collections",
        status_code=201,
        response_model=CollectionCreated,
        responses={200: {"model": CollectionCreated, "description": "already collected"}},
    )
    @answers_invalid(invalid_collection)
    async def create_collection(body: CollectRequest) -> Response:
        stored = await asyncio.to_thread(db().load_task, body.task_id)
        if stored is None:
            raise HttpProblemError(404, f"unknown task {body.task_id}")
        task = CollectorTask.model_validate_json(stored.definition)
        try:
            check_query(task, body.query)
        except CollectionError as exc:
            raise HttpProblemError(400, str(exc)) from None
        query = query_json(body.query)
        if task.dap == "dap-19" and isinstance(body.query, TimeIntervalQuery):
            # DAP-19 §4.6.1: the identical CollectionJobReq names the same job, which this
            # collector deletes at the leader once its outcome is stored: that outcome answers.
            done = await asyncio.to_thread(db().completed_job, body.task_id, query)
            if done is not None:
                return JSONResponse({"collection_job_id": done}, status_code=200)
        job_id = CollectionJobId.random().to_b64url()
        created = await asyncio.to_thread(
            db().create_job, job_id, body.task_id, query, millis(clock)
        )
        if not created:  # the task was deleted in between
            raise HttpProblemError(404, f"unknown task {body.task_id}")
        log.info("collection job %s created for task %s", job_id, body.task_id)
        poller = state["poller"]
        assert isinstance(poller, CollectionPoller)
        poller.wake()
        return JSONResponse({"collection_job_id": job_id}, status_code=201)

    @router.get("/collections/{job_id}", response_model=dict[str, Any])
    async def get_collection(job_id: str) -> Response:
        job = await asyncio.to_thread(db().get_job, job_id)
        if job is None:
            raise HttpProblemError(404, f"unknown collection job {job_id}")
        stored = await asyncio.to_thread(db().load_task, job.task_id)
        task = None if stored is None else CollectorTask.model_validate_json(stored.definition)
        return JSONResponse(job_view(job, task))

    return router
