"""Fixtures of the fault scenarios: a per-test seed (SAGG_FAULT_SEED overrides it)."""

from __future__ import annotations

import os
import zlib

import pytest


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A stable seed per test (its name), or SAGG_FAULT_SEED to replay another."""
    override = os.environ.get("SAGG_FAULT_SEED")
    value = int(override) if override else zlib.crc32(request.node.name.encode())
    print(f"fault seed {value}")
    return value
