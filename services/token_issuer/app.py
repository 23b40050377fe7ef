"""FastAPI application of the token issuer and attester, in one of three roles.

Issuer routes (roles ``joint`` and ``issuer``):

- ``GET /.well-known/private-token-issuer-directory``: the directory (RFC 9578 §4), media type
  ``application/private-token-issuer-directory``, cacheable until the key ring next changes.
- ``POST /token-request``: ``application/private-token-request`` in,
  ``application/private-token-response`` out (RFC 9578 §6.2); only for the attester, so it
  requires ``Authorization: Bearer <attester secret>`` and is not mounted without one. 422 for
  a malformed request, another token type, a wrong size or an unknown truncated key id; 415
  for any other Content-Type (the media type is matched exactly, parameters included).

Attester routes (roles ``joint`` and ``attester``), for devices, one request of each kind per
device of a population and so answered before FastAPI's stack (`services.common.raw_routes`:
the same body caps, request metrics, problem documents and OpenAPI description):

- ``POST /attester/enroll``: ``{"certificate": "<PEM>"}`` -> 201 (200 if known)
  ``{"device_id": "<base64url>", "nonce": "…", "expires": t}`` (a challenge, as below, for the
  device's first token request); 403 for a certificate no trusted manufacturer issued.
- ``POST /attester/challenge``: ``{"device_id": "…"}`` -> ``{"nonce": "…", "expires": t}``.
- ``POST /attester/token-request``: a TokenRequest body as above, plus the headers
  ``Sagg-Device-Id``, ``Sagg-Attester-Nonce`` and ``Sagg-Device-Signature`` (base64url; see
  `shared.privacypass.attestation`). 401 when authentication fails, 429 with
  Retry-After when the device's quota is used up, 422 when the issuer refuses the request.
  With ``application/private-token-generic-batch-request`` instead, a batch of TokenRequests
  under one nonce and signature (`shared.privacypass.batch`): the quota is charged for all of
  them at once; 200 when every token was issued, 206 when some were (the others absent), 400
  when none was.

Their work (store transactions, signature checks, blind signatures) runs on the event loop
when everything it touches is in this process: the joint model on SQLite stores, as ``sagg
up`` runs it. A hop to `run_blocking`'s threads cost about 50 µs of CPU a request there (a
worker woken, the loop woken back), more than a token request's store transaction, for no
concurrency: the work holds the GIL or is one short RSA operation, and the issuer's worker
processes are what use the cores (a key ring refresh that makes a key, once an epoch, then
holds the loop too). An attester on PostgreSQL or relaying to a split issuer over HTTP waits
on the network, and keeps the hop.

``GET /healthz`` answers 200 when the stores answer, else 503. ``GET /metrics`` (Prometheus
text, `services.token_issuer.metrics`) takes ``Authorization: Bearer <metrics token>``. Errors
are RFC 9457 problem documents.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
from cryptography import x509
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from services.common.auth import hash_token, presented_bearer, token_matches, unauthorized
from services.common.clock import Clock, RealClock
from services.common.crypter import crypter_from
from services.common.db import SQLITE, Database
from services.common.health import install_healthz
from services.common.http import http_client as new_http_client
from services.common.limits import install_body_limit
from services.common.metric_children import child
from services.common.metrics import install_metrics
from services.common.problems import ServiceError, install_problem_handlers
from services.common.raw_routes import (
    RawRequest,
    RawRoute,
    RawRoutesApp,
    json_operation,
    run_blocking,
)
from services.common.routing import (
    PROBLEM_RESPONSES,
    api_router,
    binary_body,
    binary_response,
)
from services.token_issuer.attester import (
    AttesterService,
    HttpIssuerChannel,
    IssuerChannel,
    IssuerUnavailableError,
    LocalIssuerChannel,
    QuotaExceededError,
)
from services.token_issuer.devices import DeviceAuthError
from services.token_issuer.issuer import IssuanceError, IssuerService
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.metrics import AttesterCounts, IssuerKeys, TokenIssuerMetrics
from services.token_issuer.settings import TokenIssuerSettings
from shared.privacypass.attestation import (
    ATTESTER_CHALLENGE_PATH,
    ATTESTER_ENROLL_PATH,
    ATTESTER_TOKEN_REQUEST_PATH,
    DEVICE_ID_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
)
from shared.privacypass.batch import MAX_BATCH, MEDIA_BATCH_REQUEST, MEDIA_BATCH_RESPONSE
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, MEDIA_ISSUER_DIRECTORY
from shared.privacypass.headers import HeaderError, b64url_decode, b64url_encode
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, MEDIA_TOKEN_RESPONSE
from shared.privacypass.rsabssa import BLIND_RSA_NK

__all__ = ["create_app", "load_trust_anchors"]

log = logging.getLogger(__name__)


#: A TokenRequest is 259 bytes; anything much larger is refused before it is read whole.
_MAX_BODY = 4096
#: A full batch: per request its type twice, the key id and the blinded message, plus the
#: vector's length prefix.
_MAX_BATCH_BODY = MAX_BATCH * (2 + 2 + 1 + BLIND_RSA_NK) + 8


def load_trust_anchors(paths: list[Path]) -> list[x509.Certificate]:
    anchors: list[x509.Certificate] = []
    for path in paths:
        anchors += x509.load_pem_x509_certificates(path.read_bytes())
    return anchors


def _problem(status: int, title: str, headers: dict[str, str] | None = None) -> Response:
    return ServiceError(title, status=status, headers=headers).response()


async def _read_body(request: Request, limit: int = _MAX_BODY) -> bytes | None:
    """The body, or None if it is longer than `limit`."""
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            return None
    return bytes(chunks)


class EnrollBody(BaseModel):
    """A device's enrolment: its certificate chain, PEM."""

    model_config = ConfigDict(extra="forbid")
    certificate: str


