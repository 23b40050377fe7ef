"""Property-based fuzzing of every decoder in `shared/` (issue #8, item 2).

The contract checked for each decoder: hostile bytes (random, or a valid encoding mutated by
bit flips, truncation, insertion and deletion) give either the decoder's own typed error, or a
value that re-encodes to exactly the input (the codec is strict, so there is one encoding per
value). Nothing else may escape: no IndexError, struct.error, UnicodeDecodeError, TypeError...

Hypothesis runs derandomized with bounded example counts, so CI sees the same inputs each run.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shared import hpke
from shared.b64url import b64url_decode as task_b64url_decode
from shared.codec import DecodeError, TlsStruct
from shared.dap import messages as m
from shared.dap import messages19 as m19
from shared.dap.extensions import RecipeBinding, decode_extensions
from shared.dap.ids import AggregationJobId, BatchId, CollectionJobId, ReportId, TaskId
from shared.dap.problems import ProblemType
from shared.dap.task import TaskDefinition
from shared.privacypass.directory import DirectoryError, IssuerDirectory
from shared.privacypass.headers import (
    HeaderError,
    b64url_decode,
    parse_authorization,
    parse_www_authenticate,
)
from shared.privacypass.keys import InvalidKeyError, decode_spki
from shared.privacypass.messages import Token, TokenChallenge, TokenRequest, TokenResponse
from shared.privacypass.verify import InvalidTokenError, verify_authorization
from shared.recipe.canonical import CanonicalizationError, canonical_json
from shared.recipe.log import (
    LogVerificationError,
    SignedTreeHead,
    verify_consistency,
    verify_inclusion,
    verify_tree_head,
)
from shared.recipe.signing import RecipeSigner, RecipeVerificationError, verify_signed_recipe
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import PrepStatus, prio3_histogram, prio3_sum
from tests.recipe.helpers import example_recipe

FUZZ = settings(
    max_examples=80,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(FUZZ, max_examples=40)

# --- seeds: one or more valid encodings of each struct, to mutate ----------------------------

RID = ReportId(bytes(range(16)))
TID = TaskId(bytes(range(32)))
BID = BatchId(b"\xbb" * 32)
IVL = m.Interval(1_700_000_000, 3600)
CT = m.HpkeCiphertext(7, b"\x01" * 32, b"\x02" * 40)
META = m.ReportMetadata(RID, 1_700_000_000)
SHARE = m.ReportShare(META, b"\x03" * 32, CT)
TI_PBS = m.PartialBatchSelector.time_interval()
FS_PBS = m.PartialBatchSelector.fixed_size(BID)
TI_BS = m.BatchSelector.time_interval(IVL)
FS_BS = m.BatchSelector.fixed_size(BID)
HPKE_CONFIG = m.HpkeConfig(1, 0x20, 1, 1, b"\x09" * 32)
TOKEN = Token(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, b"\x04" * 256)
CHALLENGE = TokenChallenge(2, b"issuer.example", b"\x05" * 32, b"origin.example")

# DAP-19 (shared.dap.messages19): the structures whose wire form differs from DAP-09's.
TASK_CONFIG_19 = m19.TaskConfiguration(
    b"foobar",
    m.Url(b"https://leader.example/"),
    m.Url(b"https://helper.example/"),
    3600,
    100,
    m19.BatchMode.TIME_INTERVAL,
    b"",
    m19.VdafType.PRIO3_HISTOGRAM,
    m19.VdafConfig.of(m19.VdafType.PRIO3_HISTOGRAM, length=4, chunk_length=2).configuration(),
    (m19.TaskExtension.task_interval(m.Interval(472_222, 24)),),
)
META_19 = m19.ReportMetadata(RID, 472_222, (m.Extension(0xFF00, b"pub"),))
SHARE_19 = m19.ReportShare(META_19, b"\x03" * 32, CT)
REPORT_19 = m19.Report(META_19, b"\x13" * 32, CT, m.HpkeCiphertext(8, b"\x14" * 32, b"\x15" * 9))
INIT_19 = m19.VerifyInit(SHARE_19, m.PingPongMessage.initialize(b"\x01" * 32).encode())
CJR_19 = m19.CollectionJobReq(
    m19.Query.time_interval(IVL), b"", (m19.CollectionJobExtension(0xFF00, b"x"),)
)
SEEDS_19: dict[type[TlsStruct], list[TlsStruct]] = {
    m19.TaskConfiguration: [
        TASK_CONFIG_19,
        m19.TaskConfiguration(
            b"", m.Url(b"L"), m.Url(b"H"), 1, 0, 0xFE, b"cfg", 0xFFFF1003, b"\x00" * 17
        ),
    ],
    m19.ReportMetadata: [META_19],
    m19.Report: [REPORT_19],
    m19.PlaintextInputShare: [m19.PlaintextInputShare((m.Extension(1, b"p"),), b"\x10" * 20)],
    m19.InputShareAad: [m19.InputShareAad(TID, TASK_CONFIG_19, META_19, b"")],
    m19.UploadRequest: [m19.UploadRequest((REPORT_19, REPORT_19))],
    m19.UploadErrors: [
        m19.UploadErrors(
            (
                m19.ReportUploadStatus(RID, m19.ReportError.UNSUPPORTED_EXTENSION),
                m19.ReportUploadStatus(RID, m19.ReportError.BATCH_COLLECTED),
            )
        )
    ],
    m19.ReportShare: [SHARE_19],
    m19.VerifyInit: [INIT_19],
    m19.AggregationJobInitReq: [
        m19.AggregationJobInitReq(0, b"", (), (INIT_19,)),
        m19.AggregationJobInitReq(
            3, b"ap", (m19.AggregationJobExtension.leader_selected_batch_id(BID),), (INIT_19,)
        ),
    ],
    m19.AggregationJobResp: [
        m19.AggregationJobResp(
            (
                m19.VerifyResp.continued(RID, m.PingPongMessage.finish(b"").encode()),
                m19.VerifyResp.finished(RID),
                m19.VerifyResp.rejected(RID, m19.ReportError.UNKNOWN_VERIFICATION_KEY_ID),
            )
        )
    ],
    m19.AggregationJobContinueReq: [
        m19.AggregationJobContinueReq(1, (m19.VerifyContinue(RID, b"\x02\x00\x00\x00\x00"),))
    ],
    m19.Query: [m19.Query.time_interval(IVL), m19.Query.leader_selected()],
    m19.BatchSelector: [
        m19.BatchSelector.time_interval(IVL),
        m19.BatchSelector.leader_selected(BID),
    ],
    m19.CollectionJobReq: [CJR_19],
    m19.CollectionJobResp: [m19.CollectionJobResp(12, IVL, CT, CT)],
    m19.AggregateShareReq: [
        m19.AggregateShareReq(CJR_19, m19.BatchSelector.time_interval(IVL), 10, b"\x42" * 32)
    ],
    m19.AggregateShareAad: [m19.AggregateShareAad(TID, TASK_CONFIG_19, CJR_19)],
}

SEEDS: dict[type[TlsStruct], list[TlsStruct]] = {
    **SEEDS_19,
    m.Interval: [IVL],
    m.Url: [m.Url(b"https://leader.example/")],
    m.HpkeCiphertext: [CT],
    m.HpkeConfig: [HPKE_CONFIG],
    m.HpkeConfigList: [
        m.HpkeConfigList((HPKE_CONFIG,)),
        m.HpkeConfigList((HPKE_CONFIG, m.HpkeConfig(2, 0x20, 1, 1, b"\x08" * 32))),
    ],
    m.ReportMetadata: [META],
    m.Extension: [m.Extension(0xFF00, b"abc")],
    m.PlaintextInputShare: [
        m.PlaintextInputShare((), b"\x10" * 20),
        m.PlaintextInputShare((m.Extension(0xFF00, b"x"), m.Extension(1, b"")), b"\x11"),
    ],
    m.InputShareAad: [m.InputShareAad(TID, META, b"\x12" * 32)],
    m.Report: [m.Report(META, b"\x13" * 32, CT, m.HpkeCiphertext(8, b"\x14" * 32, b"\x15" * 9))],
    m.PartialBatchSelector: [TI_PBS, FS_PBS],
    m.BatchSelector: [TI_BS, FS_BS],
    m.FixedSizeQuery: [m.FixedSizeQuery.by_batch_id(BID), m.FixedSizeQuery.current_batch()],
    m.Query: [
        m.Query.time_interval(IVL),
        m.Query.fixed_size(m.FixedSizeQuery.by_batch_id(BID)),
        m.Query.fixed_size(m.FixedSizeQuery.current_batch()),
    ],
    m.ReportShare: [SHARE],
    m.PrepareInit: [m.PrepareInit(SHARE, b"\x00\x00\x00\x00\x02ab")],
    m.AggregationJobInitReq: [
        m.AggregationJobInitReq(b"", TI_PBS, (m.PrepareInit(SHARE, b"\x00"),)),
        m.AggregationJobInitReq(
            b"p", FS_PBS, (m.PrepareInit(SHARE, b""), m.PrepareInit(SHARE, b"\x01"))
        ),
    ],
    m.PrepareResp: [
        m.PrepareResp.continued(RID, b"\x02\x00\x00\x00\x00"),
        m.PrepareResp.finished(RID),
        m.PrepareResp.rejected(RID, m.PrepareError.HPKE_DECRYPT_ERROR),
    ],
    m.AggregationJobResp: [
        m.AggregationJobResp(
            (
                m.PrepareResp.continued(RID, b"\x02"),
                m.PrepareResp.rejected(RID, m.PrepareError.REPORT_REPLAYED),
            )
        )
    ],
    m.PrepareContinue: [m.PrepareContinue(RID, b"\x01\x02")],
    m.AggregationJobContinueReq: [
        m.AggregationJobContinueReq(1, (m.PrepareContinue(RID, b"\x01"),))
    ],
    m.CollectionReq: [
        m.CollectionReq(m.Query.time_interval(IVL), b""),
        m.CollectionReq(m.Query.fixed_size(m.FixedSizeQuery.current_batch()), b"ap"),
    ],
    m.Collection: [m.Collection(TI_PBS, 12, IVL, CT, CT), m.Collection(FS_PBS, 0, IVL, CT, CT)],
    m.AggregateShareReq: [
        m.AggregateShareReq(TI_BS, b"", 10, b"\x42" * 32),
        m.AggregateShareReq(FS_BS, b"x", 0, bytes(32)),
    ],
    m.AggregateShare: [m.AggregateShare(CT)],
    m.AggregateShareAad: [m.AggregateShareAad(TID, b"", TI_BS)],
    m.PingPongMessage: [
        m.PingPongMessage.initialize(b"\x01" * 32),
        m.PingPongMessage.continued(b"\x02", b"\x03"),
        m.PingPongMessage.finish(b""),
    ],
    TaskId: [TID],
    ReportId: [RID],
    BatchId: [BID],
    AggregationJobId: [AggregationJobId(b"\x01" * 16)],
    CollectionJobId: [CollectionJobId(b"\x02" * 16)],
    RecipeBinding: [RecipeBinding(b"\x07" * 32, 5000)],
    Token: [TOKEN],
    TokenChallenge: [CHALLENGE, TokenChallenge(2, b"i", b"", b"")],
    TokenRequest: [TokenRequest(0x2A, b"\x06" * 256)],
    TokenResponse: [TokenResponse(b"\x07" * 256)],
}


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (op, position, byte) edits: 0 flip a bit, 1 truncate, 2 insert, 3 delete, 4 set."""
    out = bytearray(data)
    for op, pos, value in edits:
        i = pos % (len(out) + 1)
        if op == 0 and out:
            out[i % len(out)] ^= 1 << (value % 8)
        elif op == 1:
            del out[i:]
        elif op == 2:
            out[i:i] = bytes([value])
        elif op == 3 and out:
            del out[i % len(out)]
        elif op == 4 and out:
            out[i % len(out)] = value
    return bytes(out)


