"""`sagg up`: leader, helper and collector as three separate local processes.

Each service is `python -m services.aggregator` or `python -m services.collector`, configured
only through its `SAGG_AGGREGATOR_*` / `SAGG_COLLECTOR_*` environment, with its own store: one
SQLite file each under the data dir, or one PostgreSQL database each (the leader and helper
never share a store, as two real aggregators would not). Logs go to `<data dir>/logs/`.
Once every `/healthz` answers, the URLs and admin token are written to
`<data dir>/deployment.json` for the other CLI commands.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from psycopg import sql

from deploy.config import DEPLOYMENT_FILE, Deployment, write_deployment

__all__ = ["Cluster", "LaunchError", "UpOptions", "free_port", "postgres_database_urls"]


class LaunchError(Exception):
    """A service did not start; the message is one line."""


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    host: str = "127.0.0.1"
    leader_port: int = 8081
    helper_port: int = 8082
    collector_port: int = 8083
    store: str = "sqlite"
    postgres_url: str | None = None
    startup_timeout: float = 60.0
    #: Extra environment for every service (tests use it to speed up the drivers).
    extra_env: dict[str, str] = field(default_factory=dict)


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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def postgres_database_urls(base_url: str) -> dict[str, str]:
    """One database per service, named after the base URL's database: `<db>_leader`, ...

    Creates those that do not exist yet, through the server's `postgres` database.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise LaunchError("--postgres-url must be a postgresql:// URL")
    base_name = parts.path.lstrip("/") or "sagg"
    urls = {
        role: urlunsplit(parts._replace(path=f"/{base_name}_{role}"))
        for role in ("leader", "helper", "collector")
    }
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


def _existing_token(path: Path) -> str | None:
    try:
        token = json.loads(path.read_text()).get("admin_token")
    except (OSError, ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and len(token) >= 16 else None


class Cluster:
    """Starts, health-checks and stops the three processes."""

    def __init__(self, options: UpOptions) -> None:
        self.options = options
        self.data_dir = options.data_dir.resolve()
        self.deployment_path = self.data_dir / DEPLOYMENT_FILE
        # Reuse the token of a previous `sagg up` in this data dir, so tasks and scripts that
        # already hold it keep working across restarts.
        self.admin_token = _existing_token(self.deployment_path) or secrets.token_urlsafe(32)
        self.services: list[_Service] = []

    def _database_urls(self) -> dict[str, str]:
        if self.options.store == "postgres":
            if not self.options.postgres_url:
                raise LaunchError("--store postgres needs --postgres-url")
            return postgres_database_urls(self.options.postgres_url)
        if self.options.store != "sqlite":
            raise LaunchError("--store must be sqlite or postgres")
        return {
            role: f"sqlite:///{self.data_dir / f'{role}.sqlite3'}"
            for role in ("leader", "helper", "collector")
        }

    def _plan(self) -> list[_Service]:
        o = self.options
        dbs = self._database_urls()
        logs = self.data_dir / "logs"
        services = []
        for name, port in (("leader", o.leader_port), ("helper", o.helper_port)):
            env = {
                "SAGG_AGGREGATOR_DATABASE_URL": dbs[name],
                "SAGG_AGGREGATOR_ADMIN_TOKEN": self.admin_token,
                "SAGG_AGGREGATOR_HOST": o.host,
                "SAGG_AGGREGATOR_PORT": str(port),
            }
            services.append(
                _Service(
                    name,
                    "services.aggregator",
                    f"http://{o.host}:{port}",
                    env,
                    logs / f"{name}.log",
                )
            )
        env = {
            "SAGG_COLLECTOR_DATABASE_URL": dbs["collector"],
            "SAGG_COLLECTOR_ADMIN_TOKEN": self.admin_token,
            "SAGG_COLLECTOR_HOST": o.host,
            "SAGG_COLLECTOR_PORT": str(o.collector_port),
        }
        url = f"http://{o.host}:{o.collector_port}"
        services.append(
            _Service("collector", "services.collector", url, env, logs / "collector.log")
        )
        return services

    def start(self) -> Deployment:
        self._check_ports()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self.services = self._plan()
        try:
            for service in self.services:
                env = {**os.environ, **service.env, **self.options.extra_env}
                log = service.log_path.open("ab")
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
            deadline = time.monotonic() + self.options.startup_timeout
            for service in self.services:
                self._wait_healthy(service, deadline)
        except BaseException:
            self.stop()
            raise
        deployment = Deployment(
            leader=self.services[0].url,
            helper=self.services[1].url,
            collector=self.services[2].url,
            admin_token=self.admin_token,
            data_dir=str(self.data_dir),
            store=self.options.store,
        )
        write_deployment(self.deployment_path, deployment)
        # For tooling that must clean up after a `sagg up` that was itself killed hard.
        pids = {s.name: s.process.pid for s in self.services if s.process is not None}
        (self.data_dir / "pids.json").write_text(json.dumps(pids) + "\n")
        return deployment

    def _wait_healthy(self, service: _Service, deadline: float) -> None:
        assert service.process is not None
        with httpx.Client(timeout=2.0) as http:
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
        ports = {"leader": o.leader_port, "helper": o.helper_port, "collector": o.collector_port}
        if len(set(ports.values())) != len(ports):
            raise LaunchError("leader, helper and collector need three different ports")
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
