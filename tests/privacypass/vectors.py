"""Loading the Privacy Pass vector files from the shared test-vector folder (never copied)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import vectors_path


def load(name: str, base: Path | None = None) -> Any:
    root = (base or vectors_path()) / "privacypass"
    with (root / name).open() as f:
        return json.load(f)


def h(value: str) -> bytes:
    return bytes.fromhex(value)