_EDITS = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 2**16), st.integers(0, 255)), max_size=4
)


def hostile(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a mutated valid encoding (which reaches past the first length check)."""
    mutated = st.builds(mutate, st.sampled_from(seeds), _EDITS)
    return st.one_of(mutated, st.binary(max_size=200))


@pytest.mark.parametrize("cls", list(SEEDS), ids=lambda c: f"{c.__module__}.{c.__name__}")
@FUZZ
@given(data=st.data())
def test_tls_struct_decode_or_decodeerror(cls: type[TlsStruct], data: st.DataObject) -> None:
    seeds = [s.encode() for s in SEEDS[cls]]
    for seed in seeds:  # the seeds themselves round-trip
        assert cls.decode(seed).encode() == seed
    raw = data.draw(hostile(seeds))
    try:
        value = cls.decode(raw)
    except DecodeError:
        return
    assert value.encode() == raw, "a decoded value must re-encode to its input"
    assert isinstance(value, cls)


@FUZZ
@given(data=st.data())
def test_decode_accepts_every_buffer_type(data: st.DataObject) -> None:
    raw = data.draw(hostile([s.encode() for s in SEEDS[m.Report]]))
    outcomes: list[object] = []
    for buf in (raw, bytearray(raw), memoryview(raw)):
        try:
            outcomes.append(m.Report.decode(buf))
        except DecodeError as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1] == outcomes[2]


# --- ids from URLs and JSON --------------------------------------------------------------------

B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/ \n."


@pytest.mark.parametrize("cls", [TaskId, ReportId, BatchId, AggregationJobId, CollectionJobId])
@FUZZ
@given(text=st.text(alphabet=B64_ALPHABET, max_size=48) | st.text(max_size=48))
def test_id_from_b64url(cls: type[TaskId], text: str) -> None:
    try:
        value = cls.from_b64url(text)
    except DecodeError:
        return
    assert value.to_b64url() == text  # only the canonical spelling is accepted


@FUZZ
@given(text=st.text(alphabet=B64_ALPHABET, max_size=48) | st.text(max_size=24))
def test_b64url_helpers(text: str) -> None:
    try:
        raw = b64url_decode(text)
    except HeaderError:
        pass
    else:
        assert isinstance(raw, bytes)
    with contextlib.suppress(ValueError):
        task_b64url_decode(text, "x")


# --- ping-pong and VDAF entry points -----------------------------------------------------------

SUM = prio3_sum(4)
HIST = prio3_histogram(4, 2)


@FEW
@given(data=st.data())
def test_ping_pong_helper_init_hostile_inbound(data: st.DataObject) -> None:
    """Any leader message is either accepted (it is the honest one) or rejects this report."""
    nonce = bytes(16)
    public, shares = SUM.shard(3, nonce, bytes(range(SUM.RAND_SIZE)))
    _, honest = ping_pong.leader_init(SUM, bytes(16), [nonce], [public], [shares[0]])
    assert honest[0] is not None
    inbound = data.draw(hostile([honest[0]]))
    batch, outbound = ping_pong.helper_init(
        SUM, bytes(16), [nonce], [public], [shares[1]], [inbound]
    )
    if inbound == honest[0]:
        assert batch.ok[0] and outbound[0] is not None
    else:  # the codec is strict: other bytes are another message, or none
        assert not batch.ok[0] and outbound[0] is None
        assert batch.status[0] in (PrepStatus.DECODE_ERROR, PrepStatus.PREP_ERROR)


@FEW
@given(data=st.data())
def test_ping_pong_leader_continued_hostile(data: st.DataObject) -> None:
    nonce = bytes(16)
    public, shares = SUM.shard(1, nonce, bytes(range(SUM.RAND_SIZE)))
    batch, _ = ping_pong.leader_init(SUM, bytes(16), [nonce], [public], [shares[0]])
    finish = m.PingPongMessage.finish(b"\x00" * 16).encode()
    inbound = data.draw(st.none() | hostile([finish]))
    finished = ping_pong.leader_continued(SUM, batch, [inbound])
    assert finished.shape == (1,)


@FEW
@given(data=st.data())
def test_prio3_hostile_shares_never_raise(data: st.DataObject) -> None:
    nonce = bytes(16)
    public, shares = HIST.shard(2, nonce, bytes(range(HIST.RAND_SIZE)))
    agg_id = data.draw(st.sampled_from([0, 1]))
    bad_public = data.draw(hostile([public]))
    bad_share = data.draw(hostile([shares[agg_id]]))
    batch = HIST.prep_init_batch(bytes(16), agg_id, [nonce], [bad_public], [bad_share])
    if bad_public == public and bad_share == shares[agg_id]:
        assert batch.ok[0]


@FEW
@given(data=st.data())
def test_prio3_decode_agg_share(data: st.DataObject) -> None:
    good = HIST.encode_agg_share(HIST.aggregate(HIST.field.zeros((1, 4))))
    raw = data.draw(hostile([good]))
    try:
        value = HIST.decode_agg_share(raw)
    except DecodeError:
        return
    assert HIST.encode_agg_share(value) == raw


# --- HPKE --------------------------------------------------------------------------------------

KEYPAIR = hpke.derive_keypair(1, bytes(32))


@FEW
@given(data=st.data())
def test_hpke_open_hostile(data: st.DataObject) -> None:
    enc, ct = hpke.seal(KEYPAIR.public_key, b"info", b"aad", b"plaintext")
    bad_enc = data.draw(hostile([enc]))
    bad_ct = data.draw(hostile([ct]))
    try:
        pt = hpke.open(KEYPAIR, bad_enc, b"info", b"aad", bad_ct)
    except hpke.HpkeError:
        assert (bad_enc, bad_ct) != (enc, ct)
        return
    assert pt == b"plaintext"


# --- extensions --------------------------------------------------------------------------------

_EXT_TYPES = st.sampled_from([0, 0xFF00, 0xFF01, 0xFF02, 0xFFFF, 1])


@FUZZ
@given(
    exts=st.lists(
        st.builds(
            m.Extension,
            _EXT_TYPES,
            hostile([TOKEN.encode(), RecipeBinding(b"\x01" * 32, 7).encode()]),
        ),
        max_size=4,
    )
)
def test_decode_extensions_never_raises(exts: list[m.Extension]) -> None:
    parsed = decode_extensions(exts)
    types = [e.extension_type for e in exts]
    assert parsed.ok == (not parsed.problems)
    if len(set(types)) != len(types):
        assert not parsed.ok and parsed.duplicates
    if parsed.binding is not None:
        assert parsed.binding.encode() in [e.extension_data for e in exts]
    if parsed.token is not None:
        assert parsed.token.encode() in [e.extension_data for e in exts]


# --- Privacy Pass ------------------------------------------------------------------------------

HEADER_ALPHABET = [*list('PrivateTokn chalegk=y-"\\,AQ_=\t/+max'), "max-age", "token=", ","]


@FUZZ
@given(text=st.lists(st.sampled_from(HEADER_ALPHABET), max_size=30).map("".join) | st.text())
def test_privacypass_headers(text: str) -> None:
    try:
        challenges = parse_www_authenticate(text)
    except HeaderError:
        pass
    else:
        assert isinstance(challenges, list)
    try:
        token = parse_authorization(text)
    except HeaderError:
        pass
    else:
        assert isinstance(token, bytes)


@FEW
@given(text=st.text(max_size=60))
def test_verify_authorization_hostile(text: str) -> None:
    with pytest.raises(InvalidTokenError):
        verify_authorization(f"PrivateToken token={text}", [], b"\x02" * 32)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["issuer-request-uri", "token-keys", "token-type", "token-key", "not-before", "x"]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


@FUZZ
@given(raw=st.binary(max_size=120) | JSON.map(lambda v: json.dumps(v).encode()))
def test_issuer_directory_decode(raw: bytes) -> None:
    with contextlib.suppress(DirectoryError):
        IssuerDirectory.decode(raw)


@FEW
@given(raw=st.binary(max_size=300))
def test_decode_spki(raw: bytes) -> None:
    with contextlib.suppress(InvalidKeyError):
        decode_spki(raw)


# --- recipes and the log -----------------------------------------------------------------------

SIGNER = RecipeSigner.from_seed(bytes(range(32)))


def _signed_example() -> bytes:
    return json.dumps(SIGNER.sign_recipe(example_recipe()).to_json_value()).encode()


@pytest.fixture(scope="module")
def signed_recipe() -> bytes:
    return _signed_example()


@FEW
@given(data=st.data())
def test_verify_signed_recipe_hostile(signed_recipe: bytes, data: st.DataObject) -> None:
    verify_signed_recipe(signed_recipe, SIGNER.public_key)  # the seed verifies
    raw = data.draw(hostile([signed_recipe]))
    try:
        _recipe, canonical = verify_signed_recipe(raw, SIGNER.public_key)
    except RecipeVerificationError:
        return
    # Only a document whose recipe member is the signed one verifies.
    assert json.loads(raw)["recipe"] == json.loads(signed_recipe)["recipe"]
    assert canonical == canonical_json(json.loads(signed_recipe)["recipe"])


@FUZZ
@given(doc=JSON)
def test_verify_signed_recipe_json_values(doc: Any) -> None:
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe(doc if isinstance(doc, dict) else json.dumps(doc), SIGNER.public_key)


@FUZZ
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=12,
    )
)
def test_canonical_json_is_a_fixpoint(value: Any) -> None:
    """Canonical bytes parse back to the same value and canonicalize to themselves."""
    try:
        out = canonical_json(value)
    except CanonicalizationError:
        return
    parsed = json.loads(out)
    assert canonical_json(parsed) == out
    assert _as_doubles(parsed) == _as_doubles(value)


def _as_doubles(value: Any) -> Any:
    """The value as an I-JSON reader sees it: every number an IEEE-754 double."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [_as_doubles(v) for v in value]
    return {k: _as_doubles(v) for k, v in value.items()}


_HASH = st.binary(min_size=32, max_size=32) | st.binary(max_size=40)


@FUZZ
@given(
    leaf=_HASH,
    index=st.integers(-2, 40),
    size=st.integers(-2, 40),
    proof=st.lists(_HASH, max_size=7),
    root=_HASH,
)
def test_verify_inclusion_hostile(
    leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes
) -> None:
    with pytest.raises(LogVerificationError):
        verify_inclusion(leaf, index, size, proof, root)


@FUZZ
@given(
    first=st.integers(-2, 40),
    second=st.integers(-2, 40),
    a=_HASH,
    b=_HASH,
    proof=st.lists(_HASH, max_size=7),
)
def test_verify_consistency_hostile(
    first: int, second: int, a: bytes, b: bytes, proof: list[bytes]
) -> None:
    try:
        verify_consistency(first, second, a, b, proof)
    except LogVerificationError:
        return
    # Random hashes can only be "consistent" in the trivial cases.
    assert (first == second and a == b and not proof) or (first == 0 and not proof)


@FUZZ
@given(
    doc=JSON
    | st.fixed_dictionaries(
        {},
        optional={
            "tree_size": st.integers(-1, 2**64) | st.text(max_size=3),
            "timestamp": st.integers(-1, 2**64),
            "root_hash": st.text(alphabet=B64_ALPHABET, max_size=50),
            "key_id": st.text(max_size=10),
            "signature": st.text(alphabet=B64_ALPHABET, max_size=90),
        },
    )
)
def test_signed_tree_head_hostile(doc: Any) -> None:
    try:
        sth = SignedTreeHead.model_validate(doc)
    except ValidationError:
        return
    with pytest.raises(LogVerificationError):
        verify_tree_head(sth, SIGNER.public_key)


# --- task definitions and problem types ---------------------------------------------------------


@FEW
@given(doc=JSON)
def test_task_definition_hostile(doc: Any) -> None:
    with pytest.raises(ValidationError):
        TaskDefinition.model_validate(doc)


@FEW
@given(text=st.text(max_size=60) | st.sampled_from([p.urn for p in ProblemType]))
def test_problem_type_from_urn(text: str) -> None:
    kind = ProblemType.from_urn(text)
    assert kind is None or kind.urn == text


# --- nesting deeper than the stack (found by tests/fuzz: RecursionError escaped) ----------------


def _nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [10, 990, 5_000, 100_000])
def test_deeply_nested_json_gives_the_typed_error(depth: int) -> None:
    text = "[" * depth + "]" * depth
    with pytest.raises(DirectoryError):
        IssuerDirectory.decode(text)
    with pytest.raises(DirectoryError):
        IssuerDirectory.decode(('{"issuer-request-uri": "/", "token-keys": ' + text + "}").encode())
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe(text, SIGNER.public_key)
    member = f'{{"recipe": {text}, "key_id": "{SIGNER.key_id}", "signature": "AA"}}'
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe(member.encode(), SIGNER.public_key)


@pytest.mark.parametrize("depth", [10, 5_000])
def test_canonical_json_of_a_deep_value(depth: int) -> None:
    value = _nested_list(depth)
    if depth < 100:
        assert canonical_json(value) == b"[" * (depth + 1) + b"]" * (depth + 1)
    else:
        with pytest.raises(CanonicalizationError):
            canonical_json(value)
    with pytest.raises(RecipeVerificationError):  # a parsed document: no JSON parser involved
        verify_signed_recipe(
            {"recipe": value, "key_id": SIGNER.key_id, "signature": "AA"}, SIGNER.public_key
        )
