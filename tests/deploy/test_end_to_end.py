"""Multi-process end to end: `sagg up`, `sagg task create`, upload, `sagg collect`, teardown.

Leader, helper, collector, token issuer and recipe server run as separate processes on free
loopback ports with SQLite stores in a temporary data dir, exactly as `sagg up` starts them for
a developer (the `up` fixture of conftest.py). The test drives them only through the CLI and
the DAP upload client, and checks the exact aggregate. Every wait has a deadline, and teardown
kills whatever is left.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections import Counter
from typing import Any

import pytest

from client_sdk.upload import ClientTask, upload_reports
from tests.deploy.conftest import Up, collect_args

REPORTS = 300
BUCKETS = 5
PRECISION = 60


def _collect(up: Up, task_id: str, start: int, fmt: str) -> str:
    done = up.sagg(*collect_args(task_id, start, PRECISION, "--format", fmt, "--wait", "60"))
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("up", ["sqlite", "postgres"], indirect=True)
def test_up_create_upload_collect_teardown(up: Up) -> None:
    created = up.sagg(
        "task",
        "create",
        "--vdaf",
        json.dumps({"type": "Prio3Histogram", "length": BUCKETS, "chunk_length": 2}),
        "--min-batch-size",
        str(REPORTS),
        "--time-precision",
        str(PRECISION),
        "--max-batch-query-count",
        "2",
        "--report-expiry-age",
        "86400",
    )
    assert created.returncode == 0, created.stderr
    info: dict[str, Any] = json.loads(created.stdout)
    assert info["query_type"] == "time_interval" and info["time_precision"] == PRECISION
    assert info["report_expiry_age"] == 86400

    measurements = [(i * 7) % BUCKETS if i % 3 else 0 for i in range(REPORTS)]
    now = int(time.time())
    start = now - now % PRECISION
    result = upload_reports(ClientTask.model_validate(info), measurements, report_time=now)
    assert (result.uploaded, result.rejected) == (REPORTS, [])

    counts = Counter(measurements)
    expected = [counts[b] for b in range(BUCKETS)]
    body = json.loads(_collect(up, info["task_id"], start, "json"))
    assert body["state"] == "complete"
    assert body["result"] == expected
    assert body["report_count"] == REPORTS
    assert body["interval"]["start"] >= start

    # Collecting the same batch again gives the same answer (DAP-09 §4.6.5 counts distinct
    # aggregation parameters, and Prio3 has one).
    csv = _collect(up, info["task_id"], start, "csv").strip().splitlines()
    assert csv[0] == "bucket,value"
    assert [int(line.split(",")[1]) for line in csv[1:]] == expected

    # A batch below min_batch_size stays pending: the CLI reports that and exits non-zero.
    empty = up.sagg(
        "collect",
        "--task",
        info["task_id"],
        "--interval-start",
        str(start + PRECISION),
        "--interval-duration",
        str(PRECISION),
        "--wait",
        "1",
    )
    assert empty.returncode == 1 and "still pending" in empty.stderr

    # Ctrl-C/SIGTERM stops every service.
    leader_port = int(info["leader"].rsplit(":", 1)[1])
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(timeout=30) == 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", leader_port), timeout=1):
        pass
