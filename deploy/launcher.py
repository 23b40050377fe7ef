"""`sagg up`: the whole topology as five separate local processes.

leader and helper (`python -m services.aggregator`), collector, token-issuer (joint model:
attester and issuer in one process, each with its own store) and recipe-server, each
configured only through its `SAGG_<SERVICE>_*` environment (`service_env` below; the compose
file sets the same names), with its own store: SQLite files under the data dir, or one
PostgreSQL database per store (the leader and helper never share one, as two real aggregators
would not). The aggregators trust that token issuer only, and the recipe server starts
once the issuer's key ids are pinned from its directory (`deploy.keys.pin_issuer_keys`).
Keys and tokens live in `<data dir>/keys/` (`deploy.keys`). Logs go to
`<data dir>/logs/`. Each process gets only its own credentials: its operator token, a DAP
party its provisioning token, the recipe server the three provisioning tokens and no admin
token. Once every `/healthz` answers, URLs, the operator's tokens and the recipe server's
public key are written to `<data dir>/deployment.json` (0600) for the other CLI commands.

With `tls`, every service serves HTTPS with a certificate from a local CA (`deploy.tls`) and
verifies its peers against that CA, whose file the deployment file names for the clients.
The data dir and everything in it are owner-only (`shared.files`): directories 0700, stores,
keys, logs and the deployment file 0600, none of them reached through a symbolic link.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import BinaryIO
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from psycopg import sql

from client_sdk.http import http_client
from deploy.config import DEPLOYMENT_FILE, Deployment, deployment_of, write_deployment
from deploy.errors import DeployError
from deploy.keys import (
    PROVISIONED_PARTIES,
    TASKPROV_HPKE_CONFIG_ID,
    TOKEN_KEY_IDS_FILE,
    DeploymentKeys,
    KeysError,
    ensure_keys,
    pin_issuer_keys,
)
from deploy.tls import LocalTls, TlsError, ensure_local_tls
from services.common.auth import MIN_TOKEN_LENGTH
from shared.files import private_dir, write_private
from shared.transport import TransportPolicy

__all__ = [
    "DEFAULT_PORTS",
    "MODULES",
    "SERVICES",
    "STORES",
    "Cluster",
    "LaunchError",
    "UpOptions",
    "free_port",
    "postgres_database_urls",
    "service_env",
]


class LaunchError(DeployError):
    """A service did not start; the message is one line."""


#: Service names, in start order; also the compose file's service names.
SERVICES = ("leader", "helper", "collector", "token-issuer", "recipe-server")
#: One store each; the joint token issuer keeps attester and issuer state apart (RFC 9576 §4.2).
STORES = ("leader", "helper", "collector", "recipe_server", "token_issuer", "token_attester")
DEFAULT_PORTS = {
    "leader": 8081,
    "helper": 8082,
    "collector": 8083,
    "token-issuer": 8084,
    "recipe-server": 8086,
}
#: Service -> (module run with `python -m`, environment prefix of its settings).
MODULES = {
    "leader": ("services.aggregator", "SAGG_AGGREGATOR_"),
    "helper": ("services.aggregator", "SAGG_AGGREGATOR_"),
    "collector": ("services.collector", "SAGG_COLLECTOR_"),
    "token-issuer": ("services.token_issuer", "SAGG_TOKEN_ISSUER_"),
    "recipe-server": ("services.recipe_server", "SAGG_RECIPE_SERVER_"),
}


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    host: str = "127.0.0.1"
    leader_port: int = DEFAULT_PORTS["leader"]
    helper_port: int = DEFAULT_PORTS["helper"]
    collector_port: int = DEFAULT_PORTS["collector"]
    token_issuer_port: int = DEFAULT_PORTS["token-issuer"]
    recipe_server_port: int = DEFAULT_PORTS["recipe-server"]
    store: str = "sqlite"
    postgres_url: str | None = None
    startup_timeout: float = 60.0
    #: Extra environment for every service (tests use it to speed up the drivers).
    extra_env: dict[str, str] = field(default_factory=dict)
    #: Serve HTTPS with certificates from a local CA in `<data dir>/tls/`.
    tls: bool = False
    #: Processes of the token issuer (`TokenIssuerSettings.workers`), on its stores.
    token_issuer_workers: int = 1
    #: Taskprov between the aggregators and the collector (`service_env`).
    taskprov: bool = False

    def ports(self) -> dict[str, int]:
        return {
            "leader": self.leader_port,
            "helper": self.helper_port,
            "collector": self.collector_port,
            "token-issuer": self.token_issuer_port,
            "recipe-server": self.recipe_server_port,
        }


@dataclass
class _Service:
    name: str
    module: str
    url: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel considers free right now (a later bind may still race)."""
    (port,) = free_ports(1, host)
    return port


