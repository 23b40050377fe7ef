"""The generic FLP of BBCGGI19 Theorem 4.3 (VDAF-08 §7.3, VDAF-20 §7.3), batched.

`prove`, `query` and `decide` take a whole batch of reports at once: every array has a leading
report axis. Wire and gadget polynomials are handled with NTTs over the P-th roots of unity,
P = next_power_of_2(1 + calls), exactly as the reference construction fixes them.

The two drafts differ only in how the proof carries each gadget polynomial (the rest, circuit
evaluation, wire polynomials, query randomness and `decide`, is one implementation):
- VDAF-08 (`FlpGeneric`) sends its L monomial coefficients;
- VDAF-18..20 (`FlpLagrange`) send its values at the first L of the M-th roots of unity
  (M = next_power_of_2(L)), the Lagrange basis of VDAF-20 §6.1.3.

Two identities keep the work in a few array operations:
- the gadget polynomial's values at the M >= D(P-1)+1 roots of unity are the gadget evaluated
  pointwise on the wire polynomials there (one size-P inverse NTT and one size-M NTT per wire);
- the gadget output of call k is the polynomial's value at alpha_P^k: for coefficients, one fold
  modulo x^P - 1 and one size-P NTT give all calls at once; for Lagrange values, it is the value
  at index k * M / P.
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

    @property
    def M(self) -> int:
        """The number of roots of unity the gadget polynomial is evaluated at."""
        return next_power_of_2(self.poly_len)


class FlpGeneric:
    """An FLP built from a validity circuit; gadget polynomials as coefficients (VDAF-08 §7.3.3).

    A circuit with several outputs (EVAL_OUTPUT_LEN > 1, VDAF-20 circuits only) has them reduced to
    one by a random linear combination whose coefficients come first in the query randomness.
    """

    def __init__(self, valid: Valid) -> None:
        if len(valid.GADGETS) != len(valid.GADGET_CALLS):
            raise ValueError("every gadget needs a call count")
        self.valid = valid
        self.field: type[Field] = valid.field
        self.MEAS_LEN = valid.MEAS_LEN
        self.OUTPUT_LEN = valid.OUTPUT_LEN
        self.JOINT_RAND_LEN = valid.JOINT_RAND_LEN
        self.PROVE_RAND_LEN = sum(g.ARITY for g in valid.GADGETS)
        self.EVAL_OUTPUT_LEN = valid.EVAL_OUTPUT_LEN
        self._fold_len = self.EVAL_OUTPUT_LEN if self.EVAL_OUTPUT_LEN > 1 else 0
        self.QUERY_RAND_LEN = self._fold_len + len(valid.GADGETS)
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
            padded = F.zeros((n, layout.arity, layout.M))
            padded[:, :, : layout.P] = wire_polys
            at_roots = np.swapaxes(F.ntt(padded), 1, 2)
            gadget_poly = self._proof_gadget_poly(layout, layout.gadget.eval(F, at_roots))
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

        coeffs: list[FieldArray] = []

        def verifier_oracle(layout: _GadgetLayout) -> GadgetOracle:
            start = layout.proof_offset + layout.arity
            poly_coeffs, outputs = self._read_gadget_poly(
                layout, proof[:, start : start + layout.poly_len]
            )
            coeffs.append(poly_coeffs)

            def oracle(inputs: FieldArray) -> FieldArray:
                wires.append(inputs)
                return outputs

            return oracle

        out = self.valid.eval(
            meas, joint_rand, num_shares, [verifier_oracle(lay) for lay in self._layouts]
        )

        verifier = F.zeros((n, self.VERIFIER_LEN))
        if self._fold_len:
            verifier[:, 0] = F.inner(out, query_rand[:, : self._fold_len])
        else:
            verifier[:, 0] = out[:, 0]
        usable = np.ones(n, dtype=np.bool_)
        one = F.from_int(1)
        for index, (layout, inputs) in enumerate(zip(self._layouts, wires, strict=True)):
            t = query_rand[:, self._fold_len + index]
            usable &= ~F.equal(F.pow(t, layout.P), one)
            seeds = proof[:, layout.proof_offset : layout.proof_offset + layout.arity]
            wire_polys = F.intt(self._wire_values(layout, seeds, inputs))
            start = layout.verifier_offset
            verifier[:, start : start + layout.arity] = F.poly_eval(wire_polys, t[:, None])
            verifier[:, start + layout.arity] = F.poly_eval(coeffs[index], t)
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

    def _proof_gadget_poly(self, layout: _GadgetLayout, at_roots: FieldArray) -> FieldArray:
        """The proof's gadget polynomial from its values at the M-th roots: L coefficients."""
        return self.field.intt(at_roots)[:, : layout.poly_len]

    def _read_gadget_poly(
        self, layout: _GadgetLayout, sent: FieldArray
    ) -> tuple[FieldArray, FieldArray]:
        """(coefficients, outputs of calls 1..calls) of the gadget polynomial the proof sent."""
        return sent, self.field.ntt(_fold(self.field, sent, layout.P))[:, 1 : layout.calls + 1]

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


