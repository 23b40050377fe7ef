"""``sagg keys init|pin-issuer``: a deployment's secrets and keys in one directory (`deploy.keys`;
the compose file's `init` and `token-keys` steps)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from deploy.cli.common import CliError, http
from deploy.config import deployment_of, write_deployment
from deploy.keys import (
    ADMIN_TOKEN_SERVICES,
    ATTESTER_SECRET_FILE,
    DATASTORE_KEY_SERVICES,
    PROVISIONED_PARTIES,
    KeysError,
    admin_token_file,
    datastore_key_file,
    db_password_file,
    ensure_db_password,
    ensure_keys,
    ensure_pinned_keys_placeholder,
    pgpass_file,
    pin_issuer_keys,
    provisioner_token_file,
)

__all__ = ["app"]

app = typer.Typer(help="deployment secrets and keys")

Url = Annotated[str | None, typer.Option(metavar="URL", help="its URL, for deployment.json")]


def _owner(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError:
        raise typer.BadParameter(f"not UID[:GID]: {text!r}") from None


@app.command()
def init(
    directory: Annotated[Path, typer.Option("--dir", help="directory to keep them in")],
    leader: Url = None,
    helper: Url = None,
    collector: Url = None,
    token_issuer: Url = None,
    recipe_server: Url = None,
    db_password: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ROLE",
            help="also generate a PostgreSQL password for ROLE (ROLE.db_password, ROLE.pgpass)",
        ),
    ] = None,
    owner: Annotated[
        str | None, typer.Option(metavar="UID[:GID]", help="chown the files to")
    ] = None,
    db_owner: Annotated[
        str | None, typer.Option(metavar="UID[:GID]", help="chown *.db_password files to")
    ] = None,
) -> None:
    """Create tokens, recipe key and manufacturer CA (the compose `init` service).

    With the service URLs, also write the operator's `deployment.json` there, and two views
    without the operator's tokens: `analyst.json` (plus the analyst token, for `sagg recipe
    publish`) and `devices.json` (no secret: URLs and the pinned recipe key, for device
    simulators). `--db-password` adds a generated PostgreSQL password per role; `--owner` and
    `--db-owner` (an init container running as root) hand the files to the services' user and
    the database servers' password files to PostgreSQL's.
    """
    roles = db_password or []
    owners = (_owner(owner), _owner(db_owner or owner)) if owner is not None else None
    try:
        keys = ensure_keys(directory)
        for role in roles:
            ensure_db_password(directory, role)
        pinned = ensure_pinned_keys_placeholder(directory)
    except (OSError, KeysError) as exc:
        raise CliError(f"keys in {directory}: {exc}") from None
    written = [admin_token_file(directory, s).name for s in ADMIN_TOKEN_SERVICES]
    written += [provisioner_token_file(directory, p).name for p in PROVISIONED_PARTIES]
    written += ["analyst_token", ATTESTER_SECRET_FILE, "recipe-server.key"]
    written += ["manufacturer-ca.pem", "manufacturer-ca.key"]
    written += [datastore_key_file(directory, s).name for s in DATASTORE_KEY_SERVICES]
    for role in roles:
        written += [db_password_file(directory, role).name, pgpass_file(directory, role).name]
    written.append(str(pinned.relative_to(directory)))
    urls = {
        "leader": leader,
        "helper": helper,
        "collector": collector,
        "token-issuer": token_issuer,
        "recipe-server": recipe_server,
    }
    if any(urls.values()):
        missing = [role for role, given in urls.items() if not given]
        if missing:
            raise CliError(f"deployment.json needs every URL; missing --{', --'.join(missing)}")
        deployment = deployment_of(keys, {r: u for r, u in urls.items() if u}, directory)
        write_deployment(directory / "deployment.json", deployment)
        public = deployment.model_copy(
            update={"admin_tokens": {}, "manufacturer_ca_cert": None, "manufacturer_ca_key": None}
        )
        write_deployment(directory / "analyst.json", public)
        write_deployment(
            directory / "devices.json", public.model_copy(update={"analyst_token": None})
        )
        written += ["deployment.json", "analyst.json", "devices.json"]
    if owners is not None:
        _hand_over(directory, *owners)
    print(f"{directory}: {', '.join(written)} (secrets mode 0600)")
    print(f"recipe server public key {keys.recipe_public_key}")


def _hand_over(directory: Path, owner: tuple[int, int], db_owner: tuple[int, int]) -> None:
    """chown the directory and its files: a database's password to the database server's user,
    everything else to the services' (the files stay 0600, so only that user reads them)."""
    try:
        os.chown(directory, *owner)
        directory.chmod(0o700)
        for path in directory.iterdir():
            os.chown(path, *(db_owner if path.name.endswith(".db_password") else owner))
            if path.is_dir() and not path.is_symlink():  # the `token-keys` step's pins
                for inner in path.iterdir():
                    os.chown(inner, *owner)
    except OSError as exc:
        raise CliError(f"cannot hand {directory} over: {exc.strerror}") from None


@app.command("pin-issuer")
def pin_issuer(
    directory: Annotated[Path, typer.Option("--dir", help="the keys directory")],
    token_issuer: Annotated[str, typer.Option(metavar="URL")],
) -> None:
    """Pin the running token issuer's key ids in DIR/token-key-ids (the compose `token-keys`
    step: the recipe server pins them into every recipe)."""
    try:
        with http(None, 10.0) as client:
            ids = pin_issuer_keys(directory, token_issuer, client)
    except (OSError, KeysError) as exc:
        raise CliError(f"pinning the issuer's keys: {exc}") from None
    print(f"{directory}: token-key-ids pins {len(ids)} key(s) of {token_issuer}")
