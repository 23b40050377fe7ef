"""Client side of token type 2 issuance (RFC 9578 §6.1, §6.3): pure functions for the device SDK.

::

    request, state = create_token_request(challenge, token_key)   # §6.1
    # ... POST request.encode() to the issuer (via the attester), get the response bytes ...
    token = finalize_token(state, TokenResponse.decode(body))     # §6.3

The TokenRequest names the key only by its last byte and carries the blinded token input, so
neither the attester nor the issuer learns the challenge, the nonce or the final token.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from shared.codec import DecodeError
from shared.privacypass import rsabssa
from shared.privacypass.headers import PrivateTokenChallenge, parse_www_authenticate
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import (
    TOKEN_NONCE_SIZE,
    TOKEN_TYPE_BLIND_RSA,
    Token,
    TokenChallenge,
    TokenRequest,
    TokenResponse,
    authenticator_input,
)

__all__ = ["TokenRequestState", "create_token_request", "finalize_token", "select_challenge"]

#: Token type 2 is RSABSSA-SHA384-PSS-Deterministic (RFC 9578 §6): the 32-byte nonce inside
#: token_input supplies the message entropy that the Randomized variants' prefix would.
VARIANT = rsabssa.PSS_DETERMINISTIC


@dataclass(frozen=True, slots=True)
class TokenRequestState:
    """What the client keeps between request and response. The blind inverse links the request
    to the token, so nothing here is shown in a repr."""

    token_key: TokenKey = field(repr=False)
    nonce: bytes = field(repr=False)
    challenge_digest: bytes = field(repr=False)
    token_input: bytes = field(repr=False)
    inv: rsabssa.BlindInverse = field(repr=False)


def create_token_request(
    challenge: TokenChallenge | bytes,
    token_key: TokenKey,
    *,
    nonce: bytes | None = None,
    salt: bytes | None = None,
    blind: int | None = None,
) -> tuple[TokenRequest, TokenRequestState]:
    """Build a TokenRequest for `challenge` under `token_key` (RFC 9578 §6.1).

    `challenge` may be the received bytes (what is hashed) or a parsed `TokenChallenge`.
    `nonce`, `salt` and `blind` (the blinding factor r) exist for test vectors only; in use they
    are drawn from the CSPRNG, as RFC 9577 §5 and RFC 9474 §7.4 require.
    """
    if isinstance(challenge, TokenChallenge):
        parsed = challenge
    else:
        parsed = TokenChallenge.decode(challenge)
    challenge_digest = parsed.digest()
    if nonce is None:
        nonce = secrets.token_bytes(TOKEN_NONCE_SIZE)
    token_input = authenticator_input(nonce, challenge_digest, token_key.token_key_id)
    blinded_msg, inv = rsabssa.blind(token_key.public_key, token_input, VARIANT, salt=salt, r=blind)
    request = TokenRequest(token_key.truncated_token_key_id, blinded_msg)
    state = TokenRequestState(token_key, nonce, challenge_digest, token_input, inv)
    return request, state


def finalize_token(state: TokenRequestState, response: TokenResponse | bytes) -> Token:
    """Unblind the issuer's response into a Token (RFC 9578 §6.3).

    Raises `rsabssa.InvalidSignatureError` if the result does not verify under the key the
    request was made for (Finalize verifies, RFC 9474 §4.4), and `DecodeError` for a response
    of the wrong size.
    """
    if not isinstance(response, TokenResponse):
        response = TokenResponse.decode(response)
    authenticator = rsabssa.finalize(
        state.token_key.public_key, state.token_input, response.blind_sig, state.inv, VARIANT
    )
    return Token(state.nonce, state.challenge_digest, state.token_key.token_key_id, authenticator)


def select_challenge(www_authenticate: str) -> PrivateTokenChallenge | None:
    """The challenge a client answers: the first token type 2 ``PrivateToken`` challenge of a
    WWW-Authenticate value whose TokenChallenge parses (origins list their preferred one
    first, RFC 9577 §2.1.2.1). Other and greased token types, and challenges with a bad
    redemption context, are ignored as RFC 9577 §2.1.1 requires; None if nothing is left.
    A malformed header raises `HeaderError`.
    """
    for candidate in parse_www_authenticate(www_authenticate):
        if len(candidate.challenge) < 2 or candidate.token_type != TOKEN_TYPE_BLIND_RSA:
            continue
        try:
            candidate.token_challenge()
        except DecodeError:
            continue
        return candidate
    return None
