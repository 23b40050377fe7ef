"""The ``PrivateToken`` HTTP authentication scheme headers (RFC 9577 §2.1.2, §2.2.1).

- ``WWW-Authenticate: PrivateToken challenge="…", token-key="…", max-age="…"``: one or more
  challenges, possibly mixed with other schemes' (RFC 9577 §2.1.2.1). `format_www_authenticate`
  writes them; `parse_www_authenticate` returns the PrivateToken ones in order, skipping other
  schemes and ignoring unknown parameters, as §2.1.2 requires.
- ``Authorization: PrivateToken token="…"`` (§2.2.1): `format_authorization` and
  `parse_authorization`.

Values are base64url with padding (RFC 4648 §5), always sent as quoted-strings because the
padding "=" is not a token character. Parsing follows the RFC 9110 §11 challenge grammar and
accepts unpadded base64url too (some clients strip it), but no other alphabet and no
non-canonical encoding. A malformed header raises `HeaderError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from shared import b64url as base64url
from shared.errors import SaggError
from shared.privacypass.messages import TokenChallenge

#: The HTTP authentication scheme name (RFC 9577 §2).
PRIVATE_TOKEN_AUTH_SCHEME: Final = "PrivateToken"


__all__ = [
    "HeaderError",
    "PrivateTokenChallenge",
    "b64url_decode",
    "b64url_encode",
    "format_authorization",
    "format_www_authenticate",
    "parse_authorization",
    "parse_www_authenticate",
]


class HeaderError(SaggError, ValueError):
    """A malformed WWW-Authenticate or Authorization header value."""


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# token68 (RFC 9110 §11.2): credentials of schemes that take no parameters, e.g. Basic.
_TOKEN68: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_WS: Final = " \t"
_DIGITS: Final = re.compile(r"[0-9]{1,10}")


def b64url_encode(data: bytes) -> str:
    """base64url with padding (RFC 4648 §5), the encoding RFC 9577 §2.1.2 prescribes."""
    return base64url.b64url_encode(data, padded=True)


def b64url_decode(text: str) -> bytes:
    """Strict base64url: padded or unpadded, url-safe alphabet only, canonical trailing bits."""
    try:
        return base64url.b64url_decode(text, "base64url", padding_allowed=True)
    except ValueError as exc:
        raise HeaderError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class PrivateTokenChallenge:
    """One ``PrivateToken`` challenge of a WWW-Authenticate header (RFC 9577 §2.1.2).

    `challenge` is kept as the received bytes: the client hashes exactly these into
    challenge_digest, and a challenge of an unknown or greased type may not even parse.
    """

    challenge: bytes
    token_key: bytes | None = None
    max_age: int | None = None

    @property
    def token_type(self) -> int:
        if len(self.challenge) < 2:
            raise HeaderError("challenge too short for a token type")
        return int.from_bytes(self.challenge[:2], "big")

    def token_challenge(self) -> TokenChallenge:
        """The decoded TokenChallenge (strict; raises `shared.codec.DecodeError`)."""
        return TokenChallenge.decode(self.challenge)


_Params = dict[str, str]


class _Parser:
    """A cursor over one header value following RFC 9110 §11.2-§11.6."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_ws(self) -> None:
        while self.peek() and self.peek() in _WS:
            self.pos += 1

    def match(self, pattern: re.Pattern[str]) -> str | None:
        m = pattern.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group()

    def quoted_string(self) -> str:
        assert self.peek() == '"'
        self.pos += 1
        out: list[str] = []
        while True:
            ch = self.peek()
            if not ch:
                raise HeaderError("unterminated quoted-string")
            self.pos += 1
            if ch == '"':
                return "".join(out)
            if ch == "\\":
                escaped = self.peek()
                if not escaped:
                    raise HeaderError("unterminated quoted-pair")
                self.pos += 1
                ch = escaped
            out.append(ch)

    def challenges(self) -> list[tuple[str, _Params | str]]:
        """All challenges as (scheme, params or token68)."""
        result: list[tuple[str, _Params | str]] = []
        while True:
            # #challenge allows empty list elements (RFC 9110 §5.6.1).
            while self.peek() and self.peek() in _WS + ",":
                self.pos += 1
            if self.at_end():
                return result
            scheme = self.match(_TOKEN)
            if scheme is None:
                raise HeaderError(f"expected an auth-scheme at offset {self.pos}")
            result.append((scheme, self.params_or_token68()))

    def params_or_token68(self) -> _Params | str:
        params: _Params = {}
        start = self.pos
        self.skip_ws()
        if self.pos == start or self.at_end() or self.peek() == ",":
            return params  # scheme alone
        # token68: a run followed by only whitespace up to a comma or the end.
        save = self.pos
        t68 = self.match(_TOKEN68)
        if t68 is not None:
            self.skip_ws()
            if self.at_end() or self.peek() == ",":
                return t68
            self.pos = save
        while True:
            save = self.pos
            name = self.match(_TOKEN)
            if name is None:
                raise HeaderError(f"expected an auth-param at offset {self.pos}")
            self.skip_ws()
            if self.peek() != "=":
                # A bare token after a comma starts the next challenge.
                self.pos = save
                return params
            self.pos += 1
            self.skip_ws()
            if self.peek() == '"':
                value = self.quoted_string()
            else:
                token = self.match(_TOKEN)
                if token is None:
                    raise HeaderError(f"expected a parameter value at offset {self.pos}")
                value = token
            key = name.lower()
            if key in params:
                raise HeaderError(f"parameter {name!r} repeated")  # RFC 9110 §11.2
            params[key] = value
            self.skip_ws()
            if self.at_end():
                return params
            if self.peek() != ",":
                raise HeaderError(f"expected ',' at offset {self.pos}")
            while self.peek() and self.peek() in _WS + ",":
                self.pos += 1
            if self.at_end():
                return params