class Enrolled(BaseModel):
    """The device's id, and a first nonce for its first token request (saving the device the
    challenge round trip that request would otherwise begin with)."""

    device_id: str
    nonce: str
    expires: int


class ChallengeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device_id: str


class Challenge(BaseModel):
    """A nonce the device signs with its token request, and until when (UNIX time) it may."""

    nonce: str
    expires: int


def create_app(
    settings: TokenIssuerSettings,
    *,
    clock: Clock | None = None,
    trust_anchors: list[x509.Certificate] | None = None,
    issuer_channel: IssuerChannel | None = None,
    key_store_factory: Callable[[Database, KeySchedule, Clock], KeyStore] | None = None,
) -> FastAPI:
    """The application for `settings.role`.

    Tests inject `clock`, `trust_anchors` (instead of `manufacturer_ca_files`),
    `issuer_channel` (the split model's attester, in place of HTTP) and `key_store_factory`.
    """
    clock = clock or RealClock()
    role = settings.role
    databases: list[Database] = []
    http_client: httpx.Client | None = None
    issuer: IssuerService | None = None
    attester: AttesterService | None = None
    metrics = TokenIssuerMetrics.create()

    if role in ("joint", "issuer"):
        issuer_db = Database.open(settings.issuer_database_url)
        databases.append(issuer_db)
        schedule = KeySchedule(
            settings.key_epoch_seconds,
            settings.key_publish_ahead_seconds,
            settings.key_grace_seconds,
        )
        if key_store_factory is None:
            crypter = crypter_from(settings.datastore_keys, "token issuer")
            keys = KeyStore(issuer_db, schedule, clock, crypter=crypter)
        else:
            keys = key_store_factory(issuer_db, schedule, clock)
        keys.migrate()
        issuer = IssuerService(
            keys,
            clock,
            settings.issuer_request_uri,
            settings.directory_max_age,
            issued=metrics.issued,
            refused=metrics.issuance_errors,
        )
        metrics.registry.register(IssuerKeys(issuer, clock))

    if role in ("joint", "attester"):
        if issuer_channel is None:
            if issuer is not None:
                issuer_channel = LocalIssuerChannel(issuer)
            else:
                assert settings.issuer_url is not None and settings.attester_secret is not None
                http_client = new_http_client(settings.transport, timeout=settings.request_timeout)
                issuer_channel = HttpIssuerChannel(
                    http_client, settings.issuer_url, settings.attester_secret.get_secret_value()
                )
        attester_db = Database.open(settings.attester_database_url)
        databases.append(attester_db)
        anchors = (
            trust_anchors
            if trust_anchors is not None
            else load_trust_anchors(settings.manufacturer_ca_files)
        )
        if not anchors:
            log.warning("attester trusts no manufacturer CA: no device can enroll")
        attester = AttesterService(
            attester_db,
            clock,
            anchors,
            issuer_channel,
            quota_tokens=settings.quota_tokens,
            quota_window_seconds=settings.quota_window_seconds,
            nonce_ttl_seconds=settings.nonce_ttl_seconds,
        )
        attester.migrate()
        metrics.registry.register(AttesterCounts(attester))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if http_client is not None:
                http_client.close()
            for db in databases:
                db.close()

    app = RawRoutesApp(title=f"sagg token issuer ({role})", lifespan=lifespan, openapi_url=None)
    app.state.metrics = metrics
    install_body_limit(app, settings.max_request_body_bytes)
    install_problem_handlers(app)
    install_healthz(app, lambda: all(db.schema_version() > 0 for db in databases), {"role": role})
    app.raw_metrics = install_metrics(
        app,
        metrics.registry,
        hash_token(settings.metrics_token.get_secret_value()) if settings.metrics_token else None,
    )
    app.raw_body_cap = settings.max_request_body_bytes

    if issuer is not None:
        app.include_router(_issuer_routes(issuer, settings))
    if attester is not None:
        local = isinstance(issuer_channel, LocalIssuerChannel) and all(
            db.dialect is SQLITE for db in databases
        )
        for route in _attester_routes(attester, metrics, _inline if local else run_blocking):
            app.add_raw_route(route)
    return app


