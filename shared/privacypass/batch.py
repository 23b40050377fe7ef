"""Generic batched token issuance (draft-ietf-privacypass-batched-tokens-04 §5), type 0x0002.

A device fetches every token it needs for a window in one round trip: one attester nonce,
one signature over the whole batch, one quota charge. Each element is an ordinary RFC 9578
TokenRequest, blinded independently, so the batch links nothing the separate requests would
not (the attester already knows they come from one device; the issuer never learns who)::

    struct {
        uint16_t token_type;
        TokenRequest token_request;        /* RFC 9578 §6.1 (it repeats the type) */
    } GenericTokenRequest;
    struct { GenericTokenRequest generic_token_requests<V>; } GenericBatchTokenRequest;

    struct {
        uint16_t token_type;
        uint8_t blind_sig[Nk];
    } TokenResponse;
    struct { optional<TokenResponse> token_response; } OptionalTokenResponse;
    struct { OptionalTokenResponse token_responses<V>; } GenericBatchTokenResponse;

``<V>`` is a vector with a QUIC variable-length integer length prefix (RFC 9000 §16), and
``optional<T>`` a presence byte (0 or 1) followed by T when present: an absent response is a
request the issuer refused (the draft's HTTP 206 when some are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Self

from shared.codec import DecodeError, Decoder, Encoder, TlsStruct
from shared.privacypass.messages import TOKEN_TYPE_BLIND_RSA, TokenRequest, TokenResponse
from shared.privacypass.rsabssa import BLIND_RSA_NK

__all__ = [
    "MAX_BATCH",
    "MEDIA_BATCH_REQUEST",
    "MEDIA_BATCH_RESPONSE",
    "BatchTokenRequest",
    "BatchTokenResponse",
]

MEDIA_BATCH_REQUEST: Final = "application/private-token-generic-batch-request"
MEDIA_BATCH_RESPONSE: Final = "application/private-token-generic-batch-response"

#: Requests one batch may hold (the draft lets an issuer bound it; a report needs two).
MAX_BATCH: Final = 16

_VARINT_LIMITS = ((1 << 6, 0), (1 << 14, 1), (1 << 30, 2), (1 << 62, 3))


def _put_varint(enc: Encoder, value: int) -> None:
    for limit, prefix in _VARINT_LIMITS:
        if value < limit:
            size = 1 << prefix
            enc.fixed(((prefix << (8 * size - 2)) | value).to_bytes(size, "big"), size)
            return
    raise ValueError("a QUIC varint holds at most 2^62 - 1")


def _get_varint(dec: Decoder, what: str) -> int:
    first = dec.u8(what)
    size = 1 << (first >> 6)
    value = first & 0x3F
    for _ in range(size - 1):
        value = (value << 8) | dec.u8(what)
    if size > 1 and value < _VARINT_LIMITS[(size.bit_length() - 1) - 1][0]:
        raise DecodeError(f"{what}: varint not in its shortest encoding")
    return value


def _vector(dec: Decoder, what: str) -> Decoder:
    length = _get_varint(dec, f"{what} length")
    return Decoder(dec.fixed(length, what))


@dataclass(frozen=True, slots=True)
class BatchTokenRequest(TlsStruct):
    """GenericBatchTokenRequest of Blind RSA requests (1 to `MAX_BATCH`)."""

    requests: tuple[TokenRequest, ...]

    def _encode_into(self, enc: Encoder) -> None:
        body = Encoder()
        for request in self.requests:
            body.u16(request.token_type, "GenericTokenRequest.token_type")
            request._encode_into(body)
        _put_varint(enc, len(body))
        enc.fixed(body.to_bytes(), len(body), "GenericBatchTokenRequest")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        items = _vector(dec, "GenericBatchTokenRequest")
        requests: list[TokenRequest] = []
        while items.remaining:
            if items.u16("GenericTokenRequest.token_type") != TOKEN_TYPE_BLIND_RSA:
                raise DecodeError("GenericTokenRequest: token type other than 0x0002")
            requests.append(TokenRequest._decode_from(items))
        if not 1 <= len(requests) <= MAX_BATCH:
            raise DecodeError(f"GenericBatchTokenRequest: 1 to {MAX_BATCH} requests")
        return cls(tuple(requests))


@dataclass(frozen=True, slots=True)
class BatchTokenResponse(TlsStruct):
    """GenericBatchTokenResponse: one response per request, None where refused."""

    responses: tuple[TokenResponse | None, ...]

    def _encode_into(self, enc: Encoder) -> None:
        body = Encoder()
        for response in self.responses:
            body.u8(0 if response is None else 1, "OptionalTokenResponse.present")
            if response is not None:
                body.u16(TOKEN_TYPE_BLIND_RSA, "TokenResponse.token_type")
                response._encode_into(body)
        _put_varint(enc, len(body))
        enc.fixed(body.to_bytes(), len(body), "GenericBatchTokenResponse")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        items = _vector(dec, "GenericBatchTokenResponse")
        responses: list[TokenResponse | None] = []
        while items.remaining:
            present = items.u8("OptionalTokenResponse.present")
            if present == 0:
                responses.append(None)
                continue
            if present != 1:
                raise DecodeError("OptionalTokenResponse: presence byte not 0 or 1")
            if items.u16("TokenResponse.token_type") != TOKEN_TYPE_BLIND_RSA:
                raise DecodeError("TokenResponse: token type other than 0x0002")
            responses.append(TokenResponse(items.fixed(BLIND_RSA_NK, "TokenResponse.blind_sig")))
        return cls(tuple(responses))
