"""The leader's DAP-19 collection jobs (DAP-19 §4.6.1; digest §7.2): creation by POST with a
leader-chosen id and `Location`, polling by GET (an empty 2xx while pending), DELETE.

The checks are DAP-19's (digest §9, "Leader @collection job"); the job itself is DAP-09's
(`Datastore.put_collection_job`, the collection driver), with the query in seconds.

Decided here (digest §16 item 3): a time-interval job's id is SHA-256(task_id ||
CollectionJobReq)[0..16], so an identical POST finds its job. Every leader-selected request is
the same 9 bytes ("the next batch"), so identity holds only until the collector has read the
job's outcome: while the job it created is unfinished, or has ended but no poll has been
answered its result or failure yet, an identical POST gets that job; once a poll has delivered
the outcome, or the job was deleted, the next one creates a new job for the next batch (its id
hashes the request and the number of jobs the request created before). So a collector that
stopped between its POST and storing the Location gets its batch by asking again, even if the
job finished meanwhile. A time-interval request has one encoding per interval, so after a job
of it failed for want of the helper (no DAP problem: the leader gave up retrying) the identical
request is the collector's only way to ask again: it then creates a new job the same way, which
collects the batch the failed one froze.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.aggregator.answer import Answer
from services.aggregator.dap19_helper import (
    collection_req_problem,
    location,
    query_interval,
    resource_id,
)
from services.aggregator.datastore import CollectionState
from services.aggregator.service import Aggregator, Task
from services.common.db import Row
from shared.codec import DecodeError
from shared.dap.ids import CollectionJobId
from shared.dap.messages import Interval
from shared.dap.messages19 import BatchMode, CollectionJobReq, Query
from shared.dap.problems import ProblemType

HTTP_CREATED = 201
#: States of a job whose outcome a collector may not have read yet (`delivered` says).
_UNDELIVERED = (
    CollectionState.PENDING,
    CollectionState.COLLECTING,
    CollectionState.FINISHED,
    CollectionState.FAILED,
)


def _helper_unavailable(job: Row) -> bool:
    """A job that failed without a DAP problem: the helper could not be reached in time."""
    if job["state"] != CollectionState.FAILED or job["error"] is None:
        return False
    return str(job["error"]) not in {kind.value for kind in ProblemType}


def _job_id(agg: Aggregator, task: Task, request: CollectionJobReq, body: bytes) -> str:
    """The id of the job this request names (module docstring)."""
    jobs = agg.ds.collection_jobs_of_request(task.id.value, body)
    if request.query.batch_mode == BatchMode.TIME_INTERVAL:
        if not jobs:
            return resource_id(task, body)
        current = [job for job in jobs if not _helper_unavailable(job)]
    else:
        current = [job for job in jobs if job["state"] in _UNDELIVERED and not job["delivered"]]
    # At most one is current: a new job is only created when none is.
    if current:
        return CollectionJobId(bytes(current[0]["job_id"])).to_b64url()
    return resource_id(task, body + len(jobs).to_bytes(8, "big"))


def create_collection_job(
    agg: Aggregator, task_id: str, headers: Mapping[str, str], body: bytes
) -> Answer:
    """POST {leader}/tasks/{task-id}/collection_jobs (DAP-19 §4.6.1)."""
    task = agg.task_for(task_id, "leader", headers, opt_in=False)
    agg.check_collector_auth(task, headers)
    try:
        request = CollectionJobReq.decode(body)
    except DecodeError as exc:
        raise task.problem(ProblemType.INVALID_MESSAGE, f"CollectionJobReq: {exc}") from None
    problem = collection_req_problem(task, request)
    if problem is not None:
        raise problem
    if request.agg_param != b"":
        raise task.problem(
            ProblemType.INVALID_AGGREGATION_PARAMETER, "Prio3 takes an empty aggregation parameter"
        )
    span: tuple[int, int] | None = None
    if request.query.batch_interval is not None:
        span = query_interval(task, request.query.batch_interval)
        if span is None:
            raise task.problem(ProblemType.BATCH_INVALID, "not a valid batch interval")
    rid = _job_id(agg, task, request, body)
    result, kind = agg.ds.put_collection_job(
        task.id.value,
        CollectionJobId.from_b64url(rid).value,
        body,
        int(task.query_type),
        span is None,
        request.agg_param,
        None,
        span,
        task.batch_rules,
        agg.clock.now(),
    )
    if kind is not None:
        raise task.problem(kind, "batch check failed")
    if result == "conflict":
        # Only a hash collision gives another request the same id.
        raise task.problem(ProblemType.INVALID_MESSAGE, "collection job exists")
    headers_out = {
        "Location": location(task.leader_endpoint, task, "collection_jobs", rid),
        "Retry-After": str(agg.settings.collection_retry_s),
    }
    return Answer(HTTP_CREATED, headers=headers_out)


def collection_job_req(task: Task, interval: tuple[int, int] | None) -> bytes:
    """The Collector's CollectionJobReq of a stored job, byte for byte: every request the
    leader accepts has no extension and an empty aggregation parameter, and the codec has one
    encoding per value, so the stored query gives back the bytes the AADs bind."""
    if interval is None:
        query = Query.leader_selected()
    else:
        wire = task.wire
        query = Query.time_interval(Interval(wire.units(interval[0]), wire.units(interval[1])))
    return CollectionJobReq(query, b"").encode()
