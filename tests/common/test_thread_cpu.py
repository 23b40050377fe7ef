"""`services.common.thread_cpu`: CPU by kind of thread, against the threads' own clocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

from services.common import thread_cpu
from services.common.thread_cpu import ThreadCpu, thread_kind

linux_only = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="per-thread CPU is read from Linux's /proc"
)

#: CPU seconds a test thread burns; /proc counts in clock ticks (10 ms on Linux).
BURN_S = 0.3
TOLERANCE_S = 0.05


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("dap-request_0", "dap-request"),
        ("upload-validate_12", "upload-validate"),
        ("aggregation-driver-1", "aggregation-driver"),
        ("MainThread", "MainThread"),
        ("AnyIO worker thread", "AnyIO worker thread"),
        ("job-creator", "job-creator"),
        ("v2-worker", "v2-worker"),
    ],
)
def test_a_pools_index_is_not_part_of_the_label(name: str, kind: str) -> None:
    assert thread_kind(name) == kind


def _burn() -> None:
    """Burn CPU in the calling thread until its clock reads `BURN_S`."""
    while time.thread_time() < BURN_S:
        pass


class _Burner:
    """A thread that burns `BURN_S` of CPU, reports its own thread clock, then waits."""

    def __init__(self, name: str) -> None:
        self.burnt = threading.Event()
        self.release = threading.Event()
        self.own_seconds = 0.0
        self.thread = threading.Thread(target=self._run, name=name)

    def _run(self) -> None:
        _burn()
        self.own_seconds = time.thread_time()
        self.burnt.set()
        self.release.wait(30)

    def __enter__(self) -> _Burner:
        self.thread.start()
        assert self.burnt.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(30)


@pytest.fixture
def collector() -> Iterator[ThreadCpu]:
    yield ThreadCpu()


@linux_only
def test_a_threads_cpu_is_its_own_clocks_and_stays_counted_after_it_ends(
    collector: ThreadCpu,
) -> None:
    before = collector.seconds().get("burner", 0.0)
    with _Burner("burner_3") as one, _Burner("burner-4") as two:
        alive = collector.seconds()["burner"] - before
        assert abs(alive - (one.own_seconds + two.own_seconds)) < TOLERANCE_S
    ended = collector.seconds()
    assert abs(ended["burner"] - before - alive) < TOLERANCE_S
    # Counters never go down: read again after both threads are gone.
    assert collector.seconds()["burner"] >= ended["burner"]


class _Retiring(_Burner):
    """A `_Burner` that, once burnt, waits for `retire_now`, counts itself ended with the
    collector's `retire`, then waits for `release` and ends (started by the test)."""

    def __init__(self, collector: ThreadCpu, name: str) -> None:
        super().__init__(name)
        self.collector = collector
        self.retire_now = threading.Event()
        self.retired = threading.Event()

    def _run(self) -> None:
        _burn()
        self.burnt.set()
        self.retire_now.wait(30)
        self.own_seconds = time.thread_time()
        self.collector.retire()
        self.retired.set()
        self.release.wait(30)


@linux_only
def test_a_thread_that_ends_between_scrapes_is_counted_when_it_retires(
    collector: ThreadCpu,
) -> None:
    """The upload writer may start and end between two scrapes: `retire` counts it."""
    before = collector.seconds().get("writer", 0.0)
    worker = _Retiring(collector, "writer")
    worker.retire_now.set()
    worker.release.set()
    worker.thread.start()
    worker.thread.join(30)
    assert abs(collector.seconds().get("writer", 0.0) - before - worker.own_seconds) < TOLERANCE_S


@linux_only
def test_a_retired_thread_seen_alive_is_counted_once(collector: ThreadCpu) -> None:
    """Seen by a scrape while it ran, then retired, then scraped again before and after it
    ended: its CPU counts once."""
    before = collector.seconds().get("writer", 0.0)
    worker = _Retiring(collector, "writer")
    worker.thread.start()
    assert worker.burnt.wait(30)
    assert collector.seconds()["writer"] - before >= BURN_S - TOLERANCE_S
    worker.retire_now.set()
    assert worker.retired.wait(30)
    retired = collector.seconds()["writer"] - before
    worker.release.set()
    worker.thread.join(30)
    ended = collector.seconds()["writer"] - before
    assert abs(retired - worker.own_seconds) < TOLERANCE_S
    assert abs(ended - worker.own_seconds) < TOLERANCE_S


@linux_only
def test_the_family_is_a_counter_by_thread_and_installed_once() -> None:
    installed = thread_cpu.install()
    assert thread_cpu.install() is installed
    with _Burner("scraped_0"):
        text = generate_latest(REGISTRY).decode()
    assert "# TYPE sagg_thread_cpu_seconds_total counter" in text
    samples = {
        line.split('"')[1]: float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith('sagg_thread_cpu_seconds_total{thread="')
    }
    assert samples["scraped"] >= BURN_S - TOLERANCE_S
    assert "MainThread" in samples


def test_without_proc_the_family_is_empty(
    collector: ThreadCpu, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(thread_cpu, "_TASKS", tmp_path / "absent")
    assert collector.seconds() == {}
    families = list(collector.collect())
    assert [f.name for f in families] == ["sagg_thread_cpu_seconds"]
    assert families[0].samples == []
