"""`parse_retry_after` (RFC 9110 §10.2.3): both forms, unreadable values, the one-hour cap."""

from __future__ import annotations

import pytest

from services.common.http import MAX_RETRY_AFTER_S, parse_retry_after

NOW = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("Sun, 06 Nov 1994 08:51:37 GMT", 120.0),
        ("Sun, 06 Nov 1994 08:48:37 GMT", 0.0),  # in the past: now
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("Sun, 06 Nov 1994 08:51:37", None),  # no zone
        (str(10**9), MAX_RETRY_AFTER_S),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_S),
    ],
)
def test_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds
