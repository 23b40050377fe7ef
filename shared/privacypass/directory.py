"""The issuer directory (RFC 9578 §4), served at ``/.well-known/private-token-issuer-directory``.

::

    { "issuer-request-uri": "https://issuer.example.net/request",
      "token-keys": [ {"token-type": 2, "token-key": "<base64url SPKI>", "not-before": 1686913811},
                      {"token-type": 2, "token-key": "…"} ] }

Keys are listed in preference order; a client uses the first one whose `not-before` is absent
or in the past, and an origin may try each listed key (§4). Parsing is strict about the fields
it uses (types, base64url, a key of token type 2 must be a valid RFC 9578 §6.5 SPKI) and
ignores unknown members, so that directories with extensions (e.g. the rate-limit draft's
`issuer-policy-window`) still load.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.errors import SaggError
from shared.privacypass.headers import HeaderError, b64url_decode, b64url_encode
from shared.privacypass.keys import InvalidKeyError, TokenKey
from shared.privacypass.messages import TOKEN_TYPE_BLIND_RSA

#: Well-known path of the issuer directory (RFC 9578 §4, §8.1).
ISSUER_DIRECTORY_PATH: Final = "/.well-known/private-token-issuer-directory"

MEDIA_ISSUER_DIRECTORY: Final = "application/private-token-issuer-directory"


__all__ = ["DirectoryError", "DirectoryKey", "IssuerDirectory"]


class DirectoryError(SaggError, ValueError):
    """A directory document that does not follow RFC 9578 §4."""


@dataclass(frozen=True, slots=True)
class DirectoryKey:
    """One `token-keys` entry."""

    token_type: int
    token_key: bytes
    not_before: int | None = None

    def token_key_object(self) -> TokenKey:
        """The parsed type 2 key (raises `InvalidKeyError` for anything else)."""
        if self.token_type != TOKEN_TYPE_BLIND_RSA:
            raise InvalidKeyError(f"token type {self.token_type} is not Blind RSA")
        return TokenKey.from_spki(self.token_key)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "token-type": self.token_type,
            "token-key": b64url_encode(self.token_key),
        }
        if self.not_before is not None:
            out["not-before"] = self.not_before
        return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class IssuerDirectory:
    """An issuer directory document (RFC 9578 §4)."""

    issuer_request_uri: str
    token_keys: Sequence[DirectoryKey]

    def to_json(self) -> dict[str, Any]:
        return {
            "issuer-request-uri": self.issuer_request_uri,
            "token-keys": [k.to_json() for k in self.token_keys],
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, doc: object) -> IssuerDirectory:
        if not isinstance(doc, dict):
            raise DirectoryError("directory is not a JSON object")
        uri = doc.get("issuer-request-uri")
        if not isinstance(uri, str) or not uri:
            raise DirectoryError("issuer-request-uri missing or not a string")
        raw_keys = doc.get("token-keys")
        if not isinstance(raw_keys, list):
            raise DirectoryError("token-keys missing or not a list")
        keys: list[DirectoryKey] = []
        for i, entry in enumerate(raw_keys):
            if not isinstance(entry, dict):
                raise DirectoryError(f"token-keys[{i}] is not an object")
            token_type, token_key = entry.get("token-type"), entry.get("token-key")
            not_before = entry.get("not-before")
            if not isinstance(token_type, int) or isinstance(token_type, bool):
                raise DirectoryError(f"token-keys[{i}].token-type is not a uint16")
            if not 0 <= token_type <= 0xFFFF:
                raise DirectoryError(f"token-keys[{i}].token-type is not a uint16")
            if not isinstance(token_key, str):
                raise DirectoryError(f"token-keys[{i}].token-key is not a string")
            if not_before is not None and (not _is_int(not_before) or not_before < 0):
                raise DirectoryError(f"token-keys[{i}].not-before is not a timestamp")
            try:
                key = DirectoryKey(token_type, b64url_decode(token_key), not_before)
                if token_type == TOKEN_TYPE_BLIND_RSA:
                    key.token_key_object()
            except (HeaderError, InvalidKeyError) as exc:
                raise DirectoryError(f"token-keys[{i}].token-key: {exc}") from None
            keys.append(key)
        return cls(uri, tuple(keys))

    @classmethod
    def decode(cls, data: bytes | str) -> IssuerDirectory:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DirectoryError("directory is not JSON") from exc
        except RecursionError:  # nesting deeper than the parser's stack
            raise DirectoryError("directory is not JSON (nested too deeply)") from None
        return cls.from_json(doc)

    def keys_of_type(self, token_type: int = TOKEN_TYPE_BLIND_RSA) -> list[DirectoryKey]:
        return [k for k in self.token_keys if k.token_type == token_type]

    def select_key(self, now: int, token_type: int = TOKEN_TYPE_BLIND_RSA) -> DirectoryKey | None:
        """The key a client should use now: the first of its type whose `not-before` is absent
        or not in the future (RFC 9578 §4)."""
        for key in self.keys_of_type(token_type):
            if key.not_before is None or key.not_before <= now:
                return key
        return None
