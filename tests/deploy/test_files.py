"""Owner-only files that no planted symbolic link can redirect: the deployment file, the keys,
the stores, the recipe server's signing key.

The attacker is another local user (or a process) who can write into the data dir's parent,
or into the data dir before the deployment first ran, and plants a link where a secret will
be written (to read it later, or to overwrite a file of the victim's) or read (to make the
deployment use a token of the attacker's choosing). Each is refused with a clear error, and
the link's target is left as it was.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from deploy.cli import main
from deploy.config import Deployment, load_deployment, write_deployment
from deploy.keys import KeysError, ensure_keys
from services.common.db import Database
from services.recipe_server.keys import load_signer
from services.recipe_server.settings import RecipeServerSettings
from shared.files import UnsafePathError, create_private, private_dir, read_private, write_private

BAIT = "the attacker's file\n"
URLS = {
    "--leader": "http://127.0.0.1:8081",
    "--helper": "http://127.0.0.1:8082",
    "--collector": "http://127.0.0.1:8083",
    "--token-issuer": "http://127.0.0.1:8084",
    "--recipe-server": "http://127.0.0.1:8086",
}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _bait(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "target"
    target.parent.mkdir()
    target.write_text(BAIT)
    return target


def _keys_init(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = ["keys", "init", "--dir", str(directory)]
    for flag, url in URLS.items():
        argv += [flag, url]
    code = main(argv)
    return code, capsys.readouterr().err


def test_keys_init_makes_everything_owner_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "config"
    directory.mkdir(mode=0o755)  # an existing directory (a compose volume) is tightened too
    directory.chmod(0o755)
    assert _keys_init(directory, capsys)[0] == 0
    assert _mode(directory) == 0o700
    files = [f for f in directory.rglob("*") if not f.is_dir()]
    assert {f.name for f in files} >= {
        "deployment.json",
        "leader.admin_token",
        "manufacturer-ca.key",
        "token-key-ids",  # the placeholder the compose `token-keys` step replaces
    }
    assert {f.name: oct(_mode(f)) for f in files if _mode(f) != 0o600} == {}
    # Subdirectories (the pinned key ids') owner-only too.
    subdirs = [d for d in directory.rglob("*") if d.is_dir()]
    assert {d.name: oct(_mode(d)) for d in subdirs if _mode(d) != 0o700} == {}


def test_a_planted_deployment_file_link_is_refused_and_its_target_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = _bait(tmp_path)
    directory = tmp_path / "config"
    ensure_keys(directory)
    (directory / "deployment.json").symlink_to(target)
    code, err = _keys_init(directory, capsys)
    assert code == 1 and "symbolic link" in err, err
    assert target.read_text() == BAIT
    assert (directory / "deployment.json").is_symlink()
    # Reading one is refused too: it would choose the URLs and the CA the CLI trusts.
    with pytest.raises(Exception, match="symbolic link"):
        load_deployment(str(directory / "deployment.json"))


def test_the_temporary_name_cannot_be_planted(tmp_path: Path) -> None:
    """The old writer wrote through `deployment.tmp`, a fixed name: a link there redirected
    the admin token into the attacker's file (O_TRUNC follows links)."""
    target = _bait(tmp_path)
    directory = private_dir(tmp_path / "data")
    (directory / "deployment.tmp").symlink_to(target)
    deployment = Deployment(
        leader=URLS["--leader"],
        helper=URLS["--helper"],
        collector=URLS["--collector"],
        admin_tokens={"leader": "an-admin-token-0123456789"},
    )
    write_deployment(directory / "deployment.json", deployment)
    assert target.read_text() == BAIT
    assert _mode(directory / "deployment.json") == 0o600
    assert "an-admin-token" in (directory / "deployment.json").read_text()


@pytest.mark.parametrize(
    "name",
    [
        "leader.admin_token",
        "leader.provisioner_token",
        "recipe-server.key",
        "leader.datastore_key",
        "manufacturer-ca.key",
    ],
)
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_planted_key_link_is_refused_and_its_target_untouched(
    tmp_path: Path, name: str, dangling: bool
) -> None:
    """An existing target would hand the deployment the attacker's token or key; a dangling
    one would receive the new secret where the attacker can read it."""
    target = _bait(tmp_path)
    if dangling:
        target.unlink()
    directory = private_dir(tmp_path / "keys")
    (directory / name).symlink_to(target)
    with pytest.raises((OSError, KeysError), match="symbolic link"):
        ensure_keys(directory)
    if dangling:
        assert not target.exists()
    else:
        assert target.read_text() == BAIT


def test_a_store_is_created_owner_only_and_a_planted_link_refused(tmp_path: Path) -> None:
    path = tmp_path / "new-dir" / "leader.sqlite3"
    Database.open(f"sqlite:///{path}").close()
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    target = _bait(tmp_path)
    planted = tmp_path / "helper.sqlite3"
    planted.symlink_to(target)
    with pytest.raises(UnsafePathError):
        Database.open(f"sqlite:///{planted}")
    assert target.read_text() == BAIT


def test_the_recipe_servers_key_file_is_never_a_link(tmp_path: Path) -> None:
    settings = RecipeServerSettings(
        analyst_token=SecretStr("analyst-token-0123456789"),
        signing_key_file=tmp_path / "keys" / "recipe-server.key",
    )
    load_signer(settings)
    assert _mode(settings.signing_key_file) == 0o600
    assert _mode(settings.signing_key_file.parent) == 0o700
    target = _bait(tmp_path)
    planted = tmp_path / "planted.key"
    planted.symlink_to(target)
    with pytest.raises(UnsafePathError):
        load_signer(settings.model_copy(update={"signing_key_file": planted}))
    assert target.read_text() == BAIT


def test_the_primitives(tmp_path: Path) -> None:
    target = _bait(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(target)
    for attempt in (
        lambda: create_private(link, b"secret"),
        lambda: write_private(link, b"secret"),
        lambda: read_private(link),
        lambda: private_dir(link),
    ):
        with pytest.raises(UnsafePathError):
            attempt()
    assert target.read_text() == BAIT
    fresh = tmp_path / "fresh"
    assert create_private(fresh, b"one") and not create_private(fresh, b"two")
    assert read_private(fresh) == b"one" and _mode(fresh) == 0o600
    write_private(fresh, b"three")
    assert read_private(fresh) == b"three" and _mode(fresh) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
