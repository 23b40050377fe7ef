"""The row both roles write for an aggregation job (DAP-09 §4.5).

A leader job holds its reports (`members`: each report id, 16 bytes, and client time, a
big-endian u64, in job order), and once finished, as a helper job does from the start, how
many of them finished and failed: one-round Prio3 needs no state per report between the
job's creation and its end, and a row per report cost ~5 us a report to write and update
(#15). Leader jobs made before that keep ``report_aggregations`` rows until they finish.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from services.aggregator.datastore.states import JobState
from services.common.db import Tx

_MEMBER = struct.Struct(">16sQ")
#: Bytes of `members` per report.
MEMBER_SIZE = _MEMBER.size


def encode_members(reports: Sequence[tuple[bytes, int]]) -> bytes:
    """A leader job's `members` value of these (report id, client time), in job order."""
    if any(len(report_id) != _MEMBER.size - 8 for report_id, _ in reports):
        raise ValueError("a report id is not 16 bytes")
    return b"".join(_MEMBER.pack(report_id, time) for report_id, time in reports)


def decode_members(value: bytes) -> list[tuple[bytes, int]]:
    """The (report id, client time) of a leader job's reports, in job order."""
    if len(value) % _MEMBER.size:
        raise ValueError(f"job members of {len(value)} bytes, not a multiple of {_MEMBER.size}")
    return list(_MEMBER.iter_unpack(value))


def insert_job(
    tx: Tx,
    task_id: bytes,
    job_id: bytes,
    role: str,
    batch_id: bytes | None,
    client_times: Sequence[int],
    state: JobState,
    now: int,
    *,
    request_hash: bytes | None = None,
    response: bytes | None = None,
    finished: int = 0,
    failed: int = 0,
    members: bytes | None = None,
) -> None:
    """A new job over reports of these client times; the leader's holds its `members`, the
    helper's its request's hash and its response for re-sends, and how many of its reports
    finished and failed."""
    tx.execute(
        "INSERT INTO aggregation_jobs (task_id, job_id, role, agg_param, batch_id, time_min,"
        " time_max, state, step, lease_expiry, lease_token, lease_attempts, request_hash,"
        " response, created_at, finished_reports, failed_reports, members) VALUES (:t, :j, :role,"
        " :ap, :b, :tmin, :tmax, :s, 0, 0, NULL, 0, :rh, :resp, :now, :fin, :fail, :m)",
        {
            "t": task_id,
            "j": job_id,
            "role": role,
            "ap": b"",
            "b": batch_id,
            "tmin": min(client_times),
            "tmax": max(client_times),
            "s": state,
            "rh": request_hash,
            "resp": response,
            "now": now,
            "fin": finished,
            "fail": failed,
            "m": members,
        },
    )
