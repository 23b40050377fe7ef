"""FastAPI application of the recipe server.

Analysts (``Authorization: Bearer <analyst token>``):

- ``POST /recipes``: a `RecipeDraft` as JSON -> 201 (200 when the same draft was published
  before) with the signed recipe, its leaf index, the new tree head and the inclusion proof;
  401 without a known token, 403 for an analysis id the analyst does not own, 409 when the
  id and version hold another draft, 422 for an invalid draft (``errors``: field and message
  each, e.g. the batch size a privacy claim needs, or a token issuer the operator did not
  allow, or an existing task the recipe cannot be bound to), 502 when a DAP party refuses
  the task.

Devices (no authentication; all answers are verifiable against the server's key):

- ``GET /recipes``: the latest signed tree head and the logged recipes.
- ``GET /recipes/{recipe_id}?version=&tree_size=``: the signed recipe (latest version by
  default), its leaf index, the tree head of `tree_size` (default: latest) and the inclusion
  proof against it.
- ``GET /log/sth``: the latest signed tree head; ``GET /log/sth/{tree_size}``: an older one.
- ``GET /log/consistency?first=&second=``: RFC 9162 consistency proof.
- ``GET /log/inclusion?leaf_index=&tree_size=`` or ``?leaf_hash=`` (base64url): inclusion proof.
- ``GET /keys``: the Ed25519 public key (raw, base64url) and its key id.
- ``GET /healthz``: 200 once the store answers, else 503.

Operators: ``GET /metrics`` (Prometheus text, `services.recipe_server.metrics`) with
``Authorization: Bearer <metrics token>``.

Hashes, proofs and signatures are unpadded base64url. Errors are RFC 9457 problem documents.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Final, TypeVar

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from services.common.auth import hash_token, presented_bearer, presented_token, unauthorized
from services.common.clock import Clock, RealClock
from services.common.db import Database
from services.common.health import install_healthz
from services.common.http import http_client
from services.common.limits import install_body_limit
from services.common.metrics import install_metrics
from services.common.problems import install_problem_handlers, problem_response
from services.common.routing import answers_invalid, api_router
from services.recipe_server.keys import load_signer
from services.recipe_server.metrics import CountingProvisioner, RecipeServerMetrics
from services.recipe_server.provision import DapProvisioner, PartyTokens, Provisioner
from services.recipe_server.service import (
    Analyst,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidDraftError,
    NotFoundError,
    ProvisioningFailedError,
    RecipeService,
)
from services.recipe_server.settings import RecipeServerSettings
from services.recipe_server.store import RecipeStore
from shared.b64url import b64url_decode, b64url_encode
from shared.recipe.model import RecipeDraft, TokenIssuerRef
from shared.recipe.signing import SIGNATURE_ALGORITHM, RecipeSigner

__all__ = ["create_app"]

log = logging.getLogger(__name__)

#: Drafts carry prefix trees and vocabularies, but nothing near this.
_MAX_DRAFT = 8 * 1024 * 1024
_T = TypeVar("_T")
#: A non-negative integer query parameter; empty is as if absent.
_COUNT: Final = r"^[0-9]{0,18}$"
Count = Annotated[str | None, Query(pattern=_COUNT, description="a non-negative integer")]


def _count(raw: str | None) -> int | None:
    return int(raw) if raw else None


def _problem(status: int, title: str, **extra: Any) -> Response:
    if not extra:
        return problem_response(type_="about:blank", title=title, status=status)
    body = {"type": "about:blank", "title": title, "status": status, **extra}
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


def _analysts(settings: RecipeServerSettings) -> dict[bytes, Analyst]:
    table: dict[bytes, Analyst] = {}
    if settings.analyst_token is not None:
        table[hash_token(settings.analyst_token.get_secret_value())] = Analyst("analyst")
    for grant in settings.analysts:
        table[bytes.fromhex(grant.token_sha256)] = Analyst(grant.name, grant.analysis_prefixes)
    return table


def _token_issuers(settings: RecipeServerSettings) -> list[TokenIssuerRef]:
    return [
        TokenIssuerRef(
            url=grant.url,
            key_ids=grant.key_ids,
            issuer_name=grant.issuer_name,
            window_seconds=grant.window_seconds,
        )
        for grant in settings.allowed_token_issuers()
    ]


async def _invalid_query(_: Request, exc: RequestValidationError) -> Response:
    error = exc.errors()[0]
    name = error["loc"][-1]
    if error["type"] == "missing":
        raise BadRequestError(f"{name} is required")
    raise BadRequestError(f"{name} must be a non-negative integer")


class PublicKey(BaseModel):
    key_id: str
    algorithm: str
    #: Raw Ed25519 public key, unpadded base64url.
    public_key: str


class Keys(BaseModel):
    keys: list[PublicKey]


def _provisioning_tokens(settings: RecipeServerSettings) -> PartyTokens | None:
    """The credentials the DAP parties gave the recipe server, if configured (all or none)."""
    leader, helper, collector = (
        settings.leader_provisioner_token,
        settings.helper_provisioner_token,
        settings.collector_provisioner_token,
    )
    if leader is None or helper is None or collector is None:
        return None
    return PartyTokens(
        leader.get_secret_value(), helper.get_secret_value(), collector.get_secret_value()
    )


def create_app(
    settings: RecipeServerSettings,
    *,
    clock: Clock | None = None,
    provisioner: Provisioner | None = None,
    signer: RecipeSigner | None = None,
    http: httpx.Client | None = None,
) -> FastAPI:
    """The application. Tests inject `clock`, `provisioner` (or the `http` client the real one
    uses, e.g. routed to in-process aggregators) and `signer`."""
    clock = clock or RealClock()
    signer = signer or load_signer(settings)
    db = Database.open(settings.database_url, pool_size=settings.pg_pool_size)
    own_http: httpx.Client | None = None
    if provisioner is None:
        if http is None:
            own_http = http = http_client(settings.transport, timeout=settings.request_timeout)
        provisioner = DapProvisioner(
            settings.leader_url,
            settings.helper_url,
            settings.collector_url,
            _provisioning_tokens(settings),
            http,
        )
    store = RecipeStore(db)
    metrics = RecipeServerMetrics.create(store)
    provisioner = CountingProvisioner(provisioner, metrics.provisioned)
    service = RecipeService(store, signer, provisioner, clock, _token_issuers(settings))
    service.start()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if own_http is not None:
                own_http.close()
            db.close()

    app = FastAPI(title="sagg recipe server", lifespan=lifespan, openapi_url=None)
    app.state.service = service
    app.state.metrics = metrics
    install_body_limit(app, settings.max_request_body_bytes)
    install_problem_handlers(app)
    install_healthz(app, lambda: db.schema_version() > 0)
    install_metrics(
        app,
        metrics.registry,
        hash_token(settings.metrics_token.get_secret_value()) if settings.metrics_token else None,
    )

    @app.exception_handler(NotFoundError)
    async def on_not_found(_: Request, exc: Exception) -> Response:
        return _problem(404, str(exc))

    @app.exception_handler(BadRequestError)
    async def on_bad_request(_: Request, exc: Exception) -> Response:
        return _problem(400, str(exc))

    app.include_router(_device_routes(service, signer, metrics))
    app.include_router(_analyst_routes(service, metrics, _analysts(settings)))
    return app


async def _call(fn: Callable[..., _T], *args: Any) -> _T:
    return await run_in_threadpool(fn, *args)


def _device_routes(
    service: RecipeService, signer: RecipeSigner, metrics: RecipeServerMetrics
) -> APIRouter:
    """What devices read, without authentication: everything is verifiable against the key."""
    router = api_router("devices")

    @router.get("/keys", response_model=Keys)
    async def keys() -> Response:
        return JSONResponse(
            {
                "keys": [
                    {
                        "key_id": signer.key_id,
                        "algorithm": SIGNATURE_ALGORITHM,
                        "public_key": b64url_encode(signer.public_key),
                    }
                ]
            }
        )

    @router.get("/recipes", response_model=dict[str, Any])
    async def list_recipes() -> Response:
        body = await _call(service.listing)
        metrics.listings.inc()
        return JSONResponse(body)

    @router.get("/recipes/{recipe_id}", response_model=dict[str, Any])
    @answers_invalid(_invalid_query)
    async def get_recipe(
        recipe_id: str, version: Count = None, tree_size: Count = None
    ) -> Response:
        body = await _call(service.recipe_with_proof, recipe_id, _count(version), _count(tree_size))
        # Only served recipes are labels: ids that exist, so the label set stays bounded.
        metrics.fetches.labels(recipe=recipe_id).inc()
        return JSONResponse(body)

    @router.get("/log/sth", response_model=dict[str, Any])
    async def sth() -> Response:
        head = await _call(service.latest_head)
        return JSONResponse(head.signed().model_dump())

    @router.get("/log/sth/{tree_size}", response_model=dict[str, Any])
    async def sth_at(tree_size: int) -> Response:
        head = await _call(service.head, tree_size)
        return JSONResponse(head.signed().model_dump())

    @router.get("/log/consistency", response_model=dict[str, Any])
    @answers_invalid(_invalid_query)
    async def consistency(first: Count, second: Count = None) -> Response:
        if not first:
            raise BadRequestError("first is required")
        return JSONResponse(await _call(service.consistency, int(first), _count(second)))

    @router.get("/log/inclusion", response_model=dict[str, Any])
    @answers_invalid(_invalid_query)
    async def inclusion(
        leaf_index: Count = None,
        tree_size: Count = None,
        leaf_hash: Annotated[str | None, Query(description="unpadded base64url")] = None,
    ) -> Response:
        index = _count(leaf_index)
        if (index is None) == (leaf_hash is None):
            raise BadRequestError("give exactly one of leaf_index and leaf_hash")
        leaf = None
        if leaf_hash is not None:
            try:
                leaf = b64url_decode(leaf_hash, "leaf_hash")
            except ValueError as exc:
                raise BadRequestError(str(exc)) from None
        return JSONResponse(await _call(service.inclusion, index, leaf, _count(tree_size)))

    return router


def _draft_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    return [
        {
            # [1:]: FastAPI's "body"
            "field": ".".join(str(p) for p in e["loc"][1:]) or "(body)",
            "message": e["msg"],
        }
        for e in exc.errors()
    ]


def _analyst_routes(
    service: RecipeService, metrics: RecipeServerMetrics, analysts: dict[bytes, Analyst]
) -> APIRouter:
    """What analysts do: publish recipes."""
    router = api_router("analysts")
    refused = metrics.refused

    async def publisher(
        request: Request, token: Annotated[str | None, Depends(presented_bearer)]
    ) -> Analyst:
        analyst = analysts.get(hash_token(token)) if token else None
        if analyst is None:
            refused.labels(reason="unauthorized").inc()
            raise unauthorized()
        if len(await request.body()) > _MAX_DRAFT:
            refused.labels(reason="too_large").inc()
            raise HTTPException(413, "draft too large")
        return analyst

    async def invalid_draft(request: Request, exc: RequestValidationError) -> Response:
        # An unparsable body fails before the dependencies run: the caller is checked here.
        await publisher(request, presented_token(request.headers))
        refused.labels(reason="invalid_draft").inc()
        return _problem(422, "Invalid recipe draft", errors=_draft_errors(exc))

    # A default, not Annotated: annotations are strings here, and `publisher` is local.
    by_publisher = Depends(publisher)

    @router.post(
        "/recipes",
        response_model=dict[str, Any],
        responses={201: {"model": dict[str, Any], "description": "published"}},
    )
    @answers_invalid(invalid_draft)
    async def publish(
        draft: RecipeDraft,
        analyst: Analyst = by_publisher,
    ) -> Response:
        try:
            result = await _call(service.publish, draft, analyst)
        except ForbiddenError as exc:
            refused.labels(reason="forbidden").inc()
            return _problem(403, str(exc))
        except ConflictError as exc:
            refused.labels(reason="conflict").inc()
            return _problem(409, str(exc))
        except InvalidDraftError as exc:
            refused.labels(reason="invalid_draft").inc()
            problems = [{"field": f, "message": m} for f, m in exc.problems]
            return _problem(422, "Invalid recipe draft", errors=problems)
        except ProvisioningFailedError as exc:
            refused.labels(reason="provisioning_failed").inc()
            return _problem(502, f"Task provisioning failed: {exc}")
        metrics.published.labels(outcome="created" if result.created else "existing").inc()
        if result.created:
            log.info(
                "published %s v%d at leaf %d",
                result.record.recipe_id,
                result.record.version,
                result.record.leaf_index,
            )
        body = await _call(
            service.recipe_with_proof,
            result.record.recipe_id,
            result.record.version,
            result.record.leaf_index + 1,
        )
        return JSONResponse(body, status_code=201 if result.created else 200)

    return router
