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
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from services.common.auth import hash_token, presented_token
from services.common.clock import Clock, RealClock
from services.common.db import Database
from services.common.health import install_healthz
from services.common.http import http_client
from services.common.limits import install_body_limit
from services.common.metrics import install_metrics
from services.common.problems import ServiceError, install_problem_handlers
from services.recipe_server.keys import load_signer
from services.recipe_server.metrics import CountingProvisioner, RecipeServerMetrics
from services.recipe_server.provision import DapProvisioner, PartyTokens, Provisioner
from services.recipe_server.service import (
    Analyst,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidDraftError,
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


#: The `refused` counter's reason of each refusal of a publication.
_REFUSED: dict[type[ServiceError], str] = {
    ForbiddenError: "forbidden",
    ConflictError: "conflict",
    InvalidDraftError: "invalid_draft",
    ProvisioningFailedError: "provisioning_failed",
}


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


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise BadRequestError(f"{name} must be a non-negative integer")
    return int(raw)


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
    analysts = _analysts(settings)

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
    refused = metrics.refused

    async def call(fn: Callable[..., _T], *args: Any) -> _T:
        return await run_in_threadpool(fn, *args)

    def errors(exc: ValidationError) -> list[tuple[str, str]]:
        return [(".".join(str(p) for p in e["loc"]) or "(body)", e["msg"]) for e in exc.errors()]

    @app.get("/keys")
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

    @app.post("/recipes")
    async def publish(request: Request) -> Response:
        token = presented_token(request.headers)
        analyst = analysts.get(hash_token(token)) if token else None
        if analyst is None:
            refused.inc(reason="unauthorized")
            # Unknown and missing tokens look alike: nothing tells a prober which tokens exist.
            raise ServiceError("Unauthorized", status=401, headers={"WWW-Authenticate": "Bearer"})
        raw = await request.body()
        if len(raw) > _MAX_DRAFT:
            refused.inc(reason="too_large")
            raise ServiceError("draft too large", status=413)
        try:
            draft = RecipeDraft.model_validate_json(raw)
        except ValidationError as exc:
            refused.inc(reason="invalid_draft")
            raise InvalidDraftError(errors(exc)) from None
        try:
            result = await call(service.publish, draft, analyst)
        except (ForbiddenError, ConflictError, InvalidDraftError, ProvisioningFailedError) as exc:
            refused.inc(reason=_REFUSED[type(exc)])
            raise
        metrics.published.inc(outcome="created" if result.created else "existing")
        if result.created:
            log.info(
                "published %s v%d at leaf %d",
                result.record.recipe_id,
                result.record.version,
                result.record.leaf_index,
            )
        body = await call(
            service.recipe_with_proof,
            result.record.recipe_id,
            result.record.version,
            result.record.leaf_index + 1,
        )
        return JSONResponse(body, status_code=201 if result.created else 200)

    @app.get("/recipes")
    async def list_recipes() -> Response:
        body = await call(service.listing)
        metrics.listings.inc()
        return JSONResponse(body)

    @app.get("/recipes/{recipe_id}")
    async def get_recipe(recipe_id: str, request: Request) -> Response:
        version = _int_param(request, "version")
        tree_size = _int_param(request, "tree_size")
        body = await call(service.recipe_with_proof, recipe_id, version, tree_size)
        # Only served recipes are labels: ids that exist, so the label set stays bounded.
        metrics.fetches.inc(recipe=recipe_id)
        return JSONResponse(body)

    @app.get("/log/sth")
    async def sth() -> Response:
        head = await call(service.latest_head)
        return JSONResponse(head.signed().model_dump())

    @app.get("/log/sth/{tree_size}")
    async def sth_at(tree_size: int) -> Response:
        head = await call(service.head, tree_size)
        return JSONResponse(head.signed().model_dump())

    @app.get("/log/consistency")
    async def consistency(request: Request) -> Response:
        first = _int_param(request, "first")
        if first is None:
            raise BadRequestError("first is required")
        return JSONResponse(await call(service.consistency, first, _int_param(request, "second")))

    @app.get("/log/inclusion")
    async def inclusion(request: Request) -> Response:
        index = _int_param(request, "leaf_index")
        hash_text = request.query_params.get("leaf_hash")
        if (index is None) == (hash_text is None):
            raise BadRequestError("give exactly one of leaf_index and leaf_hash")
        leaf = None
        if hash_text is not None:
            try:
                leaf = b64url_decode(hash_text, "leaf_hash")
            except ValueError as exc:
                raise BadRequestError(str(exc)) from None
        tree_size = _int_param(request, "tree_size")
        return JSONResponse(await call(service.inclusion, index, leaf, tree_size))

    return app
