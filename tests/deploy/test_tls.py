"""`sagg up --tls`: the whole deployment over HTTPS with a local CA, through real processes.

Every service serves HTTPS with a certificate from `<data dir>/tls/ca.pem`, and every client
verifies it: the leader reaching the helper and the token issuer's directory, the collector
reaching the leader, the recipe server provisioning tasks, the simulated devices and the CLI
(which find the CA in the deployment file). A recipe published there names https:// URLs, and
collecting its reports gives the exact count. A client that does not trust the local CA (the
system's store, or another CA) is refused by certificate verification, and nothing in the data
dir is readable by other users.
"""

from __future__ import annotations

import json
import re
import ssl
import stat
import time
from pathlib import Path

import httpx
import pytest

from client_sdk.upload import ClientTask, UploadError, upload_reports
from deploy.config import Deployment
from deploy.tls import ensure_local_tls
from tests.deploy.conftest import Up, age_buckets_draft, collect_args

DEVICES = 40
PRECISION = 3600


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _collect_args(task_id: str, start: int) -> list[str]:
    return collect_args(task_id, start, 2 * PRECISION, "--format", "json")


@pytest.mark.slow
@pytest.mark.parametrize("up", ["tls"], indirect=True)
def test_the_deployment_runs_over_https_and_clients_verify_the_local_ca(
    up: Up, tmp_path: Path
) -> None:
    deployment = Deployment.model_validate_json((up.data_dir / "deployment.json").read_text())
    ca_file = up.data_dir / "tls" / "ca.pem"
    assert deployment.tls_ca_file == str(ca_file)
    urls = [
        deployment.leader,
        deployment.helper,
        deployment.collector,
        deployment.token_issuer,
        deployment.recipe_server,
    ]
    assert all(str(url).startswith("https://127.0.0.1:") for url in urls), urls

    draft_file = tmp_path / "ages.json"
    draft_file.write_text(
        json.dumps(age_buckets_draft("tls", "age buckets over HTTPS", [13, 30, 65, 91], 30, 4.0))
    )
    published = up.sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    summary = json.loads(published.stdout)
    assert summary["verified"], summary
    task_id = summary["task_id"]

    # The recipe the devices verify names the HTTPS parties and issuer.
    trusting = ssl.create_default_context(cafile=str(ca_file))
    recipe = httpx.get(
        f"{deployment.recipe_server}/recipes/tls.ages", verify=trusting, timeout=10
    ).json()["signed_recipe"]["recipe"]
    named = json.dumps(recipe["task"])
    assert "http://" not in named and deployment.leader in named, named

    devices = up.sagg(
        "devices", "run", "--recipe", "tls.ages", "--count", str(DEVICES), "--data", "ages"
    )
    assert devices.returncode == 0, devices.stderr + devices.stdout
    uploaded = int(re.search(r"uploaded (\d+)", devices.stdout).group(1))  # type: ignore[union-attr]
    assert uploaded == DEVICES, devices.stdout

    # Leader -> helper aggregation and collector -> leader collection, all over HTTPS.
    start = int(time.time()) // PRECISION * PRECISION - PRECISION
    collected = up.sagg(*_collect_args(task_id, start), "--wait", "60")
    assert collected.returncode == 0, collected.stderr
    assert json.loads(collected.stdout)["report_count"] == DEVICES

    # A client trusting another CA is refused by certificate verification, one clear line.
    other_ca = ensure_local_tls(tmp_path / "other-ca", (), ()).ca_file
    refused = up.sagg("--ca-file", str(other_ca), *_collect_args(task_id, start), "--wait", "1")
    assert refused.returncode == 1, refused.stdout
    assert "TLS certificate verification failed" in refused.stderr, refused.stderr
    # So is one trusting only the system's store: the DAP upload client, and plain httpx.
    task = ClientTask(
        task_id=task_id,
        leader=deployment.leader,
        helper=deployment.helper,
        vdaf=recipe["task"]["vdaf"],
        time_precision=PRECISION,
    )
    with pytest.raises(UploadError, match="TLS certificate verification failed"):
        upload_reports(task, [0])
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{deployment.leader}/healthz", timeout=10)
    # Plain HTTP to an HTTPS port gets no DAP answer.
    with pytest.raises(httpx.HTTPError):
        httpx.get(str(deployment.leader).replace("https://", "http://") + "/healthz", timeout=10)

    # Owner-only: the data dir and the directories in it 0700 (the leader's job share files
    # beside its store too); keys, stores, job shares, logs, the deployment file 0600.
    assert _mode(up.data_dir) == 0o700
    share_dirs = list(up.data_dir.glob("*.job-shares"))
    assert share_dirs
    for directory in (up.data_dir / "keys", up.data_dir / "tls", up.data_dir / "logs", *share_dirs):
        assert _mode(directory) == 0o700, directory
    files = [
        up.data_dir / "deployment.json",
        up.data_dir / "pids.json",
        *(up.data_dir / "keys").iterdir(),
        *(up.data_dir / "tls").glob("*.key"),
        *(f for f in up.data_dir.glob("*.sqlite3*") if f not in share_dirs),
        *(f for directory in share_dirs for f in directory.iterdir()),
        *(up.data_dir / "logs").iterdir(),
    ]
    assert len(files) > 20
    loose = {str(f.relative_to(up.data_dir)): oct(_mode(f)) for f in files if _mode(f) != 0o600}
    assert not loose, loose
