"""Aggregate-share arithmetic the datastore's transactions call (VDAF-08 §4.4, §7.2.5:
aggregation adds output shares, and aggregate shares of disjoint reports, in the field).

The datastore stores aggregate shares encoded and never decodes them: a transaction that adds
a job's reports to a batch, or freezes a batch's share, calls a `ShareAdder` (the datastore's
`ShareSum`) for the sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from shared.vdaf.field import FieldArray
from shared.vdaf.prio3 import Prio3


@dataclass(frozen=True)
class ShareAdder:
    """Sums of one task's shares; `out_shares` are a job's output shares, one row per report
    that prepared (absent where only aggregate shares are added)."""

    vdaf: Prio3
    out_shares: FieldArray | None = field(default=None, repr=False)

    def of_reports(self, out_indices: Sequence[int]) -> bytes:
        if self.out_shares is None:
            raise ValueError("no output shares to aggregate")
        idx = np.array(out_indices, dtype=np.int64)
        return self.vdaf.encode_agg_share(self.vdaf.aggregate(self.out_shares[idx]))

    def merge(self, shares: Sequence[bytes]) -> bytes:
        return self.vdaf.encode_agg_share(self.total(shares))

    def total(self, shares: Sequence[bytes]) -> FieldArray:
        """The sum of encoded aggregate shares, decoded (zero for none)."""
        return self.vdaf.merge([self.vdaf.decode_agg_share(s) for s in shares])

    def encoded(self, fn: Callable[[FieldArray], FieldArray]) -> Callable[[bytes], bytes]:
        """`fn` on encoded aggregate shares (the noise draw, whose result the datastore keeps)."""

        def apply(share: bytes) -> bytes:
            return self.vdaf.encode_agg_share(fn(self.vdaf.decode_agg_share(share)))

        return apply