class FlpLagrange(FlpGeneric):
    """The FLP of VDAF-20 §7.3: gadget polynomials as values at the M-th roots of unity.

    The proof carries the first L of the M values (the polynomial has degree < L); the verifier
    extends them to all M with a fixed linear map before reading outputs and interpolating.
    """

    def _proof_gadget_poly(self, layout: _GadgetLayout, at_roots: FieldArray) -> FieldArray:
        return np.ascontiguousarray(at_roots[:, : layout.poly_len])

    def _read_gadget_poly(
        self, layout: _GadgetLayout, sent: FieldArray
    ) -> tuple[FieldArray, FieldArray]:
        F, n = self.field, sent.shape[0]
        values = F.zeros((n, layout.M))
        values[:, : layout.poly_len] = sent
        missing = _extension_map(F, layout.poly_len, layout.M)
        if missing.shape[0]:
            values[:, layout.poly_len :] = F.inner(sent[:, None], missing[None])
        step = layout.M // layout.P
        outputs = values[:, step : step * (layout.calls + 1) : step]
        return F.intt(values)[:, : layout.poly_len], np.ascontiguousarray(outputs)


_EXTENSION_MAPS: dict[tuple[type[Field], int, int], FieldArray] = {}


def _extension_map(field: type[Field], known: int, size: int) -> FieldArray:
    """B with values[known:] = B @ values[:known] for every polynomial of degree < `known`.

    Values sit at the `size`-th roots w^i in natural order. The coefficient of x^k is
    (1/size) * sum_i values[i] * w^(-ik), so requiring it to vanish for k = known..size-1 is a
    linear system in the unknown values whose matrix, a scaled Vandermonde matrix in the distinct
    w^(-i), is invertible (VDAF-20 §6.1.3 extend_values_to_power_of_2 computes the same values).
    Solved once per (field, known, size) with Python integers; for the degree-2 gadgets of every
    registered circuit it is a single row.
    """
    key = (field, known, size)
    cached = _EXTENSION_MAPS.get(key)
    if cached is not None:
        return cached
    p = field.MODULUS
    w_inv = pow(field.root(size), -1, p)
    rows = []
    for k in range(known, size):
        powers = field.to_ints(field.powers(field.from_int(pow(w_inv, k, p)), size))
        # Unknown columns first, then the known ones moved to the right-hand side.
        rows.append(powers[known:] + [-x % p for x in powers[:known]])
    m = size - known
    for col in range(m):
        pivot = next(r for r in range(col, m) if rows[r][col])
        rows[col], rows[pivot] = rows[pivot], rows[col]
        scale = pow(rows[col][col], -1, p)
        rows[col] = [x * scale % p for x in rows[col]]
        for r in range(m):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [(x - factor * y) % p for x, y in zip(rows[r], rows[col], strict=True)]
    matrix = field.from_ints([x for row in rows for x in row[m:]]).reshape(m, known, field.LIMBS)
    _EXTENSION_MAPS[key] = matrix
    return matrix
