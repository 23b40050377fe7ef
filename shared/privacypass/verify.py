"""Origin-side token verification (RFC 9577 §2.2.3, RFC 9578 §6.4): what the aggregators call.

`verify_token` checks everything about a Token that needs no state:

1. it decodes strictly as a token type 2 Token (right type, exact length);
2. its challenge_digest is the one the origin expects (SHA-256 of the TokenChallenge it issued
   or accepts, RFC 9577 §2.2.3);
3. its token_key_id names one of the issuer keys the origin accepts (RFC 9578 §4: origins may
   try each listed key), compared in full, not by a truncated byte;
4. the authenticator is a valid RSASSA-PSS signature (SHA-384, MGF1-SHA-384, sLen 48) over
   ``token_type || nonce || challenge_digest || token_key_id`` (RFC 9578 §6.4).

Double-spend prevention (the nonce not seen before, RFC 9577 §2.2.2) needs state and is the
caller's: the returned `Token` carries the nonce and key id to record.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from shared.codec import DecodeError
from shared.errors import SaggError
from shared.privacypass import rsabssa
from shared.privacypass.headers import HeaderError, parse_authorization
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import Token

__all__ = ["InvalidTokenError", "verify_authorization", "verify_token"]


class InvalidTokenError(SaggError, ValueError):
    """A token that must not be accepted; the message says which check failed."""


def verify_token(
    token: bytes | Token,
    issuer_public_keys: Iterable[TokenKey],
    expected_challenge_digest: bytes,
) -> Token:
    """Verify `token` (encoded bytes or parsed) and return it parsed; raise `InvalidTokenError`."""
    if not isinstance(token, Token):
        try:
            token = Token.decode(token)
        except DecodeError as exc:
            raise InvalidTokenError(f"malformed token: {exc}") from None
    if not hmac.compare_digest(token.challenge_digest, expected_challenge_digest):
        raise InvalidTokenError("token is for another challenge")
    key = next((k for k in issuer_public_keys if k.token_key_id == token.token_key_id), None)
    if key is None:
        raise InvalidTokenError("token key id is not an accepted issuer key")
    try:
        rsabssa.verify(
            key.public_key, token.authenticator_input(), token.authenticator,
            rsabssa.PSS_DETERMINISTIC,
        )  # fmt: skip
    except rsabssa.InvalidSignatureError:
        raise InvalidTokenError("invalid token authenticator") from None
    return token


def verify_authorization(
    header_value: str,
    issuer_public_keys: Iterable[TokenKey],
    expected_challenge_digest: bytes,
) -> Token:
    """`verify_token` on the token of an ``Authorization: PrivateToken token="…"`` value
    (RFC 9577 §2.2.1); a malformed header is an `InvalidTokenError` too."""
    try:
        encoded = parse_authorization(header_value)
    except HeaderError as exc:
        raise InvalidTokenError(f"malformed authorization: {exc}") from None
    return verify_token(encoded, issuer_public_keys, expected_challenge_digest)
