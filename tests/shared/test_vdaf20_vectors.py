"""Every VDAF-20 Prio3 and XofTurboShake128 test vector, replayed through the batched path.

The vectors are cfrg/draft-irtf-cfrg-vdaf@draft-irtf-cfrg-vdaf-20:test_vec, read from the
workplace's shared/test-vectors/vdaf-20 (never copied here). Each file's `operations` are replayed
phase by phase with all of the file's reports in one batch per aggregator: shard (public share,
input shares), verify_init (verifier shares), verifier_shares_to_message (verifier messages),
verify_next (output shares), aggregate (aggregate shares) and unshard (aggregate result), every
byte compared. A negative file (`*_bad_*`) has every step succeed up to the one it marks
`success: false`, which must reject the report.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from shared.b64url import b64url_decode, b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfigList
from shared.dap.task import TaskDefinition
from shared.vdaf import ping_pong, prio3_20
from shared.vdaf.circuits import Count, Oracles
from shared.vdaf.field import Field64, Field128, FieldArray
from shared.vdaf.flp import _extension_map
from shared.vdaf.gadgets import PolyEval
from shared.vdaf.prio3 import VDAF_08, PrepBatch, PrepStatus, Prio3, prio3_count
from shared.vdaf.spec import VdafSpec
from shared.vdaf.xof import XofTurboShake128V20
from tests.recipe.helpers import hpke_list
from tests.shared.vectors import load_vector, vector_names

#: The proof count of Prio3SumVecWithMultiproof_*; the files do not record it (nor the field,
#: Field64), the generator fixes it (poc/gen_test_vec.py at the tag, lines 698-722).
MULTIPROOF_PROOFS = 3


class HigherDegree(Count):
    """The test-only circuit of the reference code's tests: x(x-1)(x-2) == 0 with one degree-3
    PolyEval call (VDAF-20 poc/tests/test_flp_bbcggi19.py), the only degree-3 gadget vector."""

    GADGETS = (PolyEval((0, 2, -3, 1)),)

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        return gadgets[0](meas[:, :, None])

    def encode(self, measurement: Any) -> list[int]:
        return [int(measurement)]


def _instance(name: str, vec: dict[str, Any]) -> Prio3:
    shares = vec["shares"]
    kind = name.split("_", 1)[0]
    if kind == "Prio3Count":
        return prio3_20.prio3_count(shares)
    if kind == "Prio3Sum":
        return prio3_20.prio3_sum(vec["max_measurement"], shares)
    if kind == "Prio3SumVec":
        return prio3_20.prio3_sum_vec(
            vec["length"], vec["max_measurement"], vec["chunk_length"], shares
        )
    if kind == "Prio3Histogram":
        return prio3_20.prio3_histogram(vec["length"], vec["chunk_length"], shares)
    if kind == "Prio3MultihotCountVec":
        return prio3_20.prio3_multihot_count_vec(
            vec["length"], vec["max_weight"], vec["chunk_length"], shares
        )
    if kind == "Prio3SumVecWithMultiproof":
        return prio3_20.prio3_sum_vec_with_multiproof(
            Field64,
            MULTIPROOF_PROOFS,
            vec["length"],
            vec["max_measurement"],
            vec["chunk_length"],
            shares,
        )
    if kind == "Prio3HigherDegree":
        return Prio3(prio3_20.ALGO_PRIO3_PRIVATE, HigherDegree(), shares, version=prio3_20.VDAF_20)
    raise AssertionError(f"unknown vector {name}")


PRIO3_VECTORS = vector_names("Prio3", "vdaf-20")


def test_every_prio3_vector_file_is_covered() -> None:
    assert len(PRIO3_VECTORS) == 25, PRIO3_VECTORS
    assert sum("_bad_" in name for name in PRIO3_VECTORS) == 8


def _ops(vec: dict[str, Any], operation: str) -> list[dict[str, Any]]:
    return [op for op in vec["operations"] if op["operation"] == operation]


@pytest.mark.parametrize("name", PRIO3_VECTORS)
def test_prio3_vector(name: str) -> None:
    vec = load_vector(name, "vdaf-20")
    vdaf = _instance(name, vec)
    ctx = bytes.fromhex(vec["ctx"])
    verify_key = bytes.fromhex(vec["verify_key"])
    reports = vec["reports"]
    failed: list[str] = []

    def check(op: dict[str, Any], succeeded: bool) -> None:
        """The outcome the file marks; a failure ends the report, so nothing else is listed."""
        assert succeeded == op["success"], (op, name)
        if not succeeded:
            failed.append(op["operation"])

    # Client. Negative files list no shard step: their input shares were altered afterwards.
    for op in _ops(vec, "shard"):
        report = reports[op["report_index"]]
        public_share, input_shares = vdaf.shard(
            report["measurement"],
            bytes.fromhex(report["nonce"]),
            bytes.fromhex(report["rand"]),
            ctx,
        )
        assert public_share.hex() == report["public_share"]
        assert [s.hex() for s in input_shares] == report["input_shares"]
        check(op, True)

    # Aggregators: the reports each aggregator verifies go through one batch.
    batches: dict[int, tuple[list[int], PrepBatch]] = {}
    for agg_id in range(vdaf.SHARES):
        ops = [op for op in _ops(vec, "verify_init") if op["aggregator_id"] == agg_id]
        if not ops:
            continue
        indices = [op["report_index"] for op in ops]
        batch = vdaf.prep_init_batch(
            verify_key,
            agg_id,
            [bytes.fromhex(reports[r]["nonce"]) for r in indices],
            [bytes.fromhex(reports[r]["public_share"]) for r in indices],
            [bytes.fromhex(reports[r]["input_shares"][agg_id]) for r in indices],
            ctx,
        )
        for i, (op, r) in enumerate(zip(ops, indices, strict=True)):
            check(op, batch.status[i] == PrepStatus.OK)
            assert batch.prep_shares[i].hex() == reports[r]["verifier_shares"][0][agg_id]
        batches[agg_id] = (indices, batch)

    ops = _ops(vec, "verifier_shares_to_message")
    messages = vdaf.prep_shares_to_prep_batch(
        [
            [bytes.fromhex(s) for s in reports[op["report_index"]]["verifier_shares"][0]]
            for op in ops
        ],
        ctx,
    )
    for op, message in zip(ops, messages, strict=True):
        check(op, message is not None)
        if message is not None:
            assert message.hex() == reports[op["report_index"]]["verifier_messages"][0]

    for agg_id, (indices, batch) in batches.items():
        ops = [op for op in _ops(vec, "verify_next") if op["aggregator_id"] == agg_id]
        # The messages are the file's: the negative file gives the Leader a wrong one. A report
        # without a verify_next step gets none and is not finished.
        msgs: list[bytes | None] = [None] * len(indices)
        for op in ops:
            msgs[indices.index(op["report_index"])] = bytes.fromhex(
                reports[op["report_index"]]["verifier_messages"][0]
            )
        finished = vdaf.prep_next_batch(batch, msgs)
        for op in ops:
            r = op["report_index"]
            i = indices.index(r)
            check(op, bool(finished[i]))
            if finished[i]:
                out_share = vdaf.field.encode(batch.out_shares[i])
                assert out_share.hex() == reports[r]["out_shares"][agg_id]

    agg_shares = []
    for op in _ops(vec, "aggregate"):
        indices, batch = batches[op["aggregator_id"]]
        agg_share = vdaf.encode_agg_share(vdaf.aggregate(batch.out_shares[batch.ok]))
        assert agg_share.hex() == vec["agg_shares"][op["aggregator_id"]]
        agg_shares.append(agg_share)
        check(op, True)
    for op in _ops(vec, "unshard"):
        assert vdaf.unshard(agg_shares, len(reports)) == vec["agg_result"]
        check(op, True)

    # A positive file fails nowhere; a negative one at exactly its marked step.
    assert failed == [op["operation"] for op in vec["operations"] if not op["success"]]
    assert ("_bad_" in name) == bool(failed)


def test_negative_vectors_fail_where_their_readme_says() -> None:
    """The step each negative file marks, as the vectors' README describes it."""
    expected = {
        "Prio3Count_bad_gadget_poly": "verifier_shares_to_message",
        "Prio3Count_bad_helper_seed": "verifier_shares_to_message",
        "Prio3Count_bad_meas_share": "verifier_shares_to_message",
        "Prio3Count_bad_wire_seed": "verifier_shares_to_message",
        "Prio3Histogram_bad_helper_jr_blind": "verifier_shares_to_message",
        "Prio3Histogram_bad_leader_jr_blind": "verifier_shares_to_message",
        "Prio3Histogram_bad_public_share": "verifier_shares_to_message",
        "Prio3Histogram_bad_verifier_message": "verify_next",
    }
    for name, step in expected.items():
        ops = load_vector(name, "vdaf-20")["operations"]
        assert [op["operation"] for op in ops if not op["success"]] == [step], name


