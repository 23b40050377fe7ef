"""The device side of sagg's attester protocol: what a device signs and which headers carry it.

Not part of any RFC: RFC 9576 §3.5.1 leaves attestation to the deployment. sagg's attester
(`services.token_issuer.attester`) authenticates a device per token request (pure definitions
here so that the device SDK needs nothing from `services`):

1. ``POST /attester/challenge`` with ``{"device_id": base64url}`` returns a single-use nonce;
2. the device signs `auth_message(device_id, nonce, body)` with its enrolled Ed25519 or ECDSA
   key, `body` being the exact TokenRequest it sends;
3. ``POST /attester/token-request`` with that body and the headers `DEVICE_ID_HEADER`,
   `NONCE_HEADER` and `SIGNATURE_HEADER` (base64url values).

``device_id = SHA-256(DER SubjectPublicKeyInfo of the device key)`` (`device_id_of`); an ECDSA
key signs with its curve's hash (`SIGNATURE_HASHES`).
"""

from __future__ import annotations

import hashlib
from typing import Final

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

__all__ = [
    "ATTESTER_CHALLENGE_PATH",
    "ATTESTER_ENROLL_PATH",
    "ATTESTER_TOKEN_REQUEST_PATH",
    "DEVICE_ID_HEADER",
    "DEVICE_ID_SIZE",
    "NONCE_HEADER",
    "NONCE_SIZE",
    "SIGNATURE_HASHES",
    "SIGNATURE_HEADER",
    "DevicePublicKey",
    "auth_message",
    "device_id_of",
]

#: Domain separation: these signatures can never be confused with any other use of the key.
_LABEL: Final = b"sagg-attester-token-request-v1\x00"
DEVICE_ID_SIZE: Final = 32
NONCE_SIZE: Final = 32

DEVICE_ID_HEADER: Final = "Sagg-Device-Id"
NONCE_HEADER: Final = "Sagg-Attester-Nonce"
SIGNATURE_HEADER: Final = "Sagg-Device-Signature"

ATTESTER_ENROLL_PATH: Final = "/attester/enroll"
ATTESTER_CHALLENGE_PATH: Final = "/attester/challenge"
ATTESTER_TOKEN_REQUEST_PATH: Final = "/attester/token-request"

DevicePublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
#: The ECDSA curves a device key may use, with the hash its signatures use (Ed25519 has none).
SIGNATURE_HASHES: Final[dict[str, type[hashes.HashAlgorithm]]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
}


def device_id_of(public_key: DevicePublicKey) -> bytes:
    """SHA-256 of the key's DER SubjectPublicKeyInfo: the id device and attester agree on."""
    spki = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).digest()


def auth_message(device_id: bytes, nonce: bytes, body: bytes) -> bytes:
    """``label || device_id || nonce || SHA-256(body)``: what a device signs per request.

    Binding the body stops a captured signature from being spent on another TokenRequest;
    the nonce, consumed on use, stops replays of the same one.
    """
    if len(device_id) != DEVICE_ID_SIZE or len(nonce) != NONCE_SIZE:
        raise ValueError("device id and nonce are 32 bytes each")
    return _LABEL + device_id + nonce + hashlib.sha256(body).digest()
