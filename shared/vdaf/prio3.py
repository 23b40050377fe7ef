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
from shared.vdaf.xof import VDAF_VERSION, XofTurboShake128, domain_separation_tag

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

        # rand is, in order, each Helper's share seeds and blind, the Leader's blind, and the
        # prove seed (VDAF-08 §7.2.1, VDAF-20 §7.2.1).
        seeds = [[rand[i : i + size] for i in range(0, self.RAND_SIZE, size)] for rand in rands]
        helper_seeds = [
            [r_seeds[(j - 1) * self._per_helper : j * self._per_helper] for j in range(1, S)]
            for r_seeds in seeds
        ]
        leader_meas = meas.copy()
        helper_meas: list[list[FieldArray]] = []
        for r in range(n):
            shares_r = []
            for j in range(1, S):
                share = self._helper_meas_share(dst, j, helper_seeds[r][j - 1][0])
                leader_meas[r] = F.sub(leader_meas[r], share)
                shares_r.append(share)
            helper_meas.append(shares_r)

        public_shares: list[bytes] = [b""] * n
        joint_rands = F.zeros((n, self.flp.JOINT_RAND_LEN * self.PROOFS))
        if self.uses_joint_rand:
            for r in range(n):
                parts = [self._joint_rand_part(dst, 0, seeds[r][-2], leader_meas[r], nonces[r])]
                for j in range(1, S):
                    blind = helper_seeds[r][j - 1][-1]
                    parts.append(
                        self._joint_rand_part(dst, j, blind, helper_meas[r][j - 1], nonces[r])
                    )
                public_shares[r] = b"".join(parts)
                joint_rands[r] = self._joint_rands(dst, self._joint_rand_seed(dst, parts))

        prove_rands = F.zeros((n, self.flp.PROVE_RAND_LEN * self.PROOFS))
        for r in range(n):
            prove_rands[r] = self._xof_vec(
                seeds[r][-1],
                dst[USAGE_PROVE_RANDOMNESS],
                bytes((self.PROOFS,)),
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
        results = []
        for r in range(n):
            leader_proofs = proofs[r]
            helper_shares = []
            for j in range(1, S):
                own = helper_seeds[r][j - 1]
                leader_proofs = F.sub(leader_proofs, self._helper_proofs_share(dst, j, own[last]))
                helper_shares.append(b"".join(own))
            leader_blind = seeds[r][-2] if self.uses_joint_rand else b""
            leader_share = F.encode(leader_meas[r]) + F.encode(leader_proofs) + leader_blind
            results.append((public_shares[r], [leader_share, *helper_shares]))
        return results

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
        F, flp = self.field, self.flp
        if len(verify_key) != self.VERIFY_KEY_SIZE:
            raise ValueError(f"Prio3 verify key must be {self.VERIFY_KEY_SIZE} bytes")
        if not 0 <= agg_id < self.SHARES:
            raise ValueError("aggregator id out of range")
        n = len(nonces)
        if not n == len(public_shares) == len(input_shares):
            raise ValueError("nonces, public shares and input shares must have the same length")
        dst = self._dsts(ctx)

        status = np.full(n, PrepStatus.OK, dtype=np.int8)
        meas = F.zeros((n, flp.MEAS_LEN))
        proofs = F.zeros((n, self._proofs_len))
        blinds: list[bytes] = [b""] * n
        parts: list[list[bytes]] = [[] for _ in range(n)]
        for r in range(n):
            decoded = self._decode_shares(dst, agg_id, nonces[r], public_shares[r], input_shares[r])
            if decoded is None:
                status[r] = PrepStatus.DECODE_ERROR
                continue
            meas[r], proofs[r], blinds[r], parts[r] = decoded

        joint_rands = F.zeros((n, flp.JOINT_RAND_LEN * self.PROOFS))
        query_rands = F.zeros((n, flp.QUERY_RAND_LEN * self.PROOFS))
        corrected: list[bytes | None] = [None] * n
        own_parts: list[bytes] = [b""] * n
        for r in map(int, np.flatnonzero(status == PrepStatus.OK)):
            if self.uses_joint_rand:
                own_parts[r] = self._joint_rand_part(dst, agg_id, blinds[r], meas[r], nonces[r])
                parts[r][agg_id] = own_parts[r]
                seed = self._joint_rand_seed(dst, parts[r])
                corrected[r] = seed
                joint_rands[r] = self._joint_rands(dst, seed)
            query_rands[r] = self._xof_vec(
                verify_key,
                dst[USAGE_QUERY_RANDOMNESS],
                bytes((self.PROOFS,)) + nonces[r],
                flp.QUERY_RAND_LEN * self.PROOFS,
            )

        verifiers = F.zeros((n, self._verifiers_len))
        for p in range(self.PROOFS):
            verifier, usable = flp.query(
                meas,
                self._slice(proofs, p, flp.PROOF_LEN),
                self._slice(query_rands, p, flp.QUERY_RAND_LEN),
                self._slice(joint_rands, p, flp.JOINT_RAND_LEN),
                self.SHARES,
            )
            verifiers[:, p * flp.VERIFIER_LEN : (p + 1) * flp.VERIFIER_LEN] = verifier
            status[(status == PrepStatus.OK) & ~usable] = PrepStatus.PREP_ERROR

        ok = status == PrepStatus.OK
        out_shares = flp.valid.truncate(meas)
        out_shares[~ok] = 0
        prep_shares = [F.encode(verifiers[r]) + own_parts[r] if ok[r] else b"" for r in range(n)]
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
        F, flp = self.field, self.flp
        dst = self._dsts(ctx)
        n = len(prep_shares)
        verifiers = F.zeros((n, self._verifiers_len))
        decodable = np.ones(n, dtype=np.bool_)
        parts: list[list[bytes]] = [[] for _ in range(n)]
        verifiers_bytes = self._verifiers_len * F.ENCODED_SIZE
        for r, shares in enumerate(prep_shares):
            if len(shares) != self.SHARES or any(
                len(share) != self.prep_share_len() for share in shares
            ):
                decodable[r] = False
                continue
            values, in_range = F.candidates(b"".join(s[:verifiers_bytes] for s in shares))
            if not bool(in_range.all()):
                decodable[r] = False
                continue
            verifiers[r] = F.sum(values.reshape(self.SHARES, self._verifiers_len, F.LIMBS), axis=-2)
            parts[r] = [s[verifiers_bytes:] for s in shares]

        accept = decodable.copy()
        for p in range(self.PROOFS):
            accept &= flp.decide(self._slice(verifiers, p, flp.VERIFIER_LEN))
        return [
            (self._joint_rand_seed(dst, parts[r]) if self.uses_joint_rand else b"")
            if accept[r]
            else None
            for r in range(n)
        ]

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

    def _xof_vec(self, seed: bytes, dst: bytes, binder: bytes, length: int) -> FieldArray:
        return self.xof.expand_into_vec(self.field, seed, dst, binder, length)

    def _helper_meas_share(self, dst: dict[int, bytes], agg_id: int, seed: bytes) -> FieldArray:
        return self._xof_vec(seed, dst[USAGE_MEAS_SHARE], bytes((agg_id,)), self.flp.MEAS_LEN)

    def _helper_proofs_share(self, dst: dict[int, bytes], agg_id: int, seed: bytes) -> FieldArray:
        binder = bytes((self.PROOFS, agg_id))
        return self._xof_vec(seed, dst[USAGE_PROOF_SHARE], binder, self._proofs_len)

    def _joint_rand_part(
        self, dst: dict[int, bytes], agg_id: int, blind: bytes, meas_share: FieldArray, nonce: bytes
    ) -> bytes:
        binder = bytes((agg_id,)) + nonce + self.field.encode(meas_share)
        return self.xof.derive_seed(blind, dst[USAGE_JOINT_RAND_PART], binder)

    def _joint_rand_seed(self, dst: dict[int, bytes], parts: Sequence[bytes]) -> bytes:
        zero = bytes(self._seed)
        return self.xof.derive_seed(zero, dst[USAGE_JOINT_RAND_SEED], b"".join(parts))

    def _joint_rands(self, dst: dict[int, bytes], seed: bytes) -> FieldArray:
        return self._xof_vec(
            seed,
            dst[USAGE_JOINT_RANDOMNESS],
            bytes((self.PROOFS,)),
            self.flp.JOINT_RAND_LEN * self.PROOFS,
        )

    def _decode_shares(
        self,
        dst: dict[int, bytes],
        agg_id: int,
        nonce: bytes,
        public_share: bytes,
        input_share: bytes,
    ) -> tuple[FieldArray, FieldArray, bytes, list[bytes]] | None:
        """(meas share, proofs share, blind, joint rand parts), or None if anything is malformed."""
        F, flp, size = self.field, self.flp, self._seed
        if len(nonce) != self.NONCE_SIZE:
            return None
        if len(public_share) != self.public_share_len():
            return None
        if len(input_share) != self.input_share_len(agg_id):
            return None
        parts = [public_share[i : i + size] for i in range(0, len(public_share), size)]
        if agg_id == 0:
            field_bytes = (flp.MEAS_LEN + self._proofs_len) * F.ENCODED_SIZE
            values, in_range = F.candidates(input_share[:field_bytes])
            if not bool(in_range.all()):
                return None
            meas, proofs = values[: flp.MEAS_LEN], values[flp.MEAS_LEN :]
            blind = input_share[field_bytes:]
        else:
            seeds_end = self.version.helper_seeds * size
            meas = self._helper_meas_share(dst, agg_id, input_share[:size])
            proofs = self._helper_proofs_share(
                dst, agg_id, input_share[seeds_end - size : seeds_end]
            )
            blind = input_share[seeds_end:]
        return meas, proofs, blind, parts


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
