"""`sagg privacy`, `sagg recipe` input checks, `sagg keys init` and `sagg serve` secret files.

The privacy numbers are compared with `shared.dp.api` called directly: the CLI must print what
the library computes, to the last digit, on its last line.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import stat
from pathlib import Path

import pytest
from pydantic_settings import SettingsError

from deploy import launcher
from deploy.cli import main
from deploy.config import Deployment, load_deployment
from deploy.demo import demo_recipe
from deploy.keys import PROVISIONED_PARTIES, load_manufacturer_ca
from deploy.launcher import DEFAULT_PORTS, Cluster, UpOptions, free_ports
from services.aggregator.settings import AggregatorSettings
from services.collector import __main__ as collector_main
from services.collector.settings import CollectorSettings
from services.recipe_server.settings import RecipeServerSettings
from shared.dp import api


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("SAGG_DEPLOYMENT", "SAGG_ANALYST_TOKEN", "SAGG_RECIPE_SERVER_URL"):
        monkeypatch.delenv(name, raising=False)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _last(out: str) -> float:
    return float(out.strip().splitlines()[-1])


def test_amplification(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "privacy", "amplification", "--eps0", "3", "--n", "5000", "--delta", "1e-6"
    )
    expected = api.amplification(3.0, 5000, 1e-6, "stronger_clones")
    assert code == 0 and _last(out) == expected.eps
    assert len(out.strip().splitlines()) > 1  # an explanation precedes the number
    assert "stronger_clones" in out

    # Deletion-model eps0 enters the replacement analysis doubled (dp.md §2.1).
    code, out, _ = _run(
        capsys,
        *("privacy", "amplification", "--eps0", "1.5", "--n", "5000", "--delta", "1e-6"),
        *("--deletion", "--analysis", "clones", "--json"),
    )
    doc = json.loads(out)
    assert code == 0 and doc["eps"] == api.amplification(3.0, 5000, 1e-6, "clones").eps
    assert doc["eps0_replacement"] == 3.0 and doc["analysis"] == "clones"


def test_batch_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "privacy", "batch-size", "--eps0", "3", "--eps", "1", "--delta", "1e-6"
    )
    expected = api.batch_size(3.0, 1.0, 1e-6)
    assert code == 0 and out.strip().splitlines()[-1] == str(expected)
    code, out, _ = _run(
        capsys,
        *("privacy", "batch-size", "--eps0", "3", "--eps", "1", "--delta", "1e-6", "--json"),
    )
    assert json.loads(out)["min_batch_size"] == expected


def test_sampling_and_gaussian(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "privacy", "sampling", "--eps", "2", "--q", "0.05")
    assert code == 0 and _last(out) == api.sampling(2.0, 0.0, 0.05)[0]
    code, out, _ = _run(
        capsys, "privacy", "sampling", "--eps", "2", "--q", "0.05", "--delta", "1e-8", "--json"
    )
    doc = json.loads(out)
    assert (doc["eps_sampled"], doc["delta_sampled"]) == api.sampling(2.0, 1e-8, 0.05)

    code, out, _ = _run(
        capsys,
        *("privacy", "gaussian-sigma", "--eps", "0.5", "--delta", "1e-9"),
        *("--sensitivity", str(math.sqrt(2))),
    )
    expected = api.gaussian_sigma(0.5, 1e-9, math.sqrt(2))
    assert code == 0 and _last(out) == expected.sigma
    code, out, _ = _run(
        capsys,
        *("privacy", "gaussian-sigma", "--eps", "0.5", "--delta", "1e-9"),
        *("--sensitivity", "1", "--aggregators", "2", "--json"),
    )
    doc = json.loads(out)
    assert doc["total_std"] == api.gaussian_sigma(0.5, 1e-9, 1.0, 2).total_std


PRIVACY_USAGE = [
    ["privacy"],
    ["privacy", "amplification", "--eps0", "3", "--n", "0", "--delta", "1e-6"],
    ["privacy", "amplification", "--eps0", "-1", "--n", "10", "--delta", "1e-6"],
    ["privacy", "amplification", "--eps0", "3", "--n", "10", "--delta", "1"],
    ["privacy", "amplification", "--eps0", "nan", "--n", "10", "--delta", "1e-6"],
    ["privacy", "batch-size", "--eps0", "3", "--eps", "inf", "--delta", "1e-6"],
    ["privacy", "batch-size", "--eps0", "3", "--eps", "1"],
    ["privacy", "batch-size", "--eps0", "3", "--eps", "1", "--delta", "1e-6", "--analysis", "x"],
    ["privacy", "sampling", "--eps", "1", "--q", "1.5"],
    ["privacy", "sampling", "--eps", "1", "--q", "0"],
    ["privacy", "gaussian-sigma", "--eps", "1", "--delta", "0", "--sensitivity", "1"],
    ["privacy", "gaussian-sigma", "--eps", "1", "--delta", "1e-6", "--sensitivity", "zero"],
]


@pytest.mark.parametrize("argv", PRIVACY_USAGE, ids=" ".join)
def test_privacy_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "error:" in err


def test_privacy_unreachable_targets_fail_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(
        capsys, "privacy", "batch-size", "--eps0", "20", "--eps", "0.001", "--delta", "1e-9"
    )
    assert code == 1 and err.startswith("sagg: privacy batch-size: no batch size")
    code, _, err = _run(
        capsys,
        *("privacy", "amplification", "--eps0", "1", "--n", "100", "--delta", "1e-6"),
        *("--deletion", "--analysis", "sym_rappor_exact"),
    )
    assert code == 1 and "--deletion" in err and len(err.strip().splitlines()) == 1
    # Outside 000 Theorem 3.1's regime the closed form bounds nothing: no number is printed
    # (the library refuses).
    code, out, err = _run(
        capsys,
        *("privacy", "amplification", "--eps0", "8", "--n", "100", "--delta", "1e-6"),
        *("--analysis", "closed_form"),
    )
    assert code == 1 and out == "" and "Theorem 3.1 needs" in err
    code, out, _ = _run(
        capsys,
        *("privacy", "amplification", "--eps0", "1", "--n", "100000", "--delta", "1e-6"),
        *("--analysis", "closed_form"),
    )
    expected = api.amplification(1.0, 100000, 1e-6, "closed_form")
    assert code == 0 and expected.closed_form is not None and _last(out) == expected.eps


# --- sagg recipe: what is checked before anything is sent ----------------------------------------


def test_recipe_publish_needs_server_and_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = _run(capsys, "recipe", "publish", "r.json")
    assert code == 1 and "no recipe server URL" in err
    monkeypatch.setenv("SAGG_RECIPE_SERVER_URL", "http://127.0.0.1:1")
    code, _, err = _run(capsys, "recipe", "publish", "r.json")
    assert code == 1 and "no analyst token" in err


def test_recipe_files_are_checked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SAGG_RECIPE_SERVER_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("SAGG_ANALYST_TOKEN", "t" * 32)
    code, _, err = _run(capsys, "recipe", "publish", "missing.json")
    assert code == 1 and "cannot read missing.json" in err
    broken = tmp_path / "r.toml"
    broken.write_text("recipe_id = ")
    code, _, err = _run(capsys, "recipe", "publish", str(broken))
    assert code == 1 and "not valid TOML" in err
    invalid = tmp_path / "r.json"
    invalid.write_text(json.dumps({"recipe_id": "x", "version": 0}))
    code, _, err = _run(capsys, "recipe", "publish", str(invalid))
    assert code == 1 and err.startswith(f"sagg: {invalid}: ") and "more" in err
    assert len(err.strip().splitlines()) == 1
    # A valid draft reaches the network; the unreachable server is named.
    invalid.write_text(demo_recipe().model_dump_json())
    code, _, err = _run(capsys, "recipe", "publish", str(invalid))
    assert code == 1 and "cannot reach the recipe server at http://127.0.0.1:1" in err
    code, _, err = _run(capsys, "recipe", "list")
    assert code == 1 and "cannot reach the recipe server" in err


# --- sagg keys init / sagg serve secret files ----------------------------------------------------


def test_keys_init_writes_owner_only_files_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "config"
    urls = [
        *("--leader", "http://leader:8081", "--helper", "http://helper:8082"),
        *("--collector", "http://collector:8083", "--token-issuer", "http://token-issuer:8084"),
        *("--recipe-server", "http://recipe-server:8086"),
    ]
    code, out, err = _run(capsys, "keys", "init", "--dir", str(target), *urls)
    assert code == 0, err
    tokens = {path.name: path.read_text().strip() for path in target.glob("*_token")}
    assert len(tokens) == 5 + 3 + 1  # admin tokens, provisioning tokens, the analyst's
    assert len(set(tokens.values())) == len(tokens)  # every credential its own
    assert not any(token in out for token in tokens.values())  # no secret printed
    for path in target.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    # The summary line names every file it wrote (attester.secret included).
    listed = set(out.splitlines()[0].split(": ", 1)[1].split(" (")[0].split(", "))
    on_disk = {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()}
    assert listed == on_disk
    first = Deployment.model_validate_json((target / "deployment.json").read_text())
    assert first.recipe_server == "http://recipe-server:8086"
    assert first.admin_tokens == {
        service: tokens[f"{service}.admin_token"]
        for service in ("leader", "helper", "collector", "token-issuer", "recipe-server")
    }
    # The CLI needs no provisioning token: those are the recipe server's.
    saved = (target / "deployment.json").read_text()
    assert not any(tokens[f"{p}.provisioner_token"] in saved for p in PROVISIONED_PARTIES)
    assert first.recipe_server_public_key is not None and first.recipe_server_public_key in out
    ca = load_manufacturer_ca(target / "manufacturer-ca.pem", target / "manufacturer-ca.key")
    assert ca.certificate.subject == ca.certificate.issuer

    code, _, _ = _run(capsys, "keys", "init", "--dir", str(target), *urls)
    second = Deployment.model_validate_json((target / "deployment.json").read_text())
    assert code == 0 and second == first  # same tokens and keys on a rerun

    code, _, err = _run(capsys, "keys", "init", "--dir", str(target), "--leader", "http://l")
    assert code == 1 and "missing --helper" in err


def test_secret_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`<PREFIX><SECRET>_FILE` names the file of a secret setting; read by the settings (a
    pydantic-settings source), never copied into the environment."""
    token = tmp_path / "token"
    token.write_text("s" * 40 + "\n")
    monkeypatch.setenv("SAGG_AGGREGATOR_ADMIN_TOKEN_FILE", str(token))
    # A setting of its own, not a secret reference.
    monkeypatch.setenv("SAGG_RECIPE_SERVER_SIGNING_KEY_FILE", str(token))
    monkeypatch.setenv("SAGG_RECIPE_SERVER_ANALYST_TOKEN", "a" * 32)
    settings = AggregatorSettings()
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == "s" * 40
    assert "SAGG_AGGREGATOR_ADMIN_TOKEN" not in os.environ
    recipes = RecipeServerSettings()
    assert recipes.signing_key_file == token and recipes.signing_key is None
    # Init arguments (`sagg serve`'s flags) come first.
    assert AggregatorSettings(admin_token="f" * 20).admin_token.get_secret_value() == "f" * 20  # type: ignore[arg-type, union-attr]

    monkeypatch.setenv("SAGG_AGGREGATOR_ADMIN_TOKEN", "x" * 20)
    with pytest.raises(
        SettingsError, match=r"set SAGG_AGGREGATOR_ADMIN_TOKEN or .*_FILE, not both"
    ):
        AggregatorSettings()
    monkeypatch.delenv("SAGG_AGGREGATOR_ADMIN_TOKEN")
    missing = tmp_path / "none"
    monkeypatch.setenv("SAGG_AGGREGATOR_ADMIN_TOKEN_FILE", str(missing))
    with pytest.raises(
        SettingsError, match=re.escape(f"SAGG_AGGREGATOR_ADMIN_TOKEN_FILE: cannot read {missing}")
    ):
        AggregatorSettings()
    (tmp_path / "empty").write_text("\n")
    monkeypatch.setenv("SAGG_AGGREGATOR_ADMIN_TOKEN_FILE", str(tmp_path / "empty"))
    with pytest.raises(SettingsError, match="is empty"):
        AggregatorSettings()