def test_xof_turboshake128_vector() -> None:
    vec = load_vector("XofTurboShake128", "vdaf-20")
    seed, dst, binder = (bytes.fromhex(vec[k]) for k in ("seed", "dst", "binder"))
    assert XofTurboShake128V20.derive_seed(seed, dst, binder).hex() == vec["derived_seed"]
    values = XofTurboShake128V20.expand_into_vec(Field128, seed, dst, binder, vec["length"])
    assert Field128.encode(values).hex() == vec["expanded_vec_field128"]


def test_dst_worked_example() -> None:
    """VDAF-20 §6.2.3 with the digest's example: Prio3Count, usage 1, ctx "some application"."""
    vdaf = prio3_20.prio3_count()
    dst = vdaf._dsts(b"some application")[1]
    assert dst.hex() == "1200000000010001" + b"some application".hex()


def test_vdaf08_takes_no_context() -> None:
    with pytest.raises(ValueError, match="no application context"):
        prio3_count().shard(1, bytes(16), bytes(48), b"ctx")


def test_contexts_separate_reports() -> None:
    """A report sharded under one context fails verification under another (VDAF-20 §4)."""
    vdaf = prio3_20.prio3_histogram(5, 2)
    nonce, rand = bytes(16), bytes(range(vdaf.RAND_SIZE))
    public, shares = vdaf.shard(3, nonce, rand, b"task A")
    key = bytes(range(32))
    for ctx, accepted in ((b"task A", True), (b"task B", False)):
        batches = [
            vdaf.prep_init_batch(key, agg_id, [nonce], [public], [shares[agg_id]], ctx)
            for agg_id in range(2)
        ]
        msgs = vdaf.prep_shares_to_prep_batch([[b.prep_shares[0] for b in batches]], ctx)
        assert (msgs[0] is not None) == accepted
        assert bool(np.all([vdaf.prep_next_batch(b, msgs)[0] for b in batches])) == accepted


