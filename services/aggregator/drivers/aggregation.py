"""Leader aggregation: job creation and the aggregation-job driver (DAP-09 §4.5.1.1).

The creator groups unaggregated reports into jobs (and, for fixed_size tasks, into batches).
The driver prepares a whole job in one batch with `ping_pong.leader_init`, sends one
AggregationJobInitReq, finishes with `leader_continued` and commits the output shares together
with the job's completion. The request is a pure function of stored data, so a retry after a
crash or timeout re-sends identical bytes and the helper answers from its stored response.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from services.aggregator.aggregate import ShareAdder
from services.aggregator.batches import bucket_key
from services.aggregator.datastore import JobReport, Lease, ReportOutcome
from services.aggregator.drivers.common import (
    HelperError,
    HelperPendingError,
    HelperUnavailableError,
    LeasedJobDriver,
    backoff,
    check_response,
    helper_headers,
    helper_url,
    retry_after,
)
from services.aggregator.service import Aggregator, Task
from services.aggregator.wire import PREPARE_ERROR_OF, VERIFICATION_KEY_ID, Wire19
from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.ids import AggregationJobId, BatchId, ReportId
from shared.dap.messages import (
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    AggregationJobInitReq,
    AggregationJobResp,
    HpkeCiphertext,
    PartialBatchSelector,
    PrepareError,
    PrepareInit,
    PrepareRespState,
    ReportMetadata,
    ReportShare,
)
from shared.vdaf import ping_pong
from shared.vdaf.field import FieldArray
from shared.vdaf.prio3 import PrepStatus

log = logging.getLogger(__name__)


def create_jobs(agg: Aggregator) -> int:
    """One pass of the aggregation-job creator over every leader task."""
    settings, now = agg.settings, agg.clock.now()
    created = 0
    for task_id in agg.ds.leader_tasks_with_waiting_reports():
        task = agg.task_by_id(task_id, listed_only=False)
        if task is None:
            continue
        created += agg.ds.create_aggregation_jobs(
            task.id.value,
            fixed_size_target=task.batch_target(),
            min_job_size=settings.min_job_size,
            max_job_size=settings.max_job_size,
            flush_before=now - settings.max_report_wait_s + 1,
            now=now,
        )
    return created


def delete_expired_tasks(agg: Aggregator) -> int:
    """Drop every task (and all its data) expired more than `expired_task_retention_s` ago.

    DAP-09 §4.6.5 lets aggregators delete a task's data after its expiration; the retention
    leaves time for late collections."""
    cutoff = agg.clock.now() - agg.settings.expired_task_retention_s
    deleted = 0
    for record in agg.ds.all_tasks():
        expiration = record.definition.get("task_expiration")
        expired = expiration is not None and int(expiration) < cutoff
        if expired and agg.ds.delete_task(record.task_id):
            agg.forget_task(record.task_id)
            deleted += 1
    if deleted:
        log.info("deleted %d expired task(s)", deleted)
    return deleted


class AggregationJobDriver(LeasedJobDriver):
    kind = "an aggregation job"

    def release_uncounted(self, lease: Lease, retry_at: int) -> None:
        self.agg.ds.release_aggregation_job(lease, retry_at, count_attempt=False)

    def acquire(self, now: int, lease_s: int, limit: int) -> list[Lease]:
        return self.agg.ds.acquire_aggregation_jobs(now, lease_s, limit)

    def step(self, lease: Lease) -> None:
        agg = self.agg
        task = agg.task_by_id(lease.task_id, listed_only=False)
        job, reports = agg.ds.leader_job(lease)
        if task is None:
            return
        vdaf = task.vdaf
        outcomes: list[ReportOutcome] = []
        usable: list[int] = []
        for r in reports:
            key = (
                bytes(job["batch_id"])
                if job["batch_id"] is not None
                else _bucket(task, r.client_time)
            )
            ready = r.public_share is not None and r.leader_input_share is not None
            outcomes.append(
                ReportOutcome(
                    r.report_id,
                    r.client_time,
                    key,
                    None if ready else PrepareError.REPORT_DROPPED,
                )
            )
            if ready:
                usable.append(len(outcomes) - 1)

        if not usable:
            empty = vdaf.field.zeros((0, vdaf.flp.OUTPUT_LEN))
            agg.ds.finish_leader_job(lease, outcomes, ShareAdder(vdaf, empty))
            return
        batch, outbound = agg.crypto_cpu.prep(
            "leader",
            ping_pong.leader_init,
            vdaf,
            task.verify_key,
            [reports[i].report_id for i in usable],
            [reports[i].public_share or b"" for i in usable],
            [reports[i].leader_input_share or b"" for i in usable],
            task.wire.ctx,
        )
        sent: list[int] = []
        for j, i in enumerate(usable):
            r = reports[i]
            outcomes[i].out_index = j
            if outbound[j] is None or r.helper_encrypted_share is None:
                outcomes[i].error = (
                    PrepareError.INVALID_MESSAGE
                    if batch.status[j] == PrepStatus.DECODE_ERROR
                    else PrepareError.VDAF_PREP_ERROR
                )
                continue
            sent.append(i)

        inbound: list[bytes | None] = [None] * len(usable)
        if sent:
            batch_id = None if job["batch_id"] is None else BatchId(bytes(job["batch_id"]))
            shares = [(reports[i], outbound[outcomes[i].out_index or 0] or b"") for i in sent]
            wire = task.wire
            exchange = (
                _init19(task, wire, batch_id, shares)
                if isinstance(wire, Wire19)
                else _init09(task, batch_id, lease.job_id, shares)
            )
            try:
                resps, location = self._send(task, exchange)
            except HelperPendingError as pending:
                # DAP-19 §3.1: still pending after the polling budget; the identical request
                # after Retry-After finds the job and its state (DAP-19 §4.5.3.2 idempotency).
                delay = max(1, math.ceil(pending.retry_after_s))
                self.agg.ds.release_aggregation_job(lease, self.agg.clock.now() + delay)
                return
            except HelperUnavailableError as exc:
                self._retry_or_abandon(task, lease, outcomes, batch.out_shares, str(exc))
                return
            except HelperError as exc:
                log.warning(
                    "helper refused aggregation job: %s %s",
                    exc.status,
                    exc.problem.value if exc.problem else "-",
                )
                # A DAP-09 job has its URL before the helper answers; a refused DAP-19
                # creation made none, an unusable answer names its job.
                refused = exc.job_url or (exchange.url if exchange.method == "PUT" else None)
                self._abandon(task, lease, outcomes, batch.out_shares, refused)
                return
            if [rr.report_id for rr in resps] != [reports[i].report_id for i in sent]:
                log.warning("helper answered with other report ids; abandoning the job")
                job_url = _job_url(exchange.url, location)
                self._abandon(task, lease, outcomes, batch.out_shares, job_url)
                return
            for i, resp in zip(sent, resps, strict=True):
                if resp.payload is not None:
                    inbound[outcomes[i].out_index or 0] = resp.payload
                elif resp.error is not None:
                    outcomes[i].error, outcomes[i].reason = resp.error, resp.reason
                else:
                    # A one-round VDAF cannot be finished by the helper alone: the leader still
                    # needs the prep message.
                    outcomes[i].error = PrepareError.VDAF_PREP_ERROR

        finished = agg.crypto_cpu.prep("leader", ping_pong.leader_continued, vdaf, batch, inbound)
        for i in usable:
            k = outcomes[i].out_index
            if outcomes[i].error is None and (k is None or not finished[k]):
                outcomes[i].error = PrepareError.VDAF_PREP_ERROR
        final = agg.ds.finish_leader_job(
            lease,
            outcomes,
            ShareAdder(vdaf, batch.out_shares),
            requeue_at=agg.clock.now() + agg.settings.too_early_retry_s,
            bucket_precision=task.bucket_precision,
        )
        # One line per job (counts only): with several driver processes on one store, the logs
        # show how the work was shared.
        log.info(
            "aggregation job finished: %d of %d reports aggregated",
            sum(1 for o in final if o.error is None),
            len(final),
        )

    def _send(self, task: Task, exchange: _InitExchange) -> tuple[list[_Resp], str | None]:
        """Send the init request; DAP-19's helper may defer (an empty 2xx with Location): poll
        GET Location after each Retry-After, for at most `helper_poll_s` in all. The answers
        and the answer's Location (DAP-19), if any: the job's URL is only needed to abandon it
        (`_job_url`), and httpx parses a URL character by character."""
        headers = {"Content-Type": exchange.media_type}
        headers.update(helper_headers(task))
        try:
            send = self.http.post if exchange.method == "POST" else self.http.put
            response = send(exchange.url, content=exchange.body, headers=headers)
            check_response(response)
            waited = 0.0
            budget = self.agg.settings.helper_poll_s
            while not response.content and "location" in response.headers:
                delay = retry_after(response)
                if waited + delay > budget:
                    raise HelperPendingError(delay)
                time.sleep(delay)
                waited += delay
                poll = httpx.URL(exchange.url).join(response.headers["location"])
                response = self.http.get(poll, headers=helper_headers(task))
                check_response(response)
        except httpx.HTTPError as exc:
            raise HelperUnavailableError(type(exc).__name__) from exc
        location = response.headers.get("location")
        try:
            return exchange.decode(response.content), location
        except DecodeError:
            raise HelperError(
                response.status_code, None, _job_url(exchange.url, location)
            ) from None

    def _retry_or_abandon(
        self,
        task: Task,
        lease: Lease,
        outcomes: list[ReportOutcome],
        out_shares: FieldArray,
        reason: str,
    ) -> None:
        s = self.agg.settings
        if lease.attempts >= s.max_job_attempts:
            log.warning("aggregation job failed %d times (%s); abandoning", lease.attempts, reason)
            self._abandon(task, lease, outcomes, out_shares, None)
            return
        delay = backoff(s, lease.attempts)
        log.info("helper unavailable (%s); retrying the job in %ds", reason, delay)
        self.agg.ds.release_aggregation_job(lease, self.agg.clock.now() + delay)

    def _abandon(
        self,
        task: Task,
        lease: Lease,
        outcomes: list[ReportOutcome],
        out_shares: FieldArray,
        job_url: str | None,
    ) -> None:
        """Drop the job's reports; DELETE the helper's job at `job_url` if there is one
        (DAP-09 §4.5.2.2, DAP-19 §4.5.5: it may discard it; best effort)."""
        for o in outcomes:
            if o.error is None:
                o.error = PrepareError.REPORT_DROPPED
        self.agg.ds.finish_leader_job(
            lease, outcomes, ShareAdder(task.vdaf, out_shares), abandoned=True
        )
        if job_url is not None:
            with contextlib.suppress(httpx.HTTPError):
                self.http.delete(job_url, headers=helper_headers(task))


def _job_url(request_url: str, location: str | None) -> str:
    """The helper's job: DAP-19's Location, resolved against the request's URL, without its
    query; else the URL the job was created at (DAP-09)."""
    if location is None:
        return request_url
    return str(httpx.URL(request_url).join(location).copy_with(query=None))


def _bucket(task: Task, time: int) -> bytes:
    return bucket_key(time, task.time_precision)


@dataclass(slots=True)
class _Resp:
    """One report's answer from the helper, whatever the version: its continuation payload,
    or its error in sagg's stored vocabulary (DAP-09's PrepareError, `wire`). (Slots, not
    frozen: one is made per report, as `datastore.records.LeaderReport`.)"""

    report_id: bytes
    payload: bytes | None = None
    error: PrepareError | None = None
    reason: str | None = None


@dataclass(frozen=True)
class _InitExchange:
    """One version's aggregation-job creation: method, URL, body, media type, and the decoder
    of the helper's answer."""

    method: str
    url: str
    body: bytes
    media_type: str
    decode: Callable[[bytes], list[_Resp]]


