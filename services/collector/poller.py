"""The background driver of collection jobs (DAP-09 §4.6.1, collector side).

Each pass leases due jobs from the store, advances each by one step and writes the outcome back
while releasing the lease:

- `new`: PUT the CollectionReq to the leader; on 201 the job moves to `polling` and is polled
  at once (the leader may already have the result).
- `polling`: POST to the job; 202 reschedules (Retry-After if the leader sent one, exponential
  backoff otherwise); 200 decodes the `Collection`, decrypts both aggregate shares, unshards
  them (DAP-09 §4.6.3-§4.6.4) and stores the result; 204 and 4xx problems fail the job.
- Network errors, 5xx and 429 are retried with backoff and fail the job only after
  `max_transient_failures` in a row.

A DAP-19 task's job (`LeaderClient19`, DAP-19 §4.6.1) is created by POSTing its
CollectionJobReq, which the leader answers with the job's Location (stored with the job) and
possibly the result; later steps GET the Location, an empty answer meaning pending. A
collector that stopped between the POST and storing the Location POSTs the identical request
again, which names the same job until a poll has delivered its outcome (creation is
idempotent, DAP-19 §3.2; `services.aggregator.dap19_collection`); once the Location is stored a
restart only GETs it, so a finished leader-selected job is never asked for again as "the next
batch" (digest §16 item 3). The result is decrypted against the collector's own request
(`decrypt_collection_job`). Once such a job has ended (complete or
failed) and that is stored, the collector DELETEs it at the leader (DAP-19 §4.6.1 "Collection
Job Deletion": the leader may then drop the job and its result, never the replay or
collected-batch state); best effort, once: a crash in between leaves the job at the leader,
which loses nothing. A taskprov task's requests announce it (digest §11).

All state lives in the store, so a restarted collector resumes every unfinished job, and the
lease keeps two collector processes on one database from polling the same job concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from dataclasses import dataclass, replace

import httpx
from prometheus_client import Counter

from services.collector.collect import (
    CollectionError,
    CollectionResult,
    collection_job_req,
    collection_request,
    dap_query,
    decrypt_collection,
    decrypt_collection_job,
    parse_query,
)
from services.collector.leader import (
    Gone,
    LeaderClient,
    LeaderClient19,
    Outcome,
    Pending,
    Permanent,
    Ready,
    Started,
    Transient,
)
from services.collector.store import JobRow, JobState, JobUpdate, Store, StoredTask
from services.common.clock import Clock
from shared import hpke
from shared.b64url import b64url_decode
from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.ids import CollectionJobId
from shared.dap.messages import Collection, HpkeConfig
from shared.dap.task import CollectorTask

__all__ = ["CollectionPoller", "PollerConfig", "millis", "task_keypair"]

log = logging.getLogger(__name__)

#: The states after which a job is never asked for again.
_ENDED = (JobState.COMPLETE, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class PollerConfig:
    poll_interval: float = 1.0
    max_backoff: float = 30.0
    lease_seconds: float = 60.0
    max_transient_failures: int = 30
    batch_size: int = 16


def millis(clock: Clock) -> int:
    """The clock in milliseconds, the unit the store schedules in."""
    return int(clock.now() * 1000)


def task_keypair(stored: StoredTask) -> hpke.HpkeKeyPair:
    """The collector's HPKE key pair of a stored task."""
    config = HpkeConfig.decode(b64url_decode(stored.hpke_config, "hpke_config"))
    secret = b64url_decode(stored.hpke_private_key, "hpke_private_key")
    return hpke.from_private_bytes(
        config.id, secret, kem_id=config.kem_id, kdf_id=config.kdf_id, aead_id=config.aead_id
    )


