"""Secrets and keys of a deployment, generated once and kept in one directory.

`sagg up` keeps them in its data dir; the compose file's one-shot `init` service writes them to
./.secrets (`sagg keys init`), from where each container is given only its own. Each is reused
when it already exists, so restarting a deployment keeps its tokens, its recipe signing key
(devices pin it) and its manufacturer CA (enrolled devices hold certificates from it).

Files (all written owner-only, 0600, in an owner-only directory; a symbolic link in place of
any of them is refused, never followed or written through). Every service has credentials of its
own, so that no process holds a token that opens another service (least privilege; one malicious
party gains nothing at the others, 001 §4.3):

- ``<service>.admin_token`` for leader, helper, collector, token-issuer and recipe-server: the
  operator's bearer token of that service (the admin API and /metrics of a DAP party; /metrics
  of the token issuer and the recipe server).
- ``<party>.provisioner_token`` for leader, helper and collector: the token that party gives
  the recipe server, which may only create tasks there and read back their public parameters.
- ``analyst_token``: bearer token for publishing recipes.
- ``attester.secret``: the bearer secret between attester and token issuer when they run as
  separate services (the split model of the compose file); the joint process of `sagg up` does
  not use it.
- ``recipe-server.key``: the recipe server's Ed25519 seed, unpadded base64url (the format
  `services.recipe_server.keys` reads).
- ``manufacturer-ca.pem`` / ``manufacturer-ca.key``: the simulated manufacturer CA the attester
  trusts, and its private key (PKCS#8 PEM) with which the device simulator certifies devices.
- ``<service>.datastore_key`` for leader, helper, collector and token-issuer: the key sealing
  that service's secrets at rest (`services.common.crypter`), one per service so that no
  party's key opens another's store.
- ``taskprov.*``, the secrets of taskprov (dap-19.md §11) that `sagg up --taskprov` hands out:
  ``taskprov.verify_key_init`` (the 32 bytes both aggregators derive every taskprov task's
  verify key from), ``taskprov.aggregator_token`` (the leader's token at the helper on those
  tasks), ``taskprov.collector_token`` (the collector's at the leader) and
  ``taskprov.collector_hpke`` (the X25519 key their aggregate shares are sealed to; the
  aggregators get its public HpkeConfig). Made only for a deployment that runs taskprov.
- ``<role>.db_password`` and ``<role>.pgpass``, only for the database roles asked for
  (`ensure_db_password`; the compose file's PostgreSQL servers): a generated password, raw
  (what a PostgreSQL container's ``POSTGRES_PASSWORD_FILE`` reads) and as a libpq password file
  (what a service's ``?passfile=`` database URL reads), so no database has a default password
  and no URL carries one.

Once the token issuer runs, `pin_issuer_keys` writes ``token-key-ids``: the key ids of its
directory (RFC 9578 §4), one per line, which the recipe server pins into every recipe and
task (`SAGG_RECIPE_SERVER_TOKEN_KEY_IDS_FILE`); aggregators and devices then accept tokens
under those keys only. It is rewritten at each start (`sagg up`, the compose `token-keys`
step), so a deployment restarted after the issuer rotated pins the new keys; recipes
published before keep their pins, and their tokens stop once those keys expire.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from client_sdk.manufacturer import ManufacturerCA
from deploy.errors import DeployError
from services.common.auth import MIN_TOKEN_LENGTH
from services.common.crypter import CrypterError, generate_key, parse_keys
from shared import hpke
from shared.b64url import b64url_decode, b64url_encode
from shared.dap.messages import HpkeConfig
from shared.dap.taskprov import VERIFY_KEY_INIT_SIZE
from shared.files import create_private, private_dir, read_private, write_private
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, DirectoryError, IssuerDirectory
from shared.privacypass.keys import InvalidKeyError
from shared.recipe.signing import RecipeSigner
from shared.transport import http_failure

__all__ = [
    "ADMIN_TOKEN_SERVICES",
    "DATASTORE_KEY_SERVICES",
    "PINNED_KEYS_DIR",
    "PROVISIONED_PARTIES",
    "TASKPROV_HPKE_CONFIG_ID",
    "TOKEN_KEY_IDS_FILE",
    "DeploymentKeys",
    "KeysError",
    "TaskprovKeys",
    "admin_token_file",
    "datastore_key_file",
    "db_password_file",
    "ensure_db_password",
    "ensure_keys",
    "ensure_pinned_keys_placeholder",
    "load_manufacturer_ca",
    "pgpass_file",
    "pin_issuer_keys",
    "provisioner_token_file",
]

#: Every service, each with an operator token of its own.
ADMIN_TOKEN_SERVICES = ("leader", "helper", "collector", "token-issuer", "recipe-server")
#: The DAP parties the recipe server provisions tasks on, each with a token for it.
PROVISIONED_PARTIES = ("leader", "helper", "collector")
ANALYST_TOKEN_FILE = "analyst_token"
RECIPE_KEY_FILE = "recipe-server.key"
ATTESTER_SECRET_FILE = "attester.secret"
CA_CERT_FILE = "manufacturer-ca.pem"
CA_KEY_FILE = "manufacturer-ca.key"
TOKEN_KEY_IDS_FILE = "token-key-ids"
#: The subdirectory of a compose secrets directory that the `token-keys` step alone mounts.
PINNED_KEYS_DIR = "issuer"
#: The services whose stores hold secrets, each with its own datastore key.
DATASTORE_KEY_SERVICES = ("leader", "helper", "collector", "token-issuer")


class KeysError(DeployError):
    """A key file exists but cannot be used; the message names it."""


@dataclass(frozen=True, repr=False)
class DeploymentKeys:
    directory: Path
    #: Per service of `ADMIN_TOKEN_SERVICES`: the operator's token of that service.
    admin_tokens: dict[str, str]
    #: Per party of `PROVISIONED_PARTIES`: the recipe server's token at that party.
    provisioner_tokens: dict[str, str]
    analyst_token: str
    recipe_key_file: Path
    recipe_public_key: str  # unpadded base64url, raw Ed25519
    recipe_key_id: str
    ca_cert_file: Path
    ca_key_file: Path
    #: Per service of `DATASTORE_KEY_SERVICES`: its ``datastore_keys`` setting.
    datastore_keys: dict[str, str]
    #: The taskprov secrets, for a deployment that runs taskprov.
    taskprov: TaskprovKeys | None = None

    def __repr__(self) -> str:
        return f"DeploymentKeys({str(self.directory)!r})"


@dataclass(frozen=True, repr=False)  # the default object repr: no token in logs
class TaskprovKeys:
    """The ``taskprov.*`` files (module docstring); the services read the secrets from them."""

    verify_key_init_file: Path
    aggregator_token_file: Path
    collector_token: str
    collector_token_file: Path
    collector_hpke_file: Path
    #: The collector key's HpkeConfig, unpadded base64url (public: what the aggregators seal to).
    collector_hpke_config: str


def _write_new(path: Path, text: str) -> bool:
    """Create `path` 0600 with `text`; False if it already existed (another writer won)."""
    return create_private(path, text.encode())


def _read(path: Path) -> str:
    # Never through a link: a planted one would make the deployment use a token or key that
    # whoever planted it chose, or read one of theirs.
    return read_private(path).decode()


def _token(path: Path, given: str | None) -> str:
    if given is not None:
        _write_new(path, given + "\n")
    _write_new(path, secrets.token_urlsafe(32) + "\n")
    token = _read(path).strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise KeysError(f"{path} holds a token shorter than {MIN_TOKEN_LENGTH} characters")
    return token


def _recipe_key(path: Path) -> RecipeSigner:
    _write_new(path, b64url_encode(secrets.token_bytes(32)) + "\n")
    try:
        seed = b64url_decode(_read(path).strip(), str(path))
    except ValueError as exc:
        raise KeysError(f"{path}: {exc}") from None
    if len(seed) != 32:
        raise KeysError(f"{path} must hold a 32-byte Ed25519 seed")
    return RecipeSigner.from_seed(seed)


def admin_token_file(directory: Path, service: str) -> Path:
    return directory / f"{service}.admin_token"


def provisioner_token_file(directory: Path, party: str) -> Path:
    return directory / f"{party}.provisioner_token"


def datastore_key_file(directory: Path, service: str) -> Path:
    return directory / f"{service}.datastore_key"


def _datastore_key(path: Path) -> str:
    _write_new(path, generate_key() + "\n")
    text = _read(path).strip()
    try:
        parse_keys(text)
    except CrypterError as exc:
        raise KeysError(f"{path}: {exc}") from None
    return text


#: The config id of the collector's taskprov key (the collector's default,
#: `CollectorSettings.taskprov_hpke_config_id`).
TASKPROV_HPKE_CONFIG_ID = 1


def _taskprov_keys(directory: Path) -> TaskprovKeys:
    init = directory / "taskprov.verify_key_init"
    _write_new(init, b64url_encode(secrets.token_bytes(VERIFY_KEY_INIT_SIZE)) + "\n")
    try:
        if len(b64url_decode(_read(init).strip(), "verify_key_init")) != VERIFY_KEY_INIT_SIZE:
            raise ValueError(f"not {VERIFY_KEY_INIT_SIZE} bytes")
    except ValueError as exc:
        raise KeysError(f"{init}: {exc}") from None
    aggregator = directory / "taskprov.aggregator_token"
    _token(aggregator, None)
    collector = directory / "taskprov.collector_token"
    collector_token = _token(collector, None)
    key_file = directory / "taskprov.collector_hpke"
    fresh = hpke.generate_keypair(TASKPROV_HPKE_CONFIG_ID)
    _write_new(key_file, b64url_encode(fresh.private_key_bytes()) + "\n")
    try:
        secret = b64url_decode(_read(key_file).strip(), "taskprov collector key")
        pair = hpke.from_private_bytes(TASKPROV_HPKE_CONFIG_ID, secret)
    except (ValueError, hpke.HpkeError) as exc:
        raise KeysError(f"{key_file}: {exc}") from None
    config = HpkeConfig(pair.config_id, pair.kem_id, pair.kdf_id, pair.aead_id, pair.public_key)
    return TaskprovKeys(
        init, aggregator, collector_token, collector, key_file, b64url_encode(config.encode())
    )


def db_password_file(directory: Path, role: str) -> Path:
    return directory / f"{role}.db_password"


def pgpass_file(directory: Path, role: str) -> Path:
    return directory / f"{role}.pgpass"


def ensure_db_password(directory: Path, role: str) -> None:
    """A generated password of the database role `role`, in both files (kept on reruns)."""
    password = _token(db_password_file(directory, role), None)
    pgpass = pgpass_file(directory, role)
    if not pgpass.exists():
        # hostname:port:database:username:password (libpq); the URL names host, db and user.
        # token_urlsafe never yields ':' or '\\', which this format would need escaped.
        _write_new(pgpass, f"*:*:*:*:{password}\n")


def load_manufacturer_ca(cert_file: Path, key_file: Path) -> ManufacturerCA:
    """The CA `ensure_keys` wrote (for a device simulator that certifies its devices)."""
    try:
        cert = x509.load_pem_x509_certificate(read_private(cert_file))
        key = serialization.load_pem_private_key(read_private(key_file), password=None)
    except (OSError, ValueError) as exc:
        raise KeysError(f"manufacturer CA {cert_file}: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise KeysError(f"{key_file} is not an Ed25519 key")
    name = cert.subject.rfc4514_string().removeprefix("CN=")
    return ManufacturerCA(name, key, cert)


def _manufacturer_ca(cert_file: Path, key_file: Path) -> None:
    for path in (cert_file, key_file):
        if path.is_symlink():  # named as such, not as "only one of the pair exists"
            raise KeysError(f"{path} is a symbolic link; refusing to use it")
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
    directory: Path, *, analyst_token: str | None = None, taskprov: bool = False
) -> DeploymentKeys:
    """Create whatever is missing in `directory` and return it all (the ``taskprov.*`` files
    only with `taskprov`).

    `analyst_token` seeds a new token file (an older deployment file's, so scripts holding it
    keep working); existing files win. A shared ``admin_token`` file of an older layout is
    left alone and unused: every service now has its own.
    """
    # Owner-only, an existing directory (a compose volume) tightened too; the files are 0600.
    private_dir(directory)
    admin = {s: _token(admin_token_file(directory, s), None) for s in ADMIN_TOKEN_SERVICES}
    provisioner = {
        p: _token(provisioner_token_file(directory, p), None) for p in PROVISIONED_PARTIES
    }
    analyst = _token(directory / ANALYST_TOKEN_FILE, analyst_token)
    _token(directory / ATTESTER_SECRET_FILE, None)
    signer = _recipe_key(directory / RECIPE_KEY_FILE)
    _manufacturer_ca(directory / CA_CERT_FILE, directory / CA_KEY_FILE)
    return DeploymentKeys(
        directory=directory,
        admin_tokens=admin,
        provisioner_tokens=provisioner,
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
        taskprov=_taskprov_keys(directory) if taskprov else None,
    )


def ensure_pinned_keys_placeholder(directory: Path) -> Path:
    """`<directory>/issuer/token-key-ids`, created empty unless it exists: the compose file gives
    it to the recipe server as a secret, and a secret's file must exist before its container
    is created; the `token-keys` step (which mounts that subdirectory alone, never the other
    secrets) replaces it with the running issuer's key ids. Empty, the recipe server refuses
    to start (nothing pinned), so a skipped step fails closed."""
    pinned = private_dir(directory / PINNED_KEYS_DIR)
    path = pinned / TOKEN_KEY_IDS_FILE
    create_private(path, b"")
    return path


def pin_issuer_keys(directory: Path, issuer_url: str, http: httpx.Client) -> list[str]:
    """Fetch the issuer's directory and write the ids of its token keys (unpadded base64url
    SHA-256 of each key, RFC 9578 §6.5) to `directory`/token-key-ids; returns them."""
    url = issuer_url.rstrip("/") + ISSUER_DIRECTORY_PATH
    try:
        response = http.get(url)
        response.raise_for_status()
        keys = IssuerDirectory.decode(response.content).keys_of_type()
        ids = [b64url_encode(k.token_key_object().token_key_id) for k in keys]
    except httpx.HTTPError as exc:
        raise KeysError(f"token issuer directory {url}: {http_failure(exc)}") from None
    except (DirectoryError, InvalidKeyError) as exc:
        raise KeysError(f"token issuer directory {url}: {type(exc).__name__}") from None
    if not ids:
        raise KeysError(f"token issuer directory {url} lists no token key")
    # Owner-only and never through a planted link, like every other file here; replaced
    # atomically so the recipe server never reads half a list.
    private_dir(directory)
    write_private(directory / TOKEN_KEY_IDS_FILE, "".join(f"{i}\n" for i in ids).encode())
    return ids
