"""The base of every error the pure layer raises (one error type per layer).

`shared` checks bytes, signatures and proofs that came from elsewhere: each refusal is a
`SaggError` subclass named after what it refuses (`DecodeError`, `HpkeError`, the Privacy Pass
and recipe-log errors...). Most also stay `ValueError` (or `OSError`), as callers outside sagg
expect of a malformed input. The services map what they catch to problem documents
(`services.common.problems`); the CLI prints any `SaggError` as one line (`deploy.cli`).
"""

from __future__ import annotations


class SaggError(Exception):
    """Input that `shared` refuses: malformed, forged, or not what the caller asked for."""
