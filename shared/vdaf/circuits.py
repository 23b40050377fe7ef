"""Validity circuits of the Prio3 instances (VDAF-08 §7.4) and the multi-hot histogram.

Every circuit works on a batch: `meas` has element shape (N, MEAS_LEN), `joint_rand` (N,
JOINT_RAND_LEN), and the result is one field element per report, zero for valid measurements.
A circuit does not call its gadgets one call at a time: it builds the inputs of all calls of a
gadget as one array of element shape (N, calls, ARITY) and hands it to an oracle that the FLP
supplies. The prover's oracle evaluates the gadget and records its wires; the verifier's oracle
records the wires and answers from the gadget polynomial in the proof (VDAF-08 §7.3.3).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shared.vdaf.field import Field, Field64, Field128, FieldArray
from shared.vdaf.gadgets import Gadget, Mul, ParallelSum, Range2

#: Called with the stacked inputs (N, calls, ARITY) of one gadget; returns its outputs (N, calls).
GadgetOracle = Callable[[FieldArray], FieldArray]


class Valid(ABC):
    """A validity circuit with its affine-aggregatable encoding (VDAF-08 §7.3.2)."""

    field: type[Field]
    MEAS_LEN: int
    JOINT_RAND_LEN: int
    OUTPUT_LEN: int
    GADGETS: tuple[Gadget, ...]
    GADGET_CALLS: tuple[int, ...]

    @abstractmethod
    def eval(
        self,
        meas: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
        gadgets: Sequence[GadgetOracle],
    ) -> FieldArray:
        """The circuit output for each report of the batch: element shape (N,)."""

    @abstractmethod
    def encode(self, measurement: Any) -> list[int]:
        """The measurement as MEAS_LEN integers; ValueError if it is out of range."""

    @abstractmethod
    def truncate(self, meas: FieldArray) -> FieldArray:
        """The aggregatable part of a batch of (shares of) encoded measurements: (N, OUTPUT_LEN)."""

    @abstractmethod
    def decode(self, output: list[int], num_measurements: int) -> Any:
        """The aggregate result from the unsharded aggregate (OUTPUT_LEN integers)."""

    def params(self) -> dict[str, int]:
        """The circuit's parameters, named as in the VDAF-08 test vectors."""
        return {}


def _bits_of(value: int, bits: int) -> list[int]:
    """Little-endian bit decomposition (VDAF-08 §6.1.2 encode_into_bit_vector)."""
    if value < 0 or value >= 1 << bits:
        raise ValueError(f"value {value} does not fit in {bits} bits")
    return [(value >> i) & 1 for i in range(bits)]


def _from_bits(field: type[Field], bits: FieldArray) -> FieldArray:
    """Inverse of the bit decomposition along the last element axis (decode_from_bit_vector)."""
    weights = field.from_ints([1 << i for i in range(bits.shape[-2])])
    return field.inner(bits, weights)


def _shares_inv(field: type[Field], num_shares: int) -> FieldArray:
    return field.inv(field.from_int(num_shares))


class Count(Valid):
    """Prio3Count's circuit: x * x - x == 0 (VDAF-08 §7.4.1)."""

    field = Field64
    MEAS_LEN = 1
    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1
    GADGETS = (Mul(),)
    GADGET_CALLS = (1,)

    def eval(
        self,
        meas: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
        gadgets: Sequence[GadgetOracle],
    ) -> FieldArray:
        x = meas[:, 0]
        squared = gadgets[0](np.stack([x, x], axis=1)[:, None])[:, 0]
        return self.field.sub(squared, x)

    def encode(self, measurement: Any) -> list[int]:
        if measurement not in (0, 1):
            raise ValueError("Count measurement must be 0 or 1")
        return [int(measurement)]

    def truncate(self, meas: FieldArray) -> FieldArray:
        return meas

    def decode(self, output: list[int], num_measurements: int) -> int:
        return output[0]


