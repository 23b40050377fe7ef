"""A local CA and one HTTPS certificate per service, for `sagg up --tls`.

DAP-09 §3 requires HTTPS between every party. For a deployment on one machine there is no
public CA to ask, so `sagg up --tls` makes its own in ``<data dir>/tls/``:

- ``ca.pem`` / ``ca.key``: a CA (ECDSA P-256, path length 0), kept across restarts so that a
  client that was handed ``ca.pem`` keeps trusting the deployment;
- ``<service>.pem`` / ``<service>.key``: a server certificate for each service, issued anew
  at every start (30 days), with subject alternative names ``localhost``, ``127.0.0.1`` and
  the host the services listen on, and the serverAuth extended key usage.

Keys are written 0600 and never through a symbolic link (`shared.files`); the CA's key is
read by nothing but this module. The deployment file names ``ca.pem`` (`tls_ca_file`), which
the SDK, the simulators and every `sagg` command then verify the services against.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy.errors import DeployError
from shared.files import create_private, private_dir, read_private, write_private

__all__ = ["LocalTls", "ServiceCert", "TlsError", "ensure_local_tls"]

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
_CA_YEARS = 5
_LEAF_DAYS = 30


class TlsError(DeployError):
    """The local CA exists but cannot be used; the message names the file."""


@dataclass(frozen=True)
class ServiceCert:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class LocalTls:
    ca_file: Path
    certs: dict[str, ServiceCert]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _new_ca(cert_file: Path, key_file: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sagg local CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365 * _CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    # The key first: a crash in between leaves no certificate without its key.
    if create_private(key_file, _pem_key(key)):
        create_private(cert_file, cert.public_bytes(serialization.Encoding.PEM))


def _load_ca(
    cert_file: Path, key_file: Path
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate(read_private(cert_file))
        key = serialization.load_pem_private_key(read_private(key_file), password=None)
    except ValueError as exc:
        raise TlsError(f"local CA {cert_file}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TlsError(f"{key_file} is not an EC key")
    return cert, key


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _issue(
    service: str,
    hosts: Sequence[str],
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    target: ServiceCert,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sagg {service}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=_LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san(hosts), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_private(target.key_file, _pem_key(key))
    write_private(target.cert_file, cert.public_bytes(serialization.Encoding.PEM))


def ensure_local_tls(directory: Path, services: Sequence[str], hosts: Sequence[str]) -> LocalTls:
    """The CA in `directory` (made on first use) and a fresh certificate for each service,
    valid for ``localhost``, ``127.0.0.1`` and `hosts`."""
    private_dir(directory)
    ca_file, ca_key_file = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    if not ca_key_file.exists() and not ca_key_file.is_symlink():
        if ca_file.exists() or ca_file.is_symlink():
            raise TlsError(f"{ca_file} exists without its key {ca_key_file}")
        _new_ca(ca_file, ca_key_file)
    ca_cert, ca_key = _load_ca(ca_file, ca_key_file)
    certs = {
        name: ServiceCert(directory / f"{name}.pem", directory / f"{name}.key") for name in services
    }
    for name, target in certs.items():
        _issue(name, hosts, ca_cert, ca_key, target)
    return LocalTls(ca_file, certs)
