"""The device policy "shipped with the OS" (000 §4: "encodes the immutable parts of the policy").

It lists the approved query classes (`shared.recipe.query_class.QueryClass`, checked by
`check_query_class`, 000 §4.2) and the allowances of the budget accountant (000 §4.3 Table 1,
dp.md §2.4):

- per analysis: the aggregate epsilon allowed and the number of reports allowed
  (``analyses``: by analysis-id prefix, longest prefix wins; ``default_analysis`` otherwise);
- per data field: the local epsilon allowed, the aggregate epsilon allowed and the number of
  reports allowed (``fields``; a field not listed may not be read at all);
- the parties the device trusts (``trusted``): the leaders, helpers and token issuers a recipe
  may name, at least one each; a recipe naming any other is refused. The recipe server is
  pinned with its key in `client_sdk.device.DeviceConfig`. Privacy rests on one honest
  aggregator and on the issuer's rate limit (001 §4.3, §4.6), so the device, not the
  recipe's author, decides who they are.

Loaded from JSON or TOML::

    [trusted]
    leaders = ["https://leader.example"]
    helpers = ["https://helper.example"]
    token_issuers = ["https://issuer.example"]

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
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from shared.recipe.model import Recipe
from shared.recipe.query_class import QueryClass

__all__ = [
    "AnalysisAllowance",
    "DevicePolicy",
    "FieldAllowance",
    "PartyUrl",
    "TrustedParties",
    "load_policy",
]


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


#: A pinned party: an http(s) base URL, compared without a trailing slash.
PartyUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+[^\s?#]*$")]


class TrustedParties(_Frozen):
    """The leaders, helpers and token issuers a device sends reports through (at least one
    each: no empty list that would allow any)."""

    leaders: tuple[PartyUrl, ...] = Field(min_length=1)
    helpers: tuple[PartyUrl, ...] = Field(min_length=1)
    token_issuers: tuple[PartyUrl, ...] = Field(min_length=1)

    def problems(self, recipe: Recipe) -> list[str]:
        """Every party the recipe names that is not pinned here (empty: all trusted)."""
        out: list[str] = []
        for what, url, pinned in (
            ("leader", recipe.task.leader, self.leaders),
            ("helper", recipe.task.helper, self.helpers),
            ("token issuer", recipe.token_issuer.url, self.token_issuers),
        ):
            if url.rstrip("/") not in {p.rstrip("/") for p in pinned}:
                out.append(f"{what} {url} is not pinned by the device policy")
        return out


class DevicePolicy(_Frozen):
    query_classes: tuple[QueryClass, ...] = Field(min_length=1)
    default_analysis: AnalysisAllowance
    analyses: dict[str, AnalysisAllowance] = Field(default_factory=dict)
    fields: dict[str, FieldAllowance] = Field(default_factory=dict)
    trusted: TrustedParties

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
