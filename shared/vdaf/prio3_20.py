"""Prio3 as draft-irtf-cfrg-vdaf-20 specifies it (VDAF-20 §7), on the shared Prio3 core.

What VDAF-20 changes against VDAF-08 on the wire, and where it lives:
- the DST: VERSION 18 and the application context string appended (§6.2.3; `VDAF_20` below);
- XofTurboShake128: 32-byte seeds, `u16le(len(dst)) || dst || u8(len(seed)) || seed || binder`
  (§6.2.1; `shared.vdaf.xof.XofTurboShake128V20`);
- one share seed per Helper for its measurement and proofs shares (§7.2.1; `VDAF_20`);
- gadget polynomials sent as Lagrange values (§7.3.3; `shared.vdaf.flp.FlpLagrange`);
- the circuits: Sum over Field64 with a range-checked bound (`SumMax`), one joint-randomness
  element per chunk and several circuit outputs (`joint_rand_per_chunk`), MultihotCountVec;
- the codepoints below (§10).
"""

from __future__ import annotations

from typing import Final

from shared.vdaf.circuits import Count, Histogram, MultihotCountVec, SumMax, SumVec
from shared.vdaf.field import Field, Field64, Field128
from shared.vdaf.flp import FlpLagrange
from shared.vdaf.prio3 import Prio3, Prio3Version
from shared.vdaf.xof import XofTurboShake128V20

#: The VERSION byte of VDAF-20's domain-separation tags: drafts 18 to 20 all use 18 (§6.2.3).
VDAF_VERSION: Final = 18

#: Algorithm identifiers (VDAF-20 §10, table "codepoints"); 0xFFFF0000..0xFFFFFFFF are private.
ALGO_PRIO3_COUNT: Final = 0x00000001

ALGO_PRIO3_SUM: Final = 0x00000002

ALGO_PRIO3_SUM_VEC: Final = 0x00000003

ALGO_PRIO3_HISTOGRAM: Final = 0x00000004

ALGO_PRIO3_MULTIHOT_COUNT_VEC: Final = 0x00000005

#: The private codepoint of the reference code's Prio3SumVecWithMultiproof (VDAF-20 §7.5).
ALGO_PRIO3_PRIVATE: Final = 0xFFFFFFFF

#: VERIFY_KEY_SIZE = the XOF's seed size (VDAF-20 §7.2).
VERIFY_KEY_SIZE: Final = XofTurboShake128V20.SEED_SIZE

#: VDAF-20 §7.2: 32-byte seeds, one share seed per Helper, Lagrange-basis proofs, a context.
VDAF_20: Final = Prio3Version("VDAF-20", VDAF_VERSION, XofTurboShake128V20, FlpLagrange, 1, True)


def prio3_count(shares: int = 2) -> Prio3:
    """Prio3Count (VDAF-20 §7.4.1)."""
    return Prio3(ALGO_PRIO3_COUNT, Count(), shares, version=VDAF_20)


def prio3_sum(max_measurement: int, shares: int = 2) -> Prio3:
    """Prio3Sum: an integer in [0, max_measurement] (VDAF-20 §7.4.2)."""
    return Prio3(ALGO_PRIO3_SUM, SumMax(max_measurement), shares, version=VDAF_20)


def prio3_sum_vec(length: int, max_measurement: int, chunk_length: int, shares: int = 2) -> Prio3:
    """Prio3SumVec over Field128 (VDAF-20 §7.4.3)."""
    valid = SumVec(length, max_measurement, chunk_length, joint_rand_per_chunk=True)
    return Prio3(ALGO_PRIO3_SUM_VEC, valid, shares, version=VDAF_20)


def prio3_histogram(length: int, chunk_length: int, shares: int = 2) -> Prio3:
    """Prio3Histogram (VDAF-20 §7.4.4)."""
    valid = Histogram(length, chunk_length, joint_rand_per_chunk=True)
    return Prio3(ALGO_PRIO3_HISTOGRAM, valid, shares, version=VDAF_20)


def prio3_multihot_count_vec(
    length: int, max_weight: int, chunk_length: int, shares: int = 2
) -> Prio3:
    """Prio3MultihotCountVec: `length` bits with at most `max_weight` ones (VDAF-20 §7.4.5)."""
    valid = MultihotCountVec(length, max_weight, chunk_length, joint_rand_per_chunk=True)
    return Prio3(ALGO_PRIO3_MULTIHOT_COUNT_VEC, valid, shares, version=VDAF_20)


def prio3_sum_vec_with_multiproof(
    field: type[Field],
    proofs: int,
    length: int,
    max_measurement: int,
    chunk_length: int,
    shares: int = 2,
) -> Prio3:
    """The SumVec circuit over `field` with `proofs` proofs (private codepoint).

    A circuit with joint randomness needs Field128, or Field64 with at least 3 proofs, for
    robustness (VDAF-20 §9.5).
    """
    if field is Field64 and proofs < 3:
        raise ValueError("SumVec over Field64 needs at least 3 proofs")
    if field not in (Field64, Field128):
        raise ValueError("SumVecWithMultiproof runs over Field64 or Field128")
    valid = SumVec(length, max_measurement, chunk_length, field=field, joint_rand_per_chunk=True)
    return Prio3(ALGO_PRIO3_PRIVATE, valid, shares, proofs, version=VDAF_20)
