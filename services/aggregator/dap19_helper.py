"""The helper's DAP-19 requests: aggregation-job creation and aggregate shares (DAP-19
§4.5.3.2, §4.6.4; digest §6.3, §7.3, the "who checks what" table §9).

Only the wire is here: the whole-request checks DAP-19 names, content-derived resource ids and
`Location`, ReportError in the VerifyResps. The work is DAP-09's: `Aggregator.prepare_job`
prepares and stores the job, `Datastore.helper_aggregate_share` answers the share once.

Decided here (digest §4.3, §16):
- an aggregation job's id is SHA-256(task_id || AggregationJobInitReq)[0..16], so an identical
  POST finds the job it created and gets its stored response (DAP-19 §4.5.3.2 idempotency);
  an aggregate share's id is the same hash of its AggregateShareReq;
- `Location` is the full path under the helper's endpoint (`{helper}` may hold a path: item 2);
- aggregate shares are answered synchronously (2xx with the representation); GET of their
  Location answers the stored share, DELETE drops the resource (not the collected state);
  aggregation jobs
  too, unless `helper_defer_jobs`: then the checked request is stored and answered "pending"
  (an empty 200 with `Location` ...?step=0 and Retry-After, DAP-19 §3.1); the first GET or
  identical POST after Retry-After prepares it and gets its response, as every later one;
- a `verification_key_id` the task does not hold rejects every report with
  `unknown_verification_key_id` and stores nothing, so the leader may offer them again under
  the right key (item 8);
- the `leader_selected_batch_id` extension in a time-interval task is `invalidMessage` (item
  10), any other extension type `unsupportedExtension`; a batch selector outside the query is
  `invalidMessage` (item 7).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from urllib.parse import urlsplit

from services.aggregator.answer import Answer
from services.aggregator.batches import MAX_STORED_TIME, time_key
from services.aggregator.datastore import ReportOutcome
from services.aggregator.report_checks import Refusal
from services.aggregator.service import Aggregator, Task
from services.aggregator.wire import REPORT_ERROR_OF, VERIFICATION_KEY_ID, Wire19
from services.common.problems import DapProblemError, HttpProblemError
from shared.codec import DecodeError
from shared.dap.ids import AggregationJobId
from shared.dap.messages import Interval, QueryType
from shared.dap.messages19 import (
    MEDIA_AGGREGATE_SHARE,
    MEDIA_AGGREGATION_JOB_RESP,
    AggregateShareReq,
    AggregationJobExtensionType,
    AggregationJobInitReq,
    AggregationJobResp,
    BatchMode,
    CollectionJobReq,
    JobInitParts,
    ReportError,
    VerifyAnswer,
    first_unordered_extension,
)
from shared.dap.problems import ProblemType
from shared.dap.task_configuration import batch_mode

HTTP_OK = 200
UNKNOWN_KEY = ReportError.UNKNOWN_VERIFICATION_KEY_ID
#: A resource id: the first 16 bytes of SHA-256(task_id || request), base64url (digest §4.3).
RESOURCE_ID_SIZE = 16


def resource_id(task: Task, request: bytes) -> str:
    """The content-derived id of the resource a request creates (digest §4.3)."""
    digest = hashlib.sha256(task.id.value + request).digest()[:RESOURCE_ID_SIZE]
    return AggregationJobId(digest).to_b64url()


def location(endpoint: str, task: Task, collection: str, rid: str) -> str:
    """The path of a created resource under `endpoint`'s own path (digest §16 item 2)."""
    base = urlsplit(endpoint).path.rstrip("/")
    return f"{base}/tasks/{task.b64}/{collection}/{rid}"


def _wire(task: Task) -> Wire19:
    assert isinstance(task.wire, Wire19)
    return task.wire


def _check_job_extensions(task: Task, request: JobInitParts) -> None:
    """DAP-19 §4.5.3.2, §5.2.2: only `leader_selected_batch_id`, exactly in leader-selected
    tasks (order and its 32 bytes were checked by the decoder)."""
    for ext in request.extensions:
        if ext.extension_type != AggregationJobExtensionType.LEADER_SELECTED_BATCH_ID:
            raise task.problem(
                ProblemType.UNSUPPORTED_EXTENSION,
                f"unsupported aggregation-job extension 0x{ext.extension_type:04x}",
            )
    leader_selected = task.query_type == QueryType.FIXED_SIZE
    if leader_selected and request.batch_id is None:
        raise task.problem(ProblemType.INVALID_MESSAGE, "leader_selected_batch_id is missing")
    if not leader_selected and request.batch_id is not None:
        raise task.problem(
            ProblemType.INVALID_MESSAGE, "leader_selected_batch_id in a time-interval task"
        )


