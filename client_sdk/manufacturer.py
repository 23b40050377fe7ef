"""The simulation's manufacturer: a CA that certifies device keys, and the devices it makes.

A real device leaves the factory with a key pair and a certificate from its manufacturer,
which the attester trusts (RFC 9576 §3.5.1, "device validity"; the attester's check is
`services.token_issuer.devices`). `ManufacturerCA` plays that manufacturer for simulated
devices (`client_sdk.simulator`, `sagg devices run`, the demo), and `SimulatedDevice` is a
`client_sdk.tokens.DeviceIdentity`: it signs `shared.privacypass.attestation.auth_message`
over the attester's nonce and the exact TokenRequest it sends.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from shared.privacypass.attestation import (
    SIGNATURE_HASHES,
    DevicePublicKey,
    auth_message,
    device_id_of,
)

__all__ = ["DeviceKind", "ManufacturerCA", "SimulatedDevice"]

DeviceKind = Literal["ed25519", "ecdsa-p256", "ecdsa-p384"]


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
        return self.key.sign(message, ec.ECDSA(SIGNATURE_HASHES[self.key.curve.name]()))

    def __repr__(self) -> str:
        return f"SimulatedDevice({self.device_id.hex()[:16]})"
