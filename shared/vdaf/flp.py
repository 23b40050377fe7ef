"""The generic fully linear proof system of BBCGGI19 Theorem 4.3 (VDAF-08 §7.3), batched.

`prove`, `query` and `decide` take a whole batch of reports at once: every array has a leading
report axis. Wire and gadget polynomials are handled with NTTs over the P-th roots of unity,
P = next_power_of_2(1 + calls), exactly as the reference construction fixes them.

Two identities keep the work in a few array operations:
- the gadget polynomial of a degree-D gadget is recovered from the gadget evaluated pointwise on
  the wire polynomials at M >= D(P-1)+1 roots of unity (M a power of two), then one inverse NTT;
- evaluating the gadget polynomial at alpha^k with alpha^P = 1 equals evaluating it reduced
  modulo x^P - 1, so all calls' outputs come from one fold and one size-P NTT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.vdaf.circuits import GadgetOracle, Valid
from shared.vdaf.field import Field, FieldArray
from shared.vdaf.gadgets import Gadget


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True, slots=True)
class _GadgetLayout:
    """Where one gadget's pieces sit in the proof and verifier, and its polynomial sizes."""

    gadget: Gadget
    calls: int
    P: int
    proof_offset: int
    verifier_offset: int

    @property
    def arity(self) -> int:
        return self.gadget.ARITY

    @property
    def poly_len(self) -> int:
        return self.gadget.DEGREE * (self.P - 1) + 1


