"""The attester's check of a device: its manufacturer certificate and its signed token requests.

Every device holds an Ed25519 or ECDSA (P-256/P-384) key pair and an X.509 certificate for it
issued by a manufacturer CA the attester trusts (RFC 9576 §3.5.1's "device validity"
attestation, simulated: `client_sdk.manufacturer` is the factory). The device's stable
identifier is `shared.privacypass.attestation.device_id_of` its key.

To ask for a token, the device fetches a single-use attester nonce and signs
`shared.privacypass.attestation.auth_message` over it and the exact TokenRequest it sends;
this module verifies that signature and the certificate.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from services.common.problems import ServiceError
from shared.privacypass import attestation
from shared.privacypass.attestation import SIGNATURE_HASHES, DevicePublicKey

__all__ = [
    "DeviceAuthError",
    "auth_message",
    "load_device_public_key",
    "validate_device_certificate",
    "verify_device_signature",
]

NONCE_SIZE: Final = attestation.NONCE_SIZE


class DeviceAuthError(ServiceError, ValueError):
    """A certificate or a signature the attester does not accept (401: the request's doing, so
    a refusal, not an `InternalError`); `reason` is a short fixed name of why, for counting
    refusals."""

    status = 401

    def __init__(self, message: str, reason: str) -> None:
        super().__init__("Device authentication failed", detail=message)
        self.reason = reason


def auth_message(device_id: bytes, nonce: bytes, body: bytes) -> bytes:
    """`shared.privacypass.attestation.auth_message`, failing as a `DeviceAuthError`."""
    try:
        return attestation.auth_message(device_id, nonce, body)
    except ValueError as exc:
        raise DeviceAuthError(str(exc), "malformed") from None


def verify_device_signature(public_key: DevicePublicKey, message: bytes, signature: bytes) -> None:
    """Ed25519, or ECDSA with the curve's hash (DER signature); raises `DeviceAuthError`."""
    try:
        if isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(signature, message)
        else:
            hash_cls = SIGNATURE_HASHES[public_key.curve.name]
            public_key.verify(signature, message, ec.ECDSA(hash_cls()))
    except InvalidSignature:
        raise DeviceAuthError("bad device signature", "bad_signature") from None


def load_device_public_key(spki_der: bytes) -> DevicePublicKey:
    key = serialization.load_der_public_key(spki_der)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in SIGNATURE_HASHES:
        return key
    raise DeviceAuthError("device keys are Ed25519 or ECDSA P-256/P-384", "unsupported_key")


def validate_device_certificate(
    cert: x509.Certificate, trust_anchors: list[x509.Certificate], now: int
) -> DevicePublicKey:
    """The device key of `cert` if a trusted manufacturer CA issued it and it is valid at `now`.

    Checks: issued directly by one of `trust_anchors` (name and signature), both certificates
    within their validity period, not itself a CA, and an Ed25519/ECDSA P-256/P-384 key.
    """
    when = dt.datetime.fromtimestamp(now, dt.UTC)
    for ca in trust_anchors:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        if not ca.not_valid_before_utc <= when <= ca.not_valid_after_utc:
            raise DeviceAuthError("manufacturer CA certificate is not valid now", "ca_expired")
        break
    else:
        raise DeviceAuthError(
            "certificate not issued by a trusted manufacturer CA", "untrusted_issuer"
        )
    if not cert.not_valid_before_utc <= when <= cert.not_valid_after_utc:
        raise DeviceAuthError("device certificate is not valid now", "certificate_expired")
    try:
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            raise DeviceAuthError("a CA certificate is not a device certificate", "ca_certificate")
    except x509.ExtensionNotFound:
        pass
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return load_device_public_key(spki)