def _issuer_routes(issuer: IssuerService, settings: TokenIssuerSettings) -> APIRouter:
    """RFC 9578: the directory for everyone, token requests for the attester only."""
    router = api_router("issuer")

    @router.get(
        ISSUER_DIRECTORY_PATH,
        response_class=Response,
        responses=binary_response(MEDIA_ISSUER_DIRECTORY),
    )
    async def directory() -> Response:
        doc = await run_in_threadpool(issuer.directory)
        return Response(
            doc.body,
            media_type=MEDIA_ISSUER_DIRECTORY,
            headers={"Cache-Control": f"max-age={doc.max_age}"},
        )

    if settings.attester_secret is None:
        return router  # joint model without a split attester: the attester calls in process
    secret_hash = hash_token(settings.attester_secret.get_secret_value())

    def attester_only(token: Annotated[str | None, Depends(presented_bearer)]) -> None:
        if not token_matches(secret_hash, token):
            raise unauthorized()

    @router.post(
        "/token-request",
        dependencies=[Depends(attester_only)],
        response_class=Response,
        responses=binary_response(MEDIA_TOKEN_RESPONSE),
        openapi_extra=binary_body(MEDIA_TOKEN_REQUEST),
    )
    async def token_request(request: Request) -> Response:
        if request.headers.get("content-type") != MEDIA_TOKEN_REQUEST:
            return _problem(415, f"Content-Type must be {MEDIA_TOKEN_REQUEST}")
        body = await _read_body(request)
        if body is None:
            return _problem(422, "token request too large")
        try:
            out = await run_in_threadpool(issuer.issue, body)
        except IssuanceError as exc:
            return _problem(422, f"Unprocessable token request: {exc}")
        return Response(out, media_type=MEDIA_TOKEN_RESPONSE)

    return router


T = TypeVar("T")
#: How an attester route runs its blocking work: `run_blocking`, or `_inline`.
_Runner = Callable[..., Awaitable[Any]]


