"""Device identity for the attester: manufacturer certificates and signed token requests.

Every simulated device holds an Ed25519 or ECDSA (P-256/P-384) key pair and an X.509
certificate for it issued by a manufacturer CA the attester trusts (RFC 9576 §3.5.1's "device
validity" attestation, simulated). The device's stable identifier is
``device_id = SHA-256(DER SubjectPublicKeyInfo of the device key)``.

To ask for a token, the device fetches a single-use attester nonce and signs
`shared.privacypass.attestation.auth_message` over it and the exact TokenRequest it sends.

This module also carries the simulation's side of that: `ManufacturerCA` and `SimulatedDevice`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass
from typing import Final, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from shared.privacypass import attestation

__all__ = [
    "DeviceAuthError",
    "DeviceKind",
    "ManufacturerCA",
    "SimulatedDevice",
    "auth_message",
    "device_id_of",
    "validate_device_certificate",
    "verify_device_signature",
]

NONCE_SIZE: Final = attestation.NONCE_SIZE

DevicePublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
DeviceKind = Literal["ed25519", "ecdsa-p256", "ecdsa-p384"]
_CURVE_HASH: Final[dict[str, type[hashes.HashAlgorithm]]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
}


class DeviceAuthError(ValueError):
    """A certificate or a signature the attester does not accept; `reason` is a short fixed
    name of why, for counting refusals."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def device_id_of(public_key: DevicePublicKey) -> bytes:
    spki = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).digest()


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
            hash_cls = _CURVE_HASH[public_key.curve.name]
            public_key.verify(signature, message, ec.ECDSA(hash_cls()))
    except InvalidSignature:
        raise DeviceAuthError("bad device signature", "bad_signature") from None


def load_device_public_key(spki_der: bytes) -> DevicePublicKey:
    key = serialization.load_der_public_key(spki_der)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _CURVE_HASH:
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


# --- the simulation's manufacturer and devices ---------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True, slots=True, repr=False)
class ManufacturerCA:
    """A simulated manufacturer CA (Ed25519), which certifies device keys at the factory."""

    name: str
    key: ed25519.Ed25519PrivateKey
    certificate: x509.Certificate

    @classmethod
    def generate(
        cls, name: str = "sagg simulated manufacturer", now: int | None = None
    ) -> ManufacturerCA:
        key = ed25519.Ed25519PrivateKey.generate()
        start = (
            dt.datetime.fromtimestamp(now, dt.UTC) if now is not None else dt.datetime.now(dt.UTC)
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start - dt.timedelta(days=1))
            .not_valid_after(start + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, None)
        )
        return cls(name, key, cert)

    def certify(
        self,
        public_key: DevicePublicKey,
        serial: str,
        *,
        not_before: dt.datetime | None = None,
        days: int = 3650,
    ) -> x509.Certificate:
        start = not_before or self.certificate.not_valid_before_utc
        return (
            x509.CertificateBuilder()
            .subject_name(_name(f"device {serial}"))
            .issuer_name(self.certificate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, None)
        )

    def certificate_pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    def __repr__(self) -> str:
        return f"ManufacturerCA({self.name!r})"


_DevicePrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True, repr=False)
class SimulatedDevice:
    """A device with its factory key pair and certificate."""

    key: _DevicePrivateKey
    certificate: x509.Certificate

    @classmethod
    def manufacture(cls, ca: ManufacturerCA, kind: DeviceKind = "ed25519") -> SimulatedDevice:
        key: _DevicePrivateKey
        if kind == "ed25519":
            key = ed25519.Ed25519PrivateKey.generate()
        elif kind == "ecdsa-p256":
            key = ec.generate_private_key(ec.SECP256R1())
        else:
            key = ec.generate_private_key(ec.SECP384R1())
        return cls(key, ca.certify(key.public_key(), secrets.token_hex(8)))

    @property
    def device_id(self) -> bytes:
        return device_id_of(self.key.public_key())

    def certificate_pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    def sign(self, nonce: bytes, body: bytes) -> bytes:
        message = auth_message(self.device_id, nonce, body)
        if isinstance(self.key, ed25519.Ed25519PrivateKey):
            return self.key.sign(message)
        return self.key.sign(message, ec.ECDSA(_CURVE_HASH[self.key.curve.name]()))

    def __repr__(self) -> str:
        return f"SimulatedDevice({self.device_id.hex()[:16]})"
