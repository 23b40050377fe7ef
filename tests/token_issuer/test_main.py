"""Settings and the `python -m services.token_issuer` entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from client_sdk.manufacturer import ManufacturerCA
from deploy.launcher import free_ports
from services.token_issuer.__main__ import main
from services.token_issuer.settings import TokenIssuerSettings
from shared.privacypass.directory import (
    ISSUER_DIRECTORY_PATH,
    MEDIA_ISSUER_DIRECTORY,
    IssuerDirectory,
)
from tests.conftest import REPO_ROOT


def test_roles_need_their_settings() -> None:
    with pytest.raises(ValidationError):
        TokenIssuerSettings(role="issuer")
    with pytest.raises(ValidationError):
        TokenIssuerSettings(role="attester", attester_secret="s" * 20)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TokenIssuerSettings(attester_secret="short")  # type: ignore[arg-type]
    s = TokenIssuerSettings(attester_secret="s" * 20)  # type: ignore[arg-type]
    assert "s" * 20 not in repr(s)


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGG_TOKEN_ISSUER_QUOTA_TOKENS", "7")
    monkeypatch.setenv("SAGG_TOKEN_ISSUER_ROLE", "issuer")
    monkeypatch.setenv("SAGG_TOKEN_ISSUER_ATTESTER_SECRET", "x" * 16)
    s = TokenIssuerSettings()
    assert s.quota_tokens == 7 and s.role == "issuer"


def test_main_reports_bad_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAGG_TOKEN_ISSUER_ROLE", "nonsense")
    assert main() == 2
    assert "SAGG_TOKEN_ISSUER_ROLE" in capsys.readouterr().err


def _free_port() -> int:
    (port,) = free_ports(1)
    return port


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_python_m_serves(tmp_path: Path, workers: int) -> None:
    """One process, or several on one port and one store: every connection, whichever
    process accepts it, sees the same key directory (a key generated once, in the store)."""
    ca = ManufacturerCA.generate()
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(ca.certificate_pem())
    port = _free_port()
    env = dict(os.environ)
    env.update(
        {
            "SAGG_TOKEN_ISSUER_PORT": str(port),
            "SAGG_TOKEN_ISSUER_ISSUER_DATABASE_URL": f"sqlite:///{tmp_path / 'i.db'}",
            "SAGG_TOKEN_ISSUER_ATTESTER_DATABASE_URL": f"sqlite:///{tmp_path / 'a.db'}",
            "SAGG_TOKEN_ISSUER_MANUFACTURER_CA_FILES": f'["{ca_file}"]',
            "SAGG_TOKEN_ISSUER_LOG_LEVEL": "warning",
            "SAGG_TOKEN_ISSUER_WORKERS": str(workers),
        }
    )
    proc = subprocess.Popen([sys.executable, "-m", "services.token_issuer"], cwd=REPO_ROOT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(base + "/healthz", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        assert r.json() == {"status": "ok", "role": "joint"}
        r = httpx.get(base + ISSUER_DIRECTORY_PATH, timeout=10)
        assert r.headers["content-type"] == MEDIA_ISSUER_DIRECTORY
        assert len(IssuerDirectory.decode(r.content).token_keys) >= 1
        # A fresh connection each time, so the kernel spreads them over the workers.
        bodies = {httpx.get(base + ISSUER_DIRECTORY_PATH, timeout=10).content for _ in range(20)}
        assert bodies == {r.content}
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == workers - 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # The workers end with the process that started them (after their graceful shutdown).
    deadline = time.monotonic() + 15
    while any(_alive(int(c)) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(int(c)) for c in children)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_refuse_memory_stores() -> None:
    with pytest.raises(ValidationError, match="shared between processes"):
        TokenIssuerSettings(workers=2, attester_database_url="sqlite:///:memory:")
