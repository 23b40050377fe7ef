"""Privacy Pass wire structures for token type 0x0002 (RFC 9577 §2.1, §2.2; RFC 9578 §6).

- `TokenChallenge` (RFC 9577 §2.1.1), generic over token types: a client parses challenges of
  every type, then ignores the ones it does not support.
- `TokenRequest` (RFC 9578 §6.1), `TokenResponse` (§6.2) and `Token` (RFC 9577 §2.2, RFC 9578
  §6.3) for Blind RSA only: sagg issues and accepts nothing else, and Nk depends on the type.

Decoding goes through `shared.codec` and is strict: a wrong token type, a redemption context
that is neither empty nor 32 bytes, an empty issuer name, a short or long field and trailing
bytes all raise `DecodeError`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, Self

from shared.codec import DecodeError, Decoder, Encoder, TlsStruct
from shared.privacypass.keys import TOKEN_KEY_ID_SIZE
from shared.privacypass.rsabssa import BLIND_RSA_NK

#: Blind RSA (SHA-384, 2048-bit), publicly verifiable: the only type sagg issues (RFC 9578 §6).
TOKEN_TYPE_BLIND_RSA: Final = 0x0002

#: VOPRF(P-384, SHA-384), privately verifiable (RFC 9578 §5); recognized, never issued.
TOKEN_TYPE_VOPRF: Final = 0x0001

#: Client nonce in TokenInput and Token (RFC 9577 §2.2).
TOKEN_NONCE_SIZE: Final = 32

#: SHA-256 digest of the TokenChallenge (RFC 9577 §2.2).
CHALLENGE_DIGEST_SIZE: Final = 32

#: A redemption_context is empty or exactly this long (RFC 9577 §2.1.1).
REDEMPTION_CONTEXT_SIZE: Final = 32

# Media types (RFC 9578 §8.3), sent and matched exactly, with no parameters.
MEDIA_TOKEN_REQUEST: Final = "application/private-token-request"

MEDIA_TOKEN_RESPONSE: Final = "application/private-token-response"


__all__ = [
    "Token",
    "TokenChallenge",
    "TokenRequest",
    "TokenResponse",
    "authenticator_input",
]


def _require_type(dec: Decoder, what: str) -> int:
    at = dec.offset
    token_type = dec.u16(f"{what}.token_type")
    if token_type != TOKEN_TYPE_BLIND_RSA:
        raise DecodeError(f"{what}.token_type: unsupported token type {token_type} at offset {at}")
    return token_type


@dataclass(frozen=True, slots=True)
class TokenChallenge(TlsStruct):
    """RFC 9577 §2.1.1::

    struct {
        uint16_t token_type;
        opaque issuer_name<1..2^16-1>;
        opaque redemption_context<0..32>;
        opaque origin_info<0..2^16-1>;
    } TokenChallenge;
    """

    token_type: int
    issuer_name: bytes
    redemption_context: bytes = b""
    origin_info: bytes = b""

    def __post_init__(self) -> None:
        if not self.issuer_name:
            raise ValueError("TokenChallenge.issuer_name must not be empty")
        if len(self.redemption_context) not in (0, REDEMPTION_CONTEXT_SIZE):
            raise ValueError("TokenChallenge.redemption_context must be empty or 32 bytes")

    def _encode_into(self, enc: Encoder) -> None:
        enc.u16(self.token_type, "TokenChallenge.token_type")
        enc.opaque16(self.issuer_name, "TokenChallenge.issuer_name", min_len=1)
        enc.opaque8(self.redemption_context, "TokenChallenge.redemption_context")
        enc.opaque16(self.origin_info, "TokenChallenge.origin_info")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        token_type = dec.u16("TokenChallenge.token_type")
        issuer_name = dec.opaque16("TokenChallenge.issuer_name", min_len=1)
        at = dec.offset
        context = dec.opaque8("TokenChallenge.redemption_context")
        if len(context) not in (0, REDEMPTION_CONTEXT_SIZE):
            # RFC 9577 §2.1.1: any other length means the challenge MUST be ignored.
            raise DecodeError(
                f"TokenChallenge.redemption_context: length {len(context)} at offset {at} "
                "is neither 0 nor 32"
            )
        origin_info = dec.opaque16("TokenChallenge.origin_info")
        return cls(token_type, issuer_name, context, origin_info)

    def digest(self) -> bytes:
        """challenge_digest = SHA-256(TokenChallenge) (RFC 9577 §2.2)."""
        return hashlib.sha256(self.encode()).digest()

    def origin_names(self) -> list[str]:
        """origin_info split at commas (RFC 9577 §2.1.1); empty when it is empty."""
        if not self.origin_info:
            return []
        return self.origin_info.decode("ascii").split(",")


@dataclass(frozen=True, slots=True)
class TokenRequest(TlsStruct):
    """RFC 9578 §6.1::

    struct {
        uint16_t token_type = 0x0002;
        uint8_t truncated_token_key_id;
        uint8_t blinded_msg[Nk];
    } TokenRequest;
    """

    truncated_token_key_id: int
    blinded_msg: bytes
    token_type: int = TOKEN_TYPE_BLIND_RSA

    def _encode_into(self, enc: Encoder) -> None:
        enc.u16(self.token_type, "TokenRequest.token_type")
        enc.u8(self.truncated_token_key_id, "TokenRequest.truncated_token_key_id")
        enc.fixed(self.blinded_msg, BLIND_RSA_NK, "TokenRequest.blinded_msg")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        token_type = _require_type(dec, "TokenRequest")
        key_id = dec.u8("TokenRequest.truncated_token_key_id")
        blinded_msg = dec.fixed(BLIND_RSA_NK, "TokenRequest.blinded_msg")
        return cls(key_id, blinded_msg, token_type)


@dataclass(frozen=True, slots=True)
class TokenResponse(TlsStruct):
    """RFC 9578 §6.2: ``uint8_t blind_sig[Nk]``."""

    blind_sig: bytes

    def _encode_into(self, enc: Encoder) -> None:
        enc.fixed(self.blind_sig, BLIND_RSA_NK, "TokenResponse.blind_sig")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(dec.fixed(BLIND_RSA_NK, "TokenResponse.blind_sig"))


def authenticator_input(
    nonce: bytes,
    challenge_digest: bytes,
    key_id: bytes,
    token_type: int = TOKEN_TYPE_BLIND_RSA,
) -> bytes:
    """``token_type || nonce || challenge_digest || token_key_id`` (RFC 9577 §2.2.3), which is
    also the token_input the client blinds (RFC 9578 §6.1)."""
    enc = Encoder()
    enc.u16(token_type, "token_type")
    enc.fixed(nonce, TOKEN_NONCE_SIZE, "nonce")
    enc.fixed(challenge_digest, CHALLENGE_DIGEST_SIZE, "challenge_digest")
    enc.fixed(key_id, TOKEN_KEY_ID_SIZE, "token_key_id")
    return enc.to_bytes()


@dataclass(frozen=True, slots=True)
class Token(TlsStruct):
    """RFC 9577 §2.2, with Nid = 32 and Nk = 256 for token type 2 (RFC 9578 §6.3)::

    struct {
        uint16_t token_type;
        uint8_t nonce[32];
        uint8_t challenge_digest[32];
        uint8_t token_key_id[Nid];
        uint8_t authenticator[Nk];
    } Token;
    """

    nonce: bytes
    challenge_digest: bytes
    token_key_id: bytes
    authenticator: bytes
    token_type: int = TOKEN_TYPE_BLIND_RSA

    def _encode_into(self, enc: Encoder) -> None:
        enc.u16(self.token_type, "Token.token_type")
        enc.fixed(self.nonce, TOKEN_NONCE_SIZE, "Token.nonce")
        enc.fixed(self.challenge_digest, CHALLENGE_DIGEST_SIZE, "Token.challenge_digest")
        enc.fixed(self.token_key_id, TOKEN_KEY_ID_SIZE, "Token.token_key_id")
        enc.fixed(self.authenticator, BLIND_RSA_NK, "Token.authenticator")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        token_type = _require_type(dec, "Token")
        nonce = dec.fixed(TOKEN_NONCE_SIZE, "Token.nonce")
        digest = dec.fixed(CHALLENGE_DIGEST_SIZE, "Token.challenge_digest")
        key_id = dec.fixed(TOKEN_KEY_ID_SIZE, "Token.token_key_id")
        authenticator = dec.fixed(BLIND_RSA_NK, "Token.authenticator")
        return cls(nonce, digest, key_id, authenticator, token_type)

    def authenticator_input(self) -> bytes:
        """The message the authenticator signs (RFC 9577 §2.2.3)."""
        return authenticator_input(
            self.nonce, self.challenge_digest, self.token_key_id, self.token_type
        )
