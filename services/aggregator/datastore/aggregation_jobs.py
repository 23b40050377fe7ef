"""The rows both roles write for an aggregation job (DAP-09 §4.5): the job and its report
aggregations, one per report in job order."""

from __future__ import annotations

from collections.abc import Sequence

from services.aggregator.datastore.records import ReportOutcome
from services.aggregator.datastore.states import JobState, ReportAggregationState
from services.common.db import Tx


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
) -> None:
    """A new job over reports of these client times; the helper keeps its request's hash and
    its response for re-sends, and how many of its reports finished and failed."""
    tx.execute(
        "INSERT INTO aggregation_jobs (task_id, job_id, role, agg_param, batch_id, time_min,"
        " time_max, state, step, lease_expiry, lease_token, lease_attempts, request_hash,"
        " response, created_at, finished_reports, failed_reports) VALUES (:t, :j, :role, :ap,"
        " :b, :tmin, :tmax, :s, 0, 0, NULL, 0, :rh, :resp, :now, :fin, :fail)",
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
        },
    )


#: What a report aggregation is inserted with: report id, client time, state, error.
Entry = tuple[bytes, int, ReportAggregationState, int | None]

_COLUMNS = (
    ("task_id", "blob"),
    ("job_id", "blob"),
    ("ord", "bigint"),
    ("report_id", "blob"),
    ("client_time", "bigint"),
    ("state", "text"),
    ("error", "bigint"),
)


def insert_report_aggregations(
    tx: Tx, task_id: bytes, job_id: bytes, entries: Sequence[Entry]
) -> None:
    """A job's report aggregations, one per entry, in job order."""
    tx.insert_rows(
        "report_aggregations",
        _COLUMNS,
        [
            (task_id, job_id, ord_, report_id, time, state.value, error)
            for ord_, (report_id, time, state, error) in enumerate(entries)
        ],
    )


def outcome_entries(outcomes: Sequence[ReportOutcome]) -> list[Entry]:
    """The report aggregations of a job's finished reports, in job order."""
    return [
        (
            o.report_id,
            o.client_time,
            ReportAggregationState.FINISHED if o.error is None else ReportAggregationState.FAILED,
            None if o.error is None else int(o.error),
        )
        for o in outcomes
    ]
