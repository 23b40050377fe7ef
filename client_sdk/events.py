"""The on-device event store: the raw data recipes query (000 §4.1: "data streams").

A stream (e.g. ``keyboard``) has a retention period; each event is a record (a dict of field
name to value, the names a recipe's `Query.fields` and encoding features use) with the time it
happened. Records never leave the device: only the randomized measurement a recipe's query
derives from them does (`client_sdk.query`). Events older than their stream's retention are
purged, so a recipe can only ever see recent data.

One SQLite file per device (or ``:memory:``), or one per simulator worker holding many
devices' events, every row keyed by its device (`EventStore.scoped`, as `client_sdk.storage`).
"""

from __future__ import annotations

import copy
import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_RETENTION", "EventStore"]

#: 000's running example queries "this week"; keep a little more than that by default.
DEFAULT_RETENTION = 14 * 86400

_SCHEMA = """
CREATE TABLE IF NOT EXISTS stream (
    device INTEGER NOT NULL DEFAULT 0, name TEXT NOT NULL, retention INTEGER NOT NULL,
    PRIMARY KEY (device, name));
CREATE TABLE IF NOT EXISTS event (
    id INTEGER PRIMARY KEY AUTOINCREMENT, device INTEGER NOT NULL DEFAULT 0,
    stream TEXT NOT NULL, time INTEGER NOT NULL, record TEXT NOT NULL);
"""

#: After `_upgrade` (a store of one device has the older keys, which these extend).
_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS stream_by_device ON stream (device, name);
CREATE INDEX IF NOT EXISTS event_by_device_time ON event (device, stream, time);
"""


def _upgrade(conn: sqlite3.Connection) -> None:
    """A store of one device, written before stores held several: its rows are device 0's."""
    for table in ("stream", "event"):
        columns = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
        if columns and "device" not in columns:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN device INTEGER NOT NULL DEFAULT 0")


class EventStore:
    def __init__(self, path: Path | str | None = None) -> None:
        self._conn = sqlite3.connect(
            ":memory:" if path is None else str(path), check_same_thread=False, timeout=30.0
        )
        self._lock = threading.Lock()
        self.device = 0
        self._owner = True
        if path is not None:
            # A simulator's worker store takes many small commits (see `client_sdk.storage`).
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        with self._lock, self._conn:
            _upgrade(self._conn)
            self._conn.executescript(_SCHEMA)
            self._conn.executescript(_INDEXES)

    def scoped(self, device: int) -> EventStore:
        """The same store seen as `device`'s (closing the view leaves the store open)."""
        view = copy.copy(self)
        view.device = device
        view._owner = False
        return view

    def register_stream(self, name: str, retention_seconds: int = DEFAULT_RETENTION) -> None:
        if retention_seconds < 1:
            raise ValueError("retention must be positive")
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT INTO stream (device, name, retention) VALUES (?, ?, ?) "
                "ON CONFLICT (device, name) DO UPDATE SET retention = excluded.retention",
                (self.device, name, retention_seconds),
            )

    def retention(self, name: str) -> int | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT retention FROM stream WHERE device = ? AND name = ?", (self.device, name)
            )
            found = row.fetchone()
        return None if found is None else int(found[0])

    def add(self, stream: str, record: Mapping[str, Any], time: int) -> None:
        self.add_many(stream, [(record, time)])

    def add_many(self, stream: str, events: Iterable[tuple[Mapping[str, Any], int]]) -> None:
        if self.retention(stream) is None:
            raise KeyError(f"unknown stream {stream!r}")
        rows = [
            (self.device, stream, int(t), json.dumps(dict(r), separators=(",", ":")))
            for r, t in events
        ]
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT INTO event (device, stream, time, record) VALUES (?, ?, ?, ?)", rows
            )

    def add_devices(
        self,
        stream: str,
        events: Iterable[tuple[int, Iterable[tuple[Mapping[str, Any], int]]]],
        retention_seconds: int = DEFAULT_RETENTION,
    ) -> None:
        """For each (device, its events): register `stream` for the device and store its
        events, every device in one transaction (a simulator's chunk; a transaction a device
        cost more than writing its rows)."""
        if retention_seconds < 1:
            raise ValueError("retention must be positive")
        streams: list[tuple[int, str, int]] = []
        rows: list[tuple[int, str, int, str]] = []
        for device, records in events:
            streams.append((device, stream, retention_seconds))
            rows += [
                (device, stream, int(t), json.dumps(dict(r), separators=(",", ":")))
                for r, t in records
            ]
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT INTO stream (device, name, retention) VALUES (?, ?, ?) "
                "ON CONFLICT (device, name) DO UPDATE SET retention = excluded.retention",
                streams,
            )
            self._conn.executemany(
                "INSERT INTO event (device, stream, time, record) VALUES (?, ?, ?, ?)", rows
            )

    def records(self, stream: str, since: int, until: int) -> list[dict[str, Any]]:
        """Records of `stream` with since <= time <= until, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT record FROM event WHERE device = ? AND stream = ? "
                "AND time >= ? AND time <= ? ORDER BY time, id",
                (self.device, stream, since, until),
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def latest(self, stream: str, until: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT record FROM event WHERE device = ? AND stream = ? AND time <= ? "
                "ORDER BY time DESC, id DESC LIMIT 1",
                (self.device, stream, until),
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def purge(self, now: int) -> int:
        """Delete events past their stream's retention; the number deleted."""
        with self._lock, self._conn:
            cursor = self._conn.execute(
                "DELETE FROM event WHERE device = ? AND time < ? - (SELECT retention FROM stream "
                "WHERE stream.device = event.device AND stream.name = event.stream)",
                (self.device, now),
            )
        return cursor.rowcount

    def close(self) -> None:
        if self._owner:
            with self._lock:
                self._conn.close()
