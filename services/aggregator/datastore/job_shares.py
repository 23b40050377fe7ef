"""A leader job's stored input shares as one value of ``leader_job_shares``, or of its file
in a SQLite store (`job_share_files`) (#15).

A job the upload writer makes (`uploads`) keeps its reports' shares in one row instead of in
each report's ``client_reports`` row: once the job finishes, the shares go with one DELETE,
which frees the value's pages, where clearing them from every report row rewrote every page
those rows were on. In a SQLite store that cost ~10 us a report against ~4.

The value holds, for each report in job order (the job's `members`), its public share,
the leader's input share and the helper's encrypted input share (as encoded at upload), each
as a big-endian u32 length and the bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from services.aggregator.datastore.records import NewReport

__all__ = ["JobShares", "decode", "encode"]

_LENGTH = struct.Struct(">I")

#: One report's (public share, leader input share, helper encrypted share).
JobShares = tuple[bytes, bytes, bytes]


def encode(reports: Sequence[NewReport]) -> bytes:
    """The stored value of a job of these reports, in job order."""
    parts: list[bytes] = []
    for r in reports:
        for part in (r.public_share, r.leader_input_share, r.helper_encrypted_share):
            parts += (_LENGTH.pack(len(part)), part)
    return b"".join(parts)


def decode(value: bytes, count: int) -> list[JobShares]:
    """The shares of the `count` reports a stored value holds, in job order; ValueError when
    it holds anything else (fewer, more, a length past its end)."""
    shares: list[JobShares] = []
    at, end = 0, len(value)
    for _ in range(count):
        three: list[bytes] = []
        for _ in range(3):
            if at + _LENGTH.size > end:
                raise ValueError("job shares end inside a length")
            (length,) = _LENGTH.unpack_from(value, at)
            at += _LENGTH.size
            if at + length > end:
                raise ValueError("job shares end inside a share")
            three.append(value[at : at + length])
            at += length
        shares.append((three[0], three[1], three[2]))
    if at != end:
        raise ValueError(f"job shares hold {end - at} bytes beyond their {count} reports")
    return shares