def helper_init(agg: Aggregator, task_id: str, headers: Mapping[str, str], body: bytes) -> Answer:
    """POST {helper}/tasks/{task-id}/aggregation_jobs (DAP-19 §4.5.3.2)."""
    task = agg.task_for(task_id, "helper", headers, opt_in=True)
    agg.check_aggregator_auth(task, headers)
    try:
        request = AggregationJobInitReq.read_inits(body)
    except DecodeError as exc:
        raise task.problem(ProblemType.INVALID_MESSAGE, f"AggregationJobInitReq: {exc}") from None
    rid = resource_id(task, body)
    headers_out = {"Location": location(task.helper_endpoint, task, "aggregation_jobs", rid)}
    job = AggregationJobId.from_b64url(rid).value
    stored = agg.stored_init_response(task, job, body)
    if stored is not None:
        return Answer(HTTP_OK, stored, MEDIA_AGGREGATION_JOB_RESP, headers_out)
    _check_job_extensions(task, request)
    if request.agg_param != b"":
        # Prio3's aggregation parameter is Empty: nothing else decodes (DAP-19 §4.3).
        raise task.problem(
            ProblemType.INVALID_AGGREGATION_PARAMETER, "Prio3 takes an empty aggregation parameter"
        )
    if request.verification_key_id != VERIFICATION_KEY_ID:
        unknown = AggregationJobResp.encode_answers(
            [(init.sealed.report_id, None, UNKNOWN_KEY) for init in request.inits]
        )
        return Answer(HTTP_OK, unknown, MEDIA_AGGREGATION_JOB_RESP, headers_out)
    if agg.settings.helper_defer_jobs:
        agg.ds.defer_helper_job(task.id.value, job, body, agg.clock.now())
        return _deferred_state(agg, task, job, headers_out["Location"])
    response = _prepare(agg, task, job, body, request)
    return Answer(HTTP_OK, response, MEDIA_AGGREGATION_JOB_RESP, headers_out)


def _deferred_state(agg: Aggregator, task: Task, job: bytes, job_location: str) -> Answer:
    """A deferred job's current state (DAP-19 §3.1): pending (an empty 200 with Location
    ...?step=0 and Retry-After) until `helper_retry_after_s` after it was deferred, then
    prepared by this request, POST or GET, and answered with its response."""
    deferred = agg.ds.deferred_helper_job(task.id.value, job)
    if deferred is None:
        raise task.problem(ProblemType.UNRECOGNIZED_AGGREGATION_JOB, "unknown aggregation job")
    body, deferred_at = deferred
    wait = deferred_at + agg.settings.helper_retry_after_s - agg.clock.now()
    if wait > 0:
        pending = {"Location": job_location + "?step=0", "Retry-After": str(wait)}
        return Answer(HTTP_OK, headers=pending)
    # Checked when it was deferred; decoding again gives the same request.
    response = _prepare(agg, task, job, body, AggregationJobInitReq.read_inits(body))
    agg.ds.forget_deferred_job(task.id.value, job)
    return Answer(HTTP_OK, response, MEDIA_AGGREGATION_JOB_RESP, {"Location": job_location})


def _prepare(agg: Aggregator, task: Task, job: bytes, body: bytes, request: JobInitParts) -> bytes:
    """Prepare and store a checked job (`Aggregator.prepare_job`); its AggregationJobResp."""
    ids = [init.sealed.report_id for init in request.inits]

    def encode(
        final: list[ReportOutcome], messages: dict[int, bytes], refusals: dict[int, Refusal]
    ) -> bytes:
        return AggregationJobResp.encode_answers(
            [_answer(ids[i], o, messages, refusals, i) for i, o in enumerate(final)]
        )

    return agg.prepare_job(task, job, body, request.inits, request.batch_id, encode)


def _answer(
    rid: bytes,
    outcome: ReportOutcome,
    messages: dict[int, bytes],
    refusals: dict[int, Refusal],
    i: int,
) -> VerifyAnswer:
    if outcome.error is None:
        return rid, messages[i], None
    refusal = refusals.get(i)
    # A check's refusal names its DAP-19 code; the store's findings (replay, collected batch,
    # spent token) and the VDAF's come as DAP-09 errors, translated at the wire.
    error = refusal.report_error if refusal is not None else REPORT_ERROR_OF[outcome.error]
    return rid, None, error


def job_response(agg: Aggregator, task_id: str, job_id: str, headers: Mapping[str, str]) -> Answer:
    """GET {helper}/tasks/{task-id}/aggregation_jobs/{id}?step=0 (DAP-19 §4.5.3.2 polling): the
    job's stored response; a deferred job is prepared now (`helper_defer_jobs`)."""
    task = agg.task_for(task_id, "helper", headers, opt_in=True)
    agg.check_aggregator_auth(task, headers)
    try:
        job = AggregationJobId.from_b64url(job_id)
    except DecodeError:
        raise task.problem(ProblemType.UNRECOGNIZED_AGGREGATION_JOB, "unknown job") from None
    row = agg.ds.aggregation_job(task.id.value, job.value)
    if row is not None and row["role"] == "helper" and row["response"] is not None:
        agg.ds.forget_deferred_job(task.id.value, job.value)
        return Answer(HTTP_OK, bytes(row["response"]), MEDIA_AGGREGATION_JOB_RESP)
    return _deferred_state(
        agg, task, job.value, location(task.helper_endpoint, task, "aggregation_jobs", job_id)
    )


