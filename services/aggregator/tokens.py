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
- one fetch per issuer at a time (single flight): concurrent callers wait for it rather than
  stampede, and no lock is held across a fetch, so a slow or hung issuer delays only the
  requests that need its keys, never those of other issuers. A caller that must not block (the
  leader's uploads, validated in a small shared pool) gets `IssuerKeysPendingError` with the
  fetch's future, waits for it off the pool, and asks again with ``fetch=False``.
- only the issuers of the aggregator's own configuration (`AggregatorSettings.token_issuers`)
  are ever fetched: any other URL is `IssuerNotAllowedError` before a request is made, so a
  task's definition cannot point the aggregator's requests at an address of its choosing
  (SSRF) nor choose who vouches for clients.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future
from dataclasses import dataclass

import httpx

from services.common.clock import Clock
from services.common.problems import HttpProblemError, InternalError
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, DirectoryError, IssuerDirectory
from shared.privacypass.keys import InvalidKeyError, TokenKey
from shared.privacypass.messages import TOKEN_TYPE_BLIND_RSA

log = logging.getLogger(__name__)

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)

#: GET a URL; the aggregator passes an httpx client's `get` (a TestClient's in tests).
Fetch = Callable[[str], httpx.Response]


class IssuerUnavailableError(InternalError):
    """The issuer directory could not be fetched and no fresh copy is cached."""


class IssuerNotAllowedError(InternalError):
    """The issuer is not one this aggregator is configured to trust; nothing was fetched."""


class IssuerKeysPendingError(InternalError):
    """The issuer's directory is being fetched; `future` completes when the fetch ends."""

    def __init__(self, issuer_url: str, future: Future[_Entry]) -> None:
        super().__init__(issuer_url)
        self.future = future


def issuer_answer(
    task_id: str, exc: IssuerKeysPendingError | IssuerUnavailableError
) -> IssuerKeysPendingError | HttpProblemError:
    """What an upload gets when validation needs the token issuer: the pending signal as is
    (the caller validates again once the issuer answered), or, since an unavailable issuer is
    not the client's fault, a 503 that tells it to retry without refusing any report."""
    if isinstance(exc, IssuerKeysPendingError):
        return exc
    return HttpProblemError(503, "the token issuer is unavailable", task_id=task_id)


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
        #: The fetch in flight per issuer URL (module docstring: single flight).
        self._flights: dict[str, Future[_Entry]] = {}
        # Guards the two dicts only; never held across a fetch.
        self._lock = threading.Lock()
        self.fetches = 0

    def keys(
        self,
        issuer_url: str,
        token_key_id: bytes | None = None,
        *,
        wait: bool = True,
        fetch: bool = True,
    ) -> list[TokenKey]:
        """The keys that verify tokens now; refetches as the module docstring says.

        `wait` False: raise `IssuerKeysPendingError` rather than wait for a fetch. `fetch`
        False: answer from the cache alone (after such a wait)."""
        if not self.allows(issuer_url):
            raise IssuerNotAllowedError(issuer_url)
        now = self._clock.now()
        with self._lock:
            entry = self._entries.get(issuer_url)
        stale = entry is None or now >= entry.fresh_until
        if not fetch:
            # After waiting for a flight: its result counts even when it may not be reused
            # (max-age 0); a failed flight leaves only an older copy, stale or not.
            if entry is None or (stale and entry.fetched_at < now):
                raise IssuerUnavailableError(directory_url(issuer_url))
        elif stale or self._key_unknown(entry, token_key_id, now):
            future = self._flight(issuer_url, now, inline=wait)
            if not wait:
                raise IssuerKeysPendingError(issuer_url, future)
            try:
                entry = future.result()
            except IssuerUnavailableError:
                if stale:
                    raise
                # The cached copy is still fresh: the token is refused by it.
        assert entry is not None
        return [k for k, nb in entry.keys if nb is None or nb <= now + self._skew]

    def allows(self, issuer_url: str) -> bool:
        return issuer_url.rstrip("/") in self._allowed

    def _key_unknown(self, entry: _Entry | None, token_key_id: bytes | None, now: int) -> bool:
        """A fresh directory lacks the token's key id and may be refetched for it."""
        return (
            entry is not None
            and token_key_id is not None
            and all(k.token_key_id != token_key_id for k, _ in entry.keys)
            and now - entry.fetched_at >= self._min_refetch
        )

    def _flight(self, issuer_url: str, now: int, *, inline: bool) -> Future[_Entry]:
        """The issuer's fetch in flight, started here if there is none: in this thread when
        `inline`, else in a thread of its own."""
        with self._lock:
            future = self._flights.get(issuer_url)
            if future is not None:
                return future
            future = Future()
            self._flights[issuer_url] = future
            self.fetches += 1
        if inline:
            self._fly(issuer_url, now, future)
        else:
            threading.Thread(
                target=self._fly, args=(issuer_url, now, future), name="issuer-fetch", daemon=True
            ).start()
        return future

    def _fly(self, issuer_url: str, now: int, future: Future[_Entry]) -> None:
        try:
            entry = self._refresh(issuer_url, now)
        except Exception as exc:
            with self._lock:
                del self._flights[issuer_url]
            future.set_exception(exc)
            return
        with self._lock:
            self._entries[issuer_url] = entry
            del self._flights[issuer_url]
        future.set_result(entry)

    def _refresh(self, issuer_url: str, now: int) -> _Entry:
        url = directory_url(issuer_url)
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
        return _Entry(keys, now + age, now)
