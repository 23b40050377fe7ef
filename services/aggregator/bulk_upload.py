"""The leader's DAP-19 upload: many reports per request, per-report errors (DAP-19 §4.4.2.2;
digest §5.4).

The body is an `UploadRequest`, the reports one after the other. A body that does not parse, or
holds more than `upload_max_reports` reports, is refused as a whole (`invalidMessage`; 413 for
the count); otherwise every report is checked as a DAP-09 upload is
(`Aggregator.validate_reports`: the helper share's size, then `report_checks` on the leader's
own share, the same checks for both versions) and every accepted one goes to the group-commit
writer, which finds replays, collected batches and spent tokens. The answer waits until every
report of the request is committed or counted, then is 200 with an empty body when all were
accepted, else 200 with `UploadErrors`: the refused reports in request order, each with its
DAP-19 ReportError (`Refusal.report_error`).

Decided here: a report id listed twice in one request is stored once and the later copy is
answered `report_replayed` (dap-ts does the same); a store failure (an exception) answers the
whole request with it, so the client retries and the reports stored meanwhile come back as
`report_replayed`, which DAP-19 allows (idempotent upload, RFC 9110 §9.2.2). A request goes
to the writer whole or not at all: when the writer's queue has no room for it, it is answered
503 with Retry-After and nothing of it is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from services.aggregator.answer import Answer
from services.aggregator.datastore import NewReport, UploadOutcome
from services.aggregator.report_checks import STORE_REFUSALS, Refusal
from services.aggregator.tokens import (
    IssuerKeysPendingError,
    IssuerUnavailableError,
    issuer_answer,
)
from services.aggregator.uploads import Outcome, Queued
from services.common.limits import HTTP_CONTENT_TOO_LARGE
from services.common.problems import HttpProblemError
from shared.codec import DecodeError
from shared.dap.ids import ReportId
from shared.dap.messages19 import (
    MEDIA_UPLOAD_ERRORS,
    ReportError,
    ReportUploadStatus,
    UploadErrors,
    UploadRequest,
)
from shared.dap.problems import ProblemType

if TYPE_CHECKING:
    from services.aggregator.service import Aggregator, Task

Done = Callable[[Answer | Exception], None]


def bulk_upload(
    agg: Aggregator, task: Task, body: bytes, done: Done, *, wait: bool, fetch: bool
) -> None:
    """Validate every report of an UploadRequest, then store them (module docstring).

    Nothing is stored before every report is validated, so an `IssuerKeysPendingError` (the
    caller validates again once the issuer answered) leaves no trace."""
    try:
        reports = UploadRequest.read_reports(body)
    except DecodeError:
        done(task.problem(ProblemType.INVALID_MESSAGE, "malformed UploadRequest"))
        return
    most = agg.settings.upload_max_reports
    if len(reports) > most:
        # The byte cap counts the task's largest report; smaller (refusable) ones could
        # otherwise make one request cost any number of checks and refusal counts.
        done(
            task.problem(
                ProblemType.INVALID_MESSAGE,
                f"an UploadRequest holds at most {most} reports",
                HTTP_CONTENT_TOO_LARGE,
            )
        )
        return
    # A report id met before in this request is a replay of that first report.
    seen: set[bytes] = set()
    first: list[bool] = []
    for report in reports:
        rid = report.leader.report_id
        first.append(rid not in seen)
        seen.add(rid)
    try:
        checked = iter(
            agg.validate_reports(
                task,
                [r for r, is_first in zip(reports, first, strict=True) if is_first],
                agg.clock.now(),
                wait=wait,
                fetch=fetch,
            )
        )
    except (IssuerKeysPendingError, IssuerUnavailableError) as exc:
        done(issuer_answer(task.b64, exc))
        return
    verdicts: list[NewReport | Refusal] = [
        next(checked) if is_first else Refusal.REPLAYED for is_first in first
    ]
    stored = [verdict for verdict in verdicts if not isinstance(verdict, Refusal)]

    def told(outcomes: Sequence[Outcome]) -> None:
        failure = next((o for o in outcomes if isinstance(o, Exception)), None)
        if failure is not None:
            done(failure)
            return
        results = iter(outcomes)
        errors = [
            verdict.report_error if isinstance(verdict, Refusal) else _store_error(next(results))
            for verdict in verdicts
        ]
        done(_answer([r.leader.report_id for r in reports], errors))

    # A refusal stands whether or not its count could be stored.
    refusals = [
        (task.id.value, verdict.reason) for verdict in verdicts if isinstance(verdict, Refusal)
    ]
    if not agg.uploads.queue(Queued(stored, refusals, told)):
        done(
            HttpProblemError(
                503,
                "the upload queue is full",
                task_id=task.b64,
                retry_after=agg.settings.upload_retry_after_s,
            )
        )


def _store_error(outcome: Outcome) -> ReportError | None:
    """The ReportError of a report the store refused, None for a stored one."""
    if outcome == UploadOutcome.STORED:
        return None
    return STORE_REFUSALS[str(outcome)].report_error


def _answer(ids: list[bytes], errors: list[ReportError | None]) -> Answer:
    """200, with UploadErrors listing the refused reports in request order if any."""
    refused = tuple(
        ReportUploadStatus(ReportId(rid), error)
        for rid, error in zip(ids, errors, strict=True)
        if error is not None
    )
    if not refused:
        return Answer(200)
    return Answer(200, UploadErrors(refused).encode(), MEDIA_UPLOAD_ERRORS)
