"""Gadgets of the generic FLP (VDAF-08 §7.3.1, BBCGGI19 §4).

A gadget is a small arithmetic circuit of fixed arity and degree. Here `eval` works on whole
arrays: its input has shape (..., ARITY) (the trailing limb axis aside) and its output shape (...),
so one call evaluates every gadget call of every report of a batch. The gadget polynomial that the
prover needs is obtained from the same `eval` applied pointwise to wire-polynomial evaluations
(see `shared.vdaf.flp`), so a gadget never needs a separate polynomial implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from shared.vdaf.field import Field, FieldArray


class Gadget(ABC):
    """A gadget G: F^ARITY -> F of arithmetic degree DEGREE."""

    ARITY: int
    DEGREE: int

    @abstractmethod
    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        """Evaluate on inputs of element shape (..., ARITY); returns element shape (...)."""


class Mul(Gadget):
    """x * y."""

    ARITY = 2
    DEGREE = 2

    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        return field.mul(inp[..., 0, :], inp[..., 1, :])


class PolyEval(Gadget):
    """p(x) for a fixed polynomial p with integer coefficients (lowest degree first)."""

    ARITY = 1

    def __init__(self, coeffs: Sequence[int]) -> None:
        stripped = list(coeffs)
        while stripped and stripped[-1] == 0:
            stripped.pop()
        if not stripped:
            raise ValueError("PolyEval needs a non-zero polynomial")
        self.coeffs = tuple(stripped)
        self.DEGREE = len(stripped) - 1

    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        coeffs = field.from_ints(self.coeffs)
        return field.poly_eval(coeffs, inp[..., 0, :])


class Range2(PolyEval):
    """x^2 - x, zero exactly on {0, 1}."""

    def __init__(self) -> None:
        super().__init__((0, -1, 1))


class ParallelSum(Gadget):
    """Sum of `count` copies of a subcircuit on consecutive input slices (BBCGGI19 §4.4)."""

    def __init__(self, subcircuit: Gadget, count: int) -> None:
        if count <= 0:
            raise ValueError("ParallelSum count must be positive")
        self.subcircuit = subcircuit
        self.count = count
        self.ARITY = subcircuit.ARITY * count
        self.DEGREE = subcircuit.DEGREE

    def eval(self, field: type[Field], inp: FieldArray) -> FieldArray:
        sub_arity = self.subcircuit.ARITY
        split = inp.reshape(*inp.shape[:-2], self.count, sub_arity, inp.shape[-1])
        return field.sum(self.subcircuit.eval(field, split), axis=-1)
