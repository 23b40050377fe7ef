"""The bulk codecs of the aggregation messages (`AggregationJobInitReq.encode_reports`,
`AggregationJobResp.encode_answers` and `decode_answers`) against the struct codecs, which the
known answers of `test_dap19_messages` pin to the digest, Janus and dap-go: the same bytes out,
the same reports read, the same inputs refused."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.ids import BatchId, ReportId
from shared.dap.messages import HpkeCiphertext

_ids = st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=12, unique=True)
_payload = st.binary(min_size=1, max_size=40)


@st.composite
def _stored(draw: st.DrawFn) -> list[m19.StoredReportShare]:
    return [
        m19.StoredReportShare(
            rid,
            draw(st.integers(0, 2**64 - 1)),
            draw(st.binary(max_size=40)),
            HpkeCiphertext(
                draw(st.integers(0, 255)),
                draw(st.binary(min_size=1, max_size=40)),
                draw(st.binary(min_size=1, max_size=60)),
            ).encode(),
            draw(_payload),
        )
        for rid in draw(_ids)
    ]


def _structs(reports: list[m19.StoredReportShare]) -> tuple[m19.VerifyInit, ...]:
    return tuple(
        m19.VerifyInit(
            m19.ReportShare(
                m19.ReportMetadata(ReportId(r.report_id), r.time),
                r.public_share,
                HpkeCiphertext.decode(r.encrypted_input_share),
            ),
            r.payload,
        )
        for r in reports
    )


_extensions = st.sampled_from(
    [
        (),
        (m19.AggregationJobExtension.leader_selected_batch_id(BatchId(bytes(range(32)))),),
        (m19.AggregationJobExtension(0x7F00, b"x"),),
    ]
)


@settings(max_examples=150, deadline=None)
@given(_stored(), _extensions, st.integers(0, 255), st.binary(max_size=8))
def test_encode_reports_is_the_struct_encoding(
    reports: list[m19.StoredReportShare],
    extensions: tuple[m19.AggregationJobExtension, ...],
    key_id: int,
    agg_param: bytes,
) -> None:
    bulk = m19.AggregationJobInitReq.encode_reports(key_id, agg_param, extensions, reports)
    request = m19.AggregationJobInitReq(key_id, agg_param, extensions, _structs(reports))
    assert bulk == request.encode()
    assert m19.AggregationJobInitReq.decode(bulk) == request


def test_encode_reports_refuses_what_encode_refuses() -> None:
    one = m19.StoredReportShare(b"\x01" * 16, 5, b"", HpkeCiphertext(1, b"e", b"p").encode(), b"m")
    bad_batch = m19.AggregationJobExtension(
        m19.AggregationJobExtensionType.LEADER_SELECTED_BATCH_ID, b"short"
    )
    unordered = (m19.AggregationJobExtension(2, b""), m19.AggregationJobExtension(1, b""))
    for extensions, reports, reason in (
        ((), [], "minimum 1"),
        ((), [one, one], "listed twice"),
        ((bad_batch,), [one], "leader_selected_batch_id"),
        (unordered, [one], "strictly increasing"),
        ((), [one._replace(payload=b"")], "wrong length"),
        ((), [one._replace(report_id=b"\x01" * 15)], "wrong length"),
        ((), [one._replace(time=2**64)], "uint64"),
    ):
        try:
            m19.AggregationJobInitReq.encode_reports(0, b"", extensions, reports)
        except ValueError as exc:
            assert reason in str(exc)
        else:
            raise AssertionError(f"encoded: {reason}")


_errors = st.sampled_from(list(m19.ReportError))


@st.composite
def _answers(draw: st.DrawFn) -> list[m19.VerifyAnswer]:
    return [
        (rid, draw(_payload), None) if draw(st.booleans()) else (rid, None, draw(_errors))
        for rid in draw(_ids)
    ]


def _resps(answers: list[m19.VerifyAnswer]) -> m19.AggregationJobResp:
    return m19.AggregationJobResp(
        tuple(
            m19.VerifyResp.continued(ReportId(rid), payload)
            if payload is not None
            else m19.VerifyResp.rejected(ReportId(rid), error or m19.ReportError.REPORT_DROPPED)
            for rid, payload, error in answers
        )
    )


def _read(resp: m19.AggregationJobResp) -> list[m19.DecodedVerifyResp]:
    return [(v.report_id.value, v.state, v.payload, v.error) for v in resp.verify_resps]


@settings(max_examples=150, deadline=None)
@given(_answers())
def test_answers_round_trip_as_the_structs_do(answers: list[m19.VerifyAnswer]) -> None:
    encoded = m19.AggregationJobResp.encode_answers(answers)
    assert encoded == _resps(answers).encode()
    assert m19.AggregationJobResp.decode_answers(encoded) == _read(_resps(answers))


def _alike(raw: bytes) -> bool:
    """Whether both decoders read `raw` into the same answers or both refuse it; True only
    for a read (so a caller can tell which)."""
    try:
        expected: list[m19.DecodedVerifyResp] | None = _read(m19.AggregationJobResp.decode(raw))
    except DecodeError:
        expected = None
    try:
        got: list[m19.DecodedVerifyResp] | None = m19.AggregationJobResp.decode_answers(raw)
    except DecodeError:
        got = None
    assert got == expected, raw.hex()
    return got is not None


@settings(max_examples=300, deadline=None)
@given(_answers(), st.data())
def test_decode_answers_refuses_what_decode_refuses(
    answers: list[m19.VerifyAnswer], data: st.DataObject
) -> None:
    """Truncations and single bytes changed decode alike or are refused alike."""
    encoded = bytearray(m19.AggregationJobResp.encode_answers(answers))
    cut = data.draw(st.integers(0, len(encoded)))
    where = data.draw(st.integers(0, len(encoded) - 1))
    changed = bytearray(encoded)
    changed[where] = data.draw(st.integers(0, 255))
    _alike(bytes(encoded[:cut]))
    _alike(bytes(changed))


def test_decode_answers_edge_cases() -> None:
    rid = bytes(range(16))
    continued = rid + b"\x00" + (3).to_bytes(4, "big") + b"abc"
    refused = (
        b"",
        rid + b"\x00" + bytes(4),  # a continue's payload is 1..2^32-1 bytes
        rid + b"\x00" + (4).to_bytes(4, "big") + b"abc",  # past the end
        rid + b"\x00\x00\x00",  # a length cut short
        rid + b"\x03",  # no such VerifyRespType
        rid + b"\x02",  # a reject without its error
        rid + b"\x02\xff",  # no such ReportError
        rid[:15],
        continued + rid[:4],  # a second item cut short
    )
    for raw in refused:
        assert not _alike(raw)
    for raw in (
        continued,
        rid + b"\x01",
        rid + b"\x02" + bytes([m19.ReportError.REPORT_DROPPED]),
        continued + rid + b"\x01",
    ):
        assert _alike(raw)


def test_encode_answers_refuses_inconsistent_answers() -> None:
    rid = b"\x02" * 16
    for answers in (
        [],
        [(rid, b"p", m19.ReportError.REPORT_DROPPED)],
        [(rid, None, None)],
        [(rid, b"", None)],
        [(rid[:15], b"p", None)],
    ):
        try:
            m19.AggregationJobResp.encode_answers(answers)
        except ValueError:
            continue
        raise AssertionError(f"encoded {answers}")
