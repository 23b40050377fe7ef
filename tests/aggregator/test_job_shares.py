"""A leader job's reports and their shares as stored values (`datastore.job_shares`,
`aggregation_jobs.encode_members`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.aggregator.datastore import NewReport, job_shares
from services.aggregator.datastore.aggregation_jobs import decode_members, encode_members

TASK = b"\x01" * 32


def _report(public: bytes, leader: bytes, helper: bytes) -> NewReport:
    return NewReport(TASK, b"\x00" * 16, 0, public, leader, helper, None, 0)


def test_the_value_is_each_share_length_prefixed_in_job_order() -> None:
    """Written by hand from the module's documented layout (big-endian u32 lengths)."""
    value = (
        b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x02ab"
        + b"\x00\x00\x00\x01c"
        + b"\x00\x00\x00\x01d"
        + b"\x00\x00\x00\x00"
        + b"\x00\x00\x01\x00"
        + b"e" * 256
    )
    reports = [_report(b"", b"ab", b"c"), _report(b"d", b"", b"e" * 256)]
    assert job_shares.encode(reports) == value
    assert job_shares.decode(value, 2) == [(b"", b"ab", b"c"), (b"d", b"", b"e" * 256)]
    assert job_shares.decode(b"", 0) == []


shares = st.tuples(st.binary(max_size=40), st.binary(max_size=40), st.binary(max_size=40))


@settings(max_examples=60, deadline=None)
@given(st.lists(shares, max_size=8))
def test_decode_gives_back_what_encode_stored(reports: list[tuple[bytes, bytes, bytes]]) -> None:
    value = job_shares.encode([_report(*r) for r in reports])
    assert job_shares.decode(value, len(reports)) == reports


def test_a_value_that_holds_anything_else_is_refused() -> None:
    value = job_shares.encode([_report(b"p", b"leader", b"helper"), _report(b"", b"x", b"y")])
    for cut in range(len(value)):
        with pytest.raises(ValueError, match="end inside"):
            job_shares.decode(value[:cut], 2)
    with pytest.raises(ValueError, match="beyond"):
        job_shares.decode(value + b"\x00", 2)
    with pytest.raises(ValueError, match="beyond"):
        job_shares.decode(value, 1)
    with pytest.raises(ValueError, match="end inside"):
        job_shares.decode(value, 3)


def test_members_are_each_report_id_and_its_time_in_job_order() -> None:
    value = b"a" * 16 + b"\x00" * 7 + b"\x05" + b"b" * 16 + b"\x01" + b"\x00" * 7
    assert encode_members([(b"a" * 16, 5), (b"b" * 16, 1 << 56)]) == value
    assert decode_members(value) == [(b"a" * 16, 5), (b"b" * 16, 1 << 56)]
    assert decode_members(b"") == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 2**64 - 1))))
def test_decode_members_gives_back_what_encode_stored(members: list[tuple[bytes, int]]) -> None:
    assert decode_members(encode_members(members)) == members


def test_members_of_another_shape_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        encode_members([(b"short", 1)])
    value = encode_members([(b"a" * 16, 1)])
    for cut in range(1, len(value)):
        with pytest.raises(ValueError, match="multiple"):
            decode_members(value[:cut])
