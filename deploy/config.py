"""Where the CLI finds its deployment: URLs, tokens and the recipe server's public key.

`sagg up` writes `<data dir>/deployment.json` (mode 0600: it holds the operator's tokens, one
per service); every other command reads it, so that they work without flags after `sagg up`.
Precedence for each value: command-line flag, then environment (`SAGG_ADMIN_TOKEN`, one token
for whichever service a command talks to, `SAGG_ANALYST_TOKEN`,
`SAGG_LEADER_URL`, `SAGG_HELPER_URL`, `SAGG_COLLECTOR_URL`, `SAGG_RECIPE_SERVER_URL`), then the
deployment file (`--deployment`, `SAGG_DEPLOYMENT`, or `.data/deployment.json` in the working
directory).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from deploy.errors import DeployError
from deploy.keys import ADMIN_TOKEN_SERVICES, DeploymentKeys
from services.common.auth import MIN_TOKEN_LENGTH
from shared.files import private_dir, read_private, write_private
from shared.transport import TransportPolicy

__all__ = [
    "DEFAULT_DATA_DIR",
    "Deployment",
    "DeploymentError",
    "deployment_of",
    "deployment_path",
    "load_deployment",
    "read_document",
    "write_deployment",
]

DEFAULT_DATA_DIR = Path(".data")
DEPLOYMENT_FILE = "deployment.json"


class DeploymentError(DeployError):
    """The deployment file, or another file an operator wrote, is unreadable or invalid; the
    message names it."""


class Deployment(BaseModel):
    """What `sagg up` started."""

    model_config = ConfigDict(extra="ignore")

    leader: str
    helper: str
    collector: str
    #: The operator's token of each service (`deploy.keys.ADMIN_TOKEN_SERVICES`), never
    #: handed to another service; empty in an analyst's or a device fleet's view.
    admin_tokens: dict[str, str] = Field(default_factory=dict, repr=False)
    data_dir: str | None = None
    store: str = "sqlite"
    # Optional, so that deployment files of the three-service `sagg up` still load.
    token_issuer: str | None = None
    recipe_server: str | None = None
    analyst_token: str | None = Field(default=None, min_length=MIN_TOKEN_LENGTH, repr=False)
    #: The recipe server's Ed25519 public key (raw, unpadded base64url) and its key id: what a
    #: device pins to verify recipes and tree heads.
    recipe_server_public_key: str | None = None
    recipe_server_key_id: str | None = None
    #: The simulated manufacturer CA the attester trusts, and its key (device simulators).
    manufacturer_ca_cert: str | None = None
    manufacturer_ca_key: str | None = None
    #: The CA that certifies the services' HTTPS certificates (`sagg up --tls`), which every
    #: client of this deployment verifies them against; None: the system's trust store.
    tls_ca_file: str | None = None
    #: `sagg up --taskprov`: the collector's token at the leader on taskprov tasks, which
    #: `sagg task create --taskprov` gives the collector's task.
    taskprov_collector_token: str | None = Field(
        default=None, min_length=MIN_TOKEN_LENGTH, repr=False
    )

    @property
    def transport(self) -> TransportPolicy:
        return TransportPolicy(self.tls_ca_file)

    @model_validator(mode="before")
    @classmethod
    def _one_shared_admin_token(cls, data: Any) -> Any:
        # A file of an older `sagg up` holds one token that all its services took.
        if isinstance(data, dict) and "admin_tokens" not in data and "admin_token" in data:
            shared = data["admin_token"]
            data = {**data, "admin_tokens": dict.fromkeys(ADMIN_TOKEN_SERVICES, shared)}
        return data

    @field_validator("admin_tokens")
    @classmethod
    def _long_enough(cls, tokens: dict[str, str]) -> dict[str, str]:
        short = sorted(name for name, token in tokens.items() if len(token) < MIN_TOKEN_LENGTH)
        if short:
            raise ValueError(f"tokens shorter than {MIN_TOKEN_LENGTH} characters: {short}")
        return tokens

    def admin_token(self, service: str) -> str | None:
        """The operator's token of `service` (leader, helper, collector, ...), if known."""
        return self.admin_tokens.get(service)


def deployment_of(
    keys: DeploymentKeys, urls: Mapping[str, str], data_dir: Path, **extra: Any
) -> Deployment:
    """The operator's view of services at `urls` (by service name) holding `keys`."""
    return Deployment(
        leader=urls["leader"],
        helper=urls["helper"],
        collector=urls["collector"],
        token_issuer=urls["token-issuer"],
        recipe_server=urls["recipe-server"],
        admin_tokens=keys.admin_tokens,
        analyst_token=keys.analyst_token,
        recipe_server_public_key=keys.recipe_public_key,
        recipe_server_key_id=keys.recipe_key_id,
        manufacturer_ca_cert=str(keys.ca_cert_file),
        manufacturer_ca_key=str(keys.ca_key_file),
        data_dir=str(data_dir),
        **extra,
    )


def read_document(path: str) -> Any:
    """A JSON or TOML file (TOML by its suffix) an operator or analyst wrote, parsed."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise DeploymentError(f"cannot read {path}: {exc.strerror}") from None
    kind = "TOML" if file.suffix == ".toml" else "JSON"
    try:
        return tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise DeploymentError(f"{path} is not valid {kind}: {exc}") from None


def deployment_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("SAGG_DEPLOYMENT")
    if env:
        return Path(env)
    return DEFAULT_DATA_DIR / DEPLOYMENT_FILE


def load_deployment(explicit: str | None = None) -> Deployment | None:
    """The deployment file's contents, or None when there is none (and none was asked for)."""
    path = deployment_path(explicit)
    if not path.exists():
        if explicit or os.environ.get("SAGG_DEPLOYMENT"):
            raise DeploymentError(f"deployment file {path} does not exist")
        return None
    try:
        # Not through a link: whoever planted one would choose the URLs and the CA we trust.
        return Deployment.model_validate(json.loads(read_private(path)))
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise DeploymentError(f"deployment file {path} is invalid: {first}") from None


def write_deployment(path: Path, deployment: Deployment) -> None:
    """Write atomically with owner-only permissions (the file holds the admin token), in an
    owner-only directory; a symbolic link at `path` is refused (`shared.files`)."""
    private_dir(path.parent)
    write_private(path, (json.dumps(deployment.model_dump(), indent=2) + "\n").encode())
