"""Leader collection-job driver (DAP-09 §4.6.1-§4.6.4).

A leased job first waits until its batch is complete (no aggregation job or unaggregated report
left in it) and large enough (§4.6.5.2: the leader waits rather than fails). Then, in one
transaction, the batch is marked collected and its totals frozen into the job; the
AggregateShareReq built from them is identical on every retry, which the helper's idempotent
handling relies on. With aggregator noise (004 §5) the frozen share is already noised. The
helper's failure answers end the job with that problem type. With rate validation (001 §4.8),
a batch with a time bucket above the task's limit fails the job with invalidBatchSize before
anything is frozen or sent, and stays uncollected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from services.aggregator.aggregate import ShareAdder
from services.aggregator.batches import covering_interval
from services.aggregator.dap19_collection import collection_job_req
from services.aggregator.datastore import CollectionState, Lease
from services.aggregator.drivers.common import (
    HelperError,
    HelperPendingError,
    HelperUnavailableError,
    LeasedJobDriver,
    backoff,
    check_response,
    helper_headers,
    helper_url,
)
from services.aggregator.noise import noised_share
from services.aggregator.service import Task, seal_aggregate_share
from services.aggregator.wire import Wire19
from services.common.db import Row
from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.hpke_context import aggregate_share_aad
from shared.dap.ids import BatchId
from shared.dap.messages import (
    MEDIA_AGGREGATE_SHARE_REQ,
    AggregateShare,
    AggregateShareReq,
    BatchSelector,
    Collection,
    HpkeCiphertext,
    Interval,
    PartialBatchSelector,
    Role,
)
from shared.dap.problems import ProblemType

log = logging.getLogger(__name__)

#: Stored as a collection job's error when the helper stayed unreachable; not a DAP type.
HELPER_UNAVAILABLE = "helperUnavailable"


class CollectionJobDriver(LeasedJobDriver):
    kind = "a collection job"

    def release_uncounted(self, lease: Lease, retry_at: int) -> None:
        self.agg.ds.release_collection_job(lease, retry_at, count_attempt=False)

    def acquire(self, now: int, lease_s: int, limit: int) -> list[Lease]:
        return self.agg.ds.acquire_collection_jobs(now, lease_s, limit)

    def step(self, lease: Lease) -> None:
        agg, s = self.agg, self.agg.settings
        task = agg.task_by_id(lease.task_id, listed_only=False)
        if task is None:
            agg.ds.fail_collection(lease, ProblemType.UNRECOGNIZED_TASK.value)
            return
        # 004 §5: the leader's share is noised when the batch is frozen and kept with the job,
        # so helper retries and repeated jobs of the batch reuse one draw.
        adder = ShareAdder(task.vdaf)
        noise = (
            None
            if task.noise is None
            else adder.encoded(
                lambda share: noised_share(task.noise, task.vdaf.field, share, agg.noise_randbits)
            )
        )
        state = agg.ds.start_collection(
            lease, task.batch_rules, agg.clock.now(), adder, noise, task.rate_limit
        )
        if state == "refused":
            log.warning("refused a collection: a time bucket is above the rate limit")
            return
        if state != "started":
            agg.ds.release_collection_job(
                lease, agg.clock.now() + s.collection_retry_s, count_attempt=False
            )
            return
        job = agg.ds.leased_collection_job(lease)
        if job["state"] != CollectionState.COLLECTING:
            return
        exchange = (
            _exchange19(task, job) if isinstance(task.wire, Wire19) else _exchange09(task, job)
        )
        try:
            helper_share = self._send(task, exchange.request, exchange.media_type)
        except HelperPendingError:
            # DAP-19 §3.1: the helper deferred; an identical request later gets its state.
            agg.ds.release_collection_job(
                lease, agg.clock.now() + s.collection_retry_s, count_attempt=False
            )
            return
        except HelperUnavailableError as exc:
            if lease.attempts >= s.max_job_attempts:
                agg.ds.fail_collection(lease, HELPER_UNAVAILABLE)
                return
            delay = backoff(s, lease.attempts)
            log.info("helper unavailable (%s); retrying the collection in %ds", exc, delay)
            agg.ds.release_collection_job(lease, agg.clock.now() + delay, count_attempt=True)
            return
        except HelperError as exc:
            problem = exc.problem or ProblemType.INVALID_MESSAGE
            log.warning("helper refused the aggregate share request: %s", problem.value)
            agg.ds.fail_collection(lease, problem.value)
            return
        leader_share = task.vdaf.decode_agg_share(bytes(job["leader_share"]))
        sealed = seal_aggregate_share(task, Role.LEADER, exchange.leader_aad, leader_share)
        covering = covering_interval(
            int(job["time_min"]), int(job["time_max"]), task.time_precision
        )
        result = exchange.result(
            int(job["report_count"]), covering, sealed, helper_share.encrypted_aggregate_share
        )
        agg.ds.finish_collection(lease, result)

    def _send(self, task: Task, body: bytes, media_type: str) -> AggregateShare:
        url = helper_url(task.helper_endpoint, f"tasks/{task.b64}/aggregate_shares")
        headers = {"Content-Type": media_type}
        headers.update(helper_headers(task))
        try:
            response = self.http.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise HelperUnavailableError(type(exc).__name__) from exc
        check_response(response)
        if not response.content:
            raise HelperPendingError
        try:
            return AggregateShare.decode(response.content)
        except DecodeError:
            raise HelperError(response.status_code, None) from None


@dataclass(frozen=True)
class _Exchange:
    """One version's aggregate-share request and collection result (DAP-09 §4.6.1-§4.6.4,
    DAP-19 §4.6.1, §4.6.4): the request body and its media type, the AAD of both aggregate
    shares, and the encoding of the result."""

    request: bytes
    media_type: str
    leader_aad: bytes
    result: Callable[[int, Interval, HpkeCiphertext, HpkeCiphertext], bytes]


def _exchange09(task: Task, job: Row) -> _Exchange:
    if job["batch_key"] is not None:
        batch_id = BatchId(bytes(job["batch_key"]))
        selector = BatchSelector.fixed_size(batch_id)
        partial = PartialBatchSelector.fixed_size(batch_id)
    else:
        selector = BatchSelector.time_interval(
            Interval(int(job["interval_start"]), int(job["interval_duration"]))
        )
        partial = PartialBatchSelector.time_interval()
    request = AggregateShareReq(
        selector, bytes(job["agg_param"]), int(job["report_count"]), bytes(job["checksum"])
    )

    def result(
        count: int, interval: Interval, leader: HpkeCiphertext, helper: HpkeCiphertext
    ) -> bytes:
        return Collection(partial, count, interval, leader, helper).encode()

    return _Exchange(
        request.encode(),
        MEDIA_AGGREGATE_SHARE_REQ,
        aggregate_share_aad(task.id, b"", selector),
        result,
    )


def _exchange19(task: Task, job: Row) -> _Exchange:
    wire = task.wire
    assert isinstance(wire, Wire19)
    interval = (
        None
        if job["interval_start"] is None
        else (int(job["interval_start"]), int(job["interval_duration"]))
    )
    collection_req = collection_job_req(task, interval)
    if job["batch_key"] is not None:
        selector = m19.BatchSelector.leader_selected(BatchId(bytes(job["batch_key"])))
    else:
        assert interval is not None
        selector = m19.BatchSelector.time_interval(
            Interval(wire.units(interval[0]), wire.units(interval[1]))
        )
    request = m19.AggregateShareReq(
        m19.CollectionJobReq.decode(collection_req),
        selector,
        int(job["report_count"]),
        bytes(job["checksum"]),
    )

    def result(
        count: int, interval: Interval, leader: HpkeCiphertext, helper: HpkeCiphertext
    ) -> bytes:
        # DAP-19 §4.6.1: the covering interval in time_precision units, no batch selector.
        units = Interval(wire.units(interval.start), wire.units(interval.duration))
        return m19.CollectionJobResp(count, units, leader, helper).encode()

    return _Exchange(
        request.encode(),
        m19.MEDIA_AGGREGATE_SHARE_REQ,
        wire.aggregate_share_aad(collection_req),
        result,
    )
