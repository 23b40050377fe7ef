"""Secrets and keys of a deployment, generated once and kept in one directory.

`sagg up` keeps them in its data dir; the compose file's one-shot `init` service writes them to
the shared config volume (`sagg keys init`). Each is reused when it already exists, so
restarting a deployment keeps its tokens, its recipe signing key (devices pin it) and its
manufacturer CA (enrolled devices hold certificates from it).

Files (all written owner-only, 0600):

- ``admin_token``: bearer token of the leader's, helper's and collector's admin APIs.
- ``analyst_token``: bearer token for publishing recipes.
- ``recipe-server.key``: the recipe server's Ed25519 seed, unpadded base64url (the format
  `services.recipe_server.keys` reads).
- ``manufacturer-ca.pem`` / ``manufacturer-ca.key``: the simulated manufacturer CA the attester
  trusts, and its private key (PKCS#8 PEM) with which the device simulator certifies devices.
- ``<service>.datastore_key`` for leader, helper, collector and token-issuer: the key sealing
  that service's secrets at rest (`services.common.crypter`), one per service so that no
  party's key opens another's store.

Once the token issuer runs, `pin_issuer_keys` writes ``token-key-ids``: the key ids of its
directory (RFC 9578 §4), one per line, which the recipe server pins into every recipe and
task (`SAGG_RECIPE_SERVER_TOKEN_KEY_IDS_FILE`); aggregators and devices then accept tokens
under those keys only. It is rewritten at each start (`sagg up`, the compose `token-keys`
step), so a deployment restarted after the issuer rotated pins the new keys; recipes
published before keep their pins, and their tokens stop once those keys expire.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from services.common.crypter import CrypterError, generate_key, parse_keys
from services.token_issuer.devices import ManufacturerCA
from shared.b64url import b64url_decode, b64url_encode
from shared.constants import ISSUER_DIRECTORY_PATH
from shared.privacypass.directory import DirectoryError, IssuerDirectory
from shared.privacypass.keys import InvalidKeyError
from shared.recipe.signing import RecipeSigner

__all__ = [
    "DATASTORE_KEY_SERVICES",
    "TOKEN_KEY_IDS_FILE",
    "DeploymentKeys",
    "KeysError",
    "datastore_key_file",
    "ensure_keys",
    "load_manufacturer_ca",
    "pin_issuer_keys",
]

ADMIN_TOKEN_FILE = "admin_token"
ANALYST_TOKEN_FILE = "analyst_token"
RECIPE_KEY_FILE = "recipe-server.key"
CA_CERT_FILE = "manufacturer-ca.pem"
CA_KEY_FILE = "manufacturer-ca.key"
TOKEN_KEY_IDS_FILE = "token-key-ids"
#: The services whose stores hold secrets, each with its own datastore key.
DATASTORE_KEY_SERVICES = ("leader", "helper", "collector", "token-issuer")
#: Below this a token is not one `ensure_keys` wrote; the services ask for at least 16 characters.
_MIN_TOKEN = 16


class KeysError(Exception):
    """A key file exists but cannot be used; the message names it."""


@dataclass(frozen=True, repr=False)
class DeploymentKeys:
    directory: Path
    admin_token: str
    analyst_token: str
    recipe_key_file: Path
    recipe_public_key: str  # unpadded base64url, raw Ed25519
    recipe_key_id: str
    ca_cert_file: Path
    ca_key_file: Path
    #: Per service of `DATASTORE_KEY_SERVICES`: its ``datastore_keys`` setting.
    datastore_keys: dict[str, str]

    def __repr__(self) -> str:
        return f"DeploymentKeys({str(self.directory)!r})"


def _write_new(path: Path, text: str) -> bool:
    """Create `path` 0600 with `text`; False if it already existed (another writer won)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return True


def _token(path: Path, given: str | None) -> str:
    if given is not None and not path.exists():
        _write_new(path, given + "\n")
    if not path.exists():
        _write_new(path, secrets.token_urlsafe(32) + "\n")
    token = path.read_text().strip()
    if len(token) < _MIN_TOKEN:
        raise KeysError(f"{path} holds a token shorter than {_MIN_TOKEN} characters")
    return token


