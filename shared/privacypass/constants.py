"""Privacy Pass protocol constants (RFC 9577, RFC 9578, RFC 9474), defined once.

These will move to `shared.constants`; until then every module in `shared.privacypass` and
`services.token_issuer` imports them from here.
"""

from __future__ import annotations

from typing import Final

# --- Token types (RFC 9578 §8.2, IANA "Privacy Pass Token Types") ---------------------------

#: Blind RSA (SHA-384, 2048-bit), publicly verifiable: the only type sagg issues (RFC 9578 §6).
TOKEN_TYPE_BLIND_RSA: Final = 0x0002
#: VOPRF(P-384, SHA-384), privately verifiable (RFC 9578 §5); recognized, never issued.
TOKEN_TYPE_VOPRF: Final = 0x0001

#: Reserved ("greased") token types that clients must ignore (RFC 9577 §6.2.1).
GREASE_TOKEN_TYPES: Final = frozenset(
    {
        0x0000, 0x02AA, 0x1132, 0x2E96, 0x3CD3, 0x4473, 0x5A63, 0x6D32, 0x7F3F,
        0x8D07, 0x916B, 0xA6A4, 0xBEAB, 0xC3F3, 0xDA42, 0xE944, 0xF057,
    }
)  # fmt: skip

# --- Sizes (RFC 9577 §2.2, RFC 9578 §6) -------------------------------------------------------

#: Client nonce in TokenInput and Token (RFC 9577 §2.2).
NONCE_SIZE: Final = 32
#: SHA-256 digest of the TokenChallenge (RFC 9577 §2.2).
CHALLENGE_DIGEST_SIZE: Final = 32
#: Nid: SHA-256 of the issuer key's SPKI (RFC 9578 §6, Nid = 32).
TOKEN_KEY_ID_SIZE: Final = 32
#: A redemption_context is empty or exactly this long (RFC 9577 §2.1.1).
REDEMPTION_CONTEXT_SIZE: Final = 32
#: Issuer RSA modulus for token type 2, in bits (RFC 9578 §6: "Blind RSA (SHA-384, 2048-bit)").
BLIND_RSA_MODULUS_BITS: Final = 2048
#: Nk for token type 2: the RSA modulus length in bytes (RFC 9578 §6).
BLIND_RSA_NK: Final = BLIND_RSA_MODULUS_BITS // 8
#: The public exponent sagg generates keys with (RFC 9578 §6.5 leaves it open; 65537 is the
#: value of every published vector and of the SPKI template).
BLIND_RSA_PUBLIC_EXPONENT: Final = 65537
#: PSS salt length for token type 2: the SHA-384 output size (RFC 9578 §6.4, §6.5).
BLIND_RSA_SALT_LEN: Final = 48
#: The PrepareRandomize prefix length (RFC 9474 §4.1).
RSABSSA_PREFIX_LEN: Final = 32

# --- HTTP (RFC 9577 §2, RFC 9578 §4, §6, §8) --------------------------------------------------

#: The HTTP authentication scheme name (RFC 9577 §2).
AUTH_SCHEME: Final = "PrivateToken"
#: Well-known path of the issuer directory (RFC 9578 §4, §8.1).
ISSUER_DIRECTORY_PATH: Final = "/.well-known/private-token-issuer-directory"

# Media types (RFC 9578 §8.3), sent and matched exactly, with no parameters.
MEDIA_TOKEN_REQUEST: Final = "application/private-token-request"
MEDIA_TOKEN_RESPONSE: Final = "application/private-token-response"
MEDIA_ISSUER_DIRECTORY: Final = "application/private-token-issuer-directory"
