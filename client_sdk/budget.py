"""The on-device privacy budget accountant (000 §4.3 and Table 1; dp.md §2.4).

Per analysis: aggregate epsilon allowed / used and reports allowed / used. Per data field:
local epsilon allowed, aggregate epsilon allowed / used, reports allowed / used. The allowances
come from the device policy (`client_sdk.policy`); the "used" columns live in the device's
state database. Before a query runs, with eps0 the recipe's local epsilon and eps its claimed
aggregate epsilon:

1. eps + used(analysis) <= allowed(analysis) and reports_used(analysis) + 1 <= allowed;
2. for every field the query reads: eps0 <= local_allowed(field), eps + used(field) <=
   allowed(field) and reports_used(field) + 1 <= reports_allowed(field);
3. eps is achieved by aggregating at least B eps0-DP reports sampled at q
   (`shared.recipe.accounting.check_recipe_claims`, recomputed on the device).

Only if all pass is the query run; `spend` then adds eps and one report to the analysis and to
every field, in the same SQLite transaction as whatever the caller records with it (the pending
upload: nothing leaves the device without its budget having been durably consumed, and budget
is never consumed twice for one report). A failed check changes nothing.

Composition is basic (sums), as in 000 §4.3.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from client_sdk.errors import ClientError
from client_sdk.policy import DevicePolicy
from client_sdk.storage import StateDb
from shared.recipe.accounting import check_recipe_claims
from shared.recipe.model import Recipe
from shared.recipe.signing import recipe_bytes

__all__ = ["BudgetAccountant", "BudgetRefusedError", "Usage", "recipe_claim_problems"]

_T = TypeVar("_T")
#: Floating-point slack on epsilon sums (0.1 + 0.2 must fit in an allowance of 0.3).
_SLACK = 1e-9

_claims_cache: dict[bytes, tuple[str, ...]] = {}
_claims_lock = threading.Lock()


def recipe_claim_problems(recipe: Recipe, canonical: bytes | None = None) -> tuple[str, ...]:
    """Check 3, cached per recipe (the amplification bound is costly; simulators answer one
    recipe on thousands of devices). Keyed by the canonical bytes' digest, so two recipes that
    differ anywhere are checked separately."""
    key = hashlib.sha256(canonical if canonical is not None else recipe_bytes(recipe)).digest()
    with _claims_lock:
        found = _claims_cache.get(key)
    if found is None:
        found = tuple(check_recipe_claims(recipe))
        with _claims_lock:
            _claims_cache[key] = found
    return found


class BudgetRefusedError(ClientError):
    """A check failed; `reasons` says which (nothing was consumed)."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True, slots=True)
class Usage:
    eps_used: float
    reports_used: int


class BudgetAccountant:
    def __init__(self, db: StateDb, policy: DevicePolicy) -> None:
        self._db = db
        self._policy = policy

    def analysis_usage(self, analysis_id: str) -> Usage:
        with self._db.lock:
            return self._usage(self._db, "analysis_budget", "analysis_id", analysis_id)

    def field_usage(self, field: str) -> Usage:
        with self._db.lock:
            return self._usage(self._db, "field_budget", "field", field)

    @staticmethod
    def _usage(db: StateDb, table: str, column: str, key: str) -> Usage:
        row = db.conn.execute(
            f"SELECT eps_used, reports_used FROM {table} WHERE device = ? AND {column} = ?",
            (db.device, key),
        ).fetchone()
        return Usage(0.0, 0) if row is None else Usage(float(row[0]), int(row[1]))

    def _check(self, recipe: Recipe, canonical: bytes | None) -> list[str]:
        eps, eps0 = recipe.privacy.epsilon, recipe.randomizer.local_epsilon
        problems: list[str] = []
        allowance = self._policy.analysis_allowance(recipe.analysis_id)
        used = self._usage(self._db, "analysis_budget", "analysis_id", recipe.analysis_id)
        if eps + used.eps_used > allowance.epsilon + _SLACK:
            problems.append(
                f"check 1: analysis {recipe.analysis_id} has epsilon "
                f"{max(0.0, allowance.epsilon - used.eps_used):g} left, the query needs {eps:g}"
            )
        if used.reports_used + 1 > allowance.reports:
            problems.append(
                f"check 1: analysis {recipe.analysis_id} has used its {allowance.reports} report(s)"
            )
        for name in recipe.query.fields:
            field = self._policy.fields.get(name)
            if field is None:
                problems.append(f"check 2: field {name!r} has no budget in the device policy")
                continue
            f_used = self._usage(self._db, "field_budget", "field", name)
            if eps0 > field.local_epsilon + _SLACK:
                problems.append(
                    f"check 2: local epsilon {eps0:g} exceeds {field.local_epsilon:g} "
                    f"allowed for field {name!r}"
                )
            if eps + f_used.eps_used > field.epsilon + _SLACK:
                problems.append(
                    f"check 2: field {name!r} has epsilon "
                    f"{max(0.0, field.epsilon - f_used.eps_used):g} left, the query needs {eps:g}"
                )
            if f_used.reports_used + 1 > field.reports:
                problems.append(f"check 2: field {name!r} has used its {field.reports} report(s)")
        problems.extend(f"check 3: {p}" for p in recipe_claim_problems(recipe, canonical))
        return problems

    def check(self, recipe: Recipe, canonical: bytes | None = None) -> list[str]:
        """Every failed check (empty: the query may run). Reads only."""
        with self._db.lock:
            return self._check(recipe, canonical)

    def spend(
        self,
        recipe: Recipe,
        then: Callable[[sqlite3.Connection], _T],
        canonical: bytes | None = None,
    ) -> _T:
        """Checks 1-3 and, if they pass, consume the budget and run `then` (which records what
        will leave the device) in one transaction. Raises `BudgetRefusedError` without
        consuming anything otherwise; an exception from `then` rolls the consumption back."""
        eps = recipe.privacy.epsilon
        with self._db.transaction() as conn:
            problems = self._check(recipe, canonical)
            if problems:
                raise BudgetRefusedError(problems)
            conn.execute(
                "INSERT INTO analysis_budget (device, analysis_id, eps_used, reports_used) "
                "VALUES (?, ?, ?, 1) ON CONFLICT (device, analysis_id) DO UPDATE SET "
                "eps_used = eps_used + excluded.eps_used, reports_used = reports_used + 1",
                (self._db.device, recipe.analysis_id, eps),
            )
            for name in recipe.query.fields:
                conn.execute(
                    "INSERT INTO field_budget (device, field, eps_used, reports_used) "
                    "VALUES (?, ?, ?, 1) ON CONFLICT (device, field) DO UPDATE SET "
                    "eps_used = eps_used + excluded.eps_used, reports_used = reports_used + 1",
                    (self._db.device, name, eps),
                )
            return then(conn)
