"""Fetching and verifying recipes (000 §4.1-4.2; 001 §4.1 "Public Recipes").

A device trusts a recipe only if

1. it is signed by the recipe server's key (pinned in the device, `verify_signed_recipe`);
2. it is in the transparency log, with an inclusion proof against a signed tree head that is
   consistent with the last head this device accepted (`LogVerifier`; the accepted head is
   persisted, so a fork is detected across restarts: a server cannot show this device a
   recipe it hides from others, or rewrite the log's past);
3. its query falls in an approved query class of the device policy (`check_query_class`);
4. its own privacy claim holds (`check_recipe_claims`, check 3 of the budget accountant).

Protocol against the recipe server (`services.recipe_server`): ``GET /log/sth``; if a head was
accepted before, ``GET /log/consistency?first=&second=``; then
``GET /recipes/{id}?tree_size=<accepted size>`` for the signed recipe and its inclusion proof.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from client_sdk.errors import ClientError
from client_sdk.http import HttpClient
from client_sdk.storage import StateDb
from shared.b64url import b64url_decode
from shared.dap.extensions import recipe_digest
from shared.recipe.log import LogVerificationError, LogVerifier, SignedTreeHead
from shared.recipe.model import Recipe
from shared.recipe.signing import recipe_bytes

__all__ = ["RecipeClient", "RecipeRefusedError", "VerifiedRecipe"]

_STH_KEY = "log.latest_sth"


class RecipeRefusedError(ClientError):
    """The recipe cannot be trusted or fetched; the message says why (it goes to the audit)."""

    def __init__(self, reason: str, recipe_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.recipe_id = recipe_id


@dataclass(frozen=True, slots=True)
class VerifiedRecipe:
    recipe: Recipe
    canonical: bytes
    leaf_index: int
    #: SHA-256 of `canonical`, the recipe binding's digest: hashed once, not by each of the
    #: devices a simulator hands this recipe.
    digest: bytes = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", recipe_digest(self.canonical))


class RecipeClient:
    """Device side of the recipe server, with the log view persisted in the state database."""

    def __init__(self, db: StateDb, http: HttpClient, server_url: str, public_key: bytes) -> None:
        self._db = db
        self._http = http
        self._url = server_url.rstrip("/")
        self._key = public_key
        stored = db.get(_STH_KEY)
        latest = SignedTreeHead.model_validate_json(stored) if stored else None
        self.verifier = LogVerifier(public_key, latest)

    def _get(self, path: str, **params: Any) -> Any:
        try:
            response = self._http.get(f"{self._url}{path}", params=params or None)
        except httpx.HTTPError as exc:
            raise RecipeRefusedError(f"recipe server unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise RecipeRefusedError(f"recipe server answered {response.status_code} for {path}")
        try:
            return response.json()
        except ValueError:
            raise RecipeRefusedError(f"recipe server sent invalid JSON for {path}") from None

    def _accept_head(self, sth: SignedTreeHead) -> None:
        old = self.verifier.latest
        proof: list[bytes] = []
        if old is not None and old.tree_size > 0 and old.tree_size != sth.tree_size:
            first, second = sorted((old.tree_size, sth.tree_size))
            doc = self._get("/log/consistency", first=first, second=second)
            proof = [b64url_decode(p, "proof") for p in doc["proof"]]
        self.verifier.update(sth, proof)
        if self.verifier.latest is not None and self.verifier.latest is not old:
            self._db.put(_STH_KEY, self.verifier.latest.model_dump_json())

    def fetch(self, recipe_id: str, version: int | None = None) -> VerifiedRecipe:
        """The verified recipe (steps 1-2 of the module docstring); `RecipeRefusedError`."""
        try:
            self._accept_head(SignedTreeHead.model_validate(self._get("/log/sth")))
            latest = self.verifier.latest
            assert latest is not None
            params: dict[str, Any] = {"tree_size": latest.tree_size}
            if version is not None:
                params["version"] = version
            doc = self._get(f"/recipes/{recipe_id}", **params)
            head = SignedTreeHead.model_validate(doc["tree_head"])
            if head != latest:
                # The server answered against another head: it must still be consistent.
                self._accept_head(head)
            proof = [b64url_decode(p, "inclusion proof") for p in doc["inclusion_proof"]]
            leaf_index = int(doc["leaf_index"])
            recipe = self.verifier.verify_recipe(doc["signed_recipe"], self._key, leaf_index, proof)
        except LogVerificationError as exc:
            raise RecipeRefusedError(str(exc), recipe_id) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise RecipeRefusedError(f"malformed recipe server answer: {exc}", recipe_id) from None
        if recipe.recipe_id != recipe_id:
            raise RecipeRefusedError("the server sent another recipe", recipe_id)
        return VerifiedRecipe(recipe, recipe_bytes(recipe), leaf_index)