def _parse(text: str) -> list[tuple[str, _Params | str]]:
    return _Parser(text).challenges()


def parse_www_authenticate(value: str) -> list[PrivateTokenChallenge]:
    """The PrivateToken challenges of a WWW-Authenticate value, in order (RFC 9577 §2.1.2).

    Challenges of other schemes are skipped and unknown parameters ignored; a PrivateToken
    challenge without a `challenge` parameter, or with a value that is not base64url, is an
    error. `max-age` must be a non-negative integer.
    """
    found: list[PrivateTokenChallenge] = []
    for scheme, params in _parse(value):
        if scheme.lower() != PRIVATE_TOKEN_AUTH_SCHEME.lower():
            continue
        if not isinstance(params, dict) or "challenge" not in params:
            raise HeaderError("PrivateToken challenge without a challenge parameter")
        token_key = params.get("token-key")
        max_age = params.get("max-age")
        if max_age is not None and not _DIGITS.fullmatch(max_age):
            raise HeaderError("max-age is not a non-negative integer")
        found.append(
            PrivateTokenChallenge(
                challenge=b64url_decode(params["challenge"]),
                token_key=None if token_key is None else b64url_decode(token_key),
                max_age=None if max_age is None else int(max_age),
            )
        )
    return found


def format_www_authenticate(challenges: Iterable[PrivateTokenChallenge]) -> str:
    """A WWW-Authenticate value listing `challenges`, preferred first (RFC 9577 §2.1.2.1)."""
    parts: list[str] = []
    for ch in challenges:
        params = [f'challenge="{b64url_encode(ch.challenge)}"']
        if ch.token_key is not None:
            params.append(f'token-key="{b64url_encode(ch.token_key)}"')
        if ch.max_age is not None:
            if ch.max_age < 0:
                raise ValueError("max-age must be non-negative")
            params.append(f'max-age="{ch.max_age}"')
        parts.append(f"{PRIVATE_TOKEN_AUTH_SCHEME} " + ", ".join(params))
    if not parts:
        raise ValueError("at least one challenge is needed")
    return ", ".join(parts)


def format_authorization(token: bytes) -> str:
    """``PrivateToken token="<base64url(Token)>"`` (RFC 9577 §2.2.1)."""
    return f'{PRIVATE_TOKEN_AUTH_SCHEME} token="{b64url_encode(token)}"'


def parse_authorization(value: str) -> bytes:
    """The encoded Token of an ``Authorization: PrivateToken token="…"`` value (RFC 9577 §2.2.1).

    Exactly one credential of the PrivateToken scheme is accepted; unknown parameters are
    ignored. The bytes are returned undecoded: `shared.privacypass.verify` decodes them.
    """
    parsed = _parse(value)
    if len(parsed) != 1:
        raise HeaderError("expected exactly one credential")
    scheme, params = parsed[0]
    if scheme.lower() != PRIVATE_TOKEN_AUTH_SCHEME.lower():
        raise HeaderError("not a PrivateToken credential")
    if not isinstance(params, dict) or "token" not in params:
        raise HeaderError("PrivateToken credential without a token parameter")
    return b64url_decode(params["token"])
