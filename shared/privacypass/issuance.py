"""Issuer side of token type 2 issuance (RFC 9578 §6.2), pure: no I/O, no key storage.

`IssuerKey` pairs a private key with its `TokenKey` (SPKI, token_key_id); `issue` checks a
TokenRequest against it and blind-signs. The HTTP service (`services.token_issuer`) chooses
the key by truncated id among the keys of the current epochs and maps `IssuanceError` to 422.
"""

from __future__ import annotations

from shared.codec import DecodeError
from shared.errors import SaggError
from shared.privacypass import rsabssa
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import TokenRequest, TokenResponse
from shared.privacypass.rsabssa import BLIND_RSA_MODULUS_BITS, BLIND_RSA_PUBLIC_EXPONENT

__all__ = ["IssuanceError", "IssuerKey", "issue"]


class IssuanceError(SaggError, ValueError):
    """A TokenRequest the issuer must refuse with 422 (RFC 9578 §6.2).

    `reason` is a short fixed name (``malformed``, ``unknown_key_id``, ``invalid_blinded_msg``
    ...) for counting refusals; the message may quote details."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class IssuerKey:
    """A token type 2 signing key. The repr shows the public key id only."""

    __slots__ = ("private_key", "token_key")

    def __init__(self, private_key: rsabssa.RsaPrivateKey) -> None:
        self.private_key = private_key
        self.token_key = TokenKey(private_key.public_key)

    @classmethod
    def generate(cls) -> IssuerKey:
        return cls(
            rsabssa.RsaPrivateKey.generate(BLIND_RSA_MODULUS_BITS, BLIND_RSA_PUBLIC_EXPONENT)
        )

    @property
    def token_key_id(self) -> bytes:
        return self.token_key.token_key_id

    def __repr__(self) -> str:
        return f"IssuerKey(token_key_id={self.token_key_id.hex()})"


def issue(key: IssuerKey, request: TokenRequest | bytes) -> TokenResponse:
    """Validate and blind-sign one TokenRequest (RFC 9578 §6.2).

    Raises `IssuanceError` for a malformed request, a wrong token type or size, or a truncated
    key id that is not `key`'s; `rsabssa.SigningFailureError` if the fault check fails.
    """
    if not isinstance(request, TokenRequest):
        try:
            request = TokenRequest.decode(request)
        except DecodeError as exc:
            raise IssuanceError(str(exc), "malformed") from None
    if request.truncated_token_key_id != key.token_key.truncated_token_key_id:
        raise IssuanceError("unknown token key id", "unknown_key_id")
    try:
        blind_sig = rsabssa.blind_sign(key.private_key, request.blinded_msg)
    except rsabssa.InvalidInputError as exc:
        # A blinded message >= n: not something a correct client can produce.
        raise IssuanceError(str(exc), "invalid_blinded_msg") from None
    return TokenResponse(blind_sig)
