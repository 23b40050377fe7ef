"""docker-compose.yml describes the same topology as `sagg up` (deploy/launcher.py).

Same five services with the same ports and the same `SAGG_<SERVICE>_*` setting names (a
`..._TOKEN_FILE` in compose stands for the `..._TOKEN` the settings read from it), every
name a real field of that service's settings; but the token issuer runs in the split model
(RFC 9576 §4.4, what the README's "never learns which device asks" needs): `token-issuer` in
role issuer and `attester` in role attester, together the settings of `sagg up`'s joint process,
each with only its own half (the issuer no device CA or attester database, the attester no
issuer key or issuer database), joined by a shared secret; each aggregator its own PostgreSQL
server used by nothing else; a healthcheck on every long-running service. Least privilege
(issue 12): each container is given only its own secrets, the manufacturer CA's key only to the
device simulator, and no database has a default or literal password. No Docker engine is needed:
the file is parsed with PyYAML, and checked by `docker-compose config` when that is installed
(always under CI=true: there a missing docker-compose fails the test).
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic_settings import BaseSettings

from deploy.cli import main
from deploy.cli.up import SERVE_MODULES
from deploy.demo import demo_recipe
from deploy.keys import ensure_keys
from deploy.launcher import DEFAULT_PORTS, MODULES, SERVICES, STORES, Cluster, UpOptions
from services.aggregator.settings import AggregatorSettings
from services.collector.settings import CollectorSettings
from services.common.settings import SECRET_FILE_SUFFIXES
from services.recipe_server.settings import RecipeServerSettings
from services.token_issuer.settings import TokenIssuerSettings
from shared.recipe.model import RecipeDraft
from tests import pg

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
SETTINGS: dict[str, type[BaseSettings]] = {
    "SAGG_AGGREGATOR_": AggregatorSettings,
    "SAGG_COLLECTOR_": CollectorSettings,
    "SAGG_TOKEN_ISSUER_": TokenIssuerSettings,
    "SAGG_RECIPE_SERVER_": RecipeServerSettings,
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc["services"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def launcher_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The environment `sagg up` would give each service (SQLite, nothing started)."""
    data = tmp_path_factory.mktemp("up")
    cluster = Cluster(UpOptions(data_dir=data))
    keys = ensure_keys(data / "keys")
    databases = {role: f"sqlite:///{data / role}" for role in STORES}
    return {s.name: s.env for s in cluster.plan(keys, databases)}


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment as a mapping, please"
    return {str(k): str(v) for k, v in env.items()}


def _setting_names(env: dict[str, str]) -> set[str]:
    return {
        name.removesuffix("_FILE") if name.endswith(SECRET_FILE_SUFFIXES) else name for name in env
    }


def test_the_same_services(compose: dict[str, Any]) -> None:
    assert set(SERVICES) <= set(compose)
    for name in SERVICES:
        module, _ = MODULES[name]
        command = compose[name]["command"]
        assert command[0] == "serve"
        assert SERVE_MODULES[command[1]][0] == module, name


#: What only the split token issuer sets: the channel between its two halves, and where the
#: issuer's directory sends devices (the attester's service, not the issuer's own origin).
#: The compose services that keep running, and their ports: `sagg up`'s and the split attester.
PORTS = {**DEFAULT_PORTS, "attester": 8085}

SPLIT_ONLY = {
    f"SAGG_TOKEN_ISSUER_{s}" for s in ("ISSUER_URL", "ATTESTER_SECRET", "ISSUER_REQUEST_URI")
}


def _compose_setting_names(compose: dict[str, Any], name: str) -> set[str]:
    """The setting names of compose's service(s) for `sagg up`'s service `name`."""
    names = _setting_names(_env(compose[name]))
    if name == "token-issuer":
        names = (names | _setting_names(_env(compose["attester"]))) - SPLIT_ONLY
    # Compose services talk plain HTTP on their private network.
    return names - {f"{MODULES[name][1]}ALLOW_INSECURE_HTTP"}


