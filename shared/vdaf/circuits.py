"""Validity circuits of the Prio3 instances (VDAF-08 §7.4, VDAF-20 §7.4) and the multi-hot vector.

Every circuit works on a batch: `meas` has element shape (N, MEAS_LEN), the joint randomness `jr`
(N, JOINT_RAND_LEN), and the result is (N, EVAL_OUTPUT_LEN), all zero for valid measurements.
VDAF-08 circuits have one output; VDAF-20 lets a circuit return several, which the FLP reduces
with query randomness. `shares` is the number of shares `meas` is one of (1 for the prover).

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

#: One oracle per gadget of the circuit, in order.
Oracles = Sequence[GadgetOracle]


class Valid(ABC):
    """A validity circuit with its affine-aggregatable encoding (VDAF-08 §7.3.2)."""

    field: type[Field]
    MEAS_LEN: int
    JOINT_RAND_LEN: int
    OUTPUT_LEN: int
    EVAL_OUTPUT_LEN: int = 1
    GADGETS: tuple[Gadget, ...]
    GADGET_CALLS: tuple[int, ...]

    @abstractmethod
    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        """The circuit outputs for each report of the batch: element shape (N, EVAL_OUTPUT_LEN)."""

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
        """The circuit's parameters, named as in its draft's test vectors."""
        return {}


class RangeInt:
    """An integer in [0, max_value] as b = max_value.bit_length() field elements, each 0 or 1.

    The range-checked integer of VDAF-20 §7.4.2: the b-1 low bits of v if v <= R = 2^(b-1) - 1,
    else those of v - W (W = max_value - R) and a final 1; decoding is the linear map with
    weights 1, 2, .., 2^(b-2), W. For max_value = 2^b - 1 (W = 2^(b-1)) it is plain little-endian
    binary, VDAF-08's encode_into_bit_vector (VDAF-08 §6.1.2), which is how 08 circuits use it.
    """

    def __init__(self, field: type[Field], max_value: int) -> None:
        if max_value <= 0:
            raise ValueError("a range-checked integer needs a positive bound")
        self.bits = max_value.bit_length()
        if 1 << self.bits >= field.MODULUS:
            raise ValueError("a range-checked integer's bound must be below the field size")
        self.max_value = max_value
        self._low = (1 << (self.bits - 1)) - 1
        self._top = max_value - self._low
        self._weights = field.from_ints([1 << i for i in range(self.bits - 1)] + [self._top])
        self._field = field

    def encode(self, value: int) -> list[int]:
        if not 0 <= value <= self.max_value:
            raise ValueError(f"value {value} is not in [0, {self.max_value}]")
        top = int(value > self._low)
        rest = value - top * self._top
        return [(rest >> i) & 1 for i in range(self.bits - 1)] + [top]

    def decode(self, elems: FieldArray) -> FieldArray:
        """The integers (shares) encoded along the last element axis."""
        return self._field.inner(elems, self._weights)


def max_of_bits(bits: int) -> int:
    """The largest `bits`-bit integer: a VDAF-08 bit width as a range-checked bound."""
    if bits <= 0:
        raise ValueError("a bit width must be positive")
    return (1 << bits) - 1


def _shares_inv(field: type[Field], shares: int) -> FieldArray:
    return field.inv(field.from_int(shares))


class Count(Valid):
    """Prio3Count's circuit: x * x - x == 0 (VDAF-08 §7.4.1, unchanged in VDAF-20 §7.4.1)."""

    field = Field64
    MEAS_LEN = 1
    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1
    GADGETS: tuple[Gadget, ...] = (Mul(),)
    GADGET_CALLS = (1,)

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        x = meas[:, :1]
        squared = gadgets[0](np.stack([x, x], axis=2))
        return self.field.sub(squared, x)

    def encode(self, measurement: Any) -> list[int]:
        if measurement not in (0, 1):
            raise ValueError("Count measurement must be 0 or 1")
        return [int(measurement)]

    def truncate(self, meas: FieldArray) -> FieldArray:
        return meas

    def decode(self, output: list[int], num_measurements: int) -> int:
        return output[0]


class _SumBase(Valid):
    """A single integer range-checked bit by bit with x^2 - x."""

    OUTPUT_LEN = 1

    def __init__(self, encoding: RangeInt) -> None:
        self.encoding = encoding
        self.MEAS_LEN = encoding.bits
        self.GADGETS = (Range2(),)
        self.GADGET_CALLS = (encoding.bits,)

    def encode(self, measurement: Any) -> list[int]:
        return self.encoding.encode(int(measurement))

    def truncate(self, meas: FieldArray) -> FieldArray:
        return self.encoding.decode(meas)[:, None]

    def decode(self, output: list[int], num_measurements: int) -> int:
        return output[0]


