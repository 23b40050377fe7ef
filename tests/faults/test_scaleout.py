"""Scale-out of the leader on one PostgreSQL store (architecture: the drivers "can run as separate
processes"; several processes can run them against one PostgreSQL).

Two leader API processes (drivers off) and three driver-only processes
(`python -m services.aggregator.drivers`) share one PostgreSQL database; the helper and the
collector are single processes. A few thousand reports are uploaded, half through each API
process, and collected. The invariants:

- both API processes accept uploads, and a report accepted by one is a replay at the other;
- every report is aggregated exactly once: the leader finished exactly one report aggregation
  per report, the helper saw each report share once, and the collection's count and aggregate
  equal the uploaded measurements exactly (the helper agreed on count and checksum);
- the work was shared: each driver process finished some aggregation jobs (its log lines), and
  together they aggregated each report once.
"""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.faults.harness import (
    ADMIN_TOKEN,
    Deployment,
    Outcome,
    Schedule,
    Uploader,
    expected,
    wait_until,
)


@pytest.fixture(autouse=True)
def _postgres() -> None:
    """Skipped without a PostgreSQL server (failed under CI=true)."""
    pg.require()


HISTOGRAM: dict[str, Any] = {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
PRECISION = 3600
REPORTS = 2400
DRIVERS = 3
#: Small jobs, so that the reports make dozens of jobs for the three drivers to share.
ENV = {
    "SAGG_AGGREGATOR_MIN_JOB_SIZE": "20",
    "SAGG_AGGREGATOR_MAX_JOB_SIZE": "40",
    "SAGG_AGGREGATOR_DRIVER_BATCH": "1",
    "SAGG_AGGREGATOR_LEASE_DURATION_S": "30",
}
_FINISHED = re.compile(r"aggregation job finished: (\d+) of (\d+) reports aggregated")


def test_three_driver_processes_and_two_api_processes_share_one_store(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    with Deployment(
        tmp_path,
        Schedule(seed),
        postgres=True,
        aggregator_env=ENV,
        leader_replicas=2,
        driver_processes=DRIVERS,
    ) as dep:
        task = dep.create_task(HISTOGRAM, REPORTS, PRECISION)
        first = Uploader(task)
        second = Uploader(task.model_copy(update={"leader": dep.services["leader-2"].url}))
        # One store, one key: both API processes advertise the same HPKE config.
        assert first.leader_config == second.leader_config
        now = int(time.time())
        start = now - now % PRECISION
        measurements = [rng.randrange(int(HISTOGRAM["length"])) for _ in range(REPORTS)]
        reports = first.build(measurements, now)

        halves = (reports[::2], reports[1::2])
        threads = [
            threading.Thread(target=u.send, args=(h,), kwargs={"concurrency": 4})
            for u, h in zip((first, second), halves, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for half in halves:
            assert all(r.outcomes == [Outcome.ACCEPTED] for r in half), [
                r.outcomes for r in half if r.outcomes != [Outcome.ACCEPTED]
            ][:5]
        # The replay set is shared: a report accepted by one API process is refused by the other.
        assert second.put(halves[0][0]) is Outcome.REPLAYED
        assert first.put(halves[1][0]) is Outcome.REPLAYED

        job = dep.start_collection(start, PRECISION)
        body = dep.wait_collection(job, 60)
        assert body["state"] == "complete", body
        assert body["report_count"] == REPORTS
        assert body["result"] == expected(HISTOGRAM, measurements)

        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        stats = {
            name: dep.http.get(
                f"{dep.services[name].url}/internal/tasks/{task.task_id}/stats", headers=auth
            ).json()
            for name in ("leader", "leader-2", "helper")
        }
        leader = stats["leader"]
        # Both API processes read the one store.
        assert stats["leader-2"]["report_aggregations"] == leader["report_aggregations"]
        assert leader["reports"] == {"received": REPORTS, "waiting": 0}
        # Exactly one finished report aggregation per report, on either side.
        assert leader["report_aggregations"] == {"finished": REPORTS}, leader
        assert stats["helper"]["report_aggregations"] == {"finished": REPORTS}, stats["helper"]
        assert stats["helper"]["reports"]["received"] == REPORTS
        assert sum(leader["aggregation_jobs"].values()) == leader["aggregation_jobs"]["finished"]

        # Every job was finished by exactly one driver process; each one did a share.
        def per_driver() -> dict[str, list[tuple[int, int]]]:
            return {
                name: [
                    (int(a), int(n)) for a, n in _FINISHED.findall(dep.services[name].current_log())
                ]
                for name in (f"driver-{i}" for i in range(1, DRIVERS + 1))
            }

        jobs = leader["aggregation_jobs"]["finished"]
        # A driver logs right after its commit; give the last line a moment to be written.
        wait_until("every job's log line", lambda: sum(map(len, per_driver().values())) >= jobs, 10)
        done = per_driver()
        assert sum(map(len, done.values())) == jobs, done
        assert sum(a for lines in done.values() for a, _ in lines) == REPORTS, done
        assert all(lines for lines in done.values()), {k: len(v) for k, v in done.items()}
        for name in ("leader", "leader-2"):
            assert "aggregation job finished" not in dep.services[name].current_log()
        first.close()
        second.close()
