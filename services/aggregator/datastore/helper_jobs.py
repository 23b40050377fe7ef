"""Helper jobs: aggregation jobs recorded once with their output shares (DAP-09 §4.5.1.2-
§4.5.2), and aggregate share requests answered once (§4.6.2, §4.6.5); re-sent requests get the
stored answer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from services.aggregator.batches import MAX_STORED_TIME
from services.aggregator.datastore.aggregation_jobs import (
    insert_job,
)
from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.batch_aggregations import (
    add_outcomes,
    batch_totals,
    mark_collected,
    rate_refusal,
)
from services.aggregator.datastore.records import (
    BatchRules,
    EarlierQueries,
    RatePolicy,
    Refusal,
    ReportOutcome,
    ShareSum,
)
from services.aggregator.datastore.states import JobState, Stage
from services.aggregator.datastore.stats import count_rejections
from services.aggregator.datastore.task_numbers import task_number
from services.aggregator.datastore.uploads import (
    REASON_TOKEN_SPENT,
    RECORD_COLUMNS,
    spend_token,
)
from services.common.db import Row, Tx
from shared.dap.messages import PrepareError
from shared.dap.problems import ProblemType


class HelperJobStore(StoreBase):
    def aggregation_job(self, task_id: bytes, job_id: bytes) -> Row | None:
        return self._job_row("aggregation_job", "aggregation_jobs", task_id, job_id)

    def helper_init_job(
        self,
        task_id: bytes,
        job_id: bytes,
        request: bytes,
        batch_id: bytes | None,
        outcomes: Sequence[ReportOutcome],
        shares: ShareSum,
        max_batch_size: int | None,
        build_response: Callable[[list[ReportOutcome]], bytes],
        now: int,
        bucket_precision: int | None = None,
    ) -> tuple[str, bytes | None]:
        """Record a helper aggregation job and its output shares, once (with
        `bucket_precision`, also their counts per time bucket, `batch_bucket_counts`).

        Returns ('created', response), ('same', stored response) for an identical re-send, or
        ('conflict', None) when the id is taken by a different request (DAP-09 §4.5.1.2).
        Reports seen before in this task become report_replayed, those whose token (`spend`)
        was spent before invalid_message, those into collected batches batch_collected, and for
        fixed_size those beyond `max_batch_size` batch_saturated. Tokens are spent and refusals
        counted in the same transaction.
        """
        request_hash = hashlib.sha256(request).digest()

        def body(tx: Tx) -> tuple[str, bytes | None]:
            existing = tx.query_one(
                "SELECT request_hash, response, step, state FROM aggregation_jobs"
                " WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            )
            if existing is not None:
                if (
                    existing["request_hash"] is not None
                    and bytes(existing["request_hash"]) == request_hash
                    and int(existing["step"]) == 0
                    and existing["state"] != JobState.ABANDONED
                ):
                    return "same", bytes(existing["response"])
                return "conflict", None
            if batch_id is not None:
                tx.execute(
                    "INSERT INTO batches (task_id, batch_key, collected, assigned, filled,"
                    " created_at) VALUES (:t, :k, 0, 0, 0, :now)"
                    " ON CONFLICT (task_id, batch_key) DO NOTHING",
                    {"t": task_id, "k": batch_id, "now": now},
                )
            # The leader may offer a too-early report again later (DAP-09 §4.5.1.1): it is not
            # recorded, so that is not a replay.
            remembered = [o for o in outcomes if o.error != PrepareError.REPORT_TOO_EARLY]
            number = task_number(tx, task_id)
            # The ids are distinct (`helper_init` refuses a job that repeats one); those the
            # task held already are replays. On PostgreSQL a concurrent job's insert of one of
            # them fails this attempt, and the retry finds it replayed.
            seen = {
                bytes(rid)
                for rid in tx.insert_unseen(
                    "client_reports",
                    RECORD_COLUMNS,
                    [
                        (number, o.report_id, min(o.client_time, MAX_STORED_TIME), 1, now)
                        for o in remembered
                    ],
                    ("task_number", number),
                    "report_id",
                )
            }
            checked = [o.copy() for o in outcomes]
            for o in checked:
                if o.error is None and o.report_id in seen:
                    o.error = PrepareError.REPORT_REPLAYED
                elif (
                    o.error is None
                    and o.spend is not None
                    and not spend_token(tx, task_id, o.report_id, o.spend, now)
                ):
                    # A token spent before (in this job or an earlier one, whatever the report
                    # id): the leader is replaying it, or a client reused it.
                    o.error, o.reason = PrepareError.INVALID_MESSAGE, REASON_TOKEN_SPENT
            shard = self._shard()
            final = add_outcomes(
                tx,
                task_id,
                checked,
                shares,
                shard,
                check_saturation=max_batch_size if batch_id is not None else None,
                bucket_precision=bucket_precision,
            )
            response = build_response(final)
            count_rejections(
                tx,
                task_id,
                Stage.AGGREGATION,
                [r for r in (o.rejection_reason for o in final) if r is not None],
                shard,
            )
            # Times beyond the signed 64-bit range only occur on reports refused as too early;
            # they are clamped so the record of the refusal fits the database.
            for o in final:
                o.client_time = min(o.client_time, MAX_STORED_TIME)
            insert_job(
                tx,
                task_id,
                job_id,
                "helper",
                batch_id,
                [o.client_time for o in final],
                JobState.FINISHED,
                now,
                request_hash=request_hash,
                response=response,
                # Counts rather than a report_aggregations row per report: one-round Prio3
                # finishes every report here, and the response answers re-sends (#15: the
                # rows were a quarter of this transaction's CPU).
                finished=sum(1 for o in final if o.error is None),
                failed=sum(1 for o in final if o.error is not None),
            )
            return "created", response

        return self.db.run("helper_init_job", body)

    def defer_helper_job(self, task_id: bytes, job_id: bytes, request: bytes, now: int) -> None:
        """Keep a DAP-19 init request to prepare when the leader polls (DAP-19 §3.1); a
        re-sent identical request (same content-derived id) changes nothing."""
        self._statement(
            "defer_helper_job",
            "INSERT INTO deferred_aggregation_jobs (task_id, job_id, request, created_at)"
            " VALUES (:t, :j, :r, :now) ON CONFLICT (task_id, job_id) DO NOTHING",
            {"t": task_id, "j": job_id, "r": request, "now": now},
        )

    def deferred_helper_job(self, task_id: bytes, job_id: bytes) -> tuple[bytes, int] | None:
        """The deferred request of a job and when it was deferred, if it is still waiting."""
        row = self.db.run(
            "deferred_helper_job",
            lambda tx: tx.query_one(
                "SELECT request, created_at FROM deferred_aggregation_jobs"
                " WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            ),
        )
        return None if row is None else (bytes(row["request"]), int(row["created_at"]))

    def forget_deferred_job(self, task_id: bytes, job_id: bytes) -> None:
        """The deferred request is prepared (its job row holds the response)."""
        self._statement(
            "forget_deferred_job",
            "DELETE FROM deferred_aggregation_jobs WHERE task_id = :t AND job_id = :j",
            {"t": task_id, "j": job_id},
        )

    def name_aggregate_share(
        self, task_id: bytes, share_id: bytes, selector: bytes, agg_param: bytes
    ) -> None:
        """Record the id a DAP-19 aggregate share answered under (DAP-19 §4.6.4: GET and
        DELETE name it); a re-sent request names the same one."""
        self._statement(
            "name_aggregate_share",
            "INSERT INTO aggregate_share_resources (task_id, share_id, batch_selector,"
            " agg_param) VALUES (:t, :s, :bs, :ap) ON CONFLICT (task_id, share_id) DO NOTHING",
            {"t": task_id, "s": share_id, "bs": selector, "ap": agg_param},
        )

    def named_aggregate_share(self, task_id: bytes, share_id: bytes) -> bytes | None:
        """The stored AggregateShare of a DAP-19 aggregate-share resource, if it exists."""
        row = self.db.run(
            "named_aggregate_share",
            lambda tx: tx.query_one(
                "SELECT j.response FROM aggregate_share_resources r JOIN aggregate_share_jobs j"
                " ON j.task_id = r.task_id AND j.batch_selector = r.batch_selector"
                " AND j.agg_param = r.agg_param WHERE r.task_id = :t AND r.share_id = :s",
                {"t": task_id, "s": share_id},
            ),
        )
        return None if row is None else bytes(row["response"])

    def forget_aggregate_share(self, task_id: bytes, share_id: bytes) -> None:
        """DELETE of a DAP-19 aggregate-share resource: the name goes, the answer and the
        batch's collected state stay (an identical request still gets the same share)."""
        self._statement(
            "forget_aggregate_share",
            "DELETE FROM aggregate_share_resources WHERE task_id = :t AND share_id = :s",
            {"t": task_id, "s": share_id},
        )

    def abandon_helper_job(self, task_id: bytes, job_id: bytes) -> bool:
        """DELETE from the leader (DAP-09 §4.5.2.2): the job is gone for further requests; a
        DAP-19 job still deferred (never prepared) is forgotten.

        Output shares already added stay: they cannot be told apart inside the batch, and the
        batch checksum then makes any disagreement visible as batchMismatch."""

        def body(tx: Tx) -> bool:
            key = {"t": task_id, "j": job_id}
            deferred = tx.execute(
                "DELETE FROM deferred_aggregation_jobs WHERE task_id = :t AND job_id = :j", key
            )
            abandoned = tx.execute(
                "UPDATE aggregation_jobs SET state = :s"
                " WHERE task_id = :t AND job_id = :j AND role = 'helper'",
                {"s": JobState.ABANDONED, **key},
            )
            return deferred + abandoned > 0

        return self.db.run("abandon_helper_job", body)

    def helper_aggregate_share(
        self,
        task_id: bytes,
        selector: bytes,
        agg_param: bytes,
        key_lo: bytes,
        key_hi: bytes,
        is_fixed_size: bool,
        report_count: int,
        checksum: bytes,
        rules: BatchRules,
        shares: ShareSum,
        build_response: Callable[[bytes], bytes],
        now: int,
        rate: RatePolicy | None = None,
    ) -> tuple[Refusal | None, bytes | None]:
        """Answer an AggregateShareReq once (DAP-09 §4.6.2, §4.6.5); later identical
        requests get the stored answer. (refusal, None) when a batch check fails, including
        `rate` validation (001 §4.8), which is a batch size check run after DAP's."""

        def body(tx: Tx) -> tuple[Refusal | None, bytes | None]:
            stored = tx.query_one(
                "SELECT report_count, checksum, response FROM aggregate_share_jobs"
                " WHERE task_id = :t AND batch_selector = :bs AND agg_param = :ap",
                {"t": task_id, "bs": selector, "ap": agg_param},
            )
            if stored is not None:
                if (
                    int(stored["report_count"]) == report_count
                    and bytes(stored["checksum"]) == checksum
                ):
                    return None, bytes(stored["response"])
                return Refusal(ProblemType.BATCH_MISMATCH), None
            if is_fixed_size and not tx.query_one(
                "SELECT 1 AS known FROM batches WHERE task_id = :t AND batch_key = :k",
                {"t": task_id, "k": key_lo},
            ):
                return Refusal(ProblemType.BATCH_INVALID), None
            previous = tx.query(
                "SELECT batch_selector, agg_param FROM aggregate_share_jobs"
                " WHERE task_id = :t AND key_lo < :hi AND key_hi > :lo",
                {"t": task_id, "lo": key_lo, "hi": key_hi},
            )
            earlier = EarlierQueries(
                other_batch=any(bytes(p["batch_selector"]) != selector for p in previous),
                agg_params=frozenset(bytes(p["agg_param"]) for p in previous),
            )
            problem = rules.query_refusal(earlier, agg_param)
            if problem is not None:
                return Refusal(problem), None
            totals = batch_totals(tx, task_id, key_lo, key_hi)
            if not rules.size_ok(totals.report_count):
                return Refusal(ProblemType.INVALID_BATCH_SIZE), None
            refused = rate_refusal(tx, task_id, key_lo, key_hi, is_fixed_size, rate)
            if refused is not None:
                return refused, None
            if totals.report_count != report_count or totals.checksum != checksum:
                return Refusal(ProblemType.BATCH_MISMATCH), None
            response = build_response(shares.merge(totals.shares))
            mark_collected(tx, task_id, key_lo, key_hi, now)
            tx.execute(
                "INSERT INTO aggregate_share_jobs (task_id, batch_selector, agg_param, key_lo,"
                " key_hi, report_count, checksum, response, created_at)"
                " VALUES (:t, :bs, :ap, :lo, :hi, :c, :cs, :resp, :now)",
                {
                    "t": task_id,
                    "bs": selector,
                    "ap": agg_param,
                    "lo": key_lo,
                    "hi": key_hi,
                    "c": report_count,
                    "cs": checksum,
                    "resp": response,
                    "now": now,
                },
            )
            return None, response

        return self.db.run("helper_aggregate_share", body)
