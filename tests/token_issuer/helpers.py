"""A device's side of the attester protocol, over a TestClient."""

from __future__ import annotations

from fastapi.testclient import TestClient
from httpx import Response

from client_sdk.manufacturer import SimulatedDevice
from shared.privacypass.attestation import DEVICE_ID_HEADER, NONCE_HEADER, SIGNATURE_HEADER
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, IssuerDirectory
from shared.privacypass.headers import b64url_decode, b64url_encode
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, Token, TokenChallenge


def enroll(client: TestClient, device: SimulatedDevice) -> Response:
    r: Response = client.post("/attester/enroll", json={"certificate": device.certificate_pem()})
    return r


def nonce(client: TestClient, device: SimulatedDevice) -> bytes:
    r = client.post("/attester/challenge", json={"device_id": b64url_encode(device.device_id)})
    assert r.status_code == 200, r.text
    return b64url_decode(r.json()["nonce"])


def post_request(
    client: TestClient,
    device: SimulatedDevice,
    body: bytes,
    *,
    nonce_value: bytes | None = None,
    signature: bytes | None = None,
    media_type: str = MEDIA_TOKEN_REQUEST,
) -> Response:
    n = nonce_value if nonce_value is not None else nonce(client, device)
    sig = signature if signature is not None else device.sign(n, body)
    r: Response = client.post(
        "/attester/token-request",
        content=body,
        headers={
            "Content-Type": media_type,
            DEVICE_ID_HEADER: b64url_encode(device.device_id),
            NONCE_HEADER: b64url_encode(n),
            SIGNATURE_HEADER: b64url_encode(sig),
        },
    )
    return r


def current_key(client: TestClient, now: int) -> TokenKey:
    r = client.get(ISSUER_DIRECTORY_PATH)
    selected = IssuerDirectory.decode(r.content).select_key(now)
    assert selected is not None
    return selected.token_key_object()


def obtain_token(
    client: TestClient, device: SimulatedDevice, key: TokenKey, challenge: TokenChallenge
) -> tuple[Response, Token | None]:
    request, state = create_token_request(challenge, key)
    r = post_request(client, device, request.encode())
    return r, (finalize_token(state, r.content) if r.status_code == 200 else None)