async def _inline(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the event loop (the module docstring says when)."""
    return fn(*args)


def _attester_routes(
    attester: AttesterService, metrics: TokenIssuerMetrics, blocking: _Runner
) -> list[RawRoute]:
    """The devices': enrol, get a challenge, request tokens (authenticated by the device key).

    One of each per device of a population: answered before FastAPI's stack
    (`services.common.raw_routes`), with its limits, metrics and problem documents; their work
    through `blocking`."""
    requests = metrics.token_requests
    refusals = metrics.enrolment_refusals

    def bad_enrolment() -> Response:
        refusals.labels(reason="bad_request").inc()
        return _problem(400, 'expected {"certificate": PEM}')

    async def enroll(request: RawRequest) -> Response:
        try:
            body = EnrollBody.model_validate_json(request.body)
        except ValidationError:
            return bad_enrolment()
        try:
            result, first = await blocking(
                attester.enroll_with_challenge, body.certificate.encode()
            )
        except DeviceAuthError as exc:
            refusals.labels(reason=exc.reason).inc()
            return _problem(403, f"Enrollment refused: {exc}")
        child(metrics.enrolments, "created" if result.created else "known").inc()
        return JSONResponse(
            {
                "device_id": b64url_encode(result.device_id),
                "nonce": b64url_encode(first.nonce),
                "expires": first.expires,
            },
            status_code=201 if result.created else 200,
        )

    def bad_challenge() -> Response:
        return _problem(400, 'expected {"device_id": base64url}')

    async def challenge(request: RawRequest) -> Response:
        try:
            body = ChallengeBody.model_validate_json(request.body)
        except ValidationError:
            return bad_challenge()
        try:
            device_id = b64url_decode(body.device_id)
            result = await blocking(attester.challenge, device_id)
        except (HeaderError, DeviceAuthError):
            return _problem(401, "Unknown device")
        return JSONResponse({"nonce": b64url_encode(result.nonce), "expires": result.expires})

    async def token_request(request: RawRequest) -> Response:
        outcome, response = await _token_request(attester, request, blocking)
        child(requests, outcome).inc()
        return response

    def token_request_too_long() -> Response:
        requests.labels(outcome="bad_request").inc()
        return _problem(422, "token request too large")

    binary = binary_body(MEDIA_TOKEN_REQUEST)
    binary["requestBody"]["content"].update(
        binary_body(MEDIA_BATCH_REQUEST)["requestBody"]["content"]
    )
    return [
        RawRoute(
            ATTESTER_ENROLL_PATH,
            enroll,
            _MAX_BODY,
            bad_enrolment,
            json_operation(
                "attester",
                "Enroll",
                EnrollBody,
                {200: (Enrolled, "known"), 201: (Enrolled, "created")},
            ),
            models=(EnrollBody, Enrolled),
        ),
        RawRoute(
            ATTESTER_CHALLENGE_PATH,
            challenge,
            _MAX_BODY,
            bad_challenge,
            json_operation("attester", "Challenge", ChallengeBody, {200: (Challenge, "a nonce")}),
            models=(ChallengeBody, Challenge),
        ),
        RawRoute(
            ATTESTER_TOKEN_REQUEST_PATH,
            token_request,
            _MAX_BATCH_BODY,
            token_request_too_long,
            {
                "tags": ["attester"],
                "summary": "Token Request",
                "operationId": "token_request",
                **binary,
                "responses": {
                    **{str(k): v for k, v in binary_response(MEDIA_TOKEN_RESPONSE).items()},
                    "206": binary_response(MEDIA_BATCH_RESPONSE, 206)[206],
                    **{str(k): v for k, v in PROBLEM_RESPONSES.items()},
                },
            },
        ),
    ]


async def _token_request(
    attester: AttesterService, request: RawRequest, blocking: _Runner
) -> tuple[str, Response]:
    """A device's token request, single or batched: (its outcome label, the answer)."""
    media = request.header("content-type")
    batched = media == MEDIA_BATCH_REQUEST
    if not batched and media != MEDIA_TOKEN_REQUEST:
        return "bad_request", _problem(415, f"Content-Type must be {MEDIA_TOKEN_REQUEST}")
    try:
        device_id = b64url_decode(request.header(DEVICE_ID_HEADER.lower()) or "")
        nonce = b64url_decode(request.header(NONCE_HEADER.lower()) or "")
        signature = b64url_decode(request.header(SIGNATURE_HEADER.lower()) or "")
    except HeaderError:
        return "auth_failed", _problem(401, "Device authentication required")
    body = request.body
    if not batched and len(body) > _MAX_BODY:
        return "bad_request", _problem(422, "token request too large")
    try:
        if batched:
            batch = await blocking(attester.batch_token_request, device_id, nonce, signature, body)
        else:
            out = await blocking(attester.token_request, device_id, nonce, signature, body)
    except DeviceAuthError:
        return "auth_failed", _problem(401, "Device authentication failed")
    except QuotaExceededError as exc:
        return "quota_exceeded", _problem(
            429, "Token quota exceeded", {"Retry-After": str(exc.retry_after)}
        )
    except IssuanceError:
        if batched:
            # The draft's answer when no token of the batch is issued.
            return "issuer_refused", _problem(400, "No token of the batch could be issued")
        return "issuer_refused", _problem(422, "Unprocessable token request")
    except IssuerUnavailableError:
        return "issuer_unavailable", _problem(502, "Issuer unavailable")
    if batched:
        status = 206 if any(r is None for r in batch.responses) else 200
        return "issued", Response(batch.encode(), status, media_type=MEDIA_BATCH_RESPONSE)
    return "issued", Response(out, media_type=MEDIA_TOKEN_RESPONSE)