def test_the_same_settings_names(
    compose: dict[str, Any], launcher_env: dict[str, dict[str, str]]
) -> None:
    for name in SERVICES:
        _, prefix = MODULES[name]
        assert _compose_setting_names(compose, name) == set(launcher_env[name]), name
        fields = {prefix + f.upper() for f in SETTINGS[prefix].model_fields}
        for service in (name, "attester") if name == "token-issuer" else (name,):
            env = _env(compose[service])
            assert _setting_names(env) <= fields, service
        # Secrets only through files: no token or secret value in the compose file.
        for var in env:
            assert not var.endswith(("_TOKEN", "_SECRET", "_SIGNING_KEY")), var


def test_the_token_issuer_runs_split(compose: dict[str, Any]) -> None:
    """Issuer and attester are two services, each with its own half and its own database."""
    issuer, attester = _env(compose["token-issuer"]), _env(compose["attester"])
    assert compose["attester"]["command"] == compose["token-issuer"]["command"]
    assert issuer["SAGG_TOKEN_ISSUER_ROLE"] == "issuer"
    assert attester["SAGG_TOKEN_ISSUER_ROLE"] == "attester"
    port = attester["SAGG_TOKEN_ISSUER_PORT"]
    issuer_url = f"http://token-issuer:{DEFAULT_PORTS['token-issuer']}"
    assert attester["SAGG_TOKEN_ISSUER_ISSUER_URL"] == issuer_url
    assert issuer["SAGG_TOKEN_ISSUER_ISSUER_REQUEST_URI"].startswith(f"http://attester:{port}/")
    assert compose["attester"]["ports"] == [f"127.0.0.1:{port}:{port}"]
    # Each side only its own settings and store (the settings would accept the other's).
    assert not any("ATTESTER_DATABASE" in v or "MANUFACTURER" in v for v in issuer)
    assert not any("ISSUER_DATABASE" in v or "DATASTORE_KEYS" in v for v in attester)
    issuer_db = urlsplit(issuer["SAGG_TOKEN_ISSUER_ISSUER_DATABASE_URL"])
    attester_db = urlsplit(attester["SAGG_TOKEN_ISSUER_ATTESTER_DATABASE_URL"])
    assert (issuer_db.username, issuer_db.path) != (attester_db.username, attester_db.path)
    assert issuer_db.username != attester_db.username  # a database role each
    # Both hold their channel's secret, through a file; devices go to the attester.
    for env in (issuer, attester):
        assert env["SAGG_TOKEN_ISSUER_ATTESTER_SECRET_FILE"] == "/run/secrets/attester-secret"
    assert f"--attester=http://attester:{port}" in compose["devices"]["command"]


