"""Nothing secret reaches a service's log, tracebacks included: each of the four service
programs runs as a real process (uvicorn, JSON logging on stderr), and an error that carries
secrets in its message (a share's bytes repr, a bearer token, a DSN with its password) is
forced on one of its routes, and once at startup. The log must name the error's type and
frames, and hold none of the secrets.

Before the formatter withheld exception messages, uvicorn's "Exception in ASGI application"
line quoted them whole; an exception at startup was printed raw by the interpreter.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from deploy.keys import TOKEN_KEY_IDS_FILE, ensure_keys
from deploy.launcher import MODULES, STORES, free_ports, service_env
from services.common.logs import JsonFormatter, redact
from shared.b64url import b64url_encode
from shared.files import write_private

REPO = Path(__file__).resolve().parents[2]

SHARE = secrets.token_bytes(48)
TOKEN = secrets.token_urlsafe(32)
PASSWORD = "pw-" + secrets.token_hex(8)
#: Each service, the method its route calls, and that route.
TARGETS = {
    "leader": ("services.aggregator.service.Aggregator.hpke_config_list", "/hpke_config"),
    "collector": ("services.collector.store.Store.get_job", "/collections/job"),
    "token-issuer": (
        "services.token_issuer.issuer.IssuerService.directory",
        "/.well-known/private-token-issuer-directory",
    ),
    "recipe-server": ("services.recipe_server.service.RecipeService.listing", "/recipes"),
}
#: Runs the service with `target` raising; at startup instead when `startup` is set.
_PROGRAM = """
import os, runpy, sys
from unittest import mock
share = bytes.fromhex(os.environ["T_SHARE"])
secret = f"share {share!r} Bearer {os.environ['T_TOKEN']} postgresql://u:{os.environ['T_PW']}@db/x"
def boom(*args, **kwargs):
    try:
        raise KeyError(share)
    except KeyError:
        raise ValueError(secret)
target = os.environ["T_TARGET"]
if os.environ.get("T_STARTUP"):
    target = "services.common.db.Database.open"
with mock.patch(target, boom):
    runpy.run_module(os.environ["T_MODULE"], run_name="__main__", alter_sys=True)
"""


def _secrets_in(text: str) -> list[str]:
    words = [SHARE.hex(), repr(SHARE)[2:-1], TOKEN, PASSWORD]
    return [w for w in words if w in text]


def _run(name: str, tmp_path: Path, *, startup: bool) -> str:
    """The service's stderr after the forced error (and SIGTERM, if it still runs)."""
    keys = ensure_keys(tmp_path / "keys")
    # What `sagg up` pins from the running issuer's directory before the recipe server starts.
    write_private(keys.directory / TOKEN_KEY_IDS_FILE, (b64url_encode(bytes(32)) + "\n").encode())
    databases = {role: f"sqlite:///{tmp_path / role}.sqlite3" for role in STORES}
    port, *others = free_ports(1 + len(MODULES))
    urls = {n: f"http://127.0.0.1:{p}" for n, p in zip(MODULES, others, strict=True)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    env.update(
        service_env(name, host="127.0.0.1", port=port, databases=databases, keys=keys, urls=urls),
        PYTHONPATH=str(REPO),
        T_SHARE=SHARE.hex(),
        T_TOKEN=TOKEN,
        T_PW=PASSWORD,
        T_TARGET=TARGETS[name][0],
        T_MODULE=MODULES[name][0],
    )
    if startup:
        env["T_STARTUP"] = "1"
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", _PROGRAM], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        if not startup:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log.read_text()
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.1)
            auth = {"Authorization": f"Bearer {keys.admin_tokens[name]}"}
            answer = httpx.get(url + TARGETS[name][1], headers=auth, timeout=10)
            assert answer.status_code == 500, answer.text
            assert not _secrets_in(answer.text)
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("startup", [False, True], ids=["request", "startup"])
@pytest.mark.parametrize("name", list(TARGETS))
def test_a_forced_error_carrying_secrets_leaves_none_in_the_log(
    name: str, startup: bool, tmp_path: Path
) -> None:
    text = _run(name, tmp_path, startup=startup)
    docs = [json.loads(line) for line in text.splitlines()]  # every line JSON, none raw
    # uvicorn formats a lifespan failure into the message itself; other failures carry exc.
    failures = [d.get("exc") or d["msg"] for d in docs if "Traceback" in str(d)]
    assert failures, text
    assert "Error: (message withheld)" in failures[-1], failures[-1]
    assert 'services/common/logs.py", line' not in failures[-1]  # frames, not the formatter
    assert not _secrets_in(text), text


def test_the_formatter_redacts_what_secrets_look_like_in_messages() -> None:
    task_id = "Zx8e3PrWwn0lYK6yyA5rTPKqOBhNGFhh33DnmmhTgiE"  # ids stay readable
    message = (
        f"task {task_id} failed: Authorization: Bearer {TOKEN}; "
        f"postgresql://sagg:{PASSWORD}@db:5432/leader host=db password={PASSWORD} "
        f"share {SHARE!r} token {SHARE.hex()}"
    )
    assert not _secrets_in(redact(message)) and task_id in redact(message)
    record = JsonFormatter().format(
        __import__("logging").LogRecord(
            "sagg.x", 40, __file__, 1, "%s", (message,), None, func=None
        )
    )
    doc = json.loads(record)
    assert not _secrets_in(record) and task_id in doc["msg"]