def test_serve_builds_settings_from_flags_environment_and_files(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`sagg serve` hands the service settings made of its flags (first), the environment and
    secret files, without writing the environment; a bad secret file is one line, exit 2."""
    token = tmp_path / "token"
    token.write_text("c" * 40)
    monkeypatch.setenv("SAGG_COLLECTOR_ADMIN_TOKEN_FILE", str(token))
    monkeypatch.setenv("SAGG_COLLECTOR_HOST", "127.0.0.2")
    monkeypatch.setenv("SAGG_COLLECTOR_PORT", "1")
    served: list[CollectorSettings] = []
    monkeypatch.setattr(collector_main, "serve", served.append)
    before = dict(os.environ)
    code, _, err = _run(
        capsys, "serve", "collector", "--port", "9", "--database-url", "sqlite:///c.db"
    )
    assert code == 0, err
    (settings,) = served
    assert (settings.host, settings.port, settings.database_url) == (
        "127.0.0.2",
        9,
        "sqlite:///c.db",
    )
    assert settings.admin_token.get_secret_value() == "c" * 40
    assert dict(os.environ) == before

    monkeypatch.setenv("SAGG_COLLECTOR_ADMIN_TOKEN_FILE", str(tmp_path / "gone"))
    code, _, err = _run(capsys, "serve", "collector")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"SAGG_COLLECTOR_ADMIN_TOKEN_FILE: cannot read {tmp_path / 'gone'}" in err


def test_sagg_up_replaces_the_shared_token_of_an_older_deployment_file(tmp_path: Path) -> None:
    """A data dir from the three-service `sagg up` (one token in deployment.json, no keys/):
    its analyst token is kept, its shared admin token is not spread over the services."""
    data = tmp_path / "data"
    data.mkdir()
    old = {"leader": "http://l", "helper": "http://h", "collector": "http://c"}
    shared, analyst = "o" * 40, "a" * 40
    (data / "deployment.json").write_text(
        json.dumps({**old, "admin_token": shared, "analyst_token": analyst})
    )
    loaded = load_deployment(str(data / "deployment.json"))
    assert loaded is not None and loaded.admin_token("helper") == shared  # still readable
    cluster = Cluster(UpOptions(data_dir=data))
    keys = cluster._keys()
    assert keys.analyst_token == analyst
    assert shared not in keys.admin_tokens.values()
    assert len(set(keys.admin_tokens.values()) | set(keys.provisioner_tokens.values())) == 8
    # Leader and helper never share a store; every store has its own file.
    plan = cluster.plan(keys, cluster._database_urls())
    urls = [v for s in plan for k, v in s.env.items() if k.endswith("DATABASE_URL")]
    assert len(urls) == len(set(urls)) == 6


def test_each_process_gets_only_its_own_credentials(tmp_path: Path) -> None:
    """What `sagg up` hands each process: its own tokens and datastore key, nothing that
    opens another service; the recipe server provisioning tokens only, no admin token; the
    manufacturer CA's key to none (only its certificate, to the attester)."""
    cluster = Cluster(UpOptions(data_dir=tmp_path / "data"))
    keys = cluster._keys()
    secrets = {
        **{f"{s} admin": t for s, t in keys.admin_tokens.items()},
        **{f"{p} provisioner": t for p, t in keys.provisioner_tokens.items()},
        **{f"{s} datastore key": k for s, k in keys.datastore_keys.items()},
        "analyst": keys.analyst_token,
    }
    own = {
        "leader": {"leader admin", "leader provisioner", "leader datastore key"},
        "helper": {"helper admin", "helper provisioner", "helper datastore key"},
        "collector": {"collector admin", "collector provisioner", "collector datastore key"},
        "token-issuer": {"token-issuer admin", "token-issuer datastore key"},
        "recipe-server": {
            "recipe-server admin",
            "analyst",
            *(f"{p} provisioner" for p in PROVISIONED_PARTIES),
        },
    }
    for service in cluster.plan(keys, cluster._database_urls()):
        values = set(service.env.values())
        held = {name for name, secret in secrets.items() if secret in values}
        assert held == own[service.name], service.name
        assert not any(str(keys.ca_key_file) in v for v in values), service.name


def test_free_ports_are_different_and_free() -> None:
    """Ports for several services at once: bound together, so none comes twice (one at a
    time, a port just released could come back for the next service)."""
    for _ in range(50):
        ports = free_ports(len(DEFAULT_PORTS))
        assert len(set(ports)) == len(ports) == len(DEFAULT_PORTS)
    with contextlib.ExitStack() as bound:
        for port in ports:
            sock = bound.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", port))


def test_free_ports_stay_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outgoing connections take their source ports from the kernel's ephemeral range, so a
    port probed free there may be taken before the service binds it: none is drawn there."""
    start = launcher._ephemeral_start()
    for _ in range(20):
        assert all(10_000 <= port < start for port in free_ports(len(DEFAULT_PORTS)))
    # An ephemeral range that leaves no room below it: the kernel chooses.
    monkeypatch.setattr(launcher, "_ephemeral_start", lambda: 10_010)
    ports = free_ports(len(DEFAULT_PORTS))
    assert len(set(ports)) == len(DEFAULT_PORTS)
    assert not any(port < 10_010 for port in ports)