def _init09(
    task: Task, batch_id: BatchId | None, job_id: bytes, shares: list[tuple[JobReport, bytes]]
) -> _InitExchange:
    """PUT {helper}/tasks/{id}/aggregation_jobs/{job id} (DAP-09 §4.5.1.1)."""
    inits = tuple(
        PrepareInit(
            ReportShare(
                ReportMetadata(ReportId(r.report_id), r.client_time),
                r.public_share or b"",
                HpkeCiphertext.decode(r.helper_encrypted_share or b""),
            ),
            message,
        )
        for r, message in shares
    )
    selector = (
        PartialBatchSelector.fixed_size(batch_id)
        if batch_id is not None
        else PartialBatchSelector.time_interval()
    )

    def decode(body: bytes) -> list[_Resp]:
        return [
            _Resp(p.report_id.value, p.payload, None)
            if p.prepare_resp_state == PrepareRespState.CONTINUE
            else _Resp(p.report_id.value, None, p.prepare_error)
            for p in AggregationJobResp.decode(body).prepare_resps
        ]

    path = f"tasks/{task.b64}/aggregation_jobs/{AggregationJobId(job_id).to_b64url()}"
    return _InitExchange(
        "PUT",
        helper_url(task.helper_endpoint, path),
        AggregationJobInitReq(b"", selector, inits).encode(),
        MEDIA_AGGREGATION_JOB_INIT_REQ,
        decode,
    )


