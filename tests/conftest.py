"""Shared pytest fixtures: where the project's external test data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The workplace's `shared/` folder beside the checkout (vectors, specs), never copied in."""
    override = os.environ.get("SAGG_SHARED_DIR")
    return Path(override) if override else REPO_ROOT.parent / "shared"


def vectors_path() -> Path:
    return shared_data_dir() / "test-vectors"


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    path = vectors_path()
    if not path.is_dir():
        pytest.fail(f"test vectors not found at {path}; set SAGG_SHARED_DIR")
    return path
