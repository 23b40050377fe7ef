"""The publication path on SQLite and PostgreSQL, with racing publishers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.clock import TestClock
from services.common.db import Database
from services.recipe_server.service import (
    Analyst,
    ConflictError,
    PublishResult,
    RecipeService,
    draft_hash,
)
from services.recipe_server.store import RecipeStore
from shared.recipe.log import (
    consistency_proof,
    leaf_hash,
    root_hash,
    verify_consistency,
    verify_tree_head,
)
from shared.recipe.model import RecipeDraft, TokenIssuerRef
from shared.recipe.signing import RecipeSigner
from tests import pg
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import ISSUER, ISSUER_KEY_ID, FakeProvisioner

SIGNER = RecipeSigner.from_seed(b"\x09" * 32)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        database = Database.open(f"sqlite:///{tmp_path / 'r.db'}")
        yield database
        database.close()
        return
    pg.require(strict=True)
    with pg.throwaway() as made:
        database = Database.open(made.create())
        try:
            yield database
        finally:
            database.close()


def _service(db: Database) -> RecipeService:
    issuer = TokenIssuerRef(url=ISSUER, key_ids=(ISSUER_KEY_ID,))
    service = RecipeService(RecipeStore(db), SIGNER, FakeProvisioner(), TestClock(), (issuer,))
    service.start()
    return service


def _draft(**overrides: object) -> RecipeDraft:
    doc = draft_json(**overrides)
    doc["token_issuer"] = {"url": "https://issuer.test"}
    return RecipeDraft.model_validate(doc)


def test_the_loser_of_an_identical_race_returns_the_winners_record(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two publications of one draft: the loser waits for the winner, whose commit turns the
    pending task into the record in one transaction. That commit may fall between the loser's
    two reads (here: right after the first); the loser must still find the record, never
    neither (which made it refuse its own draft as a conflict, once in a full-suite run)."""
    service = _service(db)
    draft = _draft(version=1)
    store = service.store
    real_append, real_get, real_pending = store.append, store.get, store.pending
    loser: list[PublishResult] = []

    def append(*args: Any, **kw: Any) -> Any:
        committed: list[Any] = []

        def then_commit(read: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(*a: Any, **k: Any) -> Any:
                found = read(*a, **k)
                if not committed:
                    committed.append(real_append(*args, **kw))
                return found

            return wrapped

        monkeypatch.setattr(store, "get", then_commit(real_get))
        monkeypatch.setattr(store, "pending", then_commit(real_pending))
        loser.append(service._await_publication(draft, draft_hash(draft)))
        return committed[0]

    monkeypatch.setattr(store, "append", append)
    winner = service.publish(draft, Analyst("a"))
    assert winner.created
    assert loser == [PublishResult(winner.record, False)]


def test_racing_publishers_build_one_consistent_log(db: Database) -> None:
    service = _service(db)
    drafts = [_draft(version=v) for v in range(1, 9)]
    conflicts: list[int] = []
    # Versions 1..8 once each, plus a rival draft for version 1 that must lose or win whole.
    rival = _draft(version=1, description="rival")

    def publish(draft: RecipeDraft) -> None:
        try:
            service.publish(draft, Analyst("a"))
        except ConflictError:
            conflicts.append(draft.version)

    threads = [threading.Thread(target=publish, args=(d,)) for d in [*drafts, rival, drafts[2]]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert conflicts == [1]
    records = service.store.all_recipes()
    assert sorted(r.version for r in records) == list(range(1, 9))
    assert [r.leaf_index for r in records] == list(range(8))
    hashes = service.store.leaf_hashes()
    assert hashes == [leaf_hash(r.canonical) for r in records]
    heads = [service.head(n) for n in range(9)]
    for head in heads:
        sth = head.signed()
        verify_tree_head(sth, SIGNER.public_key)
        assert sth.root == root_hash(hashes[: sth.tree_size])
    assert [h.timestamp_ms for h in heads] == sorted(h.timestamp_ms for h in heads)
    for m in range(9):
        verify_consistency(m, 8, heads[m].root, heads[8].root, consistency_proof(hashes, m))


def test_migrations_are_applied_once(db: Database) -> None:
    _service(db)
    service = _service(db)  # a second start on the same store
    assert service.store.latest_head() is not None
    assert service.head(0).tree_size == 0
    assert db.schema_version() == 2
