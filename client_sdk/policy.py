"""The device policy "shipped with the OS" (000 §4: "encodes the immutable parts of the policy").

It lists the approved query classes (`shared.recipe.query_class.QueryClass`, checked by
`check_query_class`, 000 §4.2) and the allowances of the budget accountant (000 §4.3 Table 1,
dp.md §2.4):

- per analysis: the aggregate epsilon allowed and the number of reports allowed
  (``analyses``: by analysis-id prefix, longest prefix wins; ``default_analysis`` otherwise);
- per data field: the local epsilon allowed, the aggregate epsilon allowed and the number of
  reports allowed (``fields``; a field not listed may not be read at all).

Loaded from JSON or TOML::

    [[query_classes]]
    name = "keyboard"
    streams = ["keyboard"]
    fields = ["ngram", "age"]
    max_local_epsilon = 8
    max_epsilon = 1
    max_delta = 1e-6

    [default_analysis]
    epsilon = 0.5
    reports = 1

    [fields.ngram]
    local_epsilon = 5
    epsilon = 1
    reports = 1
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from shared.recipe.query_class import QueryClass

__all__ = ["AnalysisAllowance", "DevicePolicy", "FieldAllowance", "load_policy"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AnalysisAllowance(_Frozen):
    """Table 1a: epsilon_Allowed,Analysis and k_Allowed,Analysis."""

    epsilon: float = Field(gt=0)
    reports: int = Field(ge=0)


class FieldAllowance(_Frozen):
    """Table 1b: epsilon^local_Allowed, epsilon_Allowed and k_Allowed of one data field."""

    local_epsilon: float = Field(gt=0)
    epsilon: float = Field(gt=0)
    reports: int = Field(ge=0)


class DevicePolicy(_Frozen):
    query_classes: tuple[QueryClass, ...] = Field(min_length=1)
    default_analysis: AnalysisAllowance
    analyses: dict[str, AnalysisAllowance] = Field(default_factory=dict)
    fields: dict[str, FieldAllowance] = Field(default_factory=dict)

    def analysis_allowance(self, analysis_id: str) -> AnalysisAllowance:
        best: str | None = None
        for prefix in self.analyses:
            if analysis_id.startswith(prefix) and (best is None or len(prefix) > len(best)):
                best = prefix
        return self.default_analysis if best is None else self.analyses[best]


def load_policy(path: Path | str) -> DevicePolicy:
    """A policy file, TOML if it ends in ``.toml``, JSON otherwise."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    return DevicePolicy.model_validate(data)