class CollectionPoller:
    """Drives collection jobs; `run_once` is one pass, `run` loops until stopped."""

    def __init__(
        self,
        store: Store,
        http: httpx.AsyncClient,
        clock: Clock,
        config: PollerConfig | None = None,
        owner: str | None = None,
        requests: Counter | None = None,
    ) -> None:
        self._store = store
        self._http = http
        self._clock = clock
        self._config = config or PollerConfig()
        # A per-process lease owner name: unique, and meaningless to anyone reading the DB.
        self.owner = owner or f"collector-{secrets.token_hex(8)}"
        self._wake = asyncio.Event()
        #: Labels task, request (``start`` | ``poll`` | ``delete``) and outcome.
        self._requests = requests

    def wake(self) -> None:
        """Ask the loop to look for work now (a job was just created)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        idle = min(self._config.poll_interval, 1.0) / 2
        while not stop.is_set():
            try:
                stepped = await self.run_once()
            except Exception:
                # A store outage must not kill the loop; leases expire and work resumes.
                log.exception("collection poller pass failed")
                stepped = 0
            if stepped:
                continue
            self._wake.clear()
            waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(waiters, timeout=idle, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

    async def run_once(self) -> int:
        """Lease the due jobs and advance each by one step; returns how many were leased."""
        cfg = self._config
        jobs = await asyncio.to_thread(
            self._store.acquire_jobs,
            self.owner,
            millis(self._clock),
            int(cfg.lease_seconds * 1000),
            cfg.batch_size,
        )
        for job in jobs:
            try:
                update = await self._step(job)
            except Exception as exc:
                log.exception("collection job %s: unexpected error", job.job_id)
                update = self._transient(job, f"internal error: {type(exc).__name__}", None)
            released = await asyncio.to_thread(
                self._store.release_job, job.job_id, self.owner, update, millis(self._clock)
            )
            if not released:
                log.warning("collection job %s: lease lost; result discarded", job.job_id)
                continue
            if update.location is not None and update.state in _ENDED:
                try:
                    await self._delete_at_leader(job, update.location)
                except Exception:
                    # The job's outcome is stored; a cleanup failure must not end the pass.
                    log.exception("collection job %s: DELETE at the leader failed", job.job_id)
            if update.state != job.state:
                log.info(
                    "collection job %s: %s -> %s%s",
                    job.job_id,
                    job.state.value,
                    update.state.value,
                    f" ({update.error})" if update.error else "",
                )
        return len(jobs)

    async def _step(self, job: JobRow) -> JobUpdate:
        stored = await asyncio.to_thread(self._store.load_task, job.task_id)
        if stored is None:  # impossible with the foreign key; fail loudly rather than spin
            return self._failed(job, "task no longer exists", "task_missing")
        task = CollectorTask.model_validate_json(stored.definition)
        if task.dap == "dap-19":
            return await self._step19(job, stored, task)
        query = parse_query(job.query)
        job_id = CollectionJobId.from_b64url(job.job_id)
        leader = LeaderClient(self._http, task.leader_endpoint, task.collector_auth_token)

        if job.state == JobState.NEW:
            outcome: Outcome = await leader.start(task.id, job_id, collection_request(query))
            self._count(job, "start", outcome)
            if not isinstance(outcome, Started):
                return self._settle(job, outcome, stored, task)
            log.info("collection job %s: created at the leader", job.job_id)
            job = _with_state(job, JobState.POLLING)
        outcome = await leader.poll(task.id, job_id)
        self._count(job, "poll", outcome)
        return self._settle(job, outcome, stored, task)

    async def _step19(self, job: JobRow, stored: StoredTask, task: CollectorTask) -> JobUpdate:
        try:
            request = collection_job_req(task, parse_query(job.query))
        except CollectionError as exc:
            return self._failed(job, str(exc), "invalid_query")
        leader = _leader19(self._http, task)
        location = job.location
        if location is None:
            outcome = await leader.create(task.id, request)
            self._count(job, "start", outcome)
            if isinstance(outcome, Ready):
                # Answered at once: the job still exists at the leader until it is deleted.
                return replace(self._settle(job, outcome, stored, task), location=outcome.location)
            if not isinstance(outcome, Started):
                return self._settle(job, outcome, stored, task)
            assert outcome.location is not None
            location = outcome.location
            log.info("collection job %s: created at the leader", job.job_id)
            job = replace(_with_state(job, JobState.POLLING), location=location)
        outcome = await leader.poll(location)
        self._count(job, "poll", outcome)
        return replace(self._settle(job, outcome, stored, task), location=location)

    async def _delete_at_leader(self, job: JobRow, location: str) -> None:
        """DELETE an ended DAP-19 job at the leader (module docstring)."""
        stored = await asyncio.to_thread(self._store.load_task, job.task_id)
        if stored is None:
            return
        task = CollectorTask.model_validate_json(stored.definition)
        deleted = await _leader19(self._http, task).delete(location)
        if self._requests is not None:
            outcome = "deleted" if deleted else "failed"
            self._requests.labels(task=job.task_id, request="delete", outcome=outcome).inc()
        if not deleted:
            log.warning("collection job %s: the leader did not delete it", job.job_id)

    def _count(self, job: JobRow, request: str, outcome: Outcome) -> None:
        if self._requests is not None:
            name = type(outcome).__name__.lower()
            self._requests.labels(task=job.task_id, request=request, outcome=name).inc()

    def _settle(
        self, job: JobRow, outcome: Outcome, stored: StoredTask, task: CollectorTask
    ) -> JobUpdate:
        if isinstance(outcome, Pending):
            return JobUpdate(
                state=job.state,
                attempts=job.attempts + 1,
                failures=0,
                next_attempt_ms=self._due(job.attempts, outcome.retry_after),
            )
        if isinstance(outcome, Ready):
            return self._complete(job, outcome.body, stored, task)
        if isinstance(outcome, Gone):
            return self._failed(job, "the leader deleted this collection job's results", "gone")
        if isinstance(outcome, Permanent):
            return self._failed(job, outcome.reason, outcome.problem)
        if isinstance(outcome, Transient):
            return self._transient(job, outcome.reason, outcome.retry_after)
        raise AssertionError(f"unexpected outcome {outcome!r}")  # Started is handled above

    def _complete(
        self, job: JobRow, body: bytes, stored: StoredTask, task: CollectorTask
    ) -> JobUpdate:
        query = parse_query(job.query)
        result: CollectionResult
        try:
            if task.dap == "dap-19":
                result = decrypt_collection_job(
                    task,
                    task_keypair(stored),
                    collection_job_req(task, query),
                    m19.CollectionJobResp.decode(body),
                )
            else:
                result = decrypt_collection(
                    task.id,
                    task.vdaf.instance(),
                    task_keypair(stored),
                    dap_query(query),
                    Collection.decode(body),
                )
        except DecodeError as exc:
            return self._failed(
                job, f"leader sent an undecodable Collection: {exc}", "undecodable_collection"
            )
        except CollectionError as exc:
            return self._failed(job, str(exc), "invalid_collection")
        return JobUpdate(
            state=JobState.COMPLETE,
            attempts=job.attempts + 1,
            failures=0,
            next_attempt_ms=millis(self._clock),
            report_count=result.report_count,
            interval_start=result.interval.start,
            interval_duration=result.interval.duration,
            batch_id=None if result.batch_id is None else result.batch_id.to_b64url(),
            result=json.dumps(result.aggregate),
        )

    def _failed(self, job: JobRow, reason: str, problem: str) -> JobUpdate:
        return JobUpdate(
            state=JobState.FAILED,
            attempts=job.attempts,
            failures=job.failures,
            next_attempt_ms=millis(self._clock),
            error=reason,
            problem=problem,
        )

    def _transient(self, job: JobRow, reason: str, retry_after: float | None) -> JobUpdate:
        failures = job.failures + 1
        if failures >= self._config.max_transient_failures:
            return self._failed(
                job, f"gave up after {failures} failed attempts: {reason}", "gave_up"
            )
        log.warning("collection job %s: will retry: %s", job.job_id, reason)
        return JobUpdate(
            state=job.state,
            attempts=job.attempts,
            failures=failures,
            next_attempt_ms=self._due(failures - 1, retry_after),
            error=None,
        )

    def _due(self, exponent: int, retry_after: float | None) -> int:
        """When to try again: Retry-After when given, else exponential backoff.

        Retry-After is a lower bound from the leader; `poll_interval` stays the floor so a
        "Retry-After: 0" cannot turn the poller into a busy loop.
        """
        cfg = self._config
        if retry_after is not None:
            delay = max(retry_after, cfg.poll_interval)
        else:
            delay = min(cfg.poll_interval * 2 ** min(exponent, 30), cfg.max_backoff)
        return millis(self._clock) + int(delay * 1000)


def _leader19(http: httpx.AsyncClient, task: CollectorTask) -> LeaderClient19:
    """The task's DAP-19 leader, to which a taskprov task's requests announce it."""
    announce = task.configuration_bytes if task.taskprov else None
    return LeaderClient19(http, task.leader_endpoint, task.collector_auth_token, announce)


def _with_state(job: JobRow, state: JobState) -> JobRow:
    return replace(job, state=state, attempts=0, failures=0)
