"""Prio3 (VDAF-08 §7, VDAF-20 §7) with XofTurboShake128, computed a batch of reports at a time.

One implementation serves both drafts; a `Prio3Version` holds what differs on the wire (the DST's
version byte and application context, the XOF's framing and seed size, the Helper's seeds, the
FLP's gadget-polynomial basis). This module holds VDAF-08's constants and instances;
`shared.vdaf.prio3_20` holds VDAF-20's. The circuits take their draft's rules as parameters.

Sharding and preparation take lists of reports of one task and run the FLP over all of them in
array operations; the per-report work left in Python is the XOF calls that derive each report's
seeds and randomness (one bulk read each) and the byte slicing of its shares. A batch of one is
the report-by-report path: it runs the same code.

Preparation never raises for a bad report. Each report gets a status instead: `DECODE_ERROR` when
its shares are malformed (DAP: invalid_message), `PREP_ERROR` when its proof cannot be checked or
fails (DAP: vdaf_prep_error).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from shared.vdaf.circuits import (
    Count,
    Histogram,
    MultihotCountVec,
    Sum,
    SumVec,
    Valid,
    max_of_bits,
)
from shared.vdaf.field import Field, Field64, FieldArray
from shared.vdaf.flp import FlpGeneric
from shared.vdaf.xof import VDAF_VERSION, XofTurboShake128, byte_rows, domain_separation_tag

#: Algorithm identifiers (VDAF-08 §10); 0xFFFF0000..0xFFFFFFFF are private.
ALGO_PRIO3_COUNT: Final = 0x00000000

ALGO_PRIO3_SUM: Final = 0x00000001

ALGO_PRIO3_SUM_VEC: Final = 0x00000002

ALGO_PRIO3_HISTOGRAM: Final = 0x00000003

#: Private codepoint the VDAF-08 reference code uses for its experimental Prio3 variants.
ALGO_PRIO3_PRIVATE: Final = 0xFFFFFFFF

#: Prio3 DST usages (VDAF-08 §7.2, table "prio3-const").
USAGE_MEAS_SHARE: Final = 1

USAGE_PROOF_SHARE: Final = 2

USAGE_JOINT_RANDOMNESS: Final = 3

USAGE_PROVE_RANDOMNESS: Final = 4

USAGE_QUERY_RANDOMNESS: Final = 5

USAGE_JOINT_RAND_SEED: Final = 6

USAGE_JOINT_RAND_PART: Final = 7

#: Prio3 usages in the order the DST cache lists them.
_USAGES: Final = (
    USAGE_MEAS_SHARE,
    USAGE_PROOF_SHARE,
    USAGE_JOINT_RANDOMNESS,
    USAGE_PROVE_RANDOMNESS,
    USAGE_QUERY_RANDOMNESS,
    USAGE_JOINT_RAND_SEED,
    USAGE_JOINT_RAND_PART,
)

VERIFY_KEY_SIZE: Final = XofTurboShake128.SEED_SIZE

NONCE_SIZE: Final = 16

#: Application contexts whose DSTs one instance keeps (a DAP task uses one).
_DST_CACHE_SIZE = 16

#: Reports sharded together by `Prio3.shard_batch`.
SHARD_CHUNK = 32


class PrepStatus(enum.IntEnum):
    """Outcome of preparing one report."""

    OK = 0
    DECODE_ERROR = 1
    PREP_ERROR = 2


@dataclass(slots=True)
class PrepBatch:
    """One aggregator's preparation state for a batch of reports after `prep_init`.

    `out_shares` rows and `prep_shares` entries of reports whose status is not OK are meaningless
    (zeros and empty bytes).
    """

    status: npt.NDArray[np.int8]
    out_shares: FieldArray
    corrected_seeds: list[bytes | None]
    prep_shares: list[bytes]

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        ok: npt.NDArray[np.bool_] = self.status == PrepStatus.OK
        return ok


@dataclass(frozen=True, slots=True)
class Prio3Version:
    """What a draft fixes about Prio3 beyond its circuits (VDAF-20 §12 lists the changes)."""

    name: str
    #: The VERSION byte of every domain-separation tag.
    dst_version: int
    xof: type[XofTurboShake128]
    flp: type[FlpGeneric]
    #: Seeds a Helper's input share carries before its blind: VDAF-08 has one for the
    #: measurement share and one for the proofs share, VDAF-12 on one for both.
    helper_seeds: int
    #: Whether the DSTs end with an application context string (VDAF-12 on).
    has_context: bool


#: VDAF-08 §7.2: 16-byte seeds, a measurement and a proof seed per Helper, no context.
VDAF_08: Final = Prio3Version("VDAF-08", VDAF_VERSION, XofTurboShake128, FlpGeneric, 2, False)


class Prio3:
    """A Prio3 instance: a validity circuit, a share count and a proof count (VDAF-08 §7.2).

    `ctx` arguments are the application context string of VDAF-20 §4; VDAF-08 has none and
    accepts only the empty string.
    """

    NONCE_SIZE = NONCE_SIZE
    ROUNDS = 1

    def __init__(
        self,
        algo_id: int,
        valid: Valid,
        shares: int = 2,
        proofs: int = 1,
        version: Prio3Version = VDAF_08,
    ) -> None:
        if not 2 <= shares < 256:
            raise ValueError("Prio3 needs between 2 and 255 shares")
        if not 1 <= proofs < 256:
            raise ValueError("Prio3 needs between 1 and 255 proofs")
        self.ID = algo_id
        self.SHARES = shares
        self.PROOFS = proofs
        self.version = version
        self.xof = version.xof
        self.VERIFY_KEY_SIZE = self._seed = version.xof.SEED_SIZE
        self.flp = version.flp(valid)
        self.field: type[Field] = valid.field
        self.valid = valid
        self.uses_joint_rand = self.flp.JOINT_RAND_LEN > 0
        self._per_helper = version.helper_seeds + int(self.uses_joint_rand)
        seeds = self._per_helper * (shares - 1) + int(self.uses_joint_rand) + 1
        self.RAND_SIZE = self._seed * seeds
        self._dst_cache: dict[bytes, dict[int, bytes]] = {}
        self._proofs_len = self.flp.PROOF_LEN * proofs
        self._verifiers_len = self.flp.VERIFIER_LEN * proofs

    # --- sizes of the encoded messages (VDAF-08 §7.2.7, VDAF-20 §7.2.7) -----------------------

    def public_share_len(self) -> int:
        return self._seed * self.SHARES if self.uses_joint_rand else 0

    def input_share_len(self, agg_id: int) -> int:
        blind = self._seed if self.uses_joint_rand else 0
        if agg_id == 0:
            return (self.flp.MEAS_LEN + self._proofs_len) * self.field.ENCODED_SIZE + blind
        return self.version.helper_seeds * self._seed + blind

    def prep_share_len(self) -> int:
        blind = self._seed if self.uses_joint_rand else 0
        return self._verifiers_len * self.field.ENCODED_SIZE + blind

    def agg_share_len(self) -> int:
        return self.flp.OUTPUT_LEN * self.field.ENCODED_SIZE

    def params(self) -> dict[str, int]:
        return self.valid.params()

    # --- client ------------------------------------------------------------------------------

    def shard(
        self, measurement: Any, nonce: bytes, rand: bytes, ctx: bytes = b""
    ) -> tuple[bytes, list[bytes]]:
        """(public_share, input_shares) for one measurement (VDAF-08 §7.2.1, VDAF-20 §7.2.1)."""
        return self.shard_batch([measurement], [nonce], [rand], ctx)[0]

    def shard_batch(
        self,
        measurements: Sequence[Any],
        nonces: Sequence[bytes],
        rands: Sequence[bytes],
        ctx: bytes = b"",
    ) -> list[tuple[bytes, list[bytes]]]:
        """Shard many measurements at once; ValueError if any is out of range."""
        if not len(measurements) == len(nonces) == len(rands):
            raise ValueError("measurements, nonces and rands must have the same length")
        dst = self._dsts(ctx)
        # The prover's NTT buffers grow with batch x proof size; past a few dozen reports they
        # fall out of cache and batching stops paying, so large batches go in chunks.
        results: list[tuple[bytes, list[bytes]]] = []
        for start in range(0, len(measurements), SHARD_CHUNK):
            end = start + SHARD_CHUNK
            results += self._shard_chunk(
                measurements[start:end], nonces[start:end], rands[start:end], dst
            )
        return results

    def _shard_chunk(
        self,
        measurements: Sequence[Any],
        nonces: Sequence[bytes],
        rands: Sequence[bytes],
        dst: dict[int, bytes],
    ) -> list[tuple[bytes, list[bytes]]]:
        F, S, size = self.field, self.SHARES, self._seed
        n = len(measurements)
        for nonce, rand in zip(nonces, rands, strict=True):
            self._check_nonce(nonce)
            if len(rand) != self.RAND_SIZE:
                raise ValueError(f"Prio3 shard needs {self.RAND_SIZE} random bytes")
        meas = F.from_ints([x for m in measurements for x in self.valid.encode(m)]).reshape(
            n, self.flp.MEAS_LEN, F.LIMBS
        )
        nonce_rows = byte_rows(nonces)

        # rand is, in order, each Helper's share seeds and blind, the Leader's blind, and the
        # prove seed (VDAF-08 §7.2.1, VDAF-20 §7.2.1): seed k of every report is seeds[:, k].
        seeds = byte_rows(rands).reshape(n, -1, size)

        def helper_seeds(j: int) -> npt.NDArray[np.uint8]:
            return seeds[:, (j - 1) * self._per_helper : j * self._per_helper]

        leader_meas = meas
        helper_meas: list[FieldArray] = []
        for j in range(1, S):
            share = self._helper_meas_shares(dst, j, helper_seeds(j)[:, 0])
            leader_meas = F.sub(leader_meas, share)
            helper_meas.append(share)

        public_shares: list[bytes] = [b""] * n
        joint_rands = F.zeros((n, self.flp.JOINT_RAND_LEN * self.PROOFS))
        if self.uses_joint_rand:
            blind = self.version.helper_seeds
            parts = [self._joint_rand_parts(dst, 0, seeds[:, -2], leader_meas, nonce_rows)]
            parts += [
                self._joint_rand_parts(
                    dst, j, helper_seeds(j)[:, blind], helper_meas[j - 1], nonce_rows
                )
                for j in range(1, S)
            ]
            part_rows = np.hstack(parts)
            public_shares = _split(part_rows)
            joint_rands = self._joint_rands(dst, self._joint_rand_seeds(dst, part_rows))

        prove_rands = self.xof.expand_into_vecs(
            F,
            seeds[:, -1],
            dst[USAGE_PROVE_RANDOMNESS],
            _same(bytes((self.PROOFS,)), n),
            self.flp.PROVE_RAND_LEN * self.PROOFS,
        )
        proofs = F.zeros((n, self._proofs_len))
        for p in range(self.PROOFS):
            proofs[:, p * self.flp.PROOF_LEN : (p + 1) * self.flp.PROOF_LEN] = self.flp.prove(
                meas,
                self._slice(prove_rands, p, self.flp.PROVE_RAND_LEN),
                self._slice(joint_rands, p, self.flp.JOINT_RAND_LEN),
            )

        last = self.version.helper_seeds - 1
        leader_proofs = proofs
        helper_shares: list[list[bytes]] = []
        for j in range(1, S):
            own = helper_seeds(j)
            leader_proofs = F.sub(leader_proofs, self._helper_proofs_shares(dst, j, own[:, last]))
            helper_shares.append(_split(own.reshape(n, -1)))
        leader_blind = seeds[:, -2] if self.uses_joint_rand else seeds[:, :0, 0]
        leader_shares = _split(
            np.hstack((_encoded(leader_meas), _encoded(leader_proofs), leader_blind))
        )
        return [
            (public_shares[r], [leader_shares[r], *(shares[r] for shares in helper_shares)])
            for r in range(n)
        ]

    # --- aggregators -------------------------------------------------------------------------

    def prep_init_batch(
        self,
        verify_key: bytes,
        agg_id: int,
        nonces: Sequence[bytes],
        public_shares: Sequence[bytes],
        input_shares: Sequence[bytes],
        ctx: bytes = b"",
    ) -> PrepBatch:
        """Each report's prep share and state for aggregator `agg_id` (VDAF-08 §7.2.2,
        VDAF-20 §7.2.2 verify_init)."""
        F, flp, size = self.field, self.flp, self._seed
        if len(verify_key) != self.VERIFY_KEY_SIZE:
            raise ValueError(f"Prio3 verify key must be {self.VERIFY_KEY_SIZE} bytes")
        if not 0 <= agg_id < self.SHARES:
            raise ValueError("aggregator id out of range")
        n = len(nonces)
        if not n == len(public_shares) == len(input_shares):
            raise ValueError("nonces, public shares and input shares must have the same length")
        dst = self._dsts(ctx)

        public_len, input_len = self.public_share_len(), self.input_share_len(agg_id)
        # The reports still in the running: their lengths are right (and, below, their values).
        rows = [
            r
            for r in range(n)
            if len(nonces[r]) == self.NONCE_SIZE
            and len(public_shares[r]) == public_len
            and len(input_shares[r]) == input_len
        ]
        status = np.full(n, PrepStatus.DECODE_ERROR, dtype=np.int8)
        status[rows] = PrepStatus.OK
        inputs = byte_rows([input_shares[r] for r in rows], input_len)
        if agg_id == 0:
            field_bytes = (flp.MEAS_LEN + self._proofs_len) * F.ENCODED_SIZE
            values, in_range = F.candidates(np.ascontiguousarray(inputs[:, :field_bytes]))
            width = flp.MEAS_LEN + self._proofs_len
            decoded = np.asarray(in_range.reshape(len(rows), width).all(axis=1))
            values = values.reshape(len(rows), width, F.LIMBS)
            meas, proofs = values[:, : flp.MEAS_LEN], values[:, flp.MEAS_LEN :]
            blinds = inputs[:, field_bytes:]
            status[[r for r, ok in zip(rows, decoded, strict=True) if not ok]] = (
                PrepStatus.DECODE_ERROR
            )
            rows = [r for r, ok in zip(rows, decoded, strict=True) if ok]
            meas, proofs, blinds = meas[decoded], proofs[decoded], blinds[decoded]
        else:
            seeds_end = self.version.helper_seeds * size
            meas = self._helper_meas_shares(dst, agg_id, inputs[:, :size])
            proofs = self._helper_proofs_shares(
                dst, agg_id, inputs[:, seeds_end - size : seeds_end]
            )
            blinds = inputs[:, seeds_end:]
        m = len(rows)
        nonce_rows = byte_rows([nonces[r] for r in rows], self.NONCE_SIZE)

        joint_rands = F.zeros((m, flp.JOINT_RAND_LEN * self.PROOFS))
        corrected: list[bytes | None] = [None] * n
        own_parts = blinds[:, :0]
        if self.uses_joint_rand:
            own_parts = self._joint_rand_parts(dst, agg_id, blinds, meas, nonce_rows)
            parts = byte_rows([public_shares[r] for r in rows], public_len).copy()
            parts[:, agg_id * size : (agg_id + 1) * size] = own_parts
            seeds = self._joint_rand_seeds(dst, parts)
            for r, seed in zip(rows, _split(seeds), strict=True):
                corrected[r] = seed
            joint_rands = self._joint_rands(dst, seeds)
        query_rands = self.xof.expand_into_vecs(
            F,
            _same(verify_key, m),
            dst[USAGE_QUERY_RANDOMNESS],
            np.hstack((_same(bytes((self.PROOFS,)), m), nonce_rows)),
            flp.QUERY_RAND_LEN * self.PROOFS,
        )

        verifiers = F.zeros((m, self._verifiers_len))
        usable = np.ones(m, np.bool_)
        for p in range(self.PROOFS):
            verifier, usable_p = flp.query(
                meas,
                self._slice(proofs, p, flp.PROOF_LEN),
                self._slice(query_rands, p, flp.QUERY_RAND_LEN),
                self._slice(joint_rands, p, flp.JOINT_RAND_LEN),
                self.SHARES,
            )
            verifiers[:, p * flp.VERIFIER_LEN : (p + 1) * flp.VERIFIER_LEN] = verifier
            usable &= usable_p
        at = np.array(rows, dtype=np.intp)
        status[at[~usable]] = PrepStatus.PREP_ERROR

        out_shares = F.zeros((n, flp.OUTPUT_LEN))
        out_shares[at[usable]] = flp.valid.truncate(meas[usable])
        prep_shares = [b""] * n
        for r, share, ok in zip(
            rows, _split(np.hstack((_encoded(verifiers), own_parts))), usable, strict=True
        ):
            if ok:
                prep_shares[r] = share
        return PrepBatch(status, out_shares, corrected, prep_shares)

    def prep_shares_to_prep_batch(
        self, prep_shares: Sequence[Sequence[bytes]], ctx: bytes = b""
    ) -> list[bytes | None]:
        """Combine every aggregator's prep share of each report into its prep message.

        `prep_shares[r]` holds report r's shares in aggregator order. The result is the prep
        message (the joint randomness seed, or b"") of each valid report, None for a report whose
        shares are malformed or whose proof is rejected (VDAF-08 §7.2.2 prep_shares_to_prep,
        VDAF-20 §7.2.2 verifier_shares_to_message).
        """
        F, flp, S = self.field, self.flp, self.SHARES
        dst = self._dsts(ctx)
        share_len = self.prep_share_len()
        rows = np.array(
            [
                r
                for r, shares in enumerate(prep_shares)
                if len(shares) == S and all(len(share) == share_len for share in shares)
            ],
            dtype=np.intp,
        )
        m = len(rows)
        matrix = byte_rows([b"".join(prep_shares[r]) for r in rows], S * share_len)
        matrix = matrix.reshape(m, S, share_len)
        verifiers_bytes = self._verifiers_len * F.ENCODED_SIZE
        values, in_range = F.candidates(np.ascontiguousarray(matrix[:, :, :verifiers_bytes]))
        accept = in_range.reshape(m, S * self._verifiers_len).all(axis=1)
        verifiers = F.sum(values.reshape(m, S, self._verifiers_len, F.LIMBS), axis=-2)
        for p in range(self.PROOFS):
            accept &= flp.decide(self._slice(verifiers, p, flp.VERIFIER_LEN))
        messages: list[bytes | None] = [None] * len(prep_shares)
        if self.uses_joint_rand:
            parts = matrix[accept, :, verifiers_bytes:].reshape(-1, S * self._seed)
            seeds = _split(self._joint_rand_seeds(dst, parts))
        else:
            seeds = [b""] * int(accept.sum())
        for r, seed in zip(rows[accept], seeds, strict=True):
            messages[r] = seed
        return messages

    def prep_next_batch(
        self, batch: PrepBatch, prep_msgs: Sequence[bytes | None]
    ) -> npt.NDArray[np.bool_]:
        """Finish preparation: which reports' output shares in `batch` are now valid.

        A report is finished when its prep message exists and equals the joint randomness seed
        this aggregator computed with its own part substituted (VDAF-08 §7.2.2 prep_next).
        Rejected reports are also marked PREP_ERROR in `batch.status`, their output shares zeroed.
        """
        finished = batch.ok.copy()
        for r, msg in enumerate(prep_msgs):
            if not finished[r]:
                continue
            expected = batch.corrected_seeds[r] if self.uses_joint_rand else b""
            if msg is None or msg != expected:
                finished[r] = False
                batch.status[r] = PrepStatus.PREP_ERROR
        batch.out_shares[~finished] = 0
        return finished

    def aggregate(self, out_shares: FieldArray) -> FieldArray:
        """The aggregate share: the sum of a batch of output shares (N, OUTPUT_LEN)."""
        if out_shares.shape[0] == 0:
            return self.field.zeros(self.flp.OUTPUT_LEN)
        return self.field.sum(out_shares, axis=-2)

    def merge(self, agg_shares: Sequence[FieldArray]) -> FieldArray:
        """Add aggregate shares of disjoint sets of reports."""
        total = self.field.zeros(self.flp.OUTPUT_LEN)
        for share in agg_shares:
            total = self.field.add(total, share)
        return total

    def encode_agg_share(self, agg_share: FieldArray) -> bytes:
        return self.field.encode(agg_share)

    def decode_agg_share(self, data: bytes) -> FieldArray:
        """Strict: DecodeError on a wrong length or a value >= p."""
        return self.field.decode(data, self.flp.OUTPUT_LEN)

    def unshard(self, agg_shares: Sequence[bytes], num_measurements: int) -> Any:
        """The aggregate result from every aggregator's encoded aggregate share (VDAF-08 §7.2.5)."""
        if len(agg_shares) != self.SHARES:
            raise ValueError(f"Prio3 unshard needs {self.SHARES} aggregate shares")
        total = self.merge([self.decode_agg_share(share) for share in agg_shares])
        return self.valid.decode(self.field.to_ints(total), num_measurements)

    # --- helpers -----------------------------------------------------------------------------

    def _dsts(self, ctx: bytes) -> dict[int, bytes]:
        """Every usage's domain-separation tag for application context `ctx`."""
        dst = self._dst_cache.get(ctx)
        if dst is not None:
            return dst
        if ctx and not self.version.has_context:
            raise ValueError(f"{self.version.name} Prio3 takes no application context")
        if len(self._dst_cache) >= _DST_CACHE_SIZE:
            self._dst_cache.clear()
        dst = {
            usage: domain_separation_tag(self.ID, usage, self.version.dst_version, ctx)
            for usage in _USAGES
        }
        self._dst_cache[ctx] = dst
        return dst

    def _check_nonce(self, nonce: bytes) -> None:
        if len(nonce) != self.NONCE_SIZE:
            raise ValueError(f"Prio3 nonce must be {self.NONCE_SIZE} bytes")

    def _slice(self, values: FieldArray, index: int, width: int) -> FieldArray:
        return values[:, index * width : (index + 1) * width]

    def _helper_meas_shares(
        self, dst: dict[int, bytes], agg_id: int, seeds: npt.NDArray[np.uint8]
    ) -> FieldArray:
        """Helper `agg_id`'s measurement share of each report, from its seed (one per row)."""
        binders = _same(bytes((agg_id,)), len(seeds))
        return self.xof.expand_into_vecs(
            self.field, seeds, dst[USAGE_MEAS_SHARE], binders, self.flp.MEAS_LEN
        )

    def _helper_proofs_shares(
        self, dst: dict[int, bytes], agg_id: int, seeds: npt.NDArray[np.uint8]
    ) -> FieldArray:
        binders = _same(bytes((self.PROOFS, agg_id)), len(seeds))
        return self.xof.expand_into_vecs(
            self.field, seeds, dst[USAGE_PROOF_SHARE], binders, self._proofs_len
        )

    def _joint_rand_parts(
        self,
        dst: dict[int, bytes],
        agg_id: int,
        blinds: npt.NDArray[np.uint8],
        meas_shares: FieldArray,
        nonces: npt.NDArray[np.uint8],
    ) -> npt.NDArray[np.uint8]:
        """Aggregator `agg_id`'s joint randomness part of each report, one seed per row."""
        n = len(blinds)
        binders = np.hstack((_same(bytes((agg_id,)), n), nonces, _encoded(meas_shares)))
        return self.xof.derive_seeds(blinds, dst[USAGE_JOINT_RAND_PART], binders)

    def _joint_rand_seeds(
        self, dst: dict[int, bytes], parts: npt.NDArray[np.uint8]
    ) -> npt.NDArray[np.uint8]:
        """Each report's joint randomness seed from its row of concatenated parts."""
        zero = _same(bytes(self._seed), len(parts))
        return self.xof.derive_seeds(zero, dst[USAGE_JOINT_RAND_SEED], parts)

    def _joint_rands(self, dst: dict[int, bytes], seeds: npt.NDArray[np.uint8]) -> FieldArray:
        return self.xof.expand_into_vecs(
            self.field,
            seeds,
            dst[USAGE_JOINT_RANDOMNESS],
            _same(bytes((self.PROOFS,)), len(seeds)),
            self.flp.JOINT_RAND_LEN * self.PROOFS,
        )


