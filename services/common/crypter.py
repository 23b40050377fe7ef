"""Secrets at rest: AES-128-GCM of the secret columns of a service's store.

A copy of a database (a backup, a replica, a stolen disk) should not hand over the keys it
holds: HPKE private keys, VDAF verify keys, bearer tokens, issuer signing keys. The operator
gives each service one or more 16-byte *datastore keys* (``SAGG_<SERVICE>_DATASTORE_KEYS``:
comma-separated unpadded base64url, `sagg keys init` makes them); the store keeps only sealed
values, bound to where they live by the AEAD's associated data (table, column, row key), so
a sealed value copied into another row or column does not open.

Rotation: put a new key first; it seals every value written from then on, and every listed key
still opens what it sealed. Values written while no key was configured are stored in the clear
and stay readable after keys are added (they are sealed when next rewritten), so encryption can
be switched on for an existing deployment; a sealed value never opens without its key.

Sealed form: ``MAGIC || nonce (12) || AES-GCM ciphertext and tag``; as text (for TEXT
columns), ``TEXT_PREFIX`` followed by that in unpadded base64url.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Annotated

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import AfterValidator, SecretStr

from services.common.problems import InternalError
from shared.b64url import b64url_decode, b64url_encode

__all__ = ["Crypter", "CrypterError", "DatastoreKeys", "crypter_from", "generate_key", "parse_keys"]

log = logging.getLogger(__name__)

KEY_SIZE = 16
NONCE_SIZE = 12
MAGIC = b"\x00sagg-sealed-v1\x00"
TEXT_PREFIX = "sealed-v1:"


class CrypterError(InternalError, ValueError):
    """A datastore key is malformed, or a sealed value opens with none of the keys."""


def generate_key() -> str:
    """A fresh datastore key in its configuration form."""
    return b64url_encode(secrets.token_bytes(KEY_SIZE))


def parse_keys(text: str) -> list[bytes]:
    """``key1,key2,...`` (unpadded base64url of 16 bytes each) to raw keys, first first."""
    try:
        keys = [b64url_decode(part.strip(), "datastore key") for part in text.split(",")]
    except ValueError as exc:
        raise CrypterError(str(exc)) from None
    if any(len(key) != KEY_SIZE for key in keys):
        raise CrypterError(f"every datastore key must be {KEY_SIZE} bytes of base64url")
    return keys


def _valid_keys(value: SecretStr | None) -> SecretStr | None:
    if value is not None:
        parse_keys(value.get_secret_value())
    return value


#: Each service's ``datastore_keys`` setting: checked when the settings load, never shown.
DatastoreKeys = Annotated[SecretStr | None, AfterValidator(_valid_keys)]


def crypter_from(keys: SecretStr | None, service: str) -> Crypter:
    """The crypter of a service's setting; without keys, say once that secrets are in the clear."""
    if keys is None:
        log.warning("%s: no datastore keys configured: secrets are stored unencrypted", service)
        return Crypter()
    return Crypter(parse_keys(keys.get_secret_value()))


class Crypter:
    """Seals and opens secret column values; with no keys, values pass through in the clear."""

    def __init__(self, keys: Sequence[bytes] = ()) -> None:
        self._aeads = [AESGCM(key) for key in keys]

    def __repr__(self) -> str:
        return f"Crypter(keys={len(self._aeads)})"

    @staticmethod
    def _aad(table: str, column: str, row: bytes) -> bytes:
        # Length-prefixed, so that no two (table, column, row) triples share an encoding.
        parts = (table.encode(), column.encode(), row)
        return b"".join(len(p).to_bytes(2, "big") + p for p in parts)

    def seal(self, table: str, column: str, row: bytes, value: bytes) -> bytes:
        if not self._aeads:
            return value
        nonce = secrets.token_bytes(NONCE_SIZE)
        sealed = self._aeads[0].encrypt(nonce, value, self._aad(table, column, row))
        return MAGIC + nonce + sealed

    def open(self, table: str, column: str, row: bytes, stored: bytes) -> bytes:
        if not stored.startswith(MAGIC):
            return stored  # written before keys were configured
        body = stored[len(MAGIC) :]
        nonce, sealed = body[:NONCE_SIZE], body[NONCE_SIZE:]
        aad = self._aad(table, column, row)
        for aead in self._aeads:
            try:
                return aead.decrypt(nonce, sealed, aad)
            except InvalidTag:
                continue
        # Name the place, never the value.
        raise CrypterError(
            f"a sealed {table}.{column} opens with none of the configured datastore keys"
        )

    def seal_text(self, table: str, column: str, row: bytes, value: str) -> str:
        if not self._aeads:
            return value
        return TEXT_PREFIX + b64url_encode(self.seal(table, column, row, value.encode()))

    def open_text(self, table: str, column: str, row: bytes, stored: str) -> str:
        if not stored.startswith(TEXT_PREFIX):
            return stored
        try:
            raw = b64url_decode(stored[len(TEXT_PREFIX) :], f"sealed {table}.{column}")
        except ValueError as exc:
            raise CrypterError(str(exc)) from None
        if not raw.startswith(MAGIC):
            raise CrypterError(f"a sealed {table}.{column} is malformed")
        return self.open(table, column, row, raw).decode()
