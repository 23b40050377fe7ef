"""The README's configuration reference lists every setting of every service, with its real
default, and nothing that is not a setting; the first screen keeps its two commands."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from services.aggregator.settings import AggregatorSettings
from services.collector.settings import CollectorSettings
from services.recipe_server.settings import RecipeServerSettings
from services.token_issuer.settings import TokenIssuerSettings

README = Path(__file__).resolve().parents[2] / "README.md"
SETTINGS: tuple[type[BaseSettings], ...] = (
    AggregatorSettings,
    CollectorSettings,
    TokenIssuerSettings,
    RecipeServerSettings,
)
_ROW = re.compile(r"^\| `(SAGG_[A-Z0-9_]+)` \| ([^|]+) \| ([^|]+) \|$")


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _documented() -> dict[str, tuple[str, str]]:
    """Variable -> (default cell, meaning) of every table row of the reference."""
    rows: dict[str, tuple[str, str]] = {}
    for line in _section(README.read_text(), "Configuration reference").splitlines():
        match = _ROW.match(line)
        if match:
            name, default, meaning = (g.strip() for g in match.groups())
            assert name not in rows, f"{name} is listed twice"
            rows[name] = (default, meaning)
    return rows


def _rendered(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return f"`{value!r}`" if value else "`[]`"
    return f"`{value}`"


def _expected() -> dict[str, str]:
    expected: dict[str, str] = {}
    for cls in SETTINGS:
        prefix = cls.model_config.get("env_prefix", "")
        for name, field in cls.model_fields.items():
            default = (
                "(required)"
                if field.is_required()
                else _rendered(field.get_default(call_default_factory=True))
            )
            expected[f"{prefix}{name.upper()}"] = default
    return expected


def test_every_setting_is_documented_with_its_default() -> None:
    documented = _documented()
    expected = _expected()
    missing = sorted(set(expected) - set(documented))
    assert not missing, f"settings missing from the README's configuration reference: {missing}"
    stale = sorted(set(documented) - set(expected))
    assert not stale, f"the README documents settings that do not exist: {stale}"
    wrong = {n: (documented[n][0], d) for n, d in expected.items() if documented[n][0] != d}
    assert not wrong, f"README default differs from the code (README, code): {wrong}"
    for name, (_, meaning) in documented.items():
        assert len(meaning) > 5, f"{name} has no meaning"


@pytest.mark.parametrize("command", ["make demo", "make test"])
def test_first_screen_keeps_its_commands(command: str) -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:25])
    assert command in first_screen


@pytest.mark.parametrize(
    "title",
    [
        "What runs",
        "Using it",
        "Operations",
        "Security model",
        "Configuration reference",
    ],
)
def test_sections(title: str) -> None:
    assert _section(README.read_text(), title).strip()
