"""What every part of the `Datastore` holds: the database, the shard count and the crypter."""

from __future__ import annotations

import secrets

from services.common.crypter import Crypter
from services.common.db import Database


class StoreBase:
    """The state the datastore's parts share; each public method is one named transaction."""

    def __init__(self, db: Database, *, shards: int = 8, crypter: Crypter | None = None) -> None:
        self.db = db
        self._shards = shards
        #: Seals the secret columns: VDAF verify keys, the leader's helper token, HPKE keys.
        self._crypter = crypter or Crypter()

    def _shard(self) -> int:
        """A random shard row of the sharded counters: concurrent writers rarely meet."""
        return secrets.randbelow(self._shards)
