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

import httpx

from services.aggregator.aggregate import ShareAdder
from services.aggregator.batches import bucket_key
from services.aggregator.datastore import Lease, LeaseLostError, ReportOutcome
from services.aggregator.drivers.common import (
    HelperError,
    HelperUnavailableError,
    backoff,
    check_response,
    helper_url,
)
from services.aggregator.service import Aggregator, Task
from services.common.auth import auth_headers
from shared.codec import DecodeError
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
    QueryType,
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
    for record in agg.ds.leader_tasks():
        task = agg.task_by_id(record.task_id, listed_only=False)
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


class AggregationJobDriver:
    def __init__(self, agg: Aggregator, http: httpx.Client) -> None:
        self.agg = agg
        self.http = http

    def run_once(self) -> int:
        """Lease and step a few jobs; how many were leased."""
        s = self.agg.settings
        leases = self.agg.ds.acquire_aggregation_jobs(
            self.agg.clock.now(), s.lease_duration_s, s.driver_batch
        )
        for lease in leases:
            try:
                self.step(lease)
            except LeaseLostError:
                log.warning("lost the lease on an aggregation job; another worker has it")
        return len(leases)

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
        batch, outbound = ping_pong.leader_init(
            vdaf,
            task.verify_key,
            [reports[i].report_id for i in usable],
            [reports[i].public_share or b"" for i in usable],
            [reports[i].leader_input_share or b"" for i in usable],
        )
        sent: list[int] = []
        inits: list[PrepareInit] = []
        for j, i in enumerate(usable):
            message = outbound[j]
            r = reports[i]
            outcomes[i].out_index = j
            if message is None or r.helper_encrypted_share is None:
                outcomes[i].error = (
                    PrepareError.INVALID_MESSAGE
                    if batch.status[j] == PrepStatus.DECODE_ERROR
                    else PrepareError.VDAF_PREP_ERROR
                )
                continue
            sent.append(i)
            inits.append(
                PrepareInit(
                    ReportShare(
                        ReportMetadata(ReportId(r.report_id), r.client_time),
                        r.public_share or b"",
                        HpkeCiphertext.decode(r.helper_encrypted_share),
                    ),
                    message,
                )
            )

        inbound: list[bytes | None] = [None] * len(usable)
        if inits:
            selector = (
                PartialBatchSelector.fixed_size(BatchId(bytes(job["batch_id"])))
                if task.query_type == QueryType.FIXED_SIZE
                else PartialBatchSelector.time_interval()
            )
            request = AggregationJobInitReq(b"", selector, tuple(inits))
            try:
                response = self._send(task, lease.job_id, request.encode())
            except HelperUnavailableError as exc:
                self._retry_or_abandon(task, lease, outcomes, batch.out_shares, str(exc))
                return
            except HelperError as exc:
                log.warning(
                    "helper refused aggregation job: %s %s",
                    exc.status,
                    exc.problem.value if exc.problem else "-",
                )
                self._abandon(task, lease, outcomes, batch.out_shares)
                return
            resps = response.prepare_resps
            if [p.report_id.value for p in resps] != [reports[i].report_id for i in sent]:
                log.warning("helper answered with other report ids; abandoning the job")
                self._abandon(task, lease, outcomes, batch.out_shares)
                return
            for i, resp in zip(sent, resps, strict=True):
                if resp.prepare_resp_state == PrepareRespState.CONTINUE:
                    inbound[outcomes[i].out_index or 0] = resp.payload
                elif resp.prepare_resp_state == PrepareRespState.REJECT:
                    outcomes[i].error = resp.prepare_error
                else:
                    # A one-round VDAF cannot be finished by the helper alone: the leader still
                    # needs the prep message.
                    outcomes[i].error = PrepareError.VDAF_PREP_ERROR

        finished = ping_pong.leader_continued(vdaf, batch, inbound)
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

    def _send(self, task: Task, job_id: bytes, body: bytes) -> AggregationJobResp:
        url = helper_url(
            task.helper_endpoint,
            f"tasks/{task.b64}/aggregation_jobs/{AggregationJobId(job_id).to_b64url()}",
        )
        headers = {"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ}
        headers.update(auth_headers(task.record.helper_token or ""))
        try:
            response = self.http.put(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise HelperUnavailableError(type(exc).__name__) from exc
        check_response(response)
        try:
            return AggregationJobResp.decode(response.content)
        except DecodeError:
            raise HelperError(response.status_code, None) from None

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
            self._abandon(task, lease, outcomes, out_shares, notify=False)
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
        *,
        notify: bool = True,
    ) -> None:
        for o in outcomes:
            if o.error is None:
                o.error = PrepareError.REPORT_DROPPED
        self.agg.ds.finish_leader_job(
            lease, outcomes, ShareAdder(task.vdaf, out_shares), abandoned=True
        )
        if notify:
            # DAP-09 §4.5.2.2: tell the helper it may discard the job; best effort.
            url = helper_url(
                task.helper_endpoint,
                f"tasks/{task.b64}/aggregation_jobs/{AggregationJobId(lease.job_id).to_b64url()}",
            )
            with contextlib.suppress(httpx.HTTPError):
                self.http.delete(url, headers=auth_headers(task.record.helper_token or ""))


def _bucket(task: Task, time: int) -> bytes:
    return bucket_key(time, task.time_precision)
