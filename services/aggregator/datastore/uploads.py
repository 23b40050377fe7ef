"""Leader uploads (DAP-09 §4.4.2): reports stored in groups, against the anti-replay set
(``client_reports``) and the spent tokens, refusals counted in the same transaction.

A group that holds many of one time_interval task's reports (`JobSizes.from_group`: a DAP-19
bulk upload, a busy leader) makes their aggregation jobs, as even as `job_cuts` can make
them, in the transaction that stores them (DAP-09 §4.5.1.1 leaves job formation to the
leader): the job creator would otherwise read every report row back, shares and all, and
rewrite it to mark it started. Such a job keeps its reports' shares in one row
(`job_shares`), their report rows only the anti-replay record. Smaller groups (the creator
batches them across commits into fuller jobs), the remainder below a job's minimum and
fixed_size tasks (whose jobs fill batches in order) are left to the creator
(`LeaderJobStore.create_aggregation_jobs`).

A token is spent in the transaction that stores the report (leader, at upload) or that
finishes it (helper, `helper_jobs`), so a crash neither loses a spend nor counts one twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from services.aggregator.datastore import job_shares
from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.batch_aggregations import is_collected
from services.aggregator.datastore.job_share_files import IN_FILE, JobShareFiles
from services.aggregator.datastore.leader_jobs import insert_leader_job
from services.aggregator.datastore.records import JobSizes, NewReport, TokenSpend
from services.aggregator.datastore.states import Stage, UploadOutcome
from services.aggregator.datastore.stats import count_rejections
from services.aggregator.datastore.task_numbers import task_number
from services.common.db import Tx

#: The columns of a stored upload, in `put_reports`'s order.
_REPORT_COLUMNS = (
    ("task_number", "bigint"),
    ("report_id", "blob"),
    ("client_time", "bigint"),
    ("public_share", "blob"),
    ("leader_input_share", "blob"),
    ("helper_encrypted_share", "blob"),
    ("aggregation_started", "bigint"),
    ("received_at", "bigint"),
)
#: The columns of a report's anti-replay record without its shares: what the helper keeps of
#: a report it aggregates, and the leader of one whose shares are its job's (`job_shares`).
RECORD_COLUMNS = (
    ("task_number", "bigint"),
    ("report_id", "blob"),
    ("client_time", "bigint"),
    ("aggregation_started", "bigint"),
    ("received_at", "bigint"),
)
#: A job `put_reports` made: its id, its reports, and the bytes of their encoded shares.
MadeJob = tuple[bytes, list[NewReport], int]
#: What one try of `put_reports`'s transaction gives: the outcomes, and the jobs it made.
Attempt = tuple[list[UploadOutcome], list[MadeJob]]
#: Reasons of `rejection_counts` the datastore itself decides.
REASON_TOKEN_SPENT = "token_spent"
#: The counter reason of each refusal `put_reports` makes.
_UPLOAD_REASONS = {
    UploadOutcome.REPLAYED: "report_replayed",
    UploadOutcome.COLLECTED: "batch_collected",
    UploadOutcome.TOKEN_SPENT: REASON_TOKEN_SPENT,
}


def spend_token(tx: Tx, task_id: bytes, report_id: bytes, spend: TokenSpend, now: int) -> bool:
    """Record a token as spent; False when it already was (the unique key decides, so two
    racing transactions cannot both spend it)."""
    return (
        tx.execute(
            "INSERT INTO spent_tokens (token_key_id, context, nonce, task_id, report_id,"
            " spent_at) VALUES (:k, :c, :n, :t, :r, :now)"
            " ON CONFLICT (token_key_id, context, nonce) DO NOTHING",
            {
                "k": spend.token_key_id,
                "c": spend.context,
                "n": spend.nonce,
                "t": task_id,
                "r": report_id,
                "now": now,
            },
        )
        > 0
    )


def known_report_ids(tx: Tx, number: int, report_ids: list[bytes]) -> set[bytes]:
    """Which of these report ids the task numbered `number` has seen (the anti-replay set)."""
    return {
        bytes(r)
        for r in tx.present("client_reports", ("task_number", number), "report_id", report_ids)
    }


def _make_jobs(
    tx: Tx,
    task_id: bytes,
    reports: list[NewReport],
    jobs: JobSizes,
    files: JobShareFiles | None,
) -> list[MadeJob]:
    """Jobs of these reports (`job_cuts`); what no job takes is left to the creator. With
    `files` (a SQLite store) each job's shares go to its file, written before the transaction
    commits (`job_share_files`)."""
    made: list[MadeJob] = []
    for start, end in job_cuts(len(reports), jobs.minimum, jobs.maximum):
        chunk = reports[start:end]
        members = [(r.report_id, r.client_time) for r in chunk]
        job_id = insert_leader_job(tx, task_id, None, members, chunk[0].received_at)
        value = job_shares.encode(chunk)
        size = len(value)
        if files is not None:
            files.write(task_id, job_id, value)
            value = IN_FILE
        tx.execute(
            "INSERT INTO leader_job_shares (task_id, job_id, shares) VALUES (:t, :j, :s)",
            {"t": task_id, "j": job_id, "s": value},
        )
        made.append((job_id, chunk, size))
    return made


def job_cuts(count: int, minimum: int, maximum: int) -> list[tuple[int, int]]:
    """[start, end) of the jobs `count` reports make: as few as `maximum` allows, of sizes that
    differ by one at most (a group of 1,000 makes two jobs of 500, not 500, 500 and a
    remainder), so a job's fixed costs (a lease, a helper round trip, a batch update on both
    sides) are spread over as many reports as they can be. When even jobs would fall below
    `minimum`, jobs of `maximum` and a remainder below `minimum` that no job takes."""
    parts = -(-count // maximum)
    if parts and count // parts >= minimum:
        size, longer = divmod(count, parts)
        ends = [(i + 1) * size + min(i + 1, longer) for i in range(parts)]
        return list(zip([0, *ends[:-1]], ends, strict=True))
    cuts = [(start, min(start + maximum, count)) for start in range(0, count, maximum)]
    return [(start, end) for start, end in cuts if end - start >= minimum]


class UploadStore(StoreBase):
    def put_reports(
        self,
        reports: Sequence[NewReport],
        refusals: Sequence[tuple[bytes, str]] = (),
        jobs: JobSizes | None = None,
    ) -> list[UploadOutcome]:
        """Store a group of uploads in one transaction (the upload writer's group commit).

        Per report, in order: 'stored'; 'collected' (its time bucket was collected);
        'replayed' (its id was seen before, also earlier in this group); or 'token_spent' (its
        token was spent before, also earlier in this group; the id stays unused). Those
        refusals and `refusals` (task id, reason: uploads refused before the store) are
        counted in the same transaction. With `jobs`, the stored reports make aggregation jobs
        of those sizes where a task has enough of them (module docstring); once committed,
        their reports are kept for this process's driver (`fresh_jobs`)."""

        def attempt(tx: Tx, look_up: bool) -> Attempt:
            by_task: dict[bytes, list[bytes]] = {}
            for r in reports:
                by_task.setdefault(r.task_id, []).append(r.report_id)
            numbers = {t: task_number(tx, t) for t in by_task}
            seen = {
                t: known_report_ids(tx, numbers[t], ids) if look_up else set()
                for t, ids in by_task.items()
            }
            collected: dict[tuple[bytes, bytes], bool] = {}
            rejected: dict[bytes, list[str]] = {}
            for task_id, reason in refusals:
                rejected.setdefault(task_id, []).append(reason)
            outcomes: list[UploadOutcome] = []
            stored: list[NewReport] = []
            # The stored reports of time_interval tasks, by task: what jobs can be made of here.
            timed: dict[bytes, list[NewReport]] = {}
            for r in reports:
                outcome = UploadOutcome.STORED
                if r.batch_key is not None:
                    key = (r.task_id, r.batch_key)
                    if key not in collected:
                        collected[key] = is_collected(tx, r.task_id, r.batch_key)
                    if collected[key]:
                        outcome = UploadOutcome.COLLECTED
                if outcome == UploadOutcome.STORED and r.report_id in seen[r.task_id]:
                    outcome = UploadOutcome.REPLAYED
                if (
                    outcome == UploadOutcome.STORED
                    and r.spend is not None
                    and not spend_token(tx, r.task_id, r.report_id, r.spend, r.received_at)
                ):
                    outcome = UploadOutcome.TOKEN_SPENT
                outcomes.append(outcome)
                if outcome != UploadOutcome.STORED:
                    rejected.setdefault(r.task_id, []).append(_UPLOAD_REASONS[outcome])
                    continue
                seen[r.task_id].add(r.report_id)
                stored.append(r)
                if r.batch_key is not None:
                    timed.setdefault(r.task_id, []).append(r)
            made: list[MadeJob] = []
            if jobs is not None:
                for group in timed.values():
                    if len(group) >= jobs.from_group:
                        made += _make_jobs(tx, group[0].task_id, group, jobs, self._share_files)
            # Unless looked up above (under the transaction's isolation, where a concurrent
            # insert of one makes this conflict and the retry finds it replayed), a held id
            # makes this conflict and `body` look them up. The shares of a report in a job
            # made here are its job's (`leader_job_shares`): its row is the record alone, its
            # share columns left NULL rather than bound as such.
            tx.insert_rows(
                "client_reports",
                RECORD_COLUMNS,
                [
                    (numbers[r.task_id], r.report_id, r.client_time, 1, r.received_at)
                    for _, chunk, _ in made
                    for r in chunk
                ],
            )
            started = {(r.task_id, r.report_id) for _, chunk, _ in made for r in chunk}
            tx.insert_rows(
                "client_reports",
                _REPORT_COLUMNS,
                [
                    (
                        numbers[r.task_id],
                        r.report_id,
                        r.client_time,
                        r.public_share,
                        r.leader_input_share,
                        r.helper_encrypted_share,
                        0,
                        r.received_at,
                    )
                    for r in stored
                    if (r.task_id, r.report_id) not in started
                ],
            )
            for task_id, reasons in rejected.items():
                count_rejections(tx, task_id, Stage.UPLOAD, reasons, self._shard())
            return outcomes, made

        def body(tx: Tx) -> Attempt:
            # Replays are rare: the group is stored as if it held none, and its ids are looked
            # up only if one breaks the anti-replay key (`Tx.unless_conflict`). Not with
            # tokens: a replay's token is spent already, which would refuse it as token_spent
            # before the conflict could show it replayed.
            if any(r.spend is not None for r in reports):
                return attempt(tx, True)
            return tx.unless_conflict(partial(attempt, tx, False), partial(attempt, tx, True))

        # After the commit, and only the jobs of the attempt that committed: a retried body
        # makes new job ids.
        outcomes, made = self.db.run("put_reports", body)
        for job_id, chunk, size in made:
            self._fresh.add(chunk[0].task_id, job_id, chunk, size)
        if made:
            self.aggregation_jobs_made.ring()
        return outcomes
