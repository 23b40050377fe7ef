"""The recipe log survives a restart on the same database (and key file)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fastapi.testclient import TestClient

from services.common.clock import TestClock
from services.recipe_server.app import create_app
from shared.b64url import b64url_decode
from shared.recipe.log import LogVerifier, SignedTreeHead
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import FakeProvisioner, auth, make_settings


def test_restart_keeps_recipes_heads_and_key(tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "recipe.key"
    settings = make_settings(tmp_path, signing_key=None, signing_key_file=key_file)
    clock = TestClock()
    with TestClient(create_app(settings, provisioner=FakeProvisioner(), clock=clock)) as c:
        for version in (1, 2):
            assert (
                c.post("/recipes", json=draft_json(version=version), headers=auth()).status_code
                == 201
            )
        key_before = c.get("/keys").json()
        sth_before = c.get("/log/sth").json()
        first = c.get("/recipes/keyboard.ngram3-age", params={"version": 1}).json()
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600

    clock.advance(3600)
    with TestClient(create_app(settings, provisioner=FakeProvisioner(), clock=clock)) as c:
        assert c.get("/keys").json() == key_before
        assert c.get("/log/sth").json() == sth_before
        assert (
            c.get("/recipes/keyboard.ngram3-age", params={"version": 1, "tree_size": 2}).json()
            == first
        )
        # Re-publishing a stored draft after the restart is still idempotent.
        again = c.post("/recipes", json=draft_json(version=1), headers=auth())
        assert again.status_code == 200 and again.json()["leaf_index"] == 0
        assert c.post("/recipes", json=draft_json(version=3), headers=auth()).status_code == 201
        key = b64url_decode(key_before["keys"][0]["public_key"], "key")
        verifier = LogVerifier(key, SignedTreeHead.model_validate(sth_before))
        latest = SignedTreeHead.model_validate(c.get("/log/sth").json())
        proof = c.get("/log/consistency", params={"first": 2, "second": 3}).json()["proof"]
        verifier.update(latest, [b64url_decode(p, "p") for p in proof])
        assert latest.tree_size == 3 and latest.timestamp > sth_before["timestamp"]
