"""Token type 2 issuer keys: the RSASSA-PSS SubjectPublicKeyInfo and token_key_id (RFC 9578 §6.5).

RFC 9578 §6.5 fixes the encoding that is hashed into ``token_key_id = SHA-256(encoded_key)``:
a DER SubjectPublicKeyInfo whose algorithm is id-RSASSA-PSS (1.2.840.113549.1.1.10, not
rsaEncryption) with RSASSA-PSS-params naming SHA-384, MGF1-SHA-384 and saltLength 48, the
parameters encoded as the RFC's vectors do (hash AlgorithmIdentifiers without a NULL).

`cryptography` reads this encoding but only writes rsaEncryption, whose hash would be a
different key id, so the SPKI is assembled here with a minimal DER writer. Decoding is strict:
`cryptography` parses the bytes and they must then be exactly what `encode_spki` produces for
the key, so a key with other PSS parameters, a non-minimal length or trailing bytes is refused.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Final

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_der_public_key

from shared.errors import SaggError
from shared.privacypass.rsabssa import BLIND_RSA_NK, RsaPublicKey

#: Nid: SHA-256 of the issuer key's SPKI (RFC 9578 §6, Nid = 32).
TOKEN_KEY_ID_SIZE: Final = 32


__all__ = ["InvalidKeyError", "TokenKey", "decode_spki", "encode_spki", "token_key_id"]

#: AlgorithmIdentifier { id-RSASSA-PSS, RSASSA-PSS-params { [0] sha384, [1] mgf1(sha384),
#: [2] 48 } }, byte for byte as in the RFC 9578 A.2 and RFC 9577 A.2 vectors.
_PSS_SHA384_ALGORITHM: Final = bytes.fromhex(
    "303d06092a864886f70d01010a3030"
    "a00d300b0609608648016503040202"
    "a11a301806092a864886f70d010108300b0609608648016503040202"
    "a203020130"
)


class InvalidKeyError(SaggError, ValueError):
    """An issuer key encoding that is not the RFC 9578 §6.5 RSASSA-PSS SPKI of a 2048-bit key."""


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _der(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _der_length(len(body)) + body


def _der_integer(value: int) -> bytes:
    # Minimal two's complement: one extra byte when the top bit is set keeps it positive.
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def encode_spki(pk: RsaPublicKey) -> bytes:
    """The RSASSA-PSS SubjectPublicKeyInfo of `pk` (RFC 9578 §6.5)."""
    rsa_public_key = _der(0x30, _der_integer(int(pk.n)) + _der_integer(int(pk.e)))
    bit_string = _der(0x03, b"\x00" + rsa_public_key)
    return _der(0x30, _PSS_SHA384_ALGORITHM + bit_string)


def decode_spki(data: bytes) -> RsaPublicKey:
    """Parse an RSASSA-PSS SPKI; anything but `encode_spki`'s exact output is refused."""
    try:
        key = load_der_public_key(bytes(data))
    except (ValueError, TypeError) as exc:
        raise InvalidKeyError("not a DER SubjectPublicKeyInfo") from exc
    if not isinstance(key, rsa.RSAPublicKey):
        raise InvalidKeyError("not an RSA key")
    pk = RsaPublicKey.from_cryptography(key)
    if encode_spki(pk) != data:
        raise InvalidKeyError("not the RSASSA-PSS SHA-384 SPKI encoding of RFC 9578 §6.5")
    return pk


def token_key_id(spki: bytes) -> bytes:
    """``token_key_id = SHA-256(encoded_key)`` (RFC 9578 §6.5)."""
    return hashlib.sha256(spki).digest()


@dataclass(frozen=True, slots=True)
class TokenKey:
    """A token type 2 issuer public key with its SPKI and key id computed once."""

    public_key: RsaPublicKey
    spki: bytes = field(init=False, repr=False)
    token_key_id: bytes = field(init=False)

    def __post_init__(self) -> None:
        if self.public_key.modulus_len != BLIND_RSA_NK:
            raise InvalidKeyError(f"token type 2 keys have a {BLIND_RSA_NK * 8}-bit modulus")
        spki = encode_spki(self.public_key)
        object.__setattr__(self, "spki", spki)
        object.__setattr__(self, "token_key_id", token_key_id(spki))
        assert len(self.token_key_id) == TOKEN_KEY_ID_SIZE

    @classmethod
    def from_spki(cls, spki: bytes) -> TokenKey:
        """The key of an SPKI, parsed once per distinct SPKI: devices fetching tokens and
        aggregators checking them meet the same few issuer keys again and again."""
        return _from_spki(bytes(spki))

    @property
    def truncated_token_key_id(self) -> int:
        """The last byte of token_key_id, all a TokenRequest names (RFC 9578 §6.1)."""
        return self.token_key_id[-1]


@functools.lru_cache(maxsize=64)
def _from_spki(spki: bytes) -> TokenKey:
    # TokenKey is immutable, so one object may serve every caller (a refusal is not cached).
    return TokenKey(decode_spki(spki))
