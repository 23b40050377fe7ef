"""Issuer keys for report tokens: the issuer directory, fetched and cached (RFC 9578 §4).

Each aggregator verifies the Privacy Pass token in its own input share with the issuer's public
keys, which it learns from ``{issuer_url}/.well-known/private-token-issuer-directory``:

- the directory is cached for its ``Cache-Control: max-age`` (capped, with a default when the
  header is missing) and fetched again once that has passed. The issuer drops a key from the
  directory when the key expires, so a key past its expiry stops verifying within one max-age;
- a token naming a key id the cached directory lacks (the issuer rotated early) triggers a
  refetch, at most once per `min_refetch_s` per issuer, so forged key ids cannot make the
  aggregator hammer the issuer;
- a key whose ``not-before`` is still ahead (beyond the clock skew) is not accepted yet;
- when no usable directory can be had, `IssuerUnavailableError`: the caller answers 503 so the
  report (or the whole aggregation job) is tried again, rather than refusing honest reports
  because the issuer had a hiccup;
- only the issuers of the aggregator's own configuration (`AggregatorSettings.token_issuers`)
  are ever fetched: any other URL is `IssuerNotAllowedError` before a request is made, so a
  task's definition cannot point the aggregator's requests at an address of its choosing
  (SSRF) nor choose who vouches for clients.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass

import httpx

from services.common.clock import Clock
from shared.constants import ISSUER_DIRECTORY_PATH, TOKEN_TYPE_BLIND_RSA
from shared.privacypass.directory import DirectoryError, IssuerDirectory
from shared.privacypass.keys import InvalidKeyError, TokenKey

log = logging.getLogger(__name__)

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)

#: GET a URL; the aggregator passes an httpx client's `get` (a TestClient's in tests).
Fetch = Callable[[str], httpx.Response]


class IssuerUnavailableError(Exception):
    """The issuer directory could not be fetched and no fresh copy is cached."""


class IssuerNotAllowedError(Exception):
    """The issuer is not one this aggregator is configured to trust; nothing was fetched."""


@dataclass(frozen=True)
class _Entry:
    keys: tuple[tuple[TokenKey, int | None], ...]
    fresh_until: int
    fetched_at: int


def directory_url(issuer_url: str) -> str:
    return issuer_url.rstrip("/") + ISSUER_DIRECTORY_PATH


def max_age(cache_control: str | None, default: int, cap: int) -> int:
    """Seconds a directory response may be reused (no-store/no-cache mean not at all)."""
    if cache_control is None:
        return min(default, cap)
    lowered = cache_control.lower()
    if "no-store" in lowered or "no-cache" in lowered:
        return 0
    match = _MAX_AGE.search(cache_control)
    return min(int(match.group(1)), cap) if match else min(default, cap)


class IssuerKeyCache:
    """Per-issuer-URL cache of the type 2 token keys an aggregator accepts."""

    def __init__(
        self,
        fetch: Fetch,
        clock: Clock,
        *,
        allowed: Collection[str] = (),
        default_max_age_s: int = 300,
        max_age_cap_s: int = 86_400,
        min_refetch_s: int = 30,
        not_before_skew_s: int = 300,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._allowed = frozenset(url.rstrip("/") for url in allowed)
        self._default_max_age = default_max_age_s
        self._cap = max_age_cap_s
        self._min_refetch = min_refetch_s
        self._skew = not_before_skew_s
        self._entries: dict[str, _Entry] = {}
        # One fetch at a time: concurrent requests wait for it instead of stampeding.
        self._lock = threading.Lock()
        self.fetches = 0

    def keys(self, issuer_url: str, token_key_id: bytes | None = None) -> list[TokenKey]:
        """The keys that verify tokens now; refetches as the module docstring says."""
        if not self.allows(issuer_url):
            raise IssuerNotAllowedError(issuer_url)
        now = self._clock.now()
        with self._lock:
            entry = self._entries.get(issuer_url)
            if entry is None or now >= entry.fresh_until:
                entry = self._refresh(issuer_url, now)
            elif (
                token_key_id is not None
                and all(k.token_key_id != token_key_id for k, _ in entry.keys)
                and now - entry.fetched_at >= self._min_refetch
            ):
                # On failure the cached copy is still fresh: the token is refused by it.
                with contextlib.suppress(IssuerUnavailableError):
                    entry = self._refresh(issuer_url, now)
        return [k for k, nb in entry.keys if nb is None or nb <= now + self._skew]

    def allows(self, issuer_url: str) -> bool:
        return issuer_url.rstrip("/") in self._allowed

    def _refresh(self, issuer_url: str, now: int) -> _Entry:
        url = directory_url(issuer_url)
        self.fetches += 1
        try:
            response = self._fetch(url)
        except httpx.HTTPError as exc:
            log.warning("issuer directory %s unreachable: %s", url, type(exc).__name__)
            raise IssuerUnavailableError(url) from None
        if response.status_code != 200:
            log.warning("issuer directory %s answered %d", url, response.status_code)
            raise IssuerUnavailableError(url)
        try:
            directory = IssuerDirectory.decode(response.content)
            keys = tuple(
                (k.token_key_object(), k.not_before)
                for k in directory.keys_of_type(TOKEN_TYPE_BLIND_RSA)
            )
        except (DirectoryError, InvalidKeyError) as exc:
            log.warning("issuer directory %s is malformed: %s", url, exc)
            raise IssuerUnavailableError(url) from None
        age = max_age(response.headers.get("cache-control"), self._default_max_age, self._cap)
        entry = _Entry(keys, now + age, now)
        self._entries[issuer_url] = entry
        return entry
