"""DAP problem types: DAP-09's (DAP-09 §3.2, digest §2), the three DAP-19 adds (DAP-19 §3.6,
dap-19.md digest §2) and taskprov's `invalidTask` (digest §11). A DAP-19 task answers only with
DAP-19's eleven, and `invalidTask` when taskprov is on.

Errors are RFC 9457 problem documents whose `type` is ``urn:ietf:params:ppm:dap:error:`` plus
one of the tokens below (exact casing, e.g. `missingTaskID`). "Abort with X" means HTTP 400;
like Janus 0.7, sagg answers `unauthorizedRequest` with 403 instead.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

MEDIA_PROBLEM: Final = "application/problem+json"

#: Prefix of every DAP problem type URN (DAP-09 §3.2).
PROBLEM_URN_PREFIX: Final = "urn:ietf:params:ppm:dap:error:"

#: The `detail` of sagg's DAP-09 ``reportRejected`` for a report id the leader has stored:
#: DAP-09's type does not say why a report was refused, and a client that sent the report
#: before (the answer lost, or a 5xx after the commit) learns from it that it was stored.
REPORT_REPLAYED_DETAIL: Final = "report id already seen"


__all__ = ["ProblemType"]

_HTTP_BAD_REQUEST = 400
_HTTP_FORBIDDEN = 403


class ProblemType(Enum):
    """Every problem type token DAP-09 and DAP-19 define; the value is the token."""

    INVALID_MESSAGE = "invalidMessage"
    UNRECOGNIZED_TASK = "unrecognizedTask"
    UNRECOGNIZED_AGGREGATION_JOB = "unrecognizedAggregationJob"
    OUTDATED_CONFIG = "outdatedConfig"
    REPORT_REJECTED = "reportRejected"
    REPORT_TOO_EARLY = "reportTooEarly"
    BATCH_INVALID = "batchInvalid"
    INVALID_BATCH_SIZE = "invalidBatchSize"
    BATCH_QUERIED_TOO_MANY_TIMES = "batchQueriedTooManyTimes"
    BATCH_MISMATCH = "batchMismatch"
    UNAUTHORIZED_REQUEST = "unauthorizedRequest"
    MISSING_TASK_ID = "missingTaskID"
    STEP_MISMATCH = "stepMismatch"
    BATCH_OVERLAP = "batchOverlap"
    # DAP-19 only.
    INVALID_AGGREGATION_PARAMETER = "invalidAggregationParameter"
    UNSUPPORTED_EXTENSION = "unsupportedExtension"
    INVALID_EXTENSION = "invalidExtension"
    # Taskprov (digest §11): an aggregator opted out of the task its DAP-Taskprov header names.
    INVALID_TASK = "invalidTask"

    @property
    def urn(self) -> str:
        """The problem document's `type` member."""
        return PROBLEM_URN_PREFIX + self.value

    @property
    def http_status(self) -> int:
        """The status Janus 0.7 sends with this problem."""
        return _HTTP_FORBIDDEN if self is ProblemType.UNAUTHORIZED_REQUEST else _HTTP_BAD_REQUEST

    @classmethod
    def from_urn(cls, urn: str) -> ProblemType | None:
        """The problem type a peer's `type` member names, or None if it is not a DAP one."""
        if not urn.startswith(PROBLEM_URN_PREFIX):
            return None
        try:
            return cls(urn[len(PROBLEM_URN_PREFIX) :])
        except ValueError:
            return None