class Sum(Valid):
    """Prio3Sum's circuit: each of `bits` bits is 0 or 1 (VDAF-08 §7.4.2)."""

    field = Field128
    JOINT_RAND_LEN = 1
    OUTPUT_LEN = 1

    def __init__(self, bits: int) -> None:
        if bits <= 0 or 1 << bits >= self.field.MODULUS:
            raise ValueError("Sum bits must be positive and below the field size")
        self.bits = bits
        self.MEAS_LEN = bits
        self.GADGETS = (Range2(),)
        self.GADGET_CALLS = (bits,)

    def eval(
        self,
        meas: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
        gadgets: Sequence[GadgetOracle],
    ) -> FieldArray:
        checks = gadgets[0](meas[:, :, None])
        r_powers = self.field.powers(joint_rand[:, 0], self.bits + 1)[:, 1:]
        return self.field.inner(checks, r_powers)

    def encode(self, measurement: Any) -> list[int]:
        return _bits_of(int(measurement), self.bits)

    def truncate(self, meas: FieldArray) -> FieldArray:
        return _from_bits(self.field, meas)[:, None]

    def decode(self, output: list[int], num_measurements: int) -> int:
        return output[0]

    def params(self) -> dict[str, int]:
        return {"bits": self.bits}


class _ChunkedBitCheck(Valid):
    """Circuits whose elements must all be bits, checked in chunks by ParallelSum(Mul).

    SumVec, Histogram and MultiHotHistogram share this check (VDAF-08 §7.4.3-4): the sum over
    elements x_i of r^(i+1) * x_i * (x_i - 1/SHARES), padding elements zero and the powers of r
    running on across the padding.
    """

    def __init__(self, meas_len: int, chunk_length: int) -> None:
        if chunk_length <= 0:
            raise ValueError(f"{type(self).__name__} chunk_length must be positive")
        self.chunk_length = chunk_length
        self.MEAS_LEN = meas_len
        self.GADGETS = (ParallelSum(Mul(), chunk_length),)
        self.GADGET_CALLS = (-(-meas_len // chunk_length),)

    def _range_check(
        self, meas: FieldArray, r: FieldArray, num_shares: int, oracle: GadgetOracle
    ) -> FieldArray:
        field = self.field
        n = meas.shape[0]
        calls = self.GADGET_CALLS[0]
        padded_len = calls * self.chunk_length
        elems = field.zeros((n, padded_len))
        elems[:, : self.MEAS_LEN] = meas
        r_powers = field.powers(r, padded_len + 1)[:, 1:]
        wires = np.empty((n, padded_len, 2, field.LIMBS), dtype=np.uint64)
        wires[:, :, 0] = field.mul(r_powers, elems)
        wires[:, :, 1] = field.sub(elems, _shares_inv(field, num_shares))
        outputs = oracle(wires.reshape(n, calls, 2 * self.chunk_length, field.LIMBS))
        return field.sum(outputs, axis=-1)


class SumVec(_ChunkedBitCheck):
    """Prio3SumVec's circuit: `length` integers of `bits` bits each (VDAF-08 §7.4.3).

    The field is a parameter only so that the experimental multiproof variant can run it over
    Field64; Prio3SumVec itself uses Field128.
    """

    JOINT_RAND_LEN = 1

    def __init__(
        self, length: int, bits: int, chunk_length: int, field: type[Field] = Field128
    ) -> None:
        if length <= 0 or bits <= 0:
            raise ValueError("SumVec length and bits must be positive")
        if 1 << bits >= field.MODULUS:
            raise ValueError("SumVec bits must be below the field size")
        super().__init__(length * bits, chunk_length)
        self.field = field
        self.length = length
        self.bits = bits
        self.OUTPUT_LEN = length

    def eval(
        self,
        meas: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
        gadgets: Sequence[GadgetOracle],
    ) -> FieldArray:
        return self._range_check(meas, joint_rand[:, 0], num_shares, gadgets[0])

    def encode(self, measurement: Any) -> list[int]:
        values = list(measurement)
        if len(values) != self.length:
            raise ValueError(f"SumVec measurement must have {self.length} entries")
        return [bit for value in values for bit in _bits_of(int(value), self.bits)]

    def truncate(self, meas: FieldArray) -> FieldArray:
        n = meas.shape[0]
        return _from_bits(self.field, meas.reshape(n, self.length, self.bits, self.field.LIMBS))

    def decode(self, output: list[int], num_measurements: int) -> list[int]:
        return output

    def params(self) -> dict[str, int]:
        return {"length": self.length, "bits": self.bits, "chunk_length": self.chunk_length}


class Histogram(_ChunkedBitCheck):
    """Prio3Histogram's circuit: a one-hot vector of `length` buckets (VDAF-08 §7.4.4)."""

    field = Field128
    JOINT_RAND_LEN = 2

    def __init__(self, length: int, chunk_length: int) -> None:
        if length <= 0:
            raise ValueError("Histogram length must be positive")
        super().__init__(length, chunk_length)
        self.length = length
        self.OUTPUT_LEN = length

    def eval(
        self,
        meas: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
        gadgets: Sequence[GadgetOracle],
    ) -> FieldArray:
        field = self.field
        range_check = self._range_check(meas, joint_rand[:, 0], num_shares, gadgets[0])
        sum_check = field.sub(field.sum(meas, axis=-1), _shares_inv(field, num_shares))
        return _combine_checks(field, joint_rand[:, 1], range_check, sum_check)

    def encode(self, measurement: Any) -> list[int]:
        index = int(measurement)
        if not 0 <= index < self.length:
            raise ValueError(f"Histogram bucket must be in [0, {self.length})")
        encoded = [0] * self.length
        encoded[index] = 1
        return encoded

    def truncate(self, meas: FieldArray) -> FieldArray:
        return meas

    def decode(self, output: list[int], num_measurements: int) -> list[int]:
        return output

    def params(self) -> dict[str, int]:
        return {"length": self.length, "chunk_length": self.chunk_length}


class MultiHotHistogram(_ChunkedBitCheck):
    """A bit vector of `length` buckets with at most `max_count` ones (VDAF-08 reference code).

    The client appends the bits of `offset + sum(meas)`, offset = 2^bits_for_count - 1 - max_count,
    so that the bound follows from range checks alone. Private codepoint 0xFFFFFFFF.
    """

    field = Field128
    JOINT_RAND_LEN = 2

    def __init__(self, length: int, max_count: int, chunk_length: int) -> None:
        if length <= 0:
            raise ValueError("MultiHotHistogram length must be positive")
        if not 0 < max_count <= length:
            raise ValueError("MultiHotHistogram max_count must be in [1, length]")
        self.bits_for_count = max_count.bit_length()
        super().__init__(length + self.bits_for_count, chunk_length)
        self.length = length
        self.max_count = max_count
        self.offset = (1 << self.bits_for_count) - 1 - max_count
        self.OUTPUT_LEN = length

    def eval(
        self,
        meas: FieldArray,
        joint_rand: FieldArray,
        num_shares: int,
        gadgets: Sequence[GadgetOracle],
    ) -> FieldArray:
        field = self.field
        range_check = self._range_check(meas, joint_rand[:, 0], num_shares, gadgets[0])
        shares_inv = _shares_inv(field, num_shares)
        count_check = field.add(
            field.mul(field.from_int(self.offset), shares_inv),
            field.sum(meas[:, : self.length], axis=-1),
        )
        count_check = field.sub(count_check, _from_bits(field, meas[:, self.length :]))
        return _combine_checks(field, joint_rand[:, 1], range_check, count_check)

    def encode(self, measurement: Any) -> list[int]:
        bits = [int(b) for b in measurement]
        if len(bits) != self.length or any(b not in (0, 1) for b in bits):
            raise ValueError(f"MultiHotHistogram measurement must be {self.length} bits")
        weight = sum(bits)
        if weight > self.max_count:
            raise ValueError(f"MultiHotHistogram measurement has more than {self.max_count} ones")
        return bits + _bits_of(self.offset + weight, self.bits_for_count)

    def truncate(self, meas: FieldArray) -> FieldArray:
        return meas[:, : self.length]

    def decode(self, output: list[int], num_measurements: int) -> list[int]:
        return output

    def params(self) -> dict[str, int]:
        return {
            "length": self.length,
            "max_count": self.max_count,
            "chunk_length": self.chunk_length,
        }


def _combine_checks(
    field: type[Field], r: FieldArray, range_check: FieldArray, second_check: FieldArray
) -> FieldArray:
    """r * range_check + r^2 * second_check: one random linear combination of both checks."""
    return field.add(field.mul(r, range_check), field.mul(field.mul(r, r), second_check))