def _init19(
    task: Task, wire: Wire19, batch_id: BatchId | None, shares: list[tuple[JobReport, bytes]]
) -> _InitExchange:
    """POST {helper}/tasks/{id}/aggregation_jobs (DAP-19 §4.5.3.1): the task's one key id,
    times in units, the batch id of a leader-selected job in its extension. Encoded from the
    stored parts and answered as tuples, not structs (`encode_reports`, `decode_answers`)."""
    extensions = (
        ()
        if batch_id is None
        else (m19.AggregationJobExtension.leader_selected_batch_id(batch_id),)
    )
    body = m19.AggregationJobInitReq.encode_reports(
        VERIFICATION_KEY_ID,
        b"",
        extensions,
        [
            m19.StoredReportShare(
                r.report_id,
                wire.units(r.client_time),
                r.public_share or b"",
                r.helper_encrypted_share or b"",
                message,
            )
            for r, message in shares
        ],
    )

    def decode(body: bytes) -> list[_Resp]:
        resps = []
        for report_id, kind, payload, error in m19.AggregationJobResp.decode_answers(body):
            if kind == m19.VerifyRespType.CONTINUE:
                resps.append(_Resp(report_id, payload))
            elif kind == m19.VerifyRespType.REJECT and error is not None:
                # Every reject is a drop (digest §16 item 6); the counter keeps -19's name.
                resps.append(_Resp(report_id, None, PREPARE_ERROR_OF[error], error.name.lower()))
            else:
                # DAP-19 §4.5.3.1: `finish` at initialization makes the leader abandon the job.
                raise DecodeError("a VerifyResp finished at initialization")
        return resps

    return _InitExchange(
        "POST",
        helper_url(task.helper_endpoint, f"tasks/{task.b64}/aggregation_jobs"),
        body,
        m19.MEDIA_AGGREGATION_JOB_INIT_REQ,
        decode,
    )