class FlpGeneric:
    """An FLP built from a validity circuit (VDAF-08 §7.3.3)."""

    def __init__(self, valid: Valid) -> None:
        if len(valid.GADGETS) != len(valid.GADGET_CALLS):
            raise ValueError("every gadget needs a call count")
        self.valid = valid
        self.field: type[Field] = valid.field
        self.MEAS_LEN = valid.MEAS_LEN
        self.OUTPUT_LEN = valid.OUTPUT_LEN
        self.JOINT_RAND_LEN = valid.JOINT_RAND_LEN
        self.PROVE_RAND_LEN = sum(g.ARITY for g in valid.GADGETS)
        self.QUERY_RAND_LEN = len(valid.GADGETS)
        layouts = []
        proof_offset, verifier_offset = 0, 1
        for gadget, calls in zip(valid.GADGETS, valid.GADGET_CALLS, strict=True):
            P = next_power_of_2(1 + calls)
            if self.field.GEN_ORDER % P != 0:
                raise ValueError("too many gadget calls for the field's roots of unity")
            layout = _GadgetLayout(gadget, calls, P, proof_offset, verifier_offset)
            layouts.append(layout)
            proof_offset += layout.arity + layout.poly_len
            verifier_offset += layout.arity + 1
        self._layouts = tuple(layouts)
        self.PROOF_LEN = proof_offset
        self.VERIFIER_LEN = verifier_offset

    def prove(self, meas: FieldArray, prove_rand: FieldArray, joint_rand: FieldArray) -> FieldArray:
        """Proofs (N, PROOF_LEN) that each measurement of the batch is valid."""
        F = self.field
        wires: list[FieldArray] = []

        def prover_oracle(layout: _GadgetLayout) -> GadgetOracle:
            def oracle(inputs: FieldArray) -> FieldArray:
                wires.append(inputs)
                return layout.gadget.eval(F, inputs)

            return oracle

        self.valid.eval(meas, joint_rand, 1, [prover_oracle(lay) for lay in self._layouts])

        n = meas.shape[0]
        proof = F.zeros((n, self.PROOF_LEN))
        seed_offset = 0
        for layout, inputs in zip(self._layouts, wires, strict=True):
            seeds = prove_rand[:, seed_offset : seed_offset + layout.arity]
            seed_offset += layout.arity
            wire_polys = F.intt(self._wire_values(layout, seeds, inputs))
            M = next_power_of_2(layout.poly_len)
            padded = F.zeros((n, layout.arity, M))
            padded[:, :, : layout.P] = wire_polys
            at_roots = np.swapaxes(F.ntt(padded), 1, 2)
            gadget_poly = F.intt(layout.gadget.eval(F, at_roots))[:, : layout.poly_len]
            start = layout.proof_offset
            proof[:, start : start + layout.arity] = seeds
            proof[:, start + layout.arity : start + layout.arity + layout.poly_len] = gadget_poly
        return proof

    def query(
        self,
        meas: FieldArray,
        proof: FieldArray,
        query_rand: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
    ) -> tuple[FieldArray, npt.NDArray[np.bool_]]:
        """Verifier shares (N, VERIFIER_LEN), and which reports had usable query randomness.

        A report whose query point t is a P-th root of unity cannot be checked without leaking a
        gadget output (VDAF-08 §7.3.3), so it is marked unusable: the spec's query aborts.
        """
        F = self.field
        n = meas.shape[0]
        wires: list[FieldArray] = []

        def verifier_oracle(layout: _GadgetLayout) -> GadgetOracle:
            start = layout.proof_offset + layout.arity
            coeffs = proof[:, start : start + layout.poly_len]

            def oracle(inputs: FieldArray) -> FieldArray:
                wires.append(inputs)
                return F.ntt(_fold(F, coeffs, layout.P))[:, 1 : layout.calls + 1]

            return oracle

        v = self.valid.eval(
            meas, joint_rand, num_shares, [verifier_oracle(lay) for lay in self._layouts]
        )

        verifier = F.zeros((n, self.VERIFIER_LEN))
        verifier[:, 0] = v
        usable = np.ones(n, dtype=np.bool_)
        one = F.from_int(1)
        for index, (layout, inputs) in enumerate(zip(self._layouts, wires, strict=True)):
            t = query_rand[:, index]
            usable &= ~F.equal(F.pow(t, layout.P), one)
            seeds = proof[:, layout.proof_offset : layout.proof_offset + layout.arity]
            wire_polys = F.intt(self._wire_values(layout, seeds, inputs))
            start = layout.verifier_offset
            verifier[:, start : start + layout.arity] = F.poly_eval(wire_polys, t[:, None])
            gadget_start = layout.proof_offset + layout.arity
            coeffs = proof[:, gadget_start : gadget_start + layout.poly_len]
            verifier[:, start + layout.arity] = F.poly_eval(coeffs, t)
        return verifier, usable

    def decide(self, verifier: FieldArray) -> npt.NDArray[np.bool_]:
        """Whether each (unsharded) verifier accepts: circuit output zero and gadgets consistent."""
        F = self.field
        accept: npt.NDArray[np.bool_] = F.is_zero(verifier[:, 0])
        for layout in self._layouts:
            start = layout.verifier_offset
            x = verifier[:, start : start + layout.arity]
            y = verifier[:, start + layout.arity]
            accept &= F.equal(layout.gadget.eval(F, x), y)
        return accept

    def _wire_values(
        self, layout: _GadgetLayout, seeds: FieldArray, inputs: FieldArray
    ) -> FieldArray:
        """Wire j's values at alpha^0..alpha^(P-1): the seed, then call k's j-th input, then 0."""
        n = seeds.shape[0]
        values = self.field.zeros((n, layout.arity, layout.P))
        values[:, :, 0] = seeds
        values[:, :, 1 : layout.calls + 1] = np.swapaxes(inputs, 1, 2)
        return values


def _fold(field: type[Field], coeffs: FieldArray, P: int) -> FieldArray:
    """Reduce polynomials modulo x^P - 1: coefficient j is added into slot j mod P."""
    n, length = coeffs.shape[0], coeffs.shape[1]
    rows = -(-length // P)
    padded = field.zeros((n, rows * P))
    padded[:, :length] = coeffs
    return field.sum(padded.reshape(n, rows, P, field.LIMBS), axis=-2)
