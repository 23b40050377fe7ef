"""One set of in-process services for all of tests/fuzz (starting them costs a few seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.apps import Services, services


@pytest.fixture(scope="package")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    with services(Path(tmp_path_factory.mktemp("fuzz-services"))) as s:
        yield s
