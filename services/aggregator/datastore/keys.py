"""The aggregator's HPKE keys (DAP-09 §4.4.1), private keys sealed by the crypter."""

from __future__ import annotations

from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.records import HpkeKeyRecord
from services.aggregator.datastore.states import KeyState
from services.common.db import Tx
from shared import hpke


class KeyStore(StoreBase):
    def hpke_keys(self) -> list[HpkeKeyRecord]:
        """Every stored key, newest first."""
        rows = self.db.run(
            "hpke_keys",
            lambda tx: tx.query("SELECT * FROM hpke_keys ORDER BY generation DESC"),
        )
        return [
            HpkeKeyRecord(
                hpke.from_private_bytes(
                    int(r["config_id"]),
                    self._crypter.open(
                        "hpke_keys",
                        "private_key",
                        _config_row(r["config_id"]),
                        bytes(r["private_key"]),
                    ),
                    kem_id=int(r["kem_id"]),
                    kdf_id=int(r["kdf_id"]),
                    aead_id=int(r["aead_id"]),
                ),
                KeyState(r["state"]),
            )
            for r in rows
        ]

    def add_hpke_key(self, now: int, *, only_if_none: bool = False) -> hpke.HpkeKeyPair | None:
        """Generate and store a key under an unused config id; it becomes the first one.

        With `only_if_none`, do nothing when a key exists (first start of a service)."""

        def body(tx: Tx) -> hpke.HpkeKeyPair | None:
            rows = tx.query("SELECT config_id, generation FROM hpke_keys")
            if only_if_none and rows:
                return None
            used = {int(r["config_id"]) for r in rows}
            if len(used) >= 256:
                # Config ids are a u8; reuse the oldest one's id.
                oldest = min(rows, key=lambda r: int(r["generation"]))
                tx.execute("DELETE FROM hpke_keys WHERE config_id = :c", {"c": oldest["config_id"]})
                used.discard(int(oldest["config_id"]))
            generation = max((int(r["generation"]) for r in rows), default=0) + 1
            config_id = (
                next(
                    c
                    for c in range(generation % 256, generation % 256 + 256)
                    if c % 256 not in used
                )
                % 256
            )
            keypair = hpke.generate_keypair(config_id)
            tx.execute(
                "INSERT INTO hpke_keys (config_id, kem_id, kdf_id, aead_id, public_key,"
                " private_key, state, generation, created_at)"
                " VALUES (:c, :kem, :kdf, :aead, :pk, :sk, :s, :g, :now)",
                {
                    "c": config_id,
                    "kem": keypair.kem_id,
                    "kdf": keypair.kdf_id,
                    "aead": keypair.aead_id,
                    "pk": keypair.public_key,
                    "sk": self._crypter.seal(
                        "hpke_keys",
                        "private_key",
                        _config_row(config_id),
                        keypair.private_key_bytes(),
                    ),
                    "s": KeyState.ACTIVE,
                    "g": generation,
                    "now": now,
                },
            )
            return keypair

        return self.db.run("add_hpke_key", body)

    def expire_hpke_key(self, config_id: int) -> bool:
        """Stop advertising a key; it still decrypts reports sealed to it."""
        return (
            self._statement(
                "expire_hpke_key",
                "UPDATE hpke_keys SET state = :s WHERE config_id = :c",
                {"c": config_id, "s": KeyState.EXPIRED},
            )
            > 0
        )


def _config_row(config_id: object) -> bytes:
    """The associated-data row key of an HPKE key: its u8 config id."""
    return int(str(config_id)).to_bytes(1, "big")
