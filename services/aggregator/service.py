"""The aggregator's protocol logic, independent of HTTP framing (DAP-09 §4.4-§4.6; the DAP-19
wire of the same logic is in `wire`, `bulk_upload`, `dap19_helper` and `dap19_collection`).

Each public method handles one DAP request for whichever role the task gives this aggregator
and raises `DapProblemError` with the exact problem type of the digest's "who checks what"
table (§8).
Routes (app.py) only check media types and move bytes.

The checks of a report share are one implementation for both roles
(`services.aggregator.report_checks`): the leader decrypts and checks its own input share at
upload and the helper its own at aggregation, and a `Refusal` names both the upload problem and
the helper's PrepareError. Choices where DAP-09 leaves room, all at upload (§4.4.2):
- a share sealed to an unknown config id gets `outdatedConfig`, one that does not decrypt
  `reportRejected`, and a plaintext that does not parse, carries an unknown or repeated
  extension or has the wrong VDAF length `invalidMessage`; a missing or wrong recipe binding
  or Privacy Pass token is `reportRejected` (`invalid_message` at the helper);
- a replayed report id, a report past `task_expiration` and one into a collected
  time_interval batch are ignored and answered `reportRejected`;
- a report more than `clock_skew_s` ahead of the clock gets `reportTooEarly`;
- a helper ciphertext whose size no report of the task can have (its exact input share, with
  at most the extensions the task takes: `shared.dap.sizes`) gets `invalidMessage`: the leader
  would otherwise store it and re-send it to the helper in every aggregation job.

Unknown task ids and HPKE config ids cost a lookup in memory, not a store query: the set of
every provisioned task id is read at most once per `unknown_id_cache_s` (so a flood of random
task ids costs one query per period, and memory holds the store's task ids, not the flood's),
and the key list is read again for an unknown config id at most that often.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import httpx
from prometheus_client import CollectorRegistry

from services.aggregator.aggregate import ShareAdder
from services.aggregator.answer import Answer
from services.aggregator.batch_validation import DapBatchRules
from services.aggregator.batches import (
    batch_id_key,
    bucket_key,
    interval_is_valid,
    selector_key_range,
)
from services.aggregator.bulk_upload import bulk_upload
from services.aggregator.crypto_cpu import CryptoCpu
from services.aggregator.datastore import (
    CollectionState,
    Datastore,
    JobSizes,
    JobState,
    NewReport,
    ReportOutcome,
    TaskRecord,
    TokenSpend,
    UploadOutcome,
)
from services.aggregator.noise import noised_share
from services.aggregator.rate_policy import RateLimit
from services.aggregator.report_checks import STORE_REFUSALS, Accepted, Refusal, ReportChecker
from services.aggregator.settings import AggregatorSettings
from services.aggregator.taskprov import Taskprov
from services.aggregator.tokens import (
    Fetch,
    IssuerKeyCache,
    IssuerKeysPendingError,
    IssuerUnavailableError,
    issuer_answer,
)
from services.aggregator.uploads import QueueFullError, UploadWriter
from services.aggregator.wire import Wire, Wire09, Wire19
from services.common.auth import hash_token, presented_token, token_matches
from services.common.clock import Clock
from services.common.problems import DapProblemError, HttpProblemError, ServiceError
from shared import hpke
from shared.b64url import b64url_decode
from shared.codec import DecodeError
from shared.dap.hpke_context import aggregate_share_aad
from shared.dap.ids import AggregationJobId, BatchId, CollectionJobId, TaskId
from shared.dap.messages import (
    AggregateShare,
    AggregateShareReq,
    AggregationJobContinueReq,
    AggregationJobInitReq,
    AggregationJobResp,
    CollectionReq,
    FixedSizeQueryType,
    HpkeCiphertext,
    HpkeConfig,
    HpkeConfigList,
    PrepareError,
    PrepareResp,
    QueryType,
    Report,
    Role,
    SealedInit,
    UploadedReport,
)
from shared.dap.messages19 import AggregationJobContinueReq as AggregationJobContinueReq19
from shared.dap.problems import ProblemType
from shared.dap.sizes import helper_ciphertext_bounds, max_report_len
from shared.dap.task import AggregatorNoise, RateValidation, TaskDefinition, TokenPolicy
from shared.dap.task_configuration import FieldValues, task_configuration
from shared.dap.taskprov import encode_header, task_id_of
from shared.dp.samplers import RandBits
from shared.vdaf import ping_pong
from shared.vdaf.field import FieldArray
from shared.vdaf.prio3 import PrepStatus, Prio3
from shared.vdaf.spec import VdafSpec

#: How long the in-memory copy of the HPKE key list is trusted before re-reading the store.
_KEY_CACHE_S = 5.0
#: How long a parsed task is reused before the store is asked again.
_TASK_CACHE_S = 5.0

#: A collection job's final states, the ones a poll answers with its outcome.
_ENDED: Final = (CollectionState.FINISHED, CollectionState.FAILED)

#: Why a collection job failed, by the problem it failed with (the leader's own refusals and
#: the helper's answers to the aggregate share request); the collector shows it.
_COLLECTION_FAILURES: Final = {
    ProblemType.INVALID_BATCH_SIZE: (
        "a time bucket of the batch holds more reports than the task's rate validation allows "
        "(001 §4.8), or the helper counts too few reports for min_batch_size"
    ),
    ProblemType.BATCH_QUERIED_TOO_MANY_TIMES: "the batch was queried max_batch_query_count times",
    ProblemType.BATCH_MISMATCH: "leader and helper hold different reports for the batch",
    ProblemType.BATCH_OVERLAP: "the batch overlaps one that was collected already",
    ProblemType.BATCH_INVALID: "the helper finds the batch boundaries invalid",
    ProblemType.UNRECOGNIZED_TASK: "the task is no longer known",
}

HTTP_CREATED = 201
HTTP_FORBIDDEN = 403
HTTP_CONFLICT = 409
#: The secrets of a TaskDefinition, never stored in clear (except the leader's outgoing token).
SECRET_FIELDS = ("aggregator_auth_token", "collector_auth_token")


@dataclass(frozen=True)
class Task:
    """A provisioned task in the form the request paths use."""

    id: TaskId
    role: str
    query_type: QueryType
    vdaf: Prio3
    verify_key: bytes = field(repr=False)
    min_batch_size: int
    max_batch_size: int | None
    time_precision: int
    max_batch_query_count: int
    task_expiration: int | None
    report_expiry_age: int | None
    collector_config: HpkeConfig
    leader_endpoint: str
    helper_endpoint: str
    record: TaskRecord
    #: The task's DAP version: what its messages look like (`services.aggregator.wire`).
    wire: Wire
    recipe_digest: bytes | None = None
    tokens: TokenPolicy | None = None
    noise: AggregatorNoise | None = None
    rate_validation: RateValidation | None = None
    #: Provisioned by taskprov: the leader announces it on every request to the helper.
    taskprov: bool = False

    @property
    def b64(self) -> str:
        return self.id.to_b64url()

    @cached_property
    def announcement(self) -> str | None:
        """The DAP-Taskprov header value that names this task (digest §11): a DAP-19 task whose
        id taskprov derives from its TaskConfiguration; None for any other."""
        if not isinstance(self.wire, Wire19) or task_id_of(self.wire.config_bytes) != self.id:
            return None
        return encode_header(self.wire.config_bytes)

    @cached_property
    def max_report_len(self) -> int:
        """The largest report of this task (`shared.dap.sizes`; a DAP-19 ReportMetadata has
        two more bytes, the empty public extensions' length)."""
        extra = 2 if isinstance(self.wire, Wire19) else 0
        return extra + max_report_len(
            self.vdaf, token=self.tokens is not None, binding=self.recipe_digest is not None
        )

    def max_upload_len(self, max_reports: int) -> int:
        """The largest upload body: one report in DAP-09, `max_reports` in a DAP-19
        UploadRequest."""
        return self.max_report_len * (max_reports if isinstance(self.wire, Wire19) else 1)

    @cached_property
    def helper_ciphertext_bounds(self) -> tuple[int, int]:
        """The smallest and largest helper ciphertext of this task (`shared.dap.sizes`)."""
        return helper_ciphertext_bounds(
            self.vdaf, token=self.tokens is not None, binding=self.recipe_digest is not None
        )

    def problem(self, kind: ProblemType, detail: str, status: int | None = None) -> DapProblemError:
        """A DAP problem about this task (its document names the task: `taskid`)."""
        return DapProblemError(kind, detail, task_id=self.b64, status=status)

    def unauthorized(self, detail: str) -> ServiceError:
        """DAP-09's `unauthorizedRequest`; DAP-19 has no problem type for it (DAP-19 §3.6:
        a plain 403, never an unregistered DAP URN)."""
        if isinstance(self.wire, Wire19):
            return HttpProblemError(HTTP_FORBIDDEN, detail, task_id=self.b64)
        return self.problem(ProblemType.UNAUTHORIZED_REQUEST, detail)

    @property
    def rate_limit(self) -> RateLimit | None:
        """What the datastore checks for 001 §4.8 rate validation (None: no check)."""
        if self.rate_validation is None:
            return None
        return RateLimit(self.time_precision, self.rate_validation.max_reports_per_bucket)

    @property
    def batch_rules(self) -> DapBatchRules:
        """What batch validation checks (`services.aggregator.batch_validation`). DAP-19 has
        no maximum batch size and queries a batch once (digest §8)."""
        if isinstance(self.wire, Wire19):
            return DapBatchRules(self.min_batch_size, None, 1)
        return DapBatchRules(self.min_batch_size, self.max_batch_size, self.max_batch_query_count)

    @property
    def bucket_precision(self) -> int | None:
        """The bucket width whose report counts the datastore keeps per batch: only fixed_size
        tasks with rate validation need them (a time_interval batch key is a bucket)."""
        if self.rate_validation is None or self.query_type != QueryType.FIXED_SIZE:
            return None
        return self.time_precision

    def batch_target(self) -> int | None:
        """Reports per fixed_size batch the leader fills (None for time_interval)."""
        if self.query_type != QueryType.FIXED_SIZE:
            return None
        return self.max_batch_size or self.min_batch_size


def _wire(task_id: TaskId, d: Mapping[str, Any], vdaf: VdafSpec) -> Wire:
    expiration = None if d.get("task_expiration") is None else int(d["task_expiration"])
    if d.get("dap", "dap-09") == "dap-09":
        return Wire09(task_id, int(d["time_precision"]), expiration)
    config, raw = task_configuration(
        FieldValues(
            leader_endpoint=str(d["leader_endpoint"]),
            helper_endpoint=str(d["helper_endpoint"]),
            time_precision=int(d["time_precision"]),
            min_batch_size=int(d["min_batch_size"]),
            query_type=QueryType(int(d["query_type"])),
            vdaf=vdaf,
            task_expiration=expiration,
            task_configuration=d.get("task_configuration"),
        )
    )
    return Wire19(task_id, config, raw)


def task_from_record(record: TaskRecord) -> Task:
    d: Mapping[str, Any] = record.definition
    spec = VdafSpec.model_validate(d["vdaf"])
    return Task(
        id=TaskId(record.task_id),
        role=record.role,
        query_type=QueryType(int(d["query_type"])),
        vdaf=spec.instance(),
        verify_key=b64url_decode(d["vdaf_verify_key"], "vdaf_verify_key"),
        min_batch_size=int(d["min_batch_size"]),
        max_batch_size=None if d.get("max_batch_size") is None else int(d["max_batch_size"]),
        time_precision=int(d["time_precision"]),
        max_batch_query_count=int(d["max_batch_query_count"]),
        task_expiration=None if d.get("task_expiration") is None else int(d["task_expiration"]),
        report_expiry_age=None
        if d.get("report_expiry_age") is None
        else int(d["report_expiry_age"]),
        collector_config=HpkeConfig.decode(
            b64url_decode(d["collector_hpke_config"], "collector_hpke_config")
        ),
        leader_endpoint=str(d["leader_endpoint"]),
        helper_endpoint=str(d["helper_endpoint"]),
        record=record,
        wire=_wire(TaskId(record.task_id), d, spec),
        recipe_digest=None
        if d.get("recipe_digest") is None
        else b64url_decode(str(d["recipe_digest"]), "recipe_digest"),
        tokens=None if d.get("tokens") is None else TokenPolicy.model_validate(d["tokens"]),
        noise=None
        if d.get("aggregator_noise") is None
        else AggregatorNoise.model_validate(d["aggregator_noise"]),
        rate_validation=None
        if d.get("rate_validation") is None
        else RateValidation.model_validate(d["rate_validation"]),
        taskprov=bool(d.get("taskprov")),
    )


#: Writes a job's response from its final outcomes, outbound messages and check refusals.
EncodeJobResponse = Callable[[list[ReportOutcome], dict[int, bytes], dict[int, Refusal]], bytes]


def _refuse_fetch(url: str) -> httpx.Response:
    raise httpx.ConnectError(f"no HTTP client to fetch {url}")


def _stored_answer(task: Task, outcome: str | Exception) -> Answer | Exception:
    """The answer to an upload from what the store made of it (replays and the rest:
    `reportRejected`, DAP-09 §4.4.2)."""
    if isinstance(outcome, Exception):
        return outcome
    if outcome == UploadOutcome.STORED:
        return Answer(HTTP_CREATED)
    refusal = STORE_REFUSALS[outcome]
    return task.problem(refusal.problem, refusal.detail)


def _task_key(task_id: str) -> bytes:
    try:
        return TaskId.from_b64url(task_id).value
    except DecodeError:
        raise DapProblemError(
            ProblemType.UNRECOGNIZED_TASK, "not a task id", task_id=task_id
        ) from None


def _in_role(task: Task | None, task_id: str, role: str | None) -> Task:
    if task is None or (role is not None and task.role != role):
        raise DapProblemError(ProblemType.UNRECOGNIZED_TASK, "unknown task", task_id=task_id)
    return task


class Aggregator:
    """One aggregator process's view of its store, clock and keys."""

    def __init__(
        self,
        datastore: Datastore,
        clock: Clock,
        settings: AggregatorSettings,
        *,
        fetch: Fetch | None = None,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        self.ds = datastore
        self.clock = clock
        self.settings = settings
        self.issuer_keys = IssuerKeyCache(
            fetch or _refuse_fetch,
            clock,
            allowed=settings.token_issuers,
            default_max_age_s=settings.issuer_directory_default_max_age_s,
            max_age_cap_s=settings.issuer_directory_max_age_cap_s,
            min_refetch_s=settings.issuer_refetch_min_s,
            not_before_skew_s=settings.clock_skew_s,
        )
        #: This process's group-commit writer of uploads.
        self.uploads = UploadWriter(
            datastore,
            max_group=settings.upload_group_max,
            jobs=JobSizes(
                settings.min_job_size, settings.max_job_size, settings.upload_job_group_min
            ),
            max_queue=settings.upload_queue_max,
            metrics=metrics,
        )
        #: The CPU of this process's HPKE opens and VDAF preparation.
        self.crypto_cpu = CryptoCpu(metrics)
        self._lock = threading.Lock()
        self._tasks: dict[bytes, tuple[float, Task]] = {}
        #: Every provisioned task id and when it was read (unknown ids are refused by it).
        self._task_ids: frozenset[bytes] = frozenset()
        self._task_ids_loaded = float("-inf")
        self._keys: dict[int, hpke.HpkeKeyPair] = {}
        self._key_list: list[HpkeConfig] = []
        self._keys_loaded = 0.0
        #: Randomness of the aggregator noise; tests inject a seeded source.
        self.noise_randbits: RandBits = secrets.randbits
        #: Taskprov's opt-in (digest §11), None when `taskprov_verify_key_init` is unset.
        self.taskprov = Taskprov.of(settings)

    @property
    def checks(self) -> ReportChecker:
        """The report-share checks under the current settings (tests change them live)."""
        return ReportChecker(self.keypair, self.issuer_keys, self.settings, self.crypto_cpu)

    # --- tasks and keys ----------------------------------------------------------------------

    def task(self, task_id: str, role: str | None = None) -> Task:
        """The task named in the path, or `unrecognizedTask` (also when it has another role)."""
        return _in_role(self.task_by_id(_task_key(task_id)), task_id, role)

    def task_for(
        self, task_id: str, role: str, headers: Mapping[str, str], *, opt_in: bool
    ) -> Task:
        """`task`, for a request that may announce the task in a DAP-Taskprov header: with
        taskprov on, the header is checked against the task, and an unknown task it announces
        is opted into when `opt_in` (`services.aggregator.taskprov`)."""
        if self.taskprov is None:
            return self.task(task_id, role)
        return self.taskprov.task(self, task_id, role, headers, opt_in=opt_in)

    def put_task(self, definition: TaskDefinition) -> str:
        """Store a task definition: 'created', 'exists' (identical) or 'conflict'. Tokens are
        stored as hashes, but for the leader's outgoing one."""
        public = definition.model_dump(mode="json", exclude=set(SECRET_FIELDS))
        outcome = self.ds.put_task(
            definition.id.value,
            definition.role,
            public,
            hash_token(definition.aggregator_auth_token),
            hash_token(definition.collector_auth_token)
            if definition.collector_auth_token
            else None,
            definition.aggregator_auth_token if definition.role == "leader" else None,
            self.clock.now(),
        )
        # Known now, though a lookup may just have cached it as unknown.
        self.forget_task(definition.id.value)
        return outcome

    def task_by_id(self, task_id: bytes, *, listed_only: bool = True) -> Task | None:
        """The task, from memory when it can. Tasks are immutable, so a parsed copy (with its
        Prio3 instance) is reused for a few seconds; a task deleted through another process
        stops answering within that time.

        With `listed_only` an id missing from the recently read id set is unknown without a
        store query (a flood of random ids costs a set lookup); a task provisioned through
        another process is then seen within ``unknown_id_cache_s``. The job drivers pass
        False: a job row names a task that was provisioned, and must not fail for want of a
        fresh id set."""
        if listed_only:
            found, task = self.cached_task_by_id(task_id)
            if found:
                return task
            with self._lock:
                ids_fresh = self._task_ids_fresh(time.monotonic())
            if not ids_fresh:
                ids = self.ds.task_ids()
                with self._lock:
                    self._task_ids, self._task_ids_loaded = ids, time.monotonic()
                if task_id not in ids:
                    return None
        else:
            with self._lock:
                cached = self._tasks.get(task_id)
            if cached is not None and time.monotonic() - cached[0] < _TASK_CACHE_S:
                return cached[1]
        record = self.ds.get_task(task_id)
        if record is None:
            self.forget_task(task_id)
            return None
        task = task_from_record(record)
        with self._lock:
            self._tasks[task_id] = (time.monotonic(), task)
        return task

    def _task_ids_fresh(self, now: float) -> bool:
        return now - self._task_ids_loaded < self.settings.unknown_id_cache_s

    def cached_task_by_id(self, task_id: bytes) -> tuple[bool, Task | None]:
        """(True, the task or None if unknown) when memory answers, else (False, None)."""
        now = time.monotonic()
        with self._lock:
            cached = self._tasks.get(task_id)
            if cached is not None and now - cached[0] < _TASK_CACHE_S:
                return True, cached[1]
            if self._task_ids_fresh(now) and task_id not in self._task_ids:
                return True, None
        return False, None

    def cached_task_by_id_str(self, task_id: str) -> Task | None:
        """The task from memory alone, whatever its role; None when only the store can tell
        (or the id is unknown: `task` then says so)."""
        found, task = self.cached_task_by_id(_task_key(task_id))
        return task if found else None

    def cached_task(self, task_id: str, role: str) -> Task | None:
        """`task` from memory alone (no store query, so safe on the event loop); None when
        only the store can tell."""
        found, task = self.cached_task_by_id(_task_key(task_id))
        return _in_role(task, task_id, role) if found else None

    def forget_task(self, task_id: bytes) -> None:
        """Drop what memory holds about the task (provisioned or deleted here)."""
        with self._lock:
            self._tasks.pop(task_id, None)
            self._task_ids_loaded = float("-inf")

    def _load_keys(self) -> None:
        records = self.ds.hpke_keys()
        keys = {r.keypair.config_id: r.keypair for r in records}
        listed = [
            HpkeConfig(k.config_id, k.kem_id, k.kdf_id, k.aead_id, k.public_key)
            for k in (r.keypair for r in records if r.state == "active")
        ]
        with self._lock:
            self._keys, self._key_list = keys, listed
            self._keys_loaded = time.monotonic()

    def keypair(self, config_id: int) -> hpke.HpkeKeyPair | None:
        with self._lock:
            age = time.monotonic() - self._keys_loaded
            key = self._keys.get(config_id)
        # An unknown id may be a key another process just added: look before refusing, but at
        # most once per `unknown_id_cache_s`, so random ids do not each cost a store query.
        if age >= (_KEY_CACHE_S if key is not None else self.settings.unknown_id_cache_s):
            self._load_keys()
            with self._lock:
                key = self._keys.get(config_id)
        return key

    def hpke_config_list(self, task_id: str | None) -> Answer:
        """GET /hpke_config (DAP-09 §4.4.1): every active key, newest first."""
        if task_id is not None:
            self.task(task_id)
        with self._lock:
            fresh = time.monotonic() - self._keys_loaded < _KEY_CACHE_S
        if not fresh or not self._key_list:
            self._load_keys()
        with self._lock:
            configs = tuple(self._key_list)
        if not configs:
            raise HttpProblemError(503, "no HPKE key configured")
        return Answer(200, HpkeConfigList(configs).encode())

    def rotate_keys(self) -> int:
        keypair = self.ds.add_hpke_key(self.clock.now())
        assert keypair is not None
        self._load_keys()
        return keypair.config_id

    # --- auth --------------------------------------------------------------------------------

    def check_aggregator_auth(self, task: Task, headers: Mapping[str, str]) -> None:
        if not token_matches(task.record.aggregator_token_hash, presented_token(headers)):
            raise task.unauthorized("bad aggregator token")

    def check_collector_auth(self, task: Task, headers: Mapping[str, str]) -> None:
        if not token_matches(task.record.collector_token_hash, presented_token(headers)):
            raise task.unauthorized("bad collector token")

    # --- upload (leader, DAP-09 §4.4.2) ------------------------------------------------------

    def upload(
        self,
        task_id: str,
        body: bytes,
        done: Callable[[Answer | Exception], None],
        *,
        wait: bool = True,
        fetch: bool = True,
    ) -> None:
        """Validate one upload here and store it through the group-commit writer.

        `done` gets the 201 Answer, or the problem to answer, once the report (or the count of
        its refusal) is committed; it may run in the writer thread. Errors come as exceptions.
        With `wait` False validation never waits for a token issuer: when the task's issuer
        keys must be fetched first, `done` gets `IssuerKeysPendingError` and the caller calls
        again, after the fetch, with `fetch` False."""
        try:
            task = self.task(task_id, "leader")
        except DapProblemError as exc:
            done(exc)
            return
        if isinstance(task.wire, Wire19):
            bulk_upload(self, task, body, done, wait=wait, fetch=fetch)
            return
        full = HttpProblemError(
            503,
            "the upload queue is full",
            task_id=task.b64,
            retry_after=self.settings.upload_retry_after_s,
        )
        try:
            report = self._validate_upload(task, body, wait=wait, fetch=fetch)
        except (IssuerKeysPendingError, IssuerUnavailableError) as exc:
            done(issuer_answer(task.b64, exc))
            return
        try:
            if isinstance(report, Refusal):
                problem = task.problem(report.problem, report.detail)
                # The refusal stands whether or not its count could be stored.
                self.uploads.count_refusal(task.id.value, report.reason, lambda: done(problem))
            else:
                self.uploads.store(report, lambda outcome: done(_stored_answer(task, outcome)))
        except QueueFullError:
            done(full)

    def _validate_upload(
        self, task: Task, body: bytes, *, wait: bool, fetch: bool
    ) -> NewReport | Refusal:
        """The report to store, or why it is refused (`validate_reports`)."""
        try:
            report = UploadedReport.of(Report.decode(body))
        except DecodeError:
            return Refusal.MALFORMED_REPORT
        return self.validate_reports(task, [report], self.clock.now(), wait=wait, fetch=fetch)[0]

    def validate_reports(
        self,
        task: Task,
        reports: Sequence[UploadedReport],
        now: int,
        *,
        wait: bool,
        fetch: bool,
    ) -> list[NewReport | Refusal]:
        """Each report to store, or why it is refused: the leader's own input share is checked
        as the helper checks its own (`report_checks`), after the checks of the whole Report.
        Its time is stored in seconds whatever the task's DAP version (`wire`)."""
        smallest, largest = task.helper_ciphertext_bounds

        def helper_share_fits(report: UploadedReport) -> bool:
            # The encoded HpkeCiphertext: config id, enc and payload with their length prefixes.
            share = report.helper_encrypted_share
            return (
                smallest <= len(share) <= largest
                and int.from_bytes(share[1:3], "big") == hpke.ENC_SIZE
            )

        fits = [helper_share_fits(report) for report in reports]
        checked = iter(
            self.checks.check_all(
                task,
                Role.LEADER,
                [r.leader for r, fit in zip(reports, fits, strict=True) if fit],
                now,
                wait=wait,
                fetch=fetch,
            )
        )
        verdicts: list[NewReport | Refusal] = []
        for report, fit in zip(reports, fits, strict=True):
            check = next(checked) if fit else Refusal.HELPER_SHARE_SIZE
            verdicts.append(
                check if isinstance(check, Refusal) else self._new_report(task, report, check, now)
            )
        return verdicts

    @staticmethod
    def _new_report(task: Task, report: UploadedReport, checked: Accepted, now: int) -> NewReport:
        leader = report.leader
        time_s = checked.time_s
        batch_key = (
            bucket_key(time_s, task.time_precision)
            if task.query_type == QueryType.TIME_INTERVAL
            else None
        )
        return NewReport(
            task.id.value,
            leader.report_id,
            time_s,
            leader.public_share,
            checked.payload,
            report.helper_encrypted_share,
            batch_key,
            now,
            checked.spend,
        )

    # --- helper aggregation (DAP-09 §4.5.1.2-§4.5.2) ------------------------------------------

    def helper_init(
        self, task_id: str, job_id: str, headers: Mapping[str, str], body: bytes
    ) -> Answer:
        """PUT aggregation job (DAP-09 §4.5.1.2): the whole-job checks of DAP-09, then
        `prepare_job`."""
        task = self.task(task_id, "helper")
        self.check_aggregator_auth(task, headers)

        def invalid(detail: str, status: int | None = None) -> DapProblemError:
            return task.problem(ProblemType.INVALID_MESSAGE, detail, status)

        try:
            job = AggregationJobId.from_b64url(job_id)
            request = AggregationJobInitReq.decode(body)
        except DecodeError:
            raise invalid("malformed aggregation job id or AggregationJobInitReq") from None
        stored = self.stored_init_response(task, job.value, body)
        if stored is not None:
            return Answer(HTTP_CREATED, stored)
        if request.part_batch_selector.query_type != task.query_type:
            raise invalid("query type does not match the task")
        if request.agg_param != b"":
            raise invalid("Prio3 takes an empty aggregation parameter")
        ids = [p.report_share.report_metadata.report_id for p in request.prepare_inits]
        if len(set(ids)) != len(ids):
            raise invalid("duplicate report ids in the job")

        def encode(final: list[ReportOutcome], messages: dict[int, bytes], _: object) -> bytes:
            resps = [
                PrepareResp.continued(ids[i], messages[i])
                if o.error is None
                else PrepareResp.rejected(ids[i], o.error)
                for i, o in enumerate(final)
            ]
            return AggregationJobResp(tuple(resps)).encode()

        shares = [SealedInit.of(p) for p in request.prepare_inits]
        batch_id = request.part_batch_selector.batch_id
        return Answer(
            HTTP_CREATED, self.prepare_job(task, job.value, body, shares, batch_id, encode)
        )

    def stored_init_response(self, task: Task, job: bytes, body: bytes) -> bytes | None:
        """The stored answer to an identical re-send of a job's init request, None for a new
        job, `invalidMessage` (409) for a job id taken by another request."""
        existing = self.ds.aggregation_job(task.id.value, job)
        if existing is None:
            return None
        # Cheap early answer for re-sends; helper_init_job decides again atomically.
        if (
            existing["request_hash"] is not None
            and bytes(existing["request_hash"]) == hashlib.sha256(body).digest()
            and int(existing["step"]) == 0
            and existing["state"] != JobState.ABANDONED
        ):
            return bytes(existing["response"])
        raise task.problem(
            ProblemType.INVALID_MESSAGE,
            "aggregation job exists with a different request",
            HTTP_CONFLICT,
        )

    def prepare_job(
        self,
        task: Task,
        job: bytes,
        body: bytes,
        shares: Sequence[SealedInit],
        batch_id: BatchId | None,
        encode: EncodeJobResponse,
    ) -> bytes:
        """The helper's side of one aggregation job, whatever the DAP version (DAP-09
        §4.5.1.3-§4.5.1.4, DAP-19 §4.5.3.2-§4.5.3.4): check every report share
        (`report_checks`), prepare the passing ones in one batch, and store the job, its
        outcomes and output shares once (`helper_init_job`: replays, collected batches and
        spent tokens). `encode` writes the response in the task's version from the final
        outcomes, the outbound messages and the refusals of the checks, by report index."""
        now = self.clock.now()
        vdaf = task.vdaf
        wire = task.wire
        errors: list[PrepareError | None] = []
        reasons: list[str | None] = []
        spends: list[TokenSpend | None] = []
        refusals: dict[int, Refusal] = {}
        candidates: list[int] = []
        nonces: list[bytes] = []
        public_shares: list[bytes] = []
        input_shares: list[bytes] = []
        inbound: list[bytes] = []
        try:
            checked = self.checks.check_all(
                task, Role.HELPER, [share.sealed for share in shares], now
            )
        except IssuerUnavailableError:
            # Nothing is stored yet: the leader retries the whole job on a 5xx.
            raise HttpProblemError(
                503, "the token issuer is unavailable", task_id=task.b64
            ) from None
        for i, (share, check) in enumerate(zip(shares, checked, strict=True)):
            if isinstance(check, Refusal):
                refusals[i] = check
                errors.append(check.prepare_error)
                reasons.append(check.aggregation_reason)
                spends.append(None)
                continue
            errors.append(None)
            reasons.append(None)
            spends.append(check.spend)
            candidates.append(i)
            nonces.append(share.sealed.report_id)
            public_shares.append(share.sealed.public_share)
            input_shares.append(check.payload)
            inbound.append(share.payload)

        batch, outbound = self.crypto_cpu.prep(
            "helper",
            ping_pong.helper_init,
            vdaf,
            task.verify_key,
            nonces,
            public_shares,
            input_shares,
            inbound,
            wire.ctx,
        )
        messages: dict[int, bytes] = {}
        out_index: dict[int, int] = {}
        for j, i in enumerate(candidates):
            message = outbound[j]
            if message is None:
                errors[i] = (
                    PrepareError.INVALID_MESSAGE
                    if batch.status[j] == PrepStatus.DECODE_ERROR
                    else PrepareError.VDAF_PREP_ERROR
                )
            else:
                messages[i] = message
                out_index[i] = j

        outcomes = []
        for i, share in enumerate(shares):
            time_s = wire.seconds(share.sealed.time)
            key = (
                batch_id_key(batch_id)
                if batch_id is not None
                else bucket_key(time_s, task.time_precision)
            )
            outcomes.append(
                ReportOutcome(
                    share.sealed.report_id,
                    time_s,
                    key,
                    errors[i],
                    out_index.get(i),
                    spend=spends[i],
                    reason=reasons[i],
                )
            )

        result, response = self.ds.helper_init_job(
            task.id.value,
            job,
            body,
            None if batch_id is None else batch_id.value,
            outcomes,
            ShareAdder(vdaf, batch.out_shares),
            task.max_batch_size,
            lambda final: encode(final, messages, refusals),
            now,
            task.bucket_precision,
        )
        if result == "conflict" or response is None:
            raise task.problem(
                ProblemType.INVALID_MESSAGE,
                "aggregation job exists with a different request",
                HTTP_CONFLICT,
            )
        return response

    def helper_continue(
        self, task_id: str, job_id: str, headers: Mapping[str, str], body: bytes
    ) -> Answer:
        """POST aggregation job (DAP-09 §4.5.2, DAP-19 §4.5.4.2: the same checks; DAP-19's
        decoder refuses step 0 and duplicate ids itself). One-round Prio3 finishes at init, so
        no report ever waits for a continuation; the checks still run in the order §4.5.2.1
        gives."""
        task = self.task_for(task_id, "helper", headers, opt_in=True)
        self.check_aggregator_auth(task, headers)

        try:
            job = AggregationJobId.from_b64url(job_id)
            if isinstance(task.wire, Wire19):
                request19 = AggregationJobContinueReq19.decode(body)
                step, ids = request19.step, [p.report_id for p in request19.verify_continues]
            else:
                request = AggregationJobContinueReq.decode(body)
                step, ids = request.step, [p.report_id for p in request.prepare_continues]
        except DecodeError:
            raise task.problem(ProblemType.INVALID_MESSAGE, "malformed continue request") from None
        row = self.ds.aggregation_job(task.id.value, job.value)
        if row is None or row["role"] != "helper" or row["state"] == JobState.ABANDONED:
            raise task.problem(ProblemType.UNRECOGNIZED_AGGREGATION_JOB, "unknown aggregation job")
        if step == 0:
            raise task.problem(ProblemType.INVALID_MESSAGE, "step 0 is not a continuation")
        if step != int(row["step"]) + 1:
            raise task.problem(ProblemType.STEP_MISMATCH, f"the job is at step {row['step']}")
        if len(set(ids)) != len(ids):
            raise task.problem(ProblemType.INVALID_MESSAGE, "duplicate report ids")
        # One-round Prio3 finishes every report at init: every continuation names a report
        # without preparation state.
        raise task.problem(
            ProblemType.INVALID_MESSAGE,
            f"{len(ids)} report(s) have no preparation state to continue",
        )

    def helper_delete(self, task_id: str, job_id: str, headers: Mapping[str, str]) -> Answer:
        task = self.task_for(task_id, "helper", headers, opt_in=True)
        self.check_aggregator_auth(task, headers)
        try:
            job = AggregationJobId.from_b64url(job_id)
        except DecodeError:
            raise task.problem(ProblemType.INVALID_MESSAGE, "malformed job id") from None
        if not self.ds.abandon_helper_job(task.id.value, job.value):
            raise task.problem(ProblemType.UNRECOGNIZED_AGGREGATION_JOB, "unknown job")
        return Answer(204)

    # --- helper aggregate shares (DAP-09 §4.6.2) ---------------------------------------------

    def helper_aggregate_share(
        self, task_id: str, headers: Mapping[str, str], body: bytes
    ) -> Answer:
        task = self.task(task_id, "helper")
        self.check_aggregator_auth(task, headers)

        try:
            request = AggregateShareReq.decode(body)
        except DecodeError:
            raise task.problem(ProblemType.INVALID_MESSAGE, "malformed AggregateShareReq") from None
        selector = request.batch_selector
        if selector.query_type != task.query_type:
            raise task.problem(ProblemType.INVALID_MESSAGE, "query type does not match the task")
        if selector.batch_interval is not None and not interval_is_valid(
            selector.batch_interval, task.time_precision
        ):
            raise task.problem(ProblemType.BATCH_INVALID, "batch interval is not aligned")
        lo, hi = selector_key_range(selector)
        response = self.release_helper_share(
            task,
            selector.encode(),
            request.agg_param,
            (lo, hi),
            selector.query_type == QueryType.FIXED_SIZE,
            (request.report_count, request.checksum),
            aggregate_share_aad(task.id, b"", selector),
        )
        return Answer(200, response)

    def release_helper_share(
        self,
        task: Task,
        selector: bytes,
        agg_param: bytes,
        key_range: tuple[bytes, bytes],
        is_batch_id: bool,
        leader_totals: tuple[int, bytes],
        aad: bytes,
    ) -> bytes:
        """The helper's encoded AggregateShare of a batch, released once after batch and rate
        validation (DAP-09 §4.6.2, DAP-19 §4.6.7); a refusal raises the task's problem.
        `leader_totals` is the leader's (report_count, checksum) of the batch."""

        def build_response(agg_share: bytes) -> bytes:
            # Noised inside the datastore transaction that stores the answer: a re-sent
            # request gets these same bytes, so the noise is drawn once per batch (004 §5).
            share = task.vdaf.decode_agg_share(agg_share)
            noised = noised_share(task.noise, task.vdaf.field, share, self.noise_randbits)
            return AggregateShare(seal_aggregate_share(task, Role.HELPER, aad, noised)).encode()

        refusal, response = self.ds.helper_aggregate_share(
            task.id.value,
            selector,
            agg_param,
            *key_range,
            is_batch_id,
            *leader_totals,
            task.batch_rules,
            ShareAdder(task.vdaf),
            build_response,
            self.clock.now(),
            task.rate_limit,
        )
        if refusal is not None:
            raise task.problem(refusal.problem, refusal.detail)
        assert response is not None
        return response

    # --- collection (leader, DAP-09 §4.6.1) --------------------------------------------------

    def put_collection_job(
        self, task_id: str, job_id: str, headers: Mapping[str, str], body: bytes
    ) -> Answer:
        task = self.task(task_id, "leader")
        self.check_collector_auth(task, headers)

        try:
            job = CollectionJobId.from_b64url(job_id)
            request = CollectionReq.decode(body)
        except DecodeError:
            raise task.problem(ProblemType.INVALID_MESSAGE, "malformed CollectionReq") from None
        query = request.query
        if query.query_type != task.query_type:
            raise task.problem(ProblemType.INVALID_MESSAGE, "query type does not match the task")
        interval: tuple[int, int] | None = None
        batch_key: bytes | None = None
        current = False
        if query.batch_interval is not None:
            if not interval_is_valid(query.batch_interval, task.time_precision):
                raise task.problem(ProblemType.BATCH_INVALID, "batch interval is not aligned")
            interval = (query.batch_interval.start, query.batch_interval.duration)
        else:
            assert query.fixed_size_query is not None
            if query.fixed_size_query.query_type == FixedSizeQueryType.CURRENT_BATCH:
                current = True
            else:
                assert query.fixed_size_query.batch_id is not None
                batch_key = query.fixed_size_query.batch_id.value
        result, kind = self.ds.put_collection_job(
            task.id.value,
            job.value,
            body,
            int(query.query_type),
            current,
            request.agg_param,
            batch_key,
            interval,
            task.batch_rules,
            self.clock.now(),
        )
        if kind is not None:
            raise task.problem(kind, "batch check failed")
        if result == "conflict":
            raise task.problem(
                ProblemType.INVALID_MESSAGE,
                "collection job exists with another request",
                HTTP_CONFLICT,
            )
        return Answer(HTTP_CREATED)

    def poll_collection_job(self, task_id: str, job_id: str, headers: Mapping[str, str]) -> Answer:
        task = self.task_for(task_id, "leader", headers, opt_in=False)
        self.check_collector_auth(task, headers)
        row = self._collection_row(task, job_id)
        state = row["state"]
        dap19 = isinstance(task.wire, Wire19)
        if dap19 and state in _ENDED and not row["delivered"]:
            # Until now an identical leader-selected request names this job again
            # (`dap19_collection`): a collector that lost its Location still gets the batch.
            self.ds.mark_collection_delivered(task.id.value, bytes(row["job_id"]))
        if state == CollectionState.FINISHED:
            return Answer(200, bytes(row["result"]))
        if state == CollectionState.DELETED:
            # DAP-19: an empty 2xx would mean "pending" (DAP-19 §3.1); a deleted job is gone.
            if dap19:
                raise HttpProblemError(404, "the collection job was deleted", task_id=task.b64)
            return Answer(204)
        if state == CollectionState.FAILED:
            try:
                kind = ProblemType(row["error"])
            except ValueError:
                # Not a protocol failure: the helper could not be reached in time.
                raise HttpProblemError(
                    502, "the collection failed: helper unavailable", task_id=task.b64
                ) from None
            detail = _COLLECTION_FAILURES.get(kind, "the helper refused the aggregate share")
            raise task.problem(kind, f"the collection failed: {detail}")
        # DAP-19 §3.1: pending is any 2xx with an empty body; DAP-09 §4.6.1 says 202.
        pending = 200 if dap19 else 202
        return Answer(pending, headers={"Retry-After": str(self.settings.collection_retry_s)})

    def delete_collection_job(
        self, task_id: str, job_id: str, headers: Mapping[str, str]
    ) -> Answer:
        task = self.task_for(task_id, "leader", headers, opt_in=False)
        self.check_collector_auth(task, headers)
        self._collection_row(task, job_id)
        self.ds.delete_collection_job(task.id.value, CollectionJobId.from_b64url(job_id).value)
        return Answer(204)

    def _collection_row(self, task: Task, job_id: str) -> dict[str, Any]:
        try:
            job = CollectionJobId.from_b64url(job_id)
        except DecodeError:
            raise task.problem(ProblemType.INVALID_MESSAGE, "malformed collection job id") from None
        row = self.ds.collection_job(task.id.value, job.value)
        if row is None:
            raise HttpProblemError(404, "unknown collection job", task_id=task.b64)
        return row


def seal_aggregate_share(
    task: Task, role: Role, aad: bytes, agg_share: FieldArray
) -> HpkeCiphertext:
    """Encrypt an aggregate share to the collector under the task's version's info label
    (DAP-09 §4.6.4, DAP-19 §4.6.7); `aad` is that version's AggregateShareAad."""
    config = task.collector_config
    enc, payload = hpke.seal(
        config.public_key,
        task.wire.aggregate_share_info(role),
        aad,
        task.vdaf.encode_agg_share(agg_share),
    )
    return HpkeCiphertext(config.id, enc, payload)
