"""The rows both roles write for an aggregation job (DAP-09 §4.5): the job and its report
aggregations, one per report in job order."""

from __future__ import annotations

from collections.abc import Sequence

from services.aggregator.datastore.records import ReportOutcome
from services.aggregator.datastore.states import JobState, ReportAggregationState
from services.common.db import Params, Tx


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
) -> None:
    """A new job over reports of these client times; the helper keeps its request's hash and
    its response for re-sends."""
    tx.execute(
        "INSERT INTO aggregation_jobs (task_id, job_id, role, agg_param, batch_id, time_min,"
        " time_max, state, step, lease_expiry, lease_token, lease_attempts, request_hash,"
        " response, created_at) VALUES (:t, :j, :role, :ap, :b, :tmin, :tmax, :s, 0, 0, NULL,"
        " 0, :rh, :resp, :now)",
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
        },
    )


def insert_report_aggregations(tx: Tx, rows: Sequence[Params]) -> None:
    """`rows` as `outcome_rows` makes them."""
    tx.execute_many(
        "INSERT INTO report_aggregations (task_id, job_id, ord, report_id, client_time, state,"
        " error) VALUES (:t, :j, :o, :r, :time, :s, :e)",
        rows,
    )


def outcome_rows(task_id: bytes, job_id: bytes, outcomes: Sequence[ReportOutcome]) -> list[Params]:
    """The report aggregations of a job's finished reports, in job order."""
    return [
        {
            "t": task_id,
            "j": job_id,
            "o": ord_,
            "r": o.report_id,
            "time": o.client_time,
            "s": ReportAggregationState.FAILED
            if o.error is not None
            else ReportAggregationState.FINISHED,
            "e": None if o.error is None else int(o.error),
        }
        for ord_, o in enumerate(outcomes)
    ]