def test_the_same_ports(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        _, prefix = MODULES[name]
        port = DEFAULT_PORTS[name]
        assert _env(compose[name])[f"{prefix}PORT"] == str(port)
        # Published on the host's loopback only.
        assert compose[name]["ports"] == [f"127.0.0.1:{port}:{port}"]


def _database_hosts(compose: dict[str, Any]) -> dict[str, set[str]]:
    hosts: dict[str, set[str]] = {}
    for name, service in compose.items():
        for var, value in _env(service).items():
            if var.endswith("DATABASE_URL"):
                url = urlsplit(value)
                assert url.scheme == "postgresql", (name, var)
                assert url.hostname is not None and url.hostname in compose, (name, var)
                hosts.setdefault(url.hostname, set()).add(name)
    return hosts


def test_each_aggregator_its_own_database(compose: dict[str, Any]) -> None:
    hosts = _database_hosts(compose)
    leader_db = {h for h, users in hosts.items() if "leader" in users}
    helper_db = {h for h, users in hosts.items() if "helper" in users}
    assert len(leader_db) == len(helper_db) == 1 and leader_db != helper_db
    for db in leader_db | helper_db:
        assert len(hosts[db]) == 1, f"{db} is shared by {sorted(hosts[db])}"
        assert compose[db]["volumes"], db
    # Every store a database of its own, also on the shared server.
    urls = [
        (urlsplit(v).hostname, urlsplit(v).path)
        for s in compose.values()
        for k, v in _env(s).items()
        if k.endswith("DATABASE_URL")
    ]
    assert len(urls) == len(set(urls))


def test_healthchecks_and_start_order(compose: dict[str, Any]) -> None:
    for name, number in PORTS.items():
        service = compose[name]
        test = service["healthcheck"]["test"]
        port = str(number)
        assert any("/healthz" in part and port in part for part in test), name
        depends = service["depends_on"]
        assert depends["init"]["condition"] == "service_completed_successfully"
        for db in depends:
            if db not in ("init", "token-keys"):
                assert depends[db]["condition"] == "service_healthy"
                assert "healthcheck" in compose[db]
    # The recipe server starts once the running issuer's key ids are pinned for it.
    assert compose["recipe-server"]["depends_on"]["token-keys"] == {
        "condition": "service_completed_successfully"
    }
    assert compose["token-keys"]["command"][:2] == ["keys", "pin-issuer"]
    assert compose["token-keys"]["depends_on"] == {"token-issuer": {"condition": "service_healthy"}}
    provision = compose["provision"]["depends_on"]
    assert set(provision) == {*SERVICES, "attester"}
    assert all(d["condition"] == "service_healthy" for d in provision.values())


def test_init_and_provision_use_the_cli(compose: dict[str, Any]) -> None:
    init = compose["init"]["command"]
    assert init[:2] == ["keys", "init"]
    for name in SERVICES:
        assert f"--{name}=http://{name}:{DEFAULT_PORTS[name]}" in init
    assert compose["provision"]["command"][1:3] == ["recipe", "publish"]
    assert compose["devices"]["command"][1:3] == ["devices", "run"]
    assert "devices" in compose["devices"]["profiles"]


def test_the_baked_demo_recipe_is_the_demo_recipe() -> None:
    baked = json.loads((REPO / "deploy" / "docker" / "demo-recipe.json").read_text())
    assert RecipeDraft.model_validate(baked) == demo_recipe()


def test_docker_compose_accepts_the_file() -> None:
    tool = shutil.which("docker-compose")
    if tool is None:
        pg.missing("docker-compose is not installed (.ci/run installs Debian's)")
        return
    done = subprocess.run(
        [tool, "-f", str(COMPOSE), "--profile", "devices", "config", "-q"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr


# --- secrets: each container only its own ------------------------------------------------------

#: What each container may hold: its operator token, provisioning token (DAP parties),
#: datastore key and database password; the recipe server the parties' provisioning tokens
#: and no admin token of theirs; the attester only the CA's certificate.
OWN_SECRETS = {
    "leader": {"leader-admin-token", "leader-provisioner-token", "leader-datastore-key"}
    | {"leader-pgpass"},
    "helper": {"helper-admin-token", "helper-provisioner-token", "helper-datastore-key"}
    | {"helper-pgpass"},
    "collector": {"collector-admin-token", "collector-provisioner-token"}
    | {"collector-datastore-key", "collector-pgpass"},
    "token-issuer": {"token-issuer-admin-token", "token-issuer-datastore-key"}
    | {"token-issuer-pgpass", "attester-secret"},
    "attester": {"token-issuer-admin-token", "token-attester-pgpass", "attester-secret"}
    | {"manufacturer-ca-cert"},
    "recipe-server": {"recipe-server-admin-token", "recipe-server-signing-key", "analyst-token"}
    | {"recipe-server-pgpass", "token-key-ids"}
    | {f"{p}-provisioner-token" for p in ("leader", "helper", "collector")},
    "leader-db": {"leader-db-password"},
    "helper-db": {"helper-db-password"},
    "services-db": {"services-db-password"}
    | {f"{s}-db-password" for s in ("collector", "recipe-server", "token-issuer")}
    | {"token-attester-db-password"},
    "init": set(),
    "token-keys": set(),
    "provision": {"analyst-deployment"},
    "devices": {"devices-deployment", "manufacturer-ca-cert", "manufacturer-ca-key"},
}


@pytest.fixture(scope="module")
def secret_files() -> dict[str, str]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return {name: spec["file"] for name, spec in doc["secrets"].items()}


def _secrets(service: dict[str, Any]) -> set[str]:
    given = service.get("secrets", [])
    return {s if isinstance(s, str) else s["source"] for s in given}


def test_each_container_gets_only_its_own_secrets(compose: dict[str, Any]) -> None:
    assert set(compose) == set(OWN_SECRETS)
    for name, service in compose.items():
        assert _secrets(service) == OWN_SECRETS[name], name
        # Nothing else reaches a container: only `init` mounts the secrets directory, and
        # `token-keys` the subdirectory of the issuer's (public) key ids alone.
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if name == "token-keys":
                assert source == "./.secrets/issuer", source
            else:
                assert name == "init" or ".secrets" not in source, name


def test_every_secret_reference_is_one_the_container_holds(compose: dict[str, Any]) -> None:
    for name, service in compose.items():
        held = _secrets(service)
        for var, value in _env(service).items():
            for ref in re.findall(r"/run/secrets/([\w.-]+)", value):
                assert ref in held, (name, var, ref)
        for arg in service.get("command", []):
            for ref in re.findall(r"/run/secrets/([\w.-]+)", str(arg)):
                assert ref in held, (name, arg, ref)


def test_the_manufacturer_ca_key_is_in_no_service_container(
    compose: dict[str, Any], secret_files: dict[str, str]
) -> None:
    ca_key = {name for name, path in secret_files.items() if path.endswith("manufacturer-ca.key")}
    assert ca_key == {"manufacturer-ca-key"}
    holders = {name for name, service in compose.items() if _secrets(service) & ca_key}
    assert holders == {"devices"}  # the simulated devices' factory, not a service
    assert "manufacturer-ca-cert" in _secrets(compose["attester"])


def test_no_database_has_a_default_or_literal_password(compose: dict[str, Any]) -> None:
    servers = {
        name for name, s in compose.items() if str(s.get("image", "")).startswith("postgres")
    }
    assert servers == {"leader-db", "helper-db", "services-db"}
    for name in servers:
        env = _env(compose[name])
        assert "POSTGRES_PASSWORD" not in env, name
        assert env["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/"), name
    for name, service in compose.items():
        for var, value in _env(service).items():
            assert "PASSWORD:-" not in value and "${" not in value, (name, var)
            if var.endswith("DATABASE_URL"):
                url = urlsplit(value)
                assert url.password is None, (name, var)
                assert re.search(r"[?&]passfile=/run/secrets/", value), (name, var)


def test_init_writes_every_secret_file(
    compose: dict[str, Any],
    secret_files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sagg keys init` with the compose init's own arguments (but the chown, which needs
    root) writes every file the compose secrets name, each 0600."""
    args = [a for a in compose["init"]["command"] if not a.startswith(("--owner", "--db-owner"))]
    target = tmp_path / "secrets"
    args = [f"--dir={target}" if a.startswith("--dir=") else a for a in args]
    assert main(args) == 0, capsys.readouterr().err
    for name, path in secret_files.items():
        assert path.startswith("./.secrets/"), name
        written = target / path.removeprefix("./.secrets/")
        assert written.is_file(), name
        assert stat.S_IMODE(written.stat().st_mode) == 0o600, name
    # The views given to containers hold no operator token.
    operator = json.loads((target / "deployment.json").read_text())["admin_tokens"]
    for view in ("analyst.json", "devices.json"):
        text = (target / view).read_text()
        assert not any(token in text for token in operator.values()), view
    assert json.loads((target / "devices.json").read_text())["analyst_token"] is None
