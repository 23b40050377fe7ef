"""The bulk codecs of the upload and aggregation messages (`UploadRequest.read_reports`,
`AggregationJobInitReq.encode_reports`, `AggregationJobResp.encode_answers` and
`decode_answers`) against the struct codecs, which the known answers of `test_dap19_messages`
pin to the digest, Janus and dap-go: the same bytes out, the same reports read, the same inputs
refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.ids import BatchId, ReportId
from shared.dap.messages import Extension, HpkeCiphertext, SealedInit, UploadedReport

_T = TypeVar("_T")


def _reading(read: Callable[[bytes], _T], raw: bytes, *refusals: type[Exception]) -> _T | None:
    """What `read` makes of `raw`; None if it refuses it (`DecodeError` or `refusals`)."""
    refused: tuple[type[Exception], ...] = (DecodeError, *refusals)
    try:
        return read(raw)
    except refused:
        return None


def _read_alike(
    raw: bytes,
    by_structs: Callable[[bytes], _T],
    bulk: Callable[[bytes], _T],
    fast: Callable[[bytes], _T] | None = None,
) -> bool:
    """Whether the bulk reader reads `raw` as the struct decoder does or both refuse it, and
    its fast path (which may leave a message to the struct decoder) never reads it otherwise;
    True for a read, so a caller can tell which."""
    expected = _reading(by_structs, raw)
    assert _reading(bulk, raw) == expected, raw.hex()
    if fast is not None:
        got = _reading(fast, raw, m19._IrregularError)
        assert got is None or got == expected, raw.hex()
    return expected is not None


def _cut_and_changed(encoded: bytes, data: st.DataObject) -> tuple[bytes, bytes]:
    """`encoded` cut short somewhere, and with one byte changed somewhere."""
    changed = bytearray(encoded)
    changed[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    return encoded[: data.draw(st.integers(0, len(encoded)))], bytes(changed)


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


def _answers_alike(raw: bytes) -> bool:
    return _read_alike(
        raw,
        lambda b: _read(m19.AggregationJobResp.decode(b)),
        m19.AggregationJobResp.decode_answers,
    )


@settings(max_examples=300, deadline=None)
@given(_answers(), st.data())
def test_decode_answers_refuses_what_decode_refuses(
    answers: list[m19.VerifyAnswer], data: st.DataObject
) -> None:
    """Truncations and single bytes changed decode alike or are refused alike."""
    for raw in _cut_and_changed(m19.AggregationJobResp.encode_answers(answers), data):
        _answers_alike(raw)


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
        assert not _answers_alike(raw)
    for raw in (
        continued,
        rid + b"\x01",
        rid + b"\x02" + bytes([m19.ReportError.REPORT_DROPPED]),
        continued + rid + b"\x01",
    ):
        assert _answers_alike(raw)


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


_ciphertexts = st.builds(
    HpkeCiphertext,
    st.integers(0, 255),
    st.binary(min_size=1, max_size=40),
    st.binary(min_size=1, max_size=60),
)


@st.composite
def _upload(draw: st.DrawFn, extensions: bool) -> m19.UploadRequest:
    public = (
        st.lists(st.builds(Extension, st.integers(0, 2**16 - 1), st.binary(max_size=6)), max_size=3)
        if extensions
        else st.just([])
    )
    return m19.UploadRequest(
        tuple(
            m19.Report(
                m19.ReportMetadata(
                    ReportId(rid), draw(st.integers(0, 2**64 - 1)), tuple(draw(public))
                ),
                draw(st.binary(max_size=40)),
                draw(_ciphertexts),
                draw(_ciphertexts),
            )
            for rid in draw(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=8))
        )
    )


def _uploaded(request: m19.UploadRequest) -> list[UploadedReport]:
    return [UploadedReport.of(r) for r in request.reports]


@settings(max_examples=150, deadline=None)
@given(st.booleans().flatmap(_upload))
def test_read_reports_reads_what_decode_reads(request: m19.UploadRequest) -> None:
    encoded = request.encode()
    assert m19.UploadRequest.read_reports(encoded) == _uploaded(request)
    first = request.reports[0]
    share = m19.UploadRequest.read_reports(encoded)[0]
    assert share.leader.metadata == first.report_metadata.encode()
    assert share.helper_encrypted_share == first.helper_encrypted_input_share.encode()


@settings(max_examples=100, deadline=None)
@given(_upload(extensions=False))
def test_reports_without_public_extensions_take_the_fast_reader(
    request: m19.UploadRequest,
) -> None:
    # `read_reports` falls back on the struct decoder, so its answer alone cannot tell whether
    # the fast reader works: it is asked directly.
    assert m19._read_plain_reports(request.encode()) == _uploaded(request)


def _reports_alike(raw: bytes) -> bool:
    return _read_alike(
        raw,
        lambda b: _uploaded(m19.UploadRequest.decode(b)),
        m19.UploadRequest.read_reports,
        m19._read_plain_reports,
    )


@settings(max_examples=300, deadline=None)
@given(st.booleans().flatmap(_upload), st.data())
def test_read_reports_refuses_what_decode_refuses(
    request: m19.UploadRequest, data: st.DataObject
) -> None:
    """Truncations and single bytes changed read alike or are refused alike."""
    for raw in _cut_and_changed(request.encode(), data):
        _reports_alike(raw)


def test_read_reports_edge_cases() -> None:
    head = bytes(range(16)) + (7).to_bytes(8, "big") + bytes(2) + (1).to_bytes(4, "big") + b"P"

    def ciphertext(enc: bytes, payload: bytes) -> bytes:
        return (
            b"\x01" + len(enc).to_bytes(2, "big") + enc + len(payload).to_bytes(4, "big") + payload
        )

    plain = head + ciphertext(b"e", b"leader") + ciphertext(b"e", b"helper")
    refused = (
        b"",  # an UploadRequest holds at least one report
        head + ciphertext(b"", b"leader") + ciphertext(b"e", b"helper"),  # enc<1..2^16-1>
        head + ciphertext(b"e", b"") + ciphertext(b"e", b"helper"),  # payload<1..2^32-1>
        head + ciphertext(b"e", b"leader") + ciphertext(b"", b"helper"),
        head + ciphertext(b"e", b"leader") + ciphertext(b"e", b""),
        plain[:-1],
        plain + plain[:30],  # a second report cut short
        plain[:24] + b"\x00\x09" + plain[26:],  # public extensions past the end
    )
    for raw in refused:
        assert not _reports_alike(raw)
    with_extension = plain[:24] + b"\x00\x04\x00\x05\x00\x00" + plain[26:]
    for raw in (plain, plain + plain, with_extension):
        assert _reports_alike(raw)
    (report,) = m19.UploadRequest.read_reports(with_extension)
    assert report.leader.public_extensions == (Extension(5, b""),)
    assert report.leader.payload == b"leader"


def _inits(request: m19.AggregationJobInitReq) -> m19.JobInitParts:
    return m19.JobInitParts(
        request.verification_key_id,
        request.agg_param,
        request.extensions,
        [SealedInit.of(v) for v in request.verify_inits],
    )


@st.composite
def _job_init(draw: st.DrawFn) -> m19.AggregationJobInitReq:
    reports = draw(_stored())
    extensions = draw(_extensions)
    key_id, agg_param = draw(st.integers(0, 255)), draw(st.binary(max_size=8))
    return m19.AggregationJobInitReq(key_id, agg_param, extensions, _structs(reports))


@settings(max_examples=150, deadline=None)
@given(_job_init())
def test_read_inits_reads_what_decode_reads(request: m19.AggregationJobInitReq) -> None:
    encoded = request.encode()
    assert m19.AggregationJobInitReq.read_inits(encoded) == _inits(request)
    # The fast reader itself (`read_inits` falls back on `decode`).
    assert m19._read_job_init(encoded) == _inits(request)
    assert m19.AggregationJobInitReq.read_inits(encoded).batch_id == request.batch_id


def _inits_alike(raw: bytes) -> bool:
    return _read_alike(
        raw,
        lambda b: _inits(m19.AggregationJobInitReq.decode(b)),
        m19.AggregationJobInitReq.read_inits,
        m19._read_job_init,
    )


@settings(max_examples=300, deadline=None)
@given(_job_init(), st.data())
def test_read_inits_refuses_what_decode_refuses(
    request: m19.AggregationJobInitReq, data: st.DataObject
) -> None:
    """Truncations and single bytes changed read alike or are refused alike."""
    for raw in _cut_and_changed(request.encode(), data):
        _inits_alike(raw)


def test_read_inits_edge_cases() -> None:
    one = m19.StoredReportShare(b"\x01" * 16, 5, b"", HpkeCiphertext(1, b"e", b"p").encode(), b"m")
    two = one._replace(report_id=b"\x02" * 16)
    body = m19.AggregationJobInitReq.encode_reports(0, b"", (), [one, two])
    assert body.endswith(b"\x00\x00\x00\x01m")  # the last VerifyInit's payload
    assert _inits_alike(body)
    for raw in (
        body[:7],  # the fields before the VerifyInits, and none of them
        body[:7] + body[7:].replace(b"\x02" * 16, b"\x01" * 16),  # a report listed twice
        body[:-1],
        body + b"\x00",
        body[:-5] + bytes(4),  # an empty payload: payload<1..2^32-1>
    ):
        assert not _inits_alike(raw), raw.hex()