def collection_req_problem(task: Task, req: CollectionJobReq) -> DapProblemError | None:
    """The checks of a CollectionJobReq both aggregators run (DAP-19 §4.6.1, §4.6.4)."""
    if req.query.batch_mode != batch_mode(task.query_type):
        return task.problem(ProblemType.INVALID_MESSAGE, "the query's batch mode is not the task's")
    if first_unordered_extension(req.extensions) is not None:
        return task.problem(ProblemType.INVALID_EXTENSION, "extensions out of order")
    if req.extensions:
        return task.problem(ProblemType.UNSUPPORTED_EXTENSION, "unsupported collection extension")
    return None


def query_interval(task: Task, interval: Interval) -> tuple[int, int] | None:
    """A time-interval query or selector in seconds, or None when it names no valid batch
    (digest §16 item 4: duration at least one unit, and storable times)."""
    wire = _wire(task)
    start, duration = wire.seconds(interval.start), wire.seconds(interval.duration)
    if interval.duration < 1 or start + duration > MAX_STORED_TIME:
        return None
    return start, duration


def aggregate_share(
    agg: Aggregator, task_id: str, headers: Mapping[str, str], body: bytes
) -> Answer:
    """POST {helper}/tasks/{task-id}/aggregate_shares (DAP-19 §4.6.4): checks, then the
    datastore answers once; its AAD binds the Collector's CollectionJobReq bytes."""
    task = agg.task_for(task_id, "helper", headers, opt_in=True)
    agg.check_aggregator_auth(task, headers)
    wire = _wire(task)
    try:
        request = AggregateShareReq.decode(body)
    except DecodeError as exc:
        raise task.problem(ProblemType.INVALID_MESSAGE, f"AggregateShareReq: {exc}") from None
    selector = request.batch_selector
    if selector.batch_mode != batch_mode(task.query_type):
        raise task.problem(
            ProblemType.INVALID_MESSAGE, "the selector's batch mode is not the task's"
        )
    problem = collection_req_problem(task, request.collection_job_req)
    if problem is not None:
        raise problem
    if request.collection_job_req.agg_param != b"":
        # Aggregation used Prio3's empty parameter (digest §9: "agg_param ≠ eager one").
        # Checked here, not by the batch rules: after a first collection those would name
        # DAP-09's batchQueriedTooManyTimes, which DAP-19 does not register (digest §2).
        raise task.problem(
            ProblemType.INVALID_MESSAGE, "the aggregation parameter is not the one aggregated"
        )
    if selector.batch_mode == BatchMode.TIME_INTERVAL:
        assert selector.batch_interval is not None
        query = request.collection_job_req.query.batch_interval
        assert query is not None
        if not (
            query.start <= selector.batch_interval.start
            and selector.batch_interval.end <= query.end
        ):
            raise task.problem(
                ProblemType.INVALID_MESSAGE, "the batch selector is outside the query"
            )
        span = query_interval(task, selector.batch_interval)
        if span is None:
            raise task.problem(ProblemType.BATCH_INVALID, "not a valid batch interval")
        lo, hi = time_key(span[0]), time_key(span[0] + span[1])
    else:
        assert selector.batch_id is not None
        lo, hi = selector.batch_id.value, selector.batch_id.value + b"\x00"
    response = agg.release_helper_share(
        task,
        selector.encode(),
        request.collection_job_req.agg_param,
        (lo, hi),
        selector.batch_mode == BatchMode.LEADER_SELECTED,
        (request.report_count, request.checksum),
        wire.aggregate_share_aad(request.collection_job_req.encode()),
    )
    rid = resource_id(task, body)
    agg.ds.name_aggregate_share(
        task.id.value,
        AggregationJobId.from_b64url(rid).value,
        selector.encode(),
        request.collection_job_req.agg_param,
    )
    headers_out = {"Location": location(task.helper_endpoint, task, "aggregate_shares", rid)}
    return Answer(HTTP_OK, response, MEDIA_AGGREGATE_SHARE, headers_out)


def named_aggregate_share(
    agg: Aggregator, task_id: str, share_id: str, headers: Mapping[str, str], method: str
) -> Answer:
    """GET or DELETE {helper}/tasks/{task-id}/aggregate_shares/{id} (DAP-19 §4.6.4): the stored
    AggregateShare; DELETE drops the resource but the batch stays collected (digest §4 #12)."""
    task = agg.task_for(task_id, "helper", headers, opt_in=True)
    agg.check_aggregator_auth(task, headers)
    try:
        share = AggregationJobId.from_b64url(share_id).value
    except DecodeError:
        share = b""
    response = agg.ds.named_aggregate_share(task.id.value, share) if share else None
    if response is None:
        # DAP-19 has no problem type for an unknown aggregate share.
        raise HttpProblemError(404, "unknown aggregate share", task_id=task.b64)
    if method == "DELETE":
        agg.ds.forget_aggregate_share(task.id.value, share)
        return Answer(HTTP_OK)
    return Answer(HTTP_OK, response, MEDIA_AGGREGATE_SHARE)
