"""A malicious client (001 §4.2, §4.6; DAP-09 §4.5.1.4): every attack is detected or contained.

- Out-of-range measurements, sharded "honestly by a cheater": the client encodes a vector
  that is NOT in the circuit's language (a histogram with two ones, a Sum bit equal to 2, a
  Count of 2...) and runs the honest FLP prover over it. The proof is well-formed, so the
  shares decode; the validity check fails, the helper answers `vdaf_prep_error` and the report
  never reaches an aggregate.
- Tampered proofs and tampered helper seeds: same outcome.
- Replays of a report id: the leader refuses the second upload, the helper refuses a second
  aggregation (`report_replayed`); the collected count is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.dap.ids import ReportId
from shared.dap.messages import PrepareError, PrepareRespState
from shared.vdaf.field import Field128
from tests.adversaries.conftest import DbFactory
from tests.adversaries.harness import BUCKET, Deployment, Sharded, Task, deploy, problem_type

#: -1 in Field128 (Sum, SumVec and Histogram use Field128).
MINUS_ONE = Field128.MODULUS - 1


# (vdaf, honest measurements, their result, a cheating encoding, what the cheat would add)
CHEATS: dict[str, tuple[dict[str, Any], list[Any], Any, Callable[[Any], list[int]]]] = {
    "count-2": ({"type": "Prio3Count"}, [1, 0, 1], 2, lambda _: [2]),
    "sum-bit-2": (
        {"type": "Prio3Sum", "bits": 4},
        [3, 5],
        8,
        lambda _: [2, 2, 2, 2],  # "bits" of 2 claim 2 * 15 = 30, beyond 2^4 - 1
    ),
    "sum-negative": (
        {"type": "Prio3Sum", "bits": 4},
        [3, 5],
        8,
        lambda _: [MINUS_ONE, 0, 0, 0],  # -1: would subtract from the sum
    ),
    "histogram-two-ones": (
        {"type": "Prio3Histogram", "length": 4, "chunk_length": 2},
        [0, 2, 2],
        [1, 0, 2, 0],
        lambda _: [0, 1, 1, 0],
    ),
    "histogram-cancelling": (
        {"type": "Prio3Histogram", "length": 4, "chunk_length": 2},
        [0, 2, 2],
        [1, 0, 2, 0],
        lambda _: [1, 1, MINUS_ONE, 0],  # sums to one, but not a one-hot vector
    ),
    "histogram-all-weight": (
        {"type": "Prio3Histogram", "length": 4, "chunk_length": 2},
        [0, 2, 2],
        [1, 0, 2, 0],
        lambda _: [0, 0, 0, 1000],
    ),
    "sumvec-element-too-big": (
        {"type": "Prio3SumVec", "length": 3, "bits": 2, "chunk_length": 2},
        [[1, 2, 3], [0, 0, 1]],
        [1, 2, 4],
        lambda _: [2, 1, 0, 0, 0, 0],  # element 0 = 2 + 2*1 = 4 > 3 via bit 2
    ),
}


@pytest.fixture(params=list(CHEATS))
def cheat(
    request: pytest.FixtureRequest, tmp_path: Path, databases: DbFactory
) -> tuple[Deployment, str]:
    vdaf = CHEATS[request.param][0]
    return deploy(tmp_path, Task(vdaf), databases=databases), request.param


def test_cheating_encoding_decodes_but_fails_the_proof(cheat: tuple[Deployment, str]) -> None:
    """Straight at the helper: the cheater's shares are well-formed (no `invalid_message`),
    only the validity proof gives them away; the honest report of the same job goes through."""
    dep, name = cheat
    _, honest, _, encoder = CHEATS[name]
    bad = dep.shard(honest[0], encoder=encoder)
    good = dep.shard(honest[0])
    resps = dep.helper_resps([dep.prepare_init(bad), dep.prepare_init(good)]).prepare_resps
    assert resps[0].report_id == bad.report_id
    assert resps[0].prepare_resp_state == PrepareRespState.REJECT
    assert resps[0].prepare_error == PrepareError.VDAF_PREP_ERROR
    assert resps[1].prepare_resp_state == PrepareRespState.CONTINUE


def test_cheating_reports_never_reach_the_aggregate(cheat: tuple[Deployment, str]) -> None:
    """End to end: the leader accepts the upload (it cannot tell), the aggregation drops it,
    and the collection counts and sums only the honest reports."""
    dep, name = cheat
    _, honest, expected, encoder = CHEATS[name]
    dep.upload_measurements(honest)
    for _ in range(2):
        response = dep.upload(dep.seal_report(dep.shard(honest[0], encoder=encoder)))
        assert response.status_code in (200, 201), response.text
    count, result = dep.collect(BUCKET)
    assert count == len(honest)
    assert result == expected
    rejected = dep.stats(dep.helper)["rejections"]
    assert "vdaf_prep_error" in str(rejected), rejected


def _tamper_proof(dep: Deployment, s: Sharded) -> Sharded:
    """Add one to the first proof element of the leader's share (stays a field element)."""
    vdaf = dep.task.prio3
    at = vdaf.flp.MEAS_LEN * vdaf.field.ENCODED_SIZE
    share = bytearray(s.leader_share)
    share[at] = (share[at] + 1) % 256 if share[at] != 255 else 0
    return Sharded(s.report_id, s.time, s.public_share, bytes(share), s.helper_share)