def _recipe_key(path: Path) -> RecipeSigner:
    if not path.exists():
        _write_new(path, b64url_encode(secrets.token_bytes(32)) + "\n")
    try:
        seed = b64url_decode(path.read_text().strip(), str(path))
    except ValueError as exc:
        raise KeysError(f"{path}: {exc}") from None
    if len(seed) != 32:
        raise KeysError(f"{path} must hold a 32-byte Ed25519 seed")
    return RecipeSigner.from_seed(seed)


def datastore_key_file(directory: Path, service: str) -> Path:
    return directory / f"{service}.datastore_key"


def _datastore_key(path: Path) -> str:
    if not path.exists():
        _write_new(path, generate_key() + "\n")
    text = path.read_text().strip()
    try:
        parse_keys(text)
    except CrypterError as exc:
        raise KeysError(f"{path}: {exc}") from None
    return text


def load_manufacturer_ca(cert_file: Path, key_file: Path) -> ManufacturerCA:
    """The CA `ensure_keys` wrote (for a device simulator that certifies its devices)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise KeysError(f"manufacturer CA {cert_file}: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise KeysError(f"{key_file} is not an Ed25519 key")
    name = cert.subject.rfc4514_string().removeprefix("CN=")
    return ManufacturerCA(name, key, cert)


def _manufacturer_ca(cert_file: Path, key_file: Path) -> None:
    if cert_file.exists() and key_file.exists():
        load_manufacturer_ca(cert_file, key_file)  # fail now, not when a device enrolls
        return
    if cert_file.exists() or key_file.exists():
        raise KeysError(f"{cert_file} and {key_file} must both exist or both be absent")
    ca = ManufacturerCA.generate()
    key_pem = ca.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    # The key first: a crash in between leaves no certificate without its key.
    _write_new(key_file, key_pem)
    _write_new(cert_file, ca.certificate_pem())


def ensure_keys(
    directory: Path, *, admin_token: str | None = None, analyst_token: str | None = None
) -> DeploymentKeys:
    """Create whatever is missing in `directory` and return it all.

    `admin_token`/`analyst_token` seed new token files (an older deployment file's tokens,
    so scripts holding them keep working); existing files win.
    """
    # Owner-only for a new directory; an existing one (a compose volume) keeps its mode, and
    # the files in it are 0600 either way.
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    admin = _token(directory / ADMIN_TOKEN_FILE, admin_token)
    analyst = _token(directory / ANALYST_TOKEN_FILE, analyst_token)
    signer = _recipe_key(directory / RECIPE_KEY_FILE)
    _manufacturer_ca(directory / CA_CERT_FILE, directory / CA_KEY_FILE)
    return DeploymentKeys(
        directory=directory,
        admin_token=admin,
        analyst_token=analyst,
        recipe_key_file=directory / RECIPE_KEY_FILE,
        recipe_public_key=b64url_encode(signer.public_key),
        recipe_key_id=signer.key_id,
        ca_cert_file=directory / CA_CERT_FILE,
        ca_key_file=directory / CA_KEY_FILE,
        datastore_keys={
            service: _datastore_key(datastore_key_file(directory, service))
            for service in DATASTORE_KEY_SERVICES
        },
    )


def pin_issuer_keys(directory: Path, issuer_url: str, http: httpx.Client) -> list[str]:
    """Fetch the issuer's directory and write the ids of its token keys (unpadded base64url
    SHA-256 of each key, RFC 9578 §6.5) to `directory`/token-key-ids; returns them."""
    url = issuer_url.rstrip("/") + ISSUER_DIRECTORY_PATH
    try:
        response = http.get(url)
        response.raise_for_status()
        keys = IssuerDirectory.decode(response.content).keys_of_type()
        ids = [b64url_encode(k.token_key_object().token_key_id) for k in keys]
    except (httpx.HTTPError, DirectoryError, InvalidKeyError) as exc:
        raise KeysError(f"token issuer directory {url}: {type(exc).__name__}") from None
    if not ids:
        raise KeysError(f"token issuer directory {url} lists no token key")
    path = directory / TOKEN_KEY_IDS_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    _write_new(tmp, "".join(f"{i}\n" for i in ids))
    os.replace(tmp, path)
    return ids
