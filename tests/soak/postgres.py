"""A throwaway PostgreSQL server of the soak's own: `initdb` into a temporary directory,
`pg_ctl start` on a free loopback port, `pg_ctl stop -m immediate` to crash it.

The soak restarts its database server as a fault, so it cannot use the shared server on
127.0.0.1:5432 that `tests/pg.py` and other test runs rely on. Durability settings are relaxed
(`fsync=off`): an immediate stop is a crash of the server processes, not of the machine, so the
operating system still holds every write the server made, and recovery replays the WAL as
after any crash. PostgreSQL refuses to run as root; under root the server runs as the
`postgres` user (the directory is handed to it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

from deploy.launcher import free_port

__all__ = ["PostgresInstance", "binaries_available"]

_BINARIES = ("initdb", "pg_ctl")


def _bin_dir() -> Path | None:
    """Where `initdb` and `pg_ctl` are: on PATH, or a Debian cluster's versioned directory."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if all((candidate / name).exists() for name in _BINARIES):
            return candidate
    return None


def binaries_available() -> bool:
    if _bin_dir() is None:
        return False
    if os.geteuid() != 0:
        return True
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return True


class PostgresInstance:
    """One server in a temporary directory of its own; `close()` stops it and removes it.

    Not under the caller's temporary directory: that one is private to the caller (0700),
    and under root the server runs as `postgres`, which must reach its data directory."""

    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise RuntimeError("initdb/pg_ctl not found")
        self._bin = bin_dir
        self.directory = Path(tempfile.mkdtemp(prefix="sagg-soak-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.port = free_port()
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"
        )
        self.restarts = 0

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [str(self._bin / tool), *args],
            user=self._user,
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"{tool} {args[:1]} failed ({done.returncode}):\n{tail}")

    @property
    def server_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    def url(self, database: str) -> str:
        return f"{self.server_url}/{database}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            "60",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
        )

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, clients cut off mid-transaction.
        Nothing to do when it is down already (two faults may fall on one moment)."""
        if not (self.data / "postmaster.pid").exists():
            return
        self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))

    def restart(self) -> None:
        self.crash()
        self.start()
        self.restarts += 1

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))
        shutil.rmtree(self.directory, ignore_errors=True)