def _tamper_helper_seed(_: Deployment, s: Sharded) -> Sharded:
    share = bytearray(s.helper_share)
    share[0] ^= 1
    return Sharded(s.report_id, s.time, s.public_share, s.leader_share, bytes(share))


def _tamper_public_share(_: Deployment, s: Sharded) -> Sharded:
    public = bytearray(s.public_share)
    public[-1] ^= 0x80
    return Sharded(s.report_id, s.time, bytes(public), s.leader_share, s.helper_share)


@pytest.mark.parametrize(
    "tamper",
    [_tamper_proof, _tamper_helper_seed, _tamper_public_share],
    ids=["proof", "helper-seed", "joint-rand-part"],
)
def test_tampered_proofs_are_rejected(
    tmp_path: Path, tamper: Callable[[Deployment, Sharded], Sharded]
) -> None:
    dep = deploy(tmp_path, Task({"type": "Prio3Histogram", "length": 4, "chunk_length": 2}))
    dep.upload_measurements([1, 1, 3])
    bad = tamper(dep, dep.shard(2))
    resps = dep.helper_resps([dep.prepare_init(bad)]).prepare_resps
    assert resps[0].prepare_error == PrepareError.VDAF_PREP_ERROR
    response = dep.upload(dep.seal_report(tamper(dep, dep.shard(2))))
    assert response.status_code in (200, 201), response.text
    count, result = dep.collect(BUCKET)
    assert (count, result) == (3, [0, 2, 0, 1])


def test_replayed_report_id_is_counted_once(tmp_path: Path) -> None:
    """The same report twice, then the same id with other shares: one report in the batch."""
    dep = deploy(tmp_path, Task({"type": "Prio3Sum", "bits": 8}))
    first = dep.seal_report(dep.shard(200))
    assert dep.upload(first).status_code in (200, 201)
    again = dep.upload(first)
    # DAP-09 §4.4.2: MUST ignore, MAY alert reportRejected. sagg alerts.
    assert problem_type(again) == "reportRejected"
    other = dep.upload(dep.seal_report(dep.shard(255, report_id=first.report_metadata.report_id)))
    assert problem_type(other) == "reportRejected"
    dep.upload_measurements([1])
    assert dep.collect(BUCKET) == (2, 201)


def test_replay_after_aggregation_reaches_neither_aggregate(tmp_path: Path) -> None:
    """The leader has aggregated report R; a replay of R under its id is refused at upload,
    and were it to reach the helper (a leader bug), the helper answers `report_replayed`."""
    dep = deploy(tmp_path, Task({"type": "Prio3Count"}))
    s = dep.shard(1)
    assert dep.upload(dep.seal_report(s)).status_code in (200, 201)
    dep.drive()
    assert problem_type(dep.upload(dep.seal_report(s))) == "reportRejected"
    resps = dep.helper_resps([dep.prepare_init(s)]).prepare_resps
    assert resps[0].prepare_error == PrepareError.REPORT_REPLAYED
    assert dep.collect(BUCKET) == (1, 1)


def test_fresh_report_ids_make_distinct_reports(tmp_path: Path) -> None:
    """What replay protection does *not* do (and cannot): a client that makes fresh reports
    contributes each of them. Limiting how many a device makes is the token's job
    (test_tokens_and_sybils), and each is still a valid, in-range measurement."""
    dep = deploy(tmp_path, Task({"type": "Prio3Count"}))
    dep.upload_measurements([1] * 4)
    assert dep.collect(BUCKET) == (4, 4)


def test_report_id_is_the_vdaf_nonce(tmp_path: Path) -> None:
    """Re-using another report's shares under a new id (a client copying a victim's upload it
    saw on the wire, or replaying its own) fails: the helper's ciphertext is bound to the old
    id by the AAD. (Shares sealed afresh under the new id would be a new, separately proved
    report: the nonce only enters the joint randomness, which the client controls anyway.)"""
    dep = deploy(tmp_path, Task({"type": "Prio3Count"}))
    s = dep.shard(1)
    report = dep.seal_report(s)
    moved = type(report)(
        type(report.report_metadata)(ReportId.random(), report.report_metadata.time),
        report.public_share,
        report.leader_encrypted_input_share,
        report.helper_encrypted_input_share,
    )
    assert problem_type(dep.upload(moved)) == "reportRejected"  # the leader's own share fails