#: Where `free_ports` looks: above the well-known and most registered services' ports, below
#: the kernel's ephemeral range (read from Linux, else its default start).
_LOWEST_PORT = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different ports free right now, for services to bind a moment later.

    They are drawn at random below the kernel's ephemeral range: a port the kernel hands out
    itself (bind to port 0) is also what it hands any outgoing connection as its source port,
    and one did take a helper's port between the probe and the helper's bind (a CI run, with
    tests starting deployments side by side). Drawn from the OS's randomness, not `random`'s:
    two test workers may have seeded that alike. All are bound at once while probing, so none
    comes back twice. Where the ephemeral range leaves no room, the kernel chooses."""
    ports = range(_LOWEST_PORT, _ephemeral_start())
    draw = random.SystemRandom()
    with contextlib.ExitStack() as bound:
        chosen: list[int] = []
        for _ in range(50 * count if len(ports) >= 10 * count else 0):
            if len(chosen) == count:
                break
            port = draw.choice(ports)
            if port in chosen:
                continue
            sock = bound.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((host, port))
            except OSError:
                continue
            chosen.append(port)
        while len(chosen) < count:
            sock = bound.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            chosen.append(int(sock.getsockname()[1]))
        return chosen


def postgres_database_urls(base_url: str) -> dict[str, str]:
    """One database per store, named after the base URL's database: `<db>_leader`, ...

    Creates those that do not exist yet, through the server's `postgres` database.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise LaunchError("--postgres-url must be a postgresql:// URL")
    base_name = parts.path.lstrip("/") or "sagg"
    urls = {role: urlunsplit(parts._replace(path=f"/{base_name}_{role}")) for role in STORES}
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
            for url in urls.values():
                name = urlsplit(url).path.lstrip("/")
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
                ).fetchone()
                if exists is None:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LaunchError(f"PostgreSQL: {first}") from None
    return urls


def _existing_analyst_token(path: Path) -> str | None:
    """The analyst token of an earlier deployment file, if any."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    token = doc.get("analyst_token") if isinstance(doc, dict) else None
    return token if isinstance(token, str) and len(token) >= MIN_TOKEN_LENGTH else None


def _open_log(path: Path) -> BinaryIO:
    """`path` for appending, created 0600 (logs name tasks and jobs), never through a link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o600), "ab")


