"""The soak's one deployment, shared by every scenario: seven processes, a proxy, a database.

`sagg up`'s topology (`deploy.launcher.service_env` configures each service, `deploy.keys`
makes the keys), with the leader split into its API process and a driver-only process
(`python -m services.aggregator.drivers`) so that each can be killed on its own, and the
leader's and helper's stores in a throwaway PostgreSQL server (`tests.soak.postgres`) that a
scenario may crash. The collector, token issuer (joint attester and issuer) and recipe server
keep SQLite stores. The leader reaches the helper only through a `FaultProxy`
(`tests.faults.harness`): the recipe server provisions every task with the proxy as its helper
endpoint. Processes are `tests.faults.harness.Service`s: started, kill -9'ed and restarted with
the same environment and store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import psycopg

from deploy.keys import DeploymentKeys, ensure_keys, pin_issuer_keys
from deploy.launcher import free_ports, service_env
from tests.faults.harness import (
    AGGREGATOR_ENV,
    COLLECTOR_ENV,
    FaultProxy,
    Schedule,
    Service,
)
from tests.soak.postgres import PostgresInstance

__all__ = ["KILLABLE", "QUOTA_TOKENS", "SoakDeployment"]

#: Tokens per device and quota window (a day: longer than any soak). A device answers at most
#: `runner.REPORTS_PER_DEVICE` recipes; the quota leaves room for a second token per report and
#: for the units a kill mid-issuance costs, so that the quota is checked, not run into.
QUOTA_TOKENS = 12
#: The services a scenario may kill -9. The recipe server is idle while a scenario runs: its
#: kill checks that the next scenario's publication, after a restart, still extends the log the
#: devices hold (signing key and tree durable).
KILLABLE = ("leader", "leader-drivers", "helper", "collector", "token-issuer", "recipe-server")


class SoakDeployment:
    """Use as a context manager; `close()` kills every process and stops the database."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.keys: DeploymentKeys = ensure_keys(tmp / "keys")
        self.pg: PostgresInstance | None = None
        self.proxy: FaultProxy | None = None
        self.services: dict[str, Service] = {}
        self.http = httpx.Client(timeout=10.0)
        self._restart_lock = threading.Lock()

    def __enter__(self) -> SoakDeployment:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        self.pg = PostgresInstance()
        self.pg.start()
        databases = {
            "leader": self.pg.create_database("soak_leader"),
            "helper": self.pg.create_database("soak_helper"),
        }
        for store in ("collector", "recipe_server", "token_issuer", "token_attester"):
            databases[store] = f"sqlite:///{self.tmp / (store + '.sqlite3')}"
        self.attester_db = self.tmp / "token_attester.sqlite3"
        names = ("leader", "helper", "collector", "token-issuer", "recipe-server")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        self.proxy = FaultProxy(urls["helper"], Schedule(0))
        # Every party learns the helper's address as the proxy's.
        urls["helper"] = self.proxy.url
        base = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
        base["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])

        def env(name: str, port: int, **extra: str) -> dict[str, str]:
            own = service_env(
                name, host="127.0.0.1", port=port, databases=databases, keys=self.keys, urls=urls
            )
            return {**base, **own, **extra}

        leader_env = env(
            "leader", ports["leader"], **AGGREGATOR_ENV, SAGG_AGGREGATOR_RUN_DRIVERS="false"
        )
        drivers_env = {**leader_env, "SAGG_AGGREGATOR_RUN_DRIVERS": "true"}
        log = self.tmp
        self.services = {
            "leader": Service(
                "leader", "services.aggregator", leader_env, ports["leader"], log / "leader.log"
            ),
            "leader-drivers": Service(
                "leader-drivers",
                "services.aggregator.drivers",
                drivers_env,
                ports["leader"],
                log / "leader-drivers.log",
                ready_line="drivers started",
            ),
            "helper": Service(
                "helper",
                "services.aggregator",
                env(
                    "helper", ports["helper"], **AGGREGATOR_ENV, SAGG_AGGREGATOR_RUN_DRIVERS="false"
                ),
                ports["helper"],
                log / "helper.log",
            ),
            "collector": Service(
                "collector",
                "services.collector",
                env("collector", ports["collector"], **COLLECTOR_ENV),
                ports["collector"],
                log / "collector.log",
            ),
            "token-issuer": Service(
                "token-issuer",
                "services.token_issuer",
                env(
                    "token-issuer",
                    ports["token-issuer"],
                    SAGG_TOKEN_ISSUER_QUOTA_TOKENS=str(QUOTA_TOKENS),
                    SAGG_TOKEN_ISSUER_LOG_LEVEL="warning",
                ),
                ports["token-issuer"],
                log / "token-issuer.log",
            ),
            "recipe-server": Service(
                "recipe-server",
                "services.recipe_server",
                env(
                    "recipe-server", ports["recipe-server"], SAGG_RECIPE_SERVER_LOG_LEVEL="warning"
                ),
                ports["recipe-server"],
                log / "recipe-server.log",
            ),
        }
        first = [s for name, s in self.services.items() if name != "recipe-server"]
        starters = [threading.Thread(target=s.start, daemon=True) for s in first]
        for t in starters:
            t.start()
        for t in starters:
            t.join(120)
        for s in first:
            s.wait_healthy(60)
        # The recipe server pins the issuer's key ids, read from its directory, as `sagg up`.
        pin_issuer_keys(self.keys.directory, urls["token-issuer"], self.http)
        self.services["recipe-server"].start()
        self.services["recipe-server"].wait_healthy(60)
        self.urls = urls

    # --- faults ---

    def kill(self, name: str) -> None:
        self.services[name].kill9()

    def crash_database(self) -> None:
        assert self.pg is not None
        with self._restart_lock:  # not while a restart is starting it
            self.pg.crash()

    def restart(self, name: str) -> None:
        """Start `name` ("postgres" for the database server) again if it is down."""
        with self._restart_lock:
            assert self.pg is not None
            if name == "postgres":
                if not self.database_up():
                    self.pg.start()
            elif not self.services[name].running:
                self.services[name].start()

    def revive(self) -> list[str]:
        """Start whatever is down (the database first); the names of what was started."""
        started: list[str] = []
        with self._restart_lock:
            assert self.pg is not None
            if not self.database_up():
                self.pg.start()
                started.append("postgres")
            for service in self.services.values():
                if not service.running:
                    service.start()
                    started.append(service.name)
        return started

    def database_up(self) -> bool:
        assert self.pg is not None
        try:
            psycopg.connect(self.pg.url("postgres"), connect_timeout=3).close()
        except psycopg.Error:
            return False
        return True

    # --- reads for the invariants ---

    def admin_headers(self, service: str) -> dict[str, str]:
        """The operator's credentials of `service` (each service has its own)."""
        return {"Authorization": f"Bearer {self.keys.admin_tokens[service]}"}

    def task_stats(self, role: str, task_id: str) -> dict[str, Any]:
        service = self.services[role]
        response = self.http.get(
            f"{service.url}/internal/tasks/{task_id}/stats", headers=self.admin_headers(role)
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def delete_task(self, task_id: str) -> None:
        for role in ("leader", "helper"):
            self.http.delete(
                f"{self.services[role].url}/internal/tasks/{task_id}",
                headers=self.admin_headers(role),
            )

    def attester_charges(self) -> dict[bytes, int]:
        """Tokens the attester charged each device (its own persisted count)."""
        with contextlib.closing(sqlite3.connect(self.attester_db)) as conn:
            rows = conn.execute(
                "SELECT device_id, SUM(issued) FROM pp_attester_quota GROUP BY device_id"
            ).fetchall()
        return {bytes(device): int(n) for device, n in rows}

    def logs(self, chars: int = 1500) -> str:
        return "\n".join(f"--- {s.name} ---\n{s.tail(chars)}" for s in self.services.values())

    def close(self) -> None:
        for service in self.services.values():
            with contextlib.suppress(Exception):
                service.kill9()
        if self.proxy is not None:
            self.proxy.close()
        if self.pg is not None:
            self.pg.close()
        self.http.close()