class Sum(_SumBase):
    """Prio3Sum's circuit of VDAF-08 §7.4.2: `bits` bits, folded with powers of one joint rand."""

    field = Field128
    JOINT_RAND_LEN = 1

    def __init__(self, bits: int) -> None:
        super().__init__(RangeInt(self.field, max_of_bits(bits)))
        self.bits = bits

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        checks = gadgets[0](meas[:, :, None])
        r_powers = self.field.powers(jr[:, 0], self.bits + 1)[:, 1:]
        return self.field.inner(checks, r_powers)[:, None]

    def params(self) -> dict[str, int]:
        return {"bits": self.bits}


class SumMax(_SumBase):
    """Prio3Sum's circuit of VDAF-20 §7.4.2: an integer in [0, max_measurement], Field64.

    No joint randomness: each bit's check is its own output (EVAL_OUTPUT_LEN = b).
    """

    field = Field64
    JOINT_RAND_LEN = 0

    def __init__(self, max_measurement: int) -> None:
        super().__init__(RangeInt(self.field, max_measurement))
        self.max_measurement = max_measurement
        self.EVAL_OUTPUT_LEN = self.encoding.bits

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        return gadgets[0](meas[:, :, None])

    def params(self) -> dict[str, int]:
        return {"max_measurement": self.max_measurement}