def service_env(
    name: str,
    *,
    host: str,
    port: int,
    databases: dict[str, str],
    keys: DeploymentKeys,
    urls: dict[str, str],
    tls: LocalTls | None = None,
    token_issuer_workers: int = 1,
) -> dict[str, str]:
    """The `SAGG_*` environment of one service (secrets included: it goes to that process only,
    and holds no credential of another service). With `keys.taskprov` the aggregators opt into
    DAP-19 tasks announced by `DAP-Taskprov` headers (dap-19.md §11) and the collector takes
    such tasks, with those secrets."""
    common = {"HOST": host, "PORT": str(port)}
    if tls is not None:
        cert = tls.certs[name]
        common.update(
            TLS_CERT_FILE=str(cert.cert_file),
            TLS_KEY_FILE=str(cert.key_file),
            TLS_CA_FILE=str(tls.ca_file),
        )
    if name in ("leader", "helper"):
        env = {
            **common,
            "DATABASE_URL": databases[name],
            "ADMIN_TOKEN": keys.admin_tokens[name],
            "PROVISIONER_TOKEN": keys.provisioner_tokens[name],
            "DATASTORE_KEYS": keys.datastore_keys[name],
            # The only issuer whose directory the aggregator fetches and whose tasks it takes.
            "TOKEN_ISSUERS": json.dumps([urls["token-issuer"]]),
        }
        t = keys.taskprov
        if t is not None:
            env.update(
                TASKPROV_VERIFY_KEY_INIT_FILE=str(t.verify_key_init_file),
                TASKPROV_AGGREGATOR_AUTH_TOKEN_FILE=str(t.aggregator_token_file),
                TASKPROV_COLLECTOR_HPKE_CONFIG=t.collector_hpke_config,
                # Exactly as the task configurations of this deployment name it.
                TASKPROV_PEER_ENDPOINT=urls["helper" if name == "leader" else "leader"],
            )
            if name == "leader":
                env["TASKPROV_COLLECTOR_AUTH_TOKEN_FILE"] = str(t.collector_token_file)
    elif name == "collector":
        env = {
            **common,
            "DATABASE_URL": databases["collector"],
            "ADMIN_TOKEN": keys.admin_tokens[name],
            "PROVISIONER_TOKEN": keys.provisioner_tokens[name],
            "DATASTORE_KEYS": keys.datastore_keys[name],
        }
        if keys.taskprov is not None:
            env.update(
                TASKPROV_HPKE_SECRET_FILE=str(keys.taskprov.collector_hpke_file),
                TASKPROV_HPKE_CONFIG_ID=str(TASKPROV_HPKE_CONFIG_ID),
            )
    elif name == "token-issuer":
        env = {
            **common,
            "ROLE": "joint",
            "WORKERS": str(token_issuer_workers),
            "DATASTORE_KEYS": keys.datastore_keys[name],
            "ISSUER_DATABASE_URL": databases["token_issuer"],
            "ATTESTER_DATABASE_URL": databases["token_attester"],
            # pydantic-settings reads a list from the environment as JSON.
            "MANUFACTURER_CA_FILES": json.dumps([str(keys.ca_cert_file)]),
            "METRICS_TOKEN": keys.admin_tokens[name],
        }
    elif name == "recipe-server":
        env = {
            **common,
            "DATABASE_URL": databases["recipe_server"],
            "SIGNING_KEY_FILE": str(keys.recipe_key_file),
            "ANALYST_TOKEN": keys.analyst_token,
            "METRICS_TOKEN": keys.admin_tokens[name],
            **{
                f"{party.upper()}_PROVISIONER_TOKEN": keys.provisioner_tokens[party]
                for party in PROVISIONED_PARTIES
            },
            "LEADER_URL": urls["leader"],
            "HELPER_URL": urls["helper"],
            "COLLECTOR_URL": urls["collector"],
            "TOKEN_ISSUER_URL": urls["token-issuer"],
            # Written from the running issuer's directory before the recipe server starts.
            "TOKEN_KEY_IDS_FILE": str(keys.directory / TOKEN_KEY_IDS_FILE),
        }
    else:
        raise LaunchError(f"unknown service {name!r}")
    prefix = MODULES[name][1]
    return {prefix + key: value for key, value in env.items()}


