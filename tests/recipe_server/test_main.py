"""Settings from the environment and the module entry point."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from deploy.tls import ensure_local_tls
from services.common import entry as common_entry
from services.common.limits import ServerLimits
from services.recipe_server import __main__ as entry
from services.recipe_server.settings import RecipeServerSettings


@pytest.fixture(autouse=True)
def _keep_pytest_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() configures process-wide logging and excepthooks: not inside the test session."""
    monkeypatch.setattr(common_entry, "configure_logging", lambda level: None)


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
    assert kw == {
        "host": "127.0.0.1",
        "port": 8086,
        "log_level": "info",
        "tls_cert_file": None,
        "tls_key_file": None,
        "sock": None,
    }
    assert isinstance(limits, ServerLimits) and limits.limit_concurrency == 1024


def test_main_serves_https_with_a_configured_certificate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls = ensure_local_tls(tmp_path / "tls", ["recipe-server"], [])
    cert = tls.certs["recipe-server"]
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", "analyst-token-0123456789")
    monkeypatch.setenv("SAGG_RECIPE_SERVER_SIGNING_KEY_FILE", str(tmp_path / "recipe.key"))
    monkeypatch.setenv("SAGG_RECIPE_SERVER_TLS_CERT_FILE", str(cert.cert_file))
    monkeypatch.setenv("SAGG_RECIPE_SERVER_TLS_KEY_FILE", str(cert.key_file))
    served: list[dict[str, object]] = []
    monkeypatch.setattr(common_entry, "run_service", lambda app, **kw: served.append(kw))
    assert entry.main() == 0
    assert served[0]["tls_cert_file"] == str(cert.cert_file)
    assert served[0]["tls_key_file"] == str(cert.key_file)


def test_main_names_a_missing_certificate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", "analyst-token-0123456789")
    monkeypatch.setenv("SAGG_RECIPE_SERVER_TLS_CERT_FILE", "/nonexistent/recipe-server.pem")
    monkeypatch.setenv("SAGG_RECIPE_SERVER_TLS_KEY_FILE", "/nonexistent/recipe-server.key")
    assert entry.main() == 2
    assert "tls_cert_file: no such file" in capsys.readouterr().err


def test_main_refuses_a_certificate_without_its_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", "analyst-token-0123456789")
    monkeypatch.setenv("SAGG_RECIPE_SERVER_TLS_CERT_FILE", "/etc/sagg/recipe-server.pem")
    monkeypatch.delenv("SAGG_RECIPE_SERVER_TLS_KEY_FILE", raising=False)
    assert entry.main() == 2
    assert "tls_cert_file and tls_key_file must be set together" in capsys.readouterr().err