def _same(value: bytes, n: int) -> npt.NDArray[np.uint8]:
    """`value` as every one of `n` rows."""
    return np.broadcast_to(np.frombuffer(value, np.uint8), (n, len(value)))


def _encoded(values: FieldArray) -> npt.NDArray[np.uint8]:
    """Each row's field elements encoded (VDAF-08 §6.1: little-endian limbs), as a byte row."""
    width = math.prod(values.shape[1:]) * 8
    return np.ascontiguousarray(values, "<u8").view(np.uint8).reshape(len(values), width)


def _split(matrix: npt.NDArray[np.uint8]) -> list[bytes]:
    """The rows of a uint8 matrix as byte strings."""
    width = matrix.shape[1]
    if not width:
        return [b""] * len(matrix)
    raw = np.ascontiguousarray(matrix).tobytes()
    return [raw[i : i + width] for i in range(0, len(raw), width)]


# --- the instances DAP uses -----------------------------------------------------------------


def prio3_count(shares: int = 2) -> Prio3:
    return Prio3(ALGO_PRIO3_COUNT, Count(), shares)


def prio3_sum(bits: int, shares: int = 2) -> Prio3:
    return Prio3(ALGO_PRIO3_SUM, Sum(bits), shares)


def prio3_sum_vec(length: int, bits: int, chunk_length: int, shares: int = 2) -> Prio3:
    return Prio3(ALGO_PRIO3_SUM_VEC, SumVec(length, max_of_bits(bits), chunk_length), shares)


def prio3_histogram(length: int, chunk_length: int, shares: int = 2) -> Prio3:
    return Prio3(ALGO_PRIO3_HISTOGRAM, Histogram(length, chunk_length), shares)


def prio3_multihot_histogram(
    length: int, max_count: int, chunk_length: int, shares: int = 2
) -> Prio3:
    """The multi-hot count vector with a bound on its weight (private codepoint)."""
    return Prio3(ALGO_PRIO3_PRIVATE, MultihotCountVec(length, max_count, chunk_length), shares)


def prio3_sum_vec_multiproof(
    length: int, bits: int, chunk_length: int, proofs: int, shares: int = 2
) -> Prio3:
    """SumVec over Field64 with several proofs for soundness (private codepoint)."""
    if not 2 <= proofs < 256:
        raise ValueError("the Field64 multiproof variant needs between 2 and 255 proofs")
    return Prio3(
        ALGO_PRIO3_PRIVATE,
        SumVec(length, max_of_bits(bits), chunk_length, field=Field64),
        shares,
        proofs,
    )