class _ChunkedRangeCheck(Valid):
    """Circuits whose elements must all be 0 or 1, checked in chunks by ParallelSum(Mul).

    SumVec, Histogram and MultihotCountVec share this check: the sum over elements x_i of
    rho_i * x_i * (x_i - 1/SHARES), padding elements zero. VDAF-08 §7.4.3-4 takes rho_i = r^(i+1)
    for one joint-randomness element r whose powers run on across chunks, and folds a second
    check into the output with one more element s (s * range + s^2 * second). VDAF-20 §7.4.3-5
    (`joint_rand_per_chunk`) draws one element r_c per chunk with rho = r_c^(j+1) for the j-th
    element of chunk c, and returns a second check as a second output for the FLP to fold.
    """

    def __init__(
        self, meas_len: int, chunk_length: int, joint_rand_per_chunk: bool, second_check: bool
    ) -> None:
        if chunk_length <= 0:
            raise ValueError(f"{type(self).__name__} chunk_length must be positive")
        self.chunk_length = chunk_length
        self.joint_rand_per_chunk = joint_rand_per_chunk
        self.MEAS_LEN = meas_len
        self.GADGETS = (ParallelSum(Mul(), chunk_length),)
        calls = -(-meas_len // chunk_length)
        self.GADGET_CALLS = (calls,)
        if joint_rand_per_chunk:
            self.JOINT_RAND_LEN = calls
            self.EVAL_OUTPUT_LEN = 1 + int(second_check)
        else:
            self.JOINT_RAND_LEN = 1 + int(second_check)

    def _checks(
        self,
        meas: FieldArray,
        jr: FieldArray,
        shares: int,
        oracle: GadgetOracle,
        second: FieldArray | None = None,
    ) -> FieldArray:
        field = self.field
        n = meas.shape[0]
        calls = self.GADGET_CALLS[0]
        padded_len = calls * self.chunk_length
        if self.joint_rand_per_chunk:
            powers = field.powers(jr[:, :calls], self.chunk_length + 1)[:, :, 1:]
            rho = powers.reshape(n, padded_len, field.LIMBS)
        else:
            rho = field.powers(jr[:, 0], padded_len + 1)[:, 1:]
        elems = field.zeros((n, padded_len))
        elems[:, : self.MEAS_LEN] = meas
        wires = np.empty((n, padded_len, 2, field.LIMBS), dtype=np.uint64)
        wires[:, :, 0] = field.mul(rho, elems)
        wires[:, :, 1] = field.sub(elems, _shares_inv(field, shares))
        outputs = oracle(wires.reshape(n, calls, 2 * self.chunk_length, field.LIMBS))
        range_check = field.sum(outputs, axis=-1)
        if second is None:
            return range_check[:, None]
        if self.joint_rand_per_chunk:
            return np.ascontiguousarray(np.stack([range_check, second], axis=1))
        s = jr[:, 1]
        folded = field.add(field.mul(s, range_check), field.mul(field.mul(s, s), second))
        return folded[:, None]


class SumVec(_ChunkedRangeCheck):
    """Prio3SumVec's circuit: `length` integers in [0, max_measurement] (VDAF-08 §7.4.3, VDAF-20
    §7.4.3). VDAF-08 bounds them by `bits` (max_measurement = 2^bits - 1).

    The field is a parameter only so that the multiproof variant can run it over Field64;
    Prio3SumVec itself uses Field128.
    """

    def __init__(
        self,
        length: int,
        max_measurement: int,
        chunk_length: int,
        field: type[Field] = Field128,
        joint_rand_per_chunk: bool = False,
    ) -> None:
        if length <= 0:
            raise ValueError("SumVec length must be positive")
        self.field = field
        self.encoding = RangeInt(field, max_measurement)
        super().__init__(length * self.encoding.bits, chunk_length, joint_rand_per_chunk, False)
        self.length = length
        self.OUTPUT_LEN = length

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        return self._checks(meas, jr, shares, gadgets[0])

    def encode(self, measurement: Any) -> list[int]:
        values = list(measurement)
        if len(values) != self.length:
            raise ValueError(f"SumVec measurement must have {self.length} entries")
        return [bit for value in values for bit in self.encoding.encode(int(value))]

    def truncate(self, meas: FieldArray) -> FieldArray:
        n, bits = meas.shape[0], self.encoding.bits
        return self.encoding.decode(meas.reshape(n, self.length, bits, self.field.LIMBS))

    def decode(self, output: list[int], num_measurements: int) -> list[int]:
        return output

    def params(self) -> dict[str, int]:
        bound = self.encoding.max_value
        if self.joint_rand_per_chunk:
            return {
                "length": self.length,
                "max_measurement": bound,
                "chunk_length": self.chunk_length,
            }
        return {
            "length": self.length,
            "bits": self.encoding.bits,
            "chunk_length": self.chunk_length,
        }


class Histogram(_ChunkedRangeCheck):
    """Prio3Histogram's circuit: a one-hot vector of `length` buckets (VDAF-08 §7.4.4, VDAF-20
    §7.4.4); the second check is that the entries sum to one."""

    field = Field128

    def __init__(self, length: int, chunk_length: int, joint_rand_per_chunk: bool = False) -> None:
        if length <= 0:
            raise ValueError("Histogram length must be positive")
        super().__init__(length, chunk_length, joint_rand_per_chunk, True)
        self.length = length
        self.OUTPUT_LEN = length

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        field = self.field
        sum_check = field.sub(field.sum(meas, axis=-1), _shares_inv(field, shares))
        return self._checks(meas, jr, shares, gadgets[0], sum_check)

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


class MultihotCountVec(_ChunkedRangeCheck):
    """A bit vector of `length` entries with at most `max_weight` ones.

    The client appends its weight as a range-checked integer, and the second check is that the
    entries sum to it, so the bound follows from range checks alone. VDAF-20 §7.4.5 encodes the
    weight in [0, max_weight] directly (Prio3MultihotCountVec). The VDAF-08 reference code's
    private MultiHotHistogram encodes offset + weight in binary, offset = 2^b - 1 - max_weight,
    and checks offset/SHARES + sum - weight bits.
    """

    field = Field128

    def __init__(
        self, length: int, max_weight: int, chunk_length: int, joint_rand_per_chunk: bool = False
    ) -> None:
        if length <= 0:
            raise ValueError("MultihotCountVec length must be positive")
        if not 0 < max_weight <= length:
            raise ValueError("MultihotCountVec max_weight must be in [1, length]")
        if joint_rand_per_chunk:
            self.weight, self.offset = RangeInt(self.field, max_weight), 0
        else:
            self.weight = RangeInt(self.field, max_of_bits(max_weight.bit_length()))
            self.offset = self.weight.max_value - max_weight
        super().__init__(length + self.weight.bits, chunk_length, joint_rand_per_chunk, True)
        self.length = length
        self.max_weight = max_weight
        self.OUTPUT_LEN = length

    def eval(self, meas: FieldArray, jr: FieldArray, shares: int, gadgets: Oracles) -> FieldArray:
        field = self.field
        count_check = field.sub(
            field.sum(meas[:, : self.length], axis=-1), self.weight.decode(meas[:, self.length :])
        )
        if self.offset:
            offset = field.mul(field.from_int(self.offset), _shares_inv(field, shares))
            count_check = field.add(count_check, offset)
        return self._checks(meas, jr, shares, gadgets[0], count_check)

    def encode(self, measurement: Any) -> list[int]:
        bits = [int(b) for b in measurement]
        if len(bits) != self.length or any(b not in (0, 1) for b in bits):
            raise ValueError(f"MultihotCountVec measurement must be {self.length} bits")
        weight = sum(bits)
        if weight > self.max_weight:
            raise ValueError(f"MultihotCountVec measurement has more than {self.max_weight} ones")
        return bits + self.weight.encode(self.offset + weight)

    def truncate(self, meas: FieldArray) -> FieldArray:
        return meas[:, : self.length]

    def decode(self, output: list[int], num_measurements: int) -> list[int]:
        return output

    def params(self) -> dict[str, int]:
        bound = "max_weight" if self.joint_rand_per_chunk else "max_count"
        return {"length": self.length, bound: self.max_weight, "chunk_length": self.chunk_length}
