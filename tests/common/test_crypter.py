"""Secrets at rest (`services.common.crypter`): sealing, binding, rotation, and the three stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from pydantic import SecretStr, ValidationError

from services.aggregator.app import open_aggregator
from services.aggregator.settings import AggregatorSettings
from services.collector.store import open_store
from services.common.clock import TestClock
from services.common.crypter import (
    MAGIC,
    Crypter,
    CrypterError,
    crypter_from,
    generate_key,
    parse_keys,
)
from services.common.db import Database
from services.token_issuer.keys import KeySchedule, KeyStore
from shared.privacypass.issuance import IssuerKey
from tests.aggregator import helpers
from tests.aggregator.env import make_env
from tests.collector.helpers import AUTH, make_task, provision

OLD, NEW = generate_key(), generate_key()


def test_round_trip_and_binding() -> None:
    crypter = Crypter(parse_keys(OLD))
    sealed = crypter.seal("t", "c", b"row-1", b"secret value")
    assert sealed.startswith(MAGIC) and b"secret value" not in sealed
    assert crypter.open("t", "c", b"row-1", sealed) == b"secret value"
    # Two seals of one value differ (fresh nonces), and both open.
    again = crypter.seal("t", "c", b"row-1", b"secret value")
    assert again != sealed and crypter.open("t", "c", b"row-1", again) == b"secret value"
    # Bound to its place: another row, column or table does not open it.
    for where in (("t", "c", b"row-2"), ("t", "d", b"row-1"), ("u", "c", b"row-1")):
        with pytest.raises(CrypterError, match="opens with none"):
            crypter.open(*where, sealed)
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(CrypterError):
        crypter.open("t", "c", b"row-1", tampered)


def test_text_form() -> None:
    crypter = Crypter(parse_keys(OLD))
    sealed = crypter.seal_text("tasks", "token", b"id", "bearer-token-123")
    assert "bearer-token-123" not in sealed and sealed.isascii()
    assert crypter.open_text("tasks", "token", b"id", sealed) == "bearer-token-123"
    with pytest.raises(CrypterError):
        crypter.open_text("tasks", "token", b"other", sealed)


def test_rotation_and_switching_encryption_on() -> None:
    old = Crypter(parse_keys(OLD))
    sealed_by_old = old.seal("t", "c", b"r", b"v1")
    rotated = Crypter(parse_keys(f"{NEW},{OLD}"))
    assert rotated.open("t", "c", b"r", sealed_by_old) == b"v1"
    sealed_by_new = rotated.seal("t", "c", b"r", b"v2")
    # The new key seals: the old key alone cannot open what was written after the rotation.
    with pytest.raises(CrypterError):
        old.open("t", "c", b"r", sealed_by_new)
    # Values written before any key was configured stay readable once keys are.
    clear = Crypter()
    assert clear.seal("t", "c", b"r", b"v0") == b"v0"
    assert rotated.open("t", "c", b"r", b"v0") == b"v0"
    assert rotated.open_text("t", "c", b"r", "plain") == "plain"
    # A sealed value never opens without a key.
    with pytest.raises(CrypterError):
        clear.open("t", "c", b"r", sealed_by_new)


@pytest.mark.parametrize(
    "bad",
    ["", "short", "a" * 22 + "==", f"{OLD},x", "a+b/" * 6],
    # The ids, not the values: OLD is random, and every run must collect the same tests.
    ids=["empty", "short", "padded", "good-then-bad", "not-url-safe"],
)
def test_malformed_keys_are_refused_without_echoing_them(bad: str) -> None:
    with pytest.raises(CrypterError) as info:
        parse_keys(bad)
    assert bad not in str(info.value) or bad == ""
    with pytest.raises(ValidationError) as settings_error:
        AggregatorSettings(datastore_keys=SecretStr(bad))
    assert "datastore_keys" in str(settings_error.value)


def test_settings_keep_keys_secret() -> None:
    settings = AggregatorSettings(datastore_keys=SecretStr(OLD))
    assert OLD not in repr(settings)
    # Keys from the settings seal; without keys values pass through in the clear.
    assert crypter_from(settings.datastore_keys, "test").seal("t", "c", b"r", b"v") != b"v"
    assert crypter_from(None, "test").seal("t", "c", b"r", b"v") == b"v"


def _raw_bytes(db_file: Path) -> bytes:
    """Every value of every table of a SQLite store, as one blob to search."""
    out = bytearray()
    with sqlite3.connect(db_file) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table}"):
                for value in row:
                    if isinstance(value, bytes):
                        out += value
                    elif value is not None:
                        out += str(value).encode()
    return bytes(out)


# --- the stores -------------------------------------------------------------------------------


def test_aggregator_store_seals_keys_tokens_and_verify_keys(tmp_path: Path) -> None:
    clock = TestClock(1_700_006_400)
    files = iter(tmp_path / name for name in ("leader.db", "helper.db"))
    env = make_env(lambda: f"sqlite:///{next(files)}", clock, helpers.TaskParams(),
                   datastore_keys=SecretStr(OLD))  # fmt: skip
    assert env.upload(env.report(1)).status_code == 201
    env.drive()

    leader_db = tmp_path / "leader.db"
    stored = _raw_bytes(leader_db)
    keypair = env.leader_agg.ds.hpke_keys()[0].keypair
    task = env.leader_agg.ds.get_task(env.params.task_id.value)
    assert task is not None and task.helper_token is not None
    for secret in (
        keypair.private_key_bytes(),
        task.definition["vdaf_verify_key"].encode(),
        env.params.verify_key,
        task.helper_token.encode(),
    ):
        assert secret not in stored
    # The public parts stay readable (and the report flowed through the sealed keys).
    assert keypair.public_key in stored
    assert env.leader_agg.ds.hpke_keys()[0].keypair.private_key_bytes() == (
        keypair.private_key_bytes()
    )

    # Reopened without the key, or with another one, the store refuses to hand out secrets.
    for keys in (None, SecretStr(NEW)):
        settings = helpers.settings(f"sqlite:///{leader_db}", datastore_keys=keys)
        with pytest.raises(CrypterError, match=r"hpke_keys\.private_key"):
            open_aggregator(settings, clock=clock)


def test_collector_store_seals_the_private_key_and_token(tmp_path: Path) -> None:
    db_file = tmp_path / "collector.db"
    store = open_store(f"sqlite:///{db_file}", Crypter(parse_keys(OLD)))
    task = make_task()
    provision(store, task, 0)
    loaded = store.load_task(task.task_id)
    assert loaded is not None and AUTH in loaded.definition
    store.close()
    stored = _raw_bytes(db_file)
    assert AUTH.encode() not in stored
    assert loaded.hpke_private_key.encode() not in stored
    assert task.task_id.encode() in stored

    other = open_store(f"sqlite:///{db_file}", Crypter(parse_keys(NEW)))
    with pytest.raises(CrypterError, match="collector_auth_token"):
        other.load_task(task.task_id)
    other.close()


def test_issuer_keys_are_sealed(tmp_path: Path) -> None:
    clock = TestClock(1_700_000_000)
    schedule = KeySchedule(7 * 86_400, 86_400, 2 * 86_400)
    key = IssuerKey.generate()
    url = f"sqlite:///{tmp_path / 'issuer.db'}"

    def store(keys: str | None) -> KeyStore:
        crypter = Crypter(parse_keys(keys)) if keys else Crypter()
        made = KeyStore(Database.open(url), schedule, clock, generate=lambda: key, crypter=crypter)
        made.migrate()
        return made

    ring = store(OLD).ring()
    der = key.private_key.to_cryptography().private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    assert der not in _raw_bytes(tmp_path / "issuer.db")
    # The same key comes back through the seal, and nothing opens without it.
    assert [k.key.token_key_id for k in store(OLD).ring().keys] == [
        k.key.token_key_id for k in ring.keys
    ]
    with pytest.raises(CrypterError, match=r"pp_issuer_keys\.private_key"):
        store(NEW).ring()
