"""Prometheus metrics of every sagg service: one registry, the text exposition, `GET /metrics`.

The exposition is the Prometheus text format 0.0.4, written here rather than taken from
prometheus_client so the services need no dependency for ~100 lines. Two kinds of family:

- **event counters** (`Registry.counter`) count what happened in this process (a refused
  request, a poll); they start at zero with the process, as Prometheus counters may;
- **stored values** (`Registry.family` + `Registry.on_scrape`) are read from the service's
  store at scrape time, so every replica of a service and every restart reports the same
  numbers for what the database knows (jobs by state, reports per batch, log size).

`GET /metrics` takes the same bearer token check as the admin APIs (`require_bearer`): task
ids and traffic figures are not public.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from services.common.auth import require_bearer

#: Prometheus text exposition format 0.0.4, as every service's `GET /metrics` answers it.
MEDIA_PROMETHEUS_TEXT: Final = "text/plain; version=0.0.4; charset=utf-8"


__all__ = ["Counter", "Registry", "Scrape", "install_metrics"]

Kind = Literal["counter", "gauge"]
Number = int | float

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class _Family:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    from_store: bool

    def key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {tuple(labels)}")
        return tuple(str(labels[name]) for name in self.labels)


class Counter:
    """A monotonic in-process counter with a fixed set of label names; thread-safe."""

    def __init__(self, family: _Family) -> None:
        self._family = family
        self._values: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()

    def inc(self, amount: int = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._family.key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def value(self, **labels: str) -> int:
        key = self._family.key(labels)
        with self._lock:
            return self._values.get(key, 0)

    def samples(self) -> list[tuple[tuple[str, ...], int]]:
        with self._lock:
            return sorted(self._values.items())


@dataclass
class Scrape:
    """What one scrape reads from the store: `add` a sample of a declared family."""

    _families: dict[str, _Family]
    samples: dict[str, list[tuple[tuple[str, ...], Number]]] = field(default_factory=dict)

    def add(self, name: str, value: Number, **labels: str) -> None:
        family = self._families.get(name)
        if family is None or not family.from_store:
            raise KeyError(f"{name} is not a declared store family")
        self.samples.setdefault(name, []).append((family.key(labels), value))


class Registry:
    """The metric families of one service and how to read them."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._counters: dict[str, Counter] = {}
        self._sources: list[Callable[[Scrape], None]] = []

    def _declare(
        self, name: str, kind: Kind, help_text: str, labels: Sequence[str], from_store: bool
    ) -> _Family:
        if not _NAME.match(name) or name in self._families:
            raise ValueError(f"bad or duplicate metric name {name!r}")
        if not all(_LABEL.match(label) for label in labels):
            raise ValueError(f"bad label names {labels!r}")
        family = _Family(name, kind, help_text, tuple(labels), from_store)
        self._families[name] = family
        return family

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        """An event counter kept in this process."""
        counter = Counter(self._declare(name, "counter", help_text, labels, False))
        self._counters[name] = counter
        return counter

    def family(self, name: str, kind: Kind, help_text: str, labels: Sequence[str] = ()) -> None:
        """A family whose samples an `on_scrape` source reads from the store."""
        self._declare(name, kind, help_text, labels, True)

    def on_scrape(self, source: Callable[[Scrape], None]) -> None:
        self._sources.append(source)

    def render(self) -> str:
        """The exposition text; stored values are read now (blocking: call off the loop)."""
        scrape = Scrape(self._families)
        for source in self._sources:
            source(scrape)
        lines: list[str] = []
        for family in self._families.values():
            lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            samples: Sequence[tuple[tuple[str, ...], Number]] = (
                scrape.samples.get(family.name, [])
                if family.from_store
                else self._counters[family.name].samples()
            )
            lines.extend(_sample(family, key, value) for key, value in samples)
        return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format(value: Number) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _sample(family: _Family, key: tuple[str, ...], value: Number) -> str:
    if not family.labels:
        return f"{family.name} {_format(value)}"
    inner = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(family.labels, key, strict=True))
    return f"{family.name}{{{inner}}} {_format(value)}"


def install_metrics(app: FastAPI, registry: Registry, token_hash: bytes | None) -> None:
    """`GET /metrics` behind ``Authorization: Bearer <token>`` (SHA-256 `token_hash`; None
    refuses every caller with 403, as the admin APIs do without an admin token). The app's
    problem handlers (`install_problem_handlers`) answer the refusals."""

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        require_bearer(request.headers, token_hash)
        text = await run_in_threadpool(registry.render)
        return Response(text, media_type=MEDIA_PROMETHEUS_TEXT)
