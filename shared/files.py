"""Owner-only files and directories that are never reached through a planted symbolic link.

Data directories, stores, keys, tokens and deployment files hold secrets (architecture:
"datastore keys", the admin tokens of 001 §4.6). They are made 0700 (directories) and 0600
(files) at creation, not chmod-ed afterwards, so no other local user can open them in between;
and a symbolic link where one of them should be is refused, never followed: an attacker who
can write to a parent directory must not be able to redirect a key into a file they can read,
or make the deployment read a token they chose.

- `private_dir`: create (or tighten to) 0700; refuses a symlink.
- `create_private`: create a new 0600 file (O_CREAT|O_EXCL|O_NOFOLLOW), False if one exists.
- `write_private`: replace a file atomically with a new 0600 one (a fresh temporary name,
  then rename, which replaces a link rather than writing through it); refuses a symlink.
- `read_private`: read a regular file, refusing a symlink (O_NOFOLLOW).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from shared.errors import SaggError

__all__ = [
    "UnsafePathError",
    "create_private",
    "private_dir",
    "read_private",
    "write_private",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(SaggError, OSError):
    """A symbolic link or a non-regular file where an owner-only file or directory belongs."""


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symbolic link; refusing to use it")


def private_dir(path: Path) -> Path:
    """`path` as an owner-only (0700) directory: created so, or tightened if it is ours."""
    _refuse_link(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{path} is not a directory")
    if info.st_mode & 0o077 and info.st_uid == os.getuid():
        os.chmod(path, 0o700, follow_symlinks=False)
    return path


def create_private(path: Path, data: bytes) -> bool:
    """Create `path` (0600) holding `data`; False when it already exists (another writer won).

    O_EXCL fails on any existing name, a dangling link included, so nothing is written
    through a link; a link found there is refused rather than reported as "exists".
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    except FileExistsError:
        _refuse_link(path)
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return True


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` atomically with a 0600 file holding `data`; refuses a symlink there."""
    _refuse_link(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def read_private(path: Path) -> bytes:
    """The bytes of the regular file `path`; UnsafePathError for a symlink or anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if path.is_symlink():
            raise UnsafePathError(f"{path} is a symbolic link; refusing to read it") from None
        raise exc
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            raise UnsafePathError(f"{path} is not a regular file")
        return src.read()