class Cluster:
    """Starts, health-checks and stops the five processes."""

    def __init__(self, options: UpOptions) -> None:
        self.options = options
        self.data_dir = options.data_dir.resolve()
        self.deployment_path = self.data_dir / DEPLOYMENT_FILE
        self.keys_dir = self.data_dir / "keys"
        self.services: list[_Service] = []
        self.transport = TransportPolicy()

    def _database_urls(self) -> dict[str, str]:
        if self.options.store == "postgres":
            if not self.options.postgres_url:
                raise LaunchError("--store postgres needs --postgres-url")
            return postgres_database_urls(self.options.postgres_url)
        if self.options.store != "sqlite":
            raise LaunchError("--store must be sqlite or postgres")
        files = {role: self.data_dir / (role.replace("_", "-") + ".sqlite3") for role in STORES}
        return {role: f"sqlite:///{path}" for role, path in files.items()}

    def _keys(self) -> DeploymentKeys:
        # The analyst token of a `sagg up` from before keys/ existed seeds the new file, so
        # scripts that already hold it keep working across the upgrade.
        analyst = _existing_analyst_token(self.deployment_path)
        try:
            return ensure_keys(self.keys_dir, analyst_token=analyst, taskprov=self.options.taskprov)
        except (OSError, KeysError) as exc:
            raise LaunchError(f"keys in {self.keys_dir}: {exc}") from None

    def plan(
        self, keys: DeploymentKeys, databases: dict[str, str], tls: LocalTls | None = None
    ) -> list[_Service]:
        """What would run: name, module, URL and environment of each service."""
        o = self.options
        scheme = "https" if tls is not None else "http"
        urls = {name: f"{scheme}://{o.host}:{port}" for name, port in o.ports().items()}
        logs = self.data_dir / "logs"
        return [
            _Service(
                name,
                MODULES[name][0],
                urls[name],
                service_env(
                    name,
                    host=o.host,
                    port=o.ports()[name],
                    databases=databases,
                    keys=keys,
                    urls=urls,
                    tls=tls,
                    token_issuer_workers=o.token_issuer_workers,
                ),
                logs / f"{name}.log",
            )
            for name in SERVICES
        ]

    def start(self) -> Deployment:
        self._check_ports()
        try:
            private_dir(self.data_dir)
            private_dir(self.data_dir / "logs")
        except OSError as exc:
            raise LaunchError(f"data dir {self.data_dir}: {exc}") from None
        keys = self._keys()
        tls = self._tls()
        self.transport = TransportPolicy(str(tls.ca_file) if tls else None)
        self.services = self.plan(keys, self._database_urls(), tls)
        deadline = time.monotonic() + self.options.startup_timeout
        try:
            for service in self.services:
                if service.name == "recipe-server":
                    self._pin_issuer_keys(keys, deadline)
                env = {**os.environ, **service.env, **self.options.extra_env}
                log = _open_log(service.log_path)
                # A new session: Ctrl-C in the terminal reaches only `sagg up`, which then
                # stops the services in order instead of all of them dying at once.
                service.process = subprocess.Popen(
                    [sys.executable, "-m", service.module],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                log.close()
            for service in self.services:
                self._wait_healthy(service, deadline)
            by_name = {s.name: s for s in self.services}
            self._check_recipe_key(by_name["recipe-server"], keys, self.transport)
        except BaseException:
            self.stop()
            raise
        deployment = deployment_of(
            keys,
            {name: service.url for name, service in by_name.items()},
            self.data_dir,
            store=self.options.store,
            tls_ca_file=self.transport.ca_file,
            taskprov_collector_token=keys.taskprov.collector_token if keys.taskprov else None,
        )
        try:
            write_deployment(self.deployment_path, deployment)
            # For tooling that must clean up after a `sagg up` that was itself killed hard.
            pids = {s.name: s.process.pid for s in self.services if s.process is not None}
            write_private(self.data_dir / "pids.json", (json.dumps(pids) + "\n").encode())
        except OSError as exc:
            self.stop()
            raise LaunchError(f"cannot write the deployment file: {exc}") from None
        return deployment

    def _pin_issuer_keys(self, keys: DeploymentKeys, deadline: float) -> None:
        """The recipe server pins the issuer's key ids into every recipe, so they must be
        known before it starts: read them from the running issuer's directory."""
        issuer = next(s for s in self.services if s.name == "token-issuer")
        self._wait_healthy(issuer, deadline)
        try:
            with http_client(self.transport, timeout=5.0) as http:
                pin_issuer_keys(keys.directory, issuer.url, http)
        except KeysError as exc:
            raise LaunchError(str(exc)) from None

    def _tls(self) -> LocalTls | None:
        if not self.options.tls:
            return None
        try:
            return ensure_local_tls(self.data_dir / "tls", SERVICES, [self.options.host])
        except (OSError, TlsError) as exc:
            raise LaunchError(f"local CA in {self.data_dir / 'tls'}: {exc}") from None

    @staticmethod
    def _check_recipe_key(
        service: _Service, keys: DeploymentKeys, transport: TransportPolicy
    ) -> None:
        """The key the server signs with must be the one the deployment file advertises (an
        inherited SAGG_RECIPE_SERVER_SIGNING_KEY would otherwise silently win)."""
        try:
            with http_client(transport, timeout=5.0) as http:
                body = http.get(f"{service.url}/keys").json()
            served = {k.get("key_id") for k in body.get("keys", [])}
        except (httpx.HTTPError, ValueError, AttributeError):
            raise LaunchError(f"the recipe server at {service.url} did not list its keys") from None
        if keys.recipe_key_id not in served:
            raise LaunchError(
                f"the recipe server signs with another key than {keys.recipe_key_file} "
                "(is SAGG_RECIPE_SERVER_SIGNING_KEY set?)"
            )

    def _wait_healthy(self, service: _Service, deadline: float) -> None:
        assert service.process is not None
        with http_client(self.transport, timeout=2.0) as http:
            while True:
                code = service.process.poll()
                if code is not None:
                    raise LaunchError(
                        f"{service.name} exited with status {code}: {self._log_tail(service)}"
                    )
                try:
                    if http.get(f"{service.url}/healthz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"{service.name} did not become healthy at {service.url}/healthz "
                        f"(log: {service.log_path})"
                    )
                time.sleep(0.1)

    @staticmethod
    def _log_tail(service: _Service) -> str:
        """The most telling log line: the last one mentioning an error, else the last one."""
        try:
            lines = service.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        errors = [line for line in lines if "error" in line.lower()]
        pick = errors[-1] if errors else (lines[-1] if lines else "")
        return f"{pick.strip()} (log: {service.log_path})" if pick else f"see {service.log_path}"

    def _check_ports(self) -> None:
        o = self.options
        ports = o.ports()
        if len(set(ports.values())) != len(ports):
            raise LaunchError(f"the {len(ports)} services need {len(ports)} different ports")
        for name, port in ports.items():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((o.host, port))
                except OSError as exc:
                    raise LaunchError(
                        f"cannot use {o.host}:{port} for the {name}: {exc.strerror}"
                    ) from None

    def dead(self) -> list[str]:
        """Names of services that have exited."""
        return [s.name for s in self.services if s.process and s.process.poll() is not None]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every service (uvicorn shuts down gracefully), SIGKILL stragglers."""
        running = [s for s in self.services if s.process and s.process.poll() is None]
        for service in running:
            assert service.process is not None
            service.process.terminate()
        deadline = time.monotonic() + timeout
        for service in running:
            assert service.process is not None
            try:
                service.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                service.process.kill()
                service.process.wait(timeout=5)


def wait_for_shutdown(cluster: Cluster) -> str:
    """Block until SIGINT/SIGTERM or until a service dies; returns why."""
    stop = threading.Event()
    reason = ["interrupted"]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        reason[0] = signal.Signals(signum).name
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            dead = cluster.dead()
            if dead:
                return f"{', '.join(dead)} exited unexpectedly"
        return reason[0]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