def test_spec_chooses_the_draft() -> None:
    """VdafSpec's `version`: absent is VDAF-08 (and serializes as before); VDAF-20 has its own
    types and parameters."""
    old = VdafSpec(type="Prio3Sum", bits=8)
    assert old.model_dump(exclude_none=True) == {"type": "Prio3Sum", "bits": 8}
    assert old.instance().version is VDAF_08
    new = VdafSpec(version="VDAF-20", type="Prio3Sum", max_measurement=1337)
    vdaf = new.instance()
    assert (vdaf.version, vdaf.ID, vdaf.field) == (prio3_20.VDAF_20, 2, Field64)
    assert new.describe() == "Prio3Sum(max_measurement=1337) [VDAF-20]"
    assert VdafSpec.model_validate(new.model_dump(exclude_none=True)) == new
    spec = VdafSpec(
        version="VDAF-20", type="Prio3MultihotCountVec", length=4, max_weight=2, chunk_length=2
    )
    assert spec.instance().ID == prio3_20.ALGO_PRIO3_MULTIHOT_COUNT_VEC
    for bad in (
        {"version": "VDAF-20", "type": "Prio3Sum", "bits": 8},
        {"type": "Prio3Sum", "max_measurement": 255},
        {
            "version": "VDAF-20",
            "type": "Prio3MultiHotHistogram",
            "length": 4,
            "max_count": 2,
            "chunk_length": 2,
        },
        {"type": "Prio3MultihotCountVec", "length": 4, "max_weight": 2, "chunk_length": 2},
        {
            "version": "VDAF-20",
            "type": "Prio3SumVecField64Multiproof",
            "length": 4,
            "max_measurement": 3,
            "chunk_length": 2,
            "proofs": 2,
        },
    ):
        with pytest.raises(ValidationError):
            VdafSpec.model_validate(bad)


