"""An answer of the aggregator's protocol logic, before HTTP framing (`app`, `upload_route`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    media_type: str | None = None
    headers: dict[str, str] | None = None
