"""Batch validation's rules on their own (DAP-09 §4.6.5): the order of the checks and the
size bounds, which the endpoint tests exercise only one refusal at a time; and the batch
checksum (§4.6.2)."""

from __future__ import annotations

import hashlib

from services.aggregator.batch_validation import DapBatchRules
from services.aggregator.batches import EMPTY_CHECKSUM, report_checksum
from services.aggregator.datastore import EarlierQueries
from shared.dap.problems import ProblemType

NONE = EarlierQueries(other_batch=False, agg_params=frozenset())


def test_overlap_is_checked_before_the_query_count_and_the_parameter() -> None:
    rules = DapBatchRules(min_batch_size=10, max_batch_size=None, max_batch_query_count=1)
    used = EarlierQueries(other_batch=True, agg_params=frozenset({b""}))
    assert rules.query_refusal(used, b"x") == ProblemType.BATCH_OVERLAP
    again = EarlierQueries(other_batch=False, agg_params=frozenset({b""}))
    # The same parameter again is the same query (a retry), not one more.
    assert rules.query_refusal(again, b"") is None
    assert rules.query_refusal(again, b"x") == ProblemType.BATCH_QUERIED_TOO_MANY_TIMES
    # Prio3 has no aggregation parameter: any but the empty one is invalid.
    assert rules.query_refusal(NONE, b"x") == ProblemType.INVALID_MESSAGE
    assert rules.query_refusal(NONE, b"") is None


def test_a_batch_may_be_queried_max_batch_query_count_times() -> None:
    rules = DapBatchRules(min_batch_size=1, max_batch_size=None, max_batch_query_count=2)
    one = EarlierQueries(other_batch=False, agg_params=frozenset({b"a"}))
    two = EarlierQueries(other_batch=False, agg_params=frozenset({b"a", b"b"}))
    assert rules.query_refusal(one, b"") is None
    assert rules.query_refusal(two, b"") == ProblemType.BATCH_QUERIED_TOO_MANY_TIMES


def test_size_bounds_are_inclusive() -> None:
    bounded = DapBatchRules(min_batch_size=10, max_batch_size=12, max_batch_query_count=1)
    assert [n for n in range(8, 15) if bounded.size_ok(n)] == [10, 11, 12]
    open_ended = DapBatchRules(min_batch_size=10, max_batch_size=None, max_batch_query_count=1)
    assert open_ended.size_ok(10**9) and not open_ended.size_ok(9)


def test_report_checksum_is_the_xor_of_the_report_ids_sha256() -> None:
    # DAP-09 §4.6.2, folded here as one big integer, independently of the vectorised code.
    ids = [bytes([i]) * 16 for i in range(37)]
    expected = 0
    for rid in ids:
        expected ^= int.from_bytes(hashlib.sha256(rid).digest(), "big")
    assert report_checksum(ids) == expected.to_bytes(32, "big")
    assert report_checksum(iter(ids)) == report_checksum(ids)
    assert report_checksum([ids[0]]) == hashlib.sha256(ids[0]).digest()
    # A report counted twice cancels out, and no report is the all-zero checksum.
    assert report_checksum([ids[0], ids[1], ids[0]]) == hashlib.sha256(ids[1]).digest()
    assert report_checksum([]) == EMPTY_CHECKSUM == bytes(32)
