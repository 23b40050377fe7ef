"""Settings from the environment and the module entry point."""

from __future__ import annotations

import hashlib
import json

import pytest

from services.common import entry as common_entry
from services.common.limits import ServerLimits
from services.recipe_server import __main__ as entry
from services.recipe_server.settings import RecipeServerSettings


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", "analyst-token-0123456789")
    monkeypatch.setenv("SAGG_RECIPE_SERVER_LEADER_URL", "http://127.0.0.1:9001/")
    grant = {"name": "kb", "token_sha256": hashlib.sha256(b"x").hexdigest()}
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYSTS", json.dumps([grant]))
    settings = RecipeServerSettings()
    assert settings.leader_url == "http://127.0.0.1:9001"
    assert settings.analysts[0].name == "kb"
    assert "analyst-token" not in repr(settings)


def test_main_refuses_invalid_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", raising=False)
    monkeypatch.setenv("SAGG_RECIPE_SERVER_PORT", "70000")
    assert entry.main() == 2
    err = capsys.readouterr().err
    assert "SAGG_RECIPE_SERVER_PORT" in err


def test_main_serves_with_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", "analyst-token-0123456789")
    served: list[dict[str, object]] = []
    monkeypatch.setattr(common_entry, "run_service", lambda app, **kw: served.append(kw))
    assert entry.main() == 0
    (kw,) = served
    limits = kw.pop("limits")
    assert kw == {"host": "127.0.0.1", "port": 8086, "log_level": "info"}
    assert isinstance(limits, ServerLimits) and limits.limit_concurrency == 1024