@pytest.mark.parametrize(("version", "size"), [(None, 16), ("VDAF-20", 32)])
def test_task_verify_key_follows_the_draft(version: str | None, size: int) -> None:
    """A task's verify key has its VDAF's size: 16 bytes for VDAF-08, 32 for VDAF-20."""
    config = HpkeConfigList.decode(b64url_decode(hpke_list(3), "c")).configs[0].encode()
    doc = {
        "task_id": TaskId.random().to_b64url(),
        "leader_endpoint": "https://leader.test",
        "helper_endpoint": "https://helper.test",
        "query_type": "time_interval",
        "vdaf": {"type": "Prio3Count", **({"version": version} if version else {})},
        "dap": "dap-19" if version == "VDAF-20" else "dap-09",
        "min_batch_size": 10,
        "time_precision": 3600,
        "collector_hpke_config": b64url_encode(config),
        "aggregator_auth_token": "aggregator-token-0123456789",
        "role": "helper",
    }
    for key_size in (16, 32):
        key = b64url_encode(bytes(key_size))
        if key_size == size:
            task = TaskDefinition.model_validate({**doc, "vdaf_verify_key": key})
            assert size == task.vdaf.instance().VERIFY_KEY_SIZE
        else:
            with pytest.raises(ValidationError, match=f"must be {size} bytes"):
                TaskDefinition.model_validate({**doc, "vdaf_verify_key": key})
    # Each DAP draft pairs with one VDAF draft (DAP-09 with VDAF-08, DAP-19 with VDAF-20).
    other = {**doc, "vdaf_verify_key": b64url_encode(bytes(size))}
    other["dap"] = "dap-09" if doc["dap"] == "dap-19" else "dap-19"
    with pytest.raises(ValidationError, match=f"a {other['dap']} task runs"):
        TaskDefinition.model_validate(other)


def test_ping_pong_runs_vdaf20_under_a_context() -> None:
    """The one-round ping-pong exchange (VDAF-20 §5.7) with a context: both aggregators finish
    valid reports, the output shares add up to the measurements, and a report whose helper
    share was tampered with is rejected by both."""
    vdaf = prio3_20.prio3_sum_vec(3, 1000, 2)
    ctx = b"dap-19" + bytes(32)
    key = bytes(range(32))
    measurements = [[1, 2, 3], [1000, 0, 7], [4, 5, 6]]
    nonces = [bytes([i]) * 16 for i in range(3)]
    rands = [bytes([i + 7]) * vdaf.RAND_SIZE for i in range(3)]
    sharded = vdaf.shard_batch(measurements, nonces, rands, ctx)
    publics = [p for p, _ in sharded]
    leaders = [s[0] for _, s in sharded]
    helpers = [s[1] for _, s in sharded]
    helpers[2] = bytes([helpers[2][0] ^ 1]) + helpers[2][1:]

    leader, outbound = ping_pong.leader_init(vdaf, key, nonces, publics, leaders, ctx)
    assert all(m is not None for m in outbound)
    helper, answers = ping_pong.helper_init(
        vdaf, key, nonces, publics, helpers, [m or b"" for m in outbound], ctx
    )
    finished = ping_pong.leader_continued(vdaf, leader, answers)
    assert finished.tolist() == helper.ok.tolist() == [True, True, False]
    agg = [vdaf.encode_agg_share(vdaf.aggregate(b.out_shares[b.ok])) for b in (leader, helper)]
    assert vdaf.unshard(agg, 2) == [1001, 2, 10]


@pytest.mark.parametrize(("field", "known", "size"), [(Field64, 10, 16), (Field128, 15, 16)])
def test_extension_map_completes_low_degree_values(
    field: type[Field64] | type[Field128], known: int, size: int
) -> None:
    """Values of a polynomial of degree < `known` at the first `known` size-th roots determine the
    rest (VDAF-20 extend_values_to_power_of_2); checked against an NTT of random coefficients,
    several values missing (a degree-3 gadget's case) and one (every degree-2 gadget's)."""
    rng = np.random.default_rng(7)
    coeffs = field.zeros((5, size))
    coeffs[:, :known] = field.random((5, known), rng)
    values = field.ntt(coeffs)
    missing = _extension_map(field, known, size)
    got = field.inner(values[:, None, :known], missing[None])
    assert np.array_equal(got, values[:, known:])
