"""`sagg recipe publish|list`: the analyst's side of the recipe server.

Publishing sends a `RecipeDraft` (000 §4.1) to ``POST /recipes``; the server provisions the DAP
task, signs the recipe and logs it. The answer is checked the way a device would check it when
the recipe server's public key is known (the deployment file pins it): the signature, the
signed tree head and the inclusion proof must verify, else the command fails.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from client_sdk.http import http_client
from deploy.config import DeploymentError, read_document
from shared.b64url import b64url_decode
from shared.recipe.log import (
    LogVerificationError,
    SignedTreeHead,
    leaf_hash,
    verify_inclusion,
    verify_tree_head,
)
from shared.recipe.model import Recipe, RecipeDraft
from shared.recipe.signing import RecipeVerificationError, verify_signed_recipe
from shared.transport import TransportPolicy, http_failure

__all__ = ["RecipeError", "list_recipes", "load_draft", "publish_recipe"]


class RecipeError(Exception):
    """Publishing or listing failed; the message is one line."""


def load_draft(path: str) -> RecipeDraft:
    """A draft from a JSON or TOML file (by suffix), validated before anything is sent."""
    try:
        data = read_document(path)
    except DeploymentError as exc:
        raise RecipeError(str(exc)) from None
    try:
        return RecipeDraft.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RecipeError(f"{path}: {where + ': ' if where else ''}{msg}{more}") from None


def _refusal(response: httpx.Response) -> str:
    try:
        doc = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    detail = str(doc.get("detail") or doc.get("title") or "") if isinstance(doc, dict) else ""
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        detail += f": {first.get('field')}: {first.get('message')}"
        if len(errors) > 1:
            detail += f" (and {len(errors) - 1} more)"
    return f"HTTP {response.status_code} {detail}".strip()


def _verify(body: dict[str, Any], public_key: str) -> Recipe:
    """Signature, tree head and inclusion, as a device checks them (000 §4.1)."""
    try:
        key = b64url_decode(public_key, "recipe server public key")
        recipe, canonical = verify_signed_recipe(body["signed_recipe"], key)
        head = SignedTreeHead.model_validate(body["tree_head"])
        verify_tree_head(head, key)
        proof = [b64url_decode(p, "inclusion proof") for p in body["inclusion_proof"]]
        verify_inclusion(
            leaf_hash(canonical),
            int(body["leaf_index"]),
            head.tree_size,
            proof,
            head.root,
        )
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        # RecipeVerificationError and LogVerificationError are ValueErrors too.
        kind = (
            "does not verify"
            if isinstance(exc, RecipeVerificationError | LogVerificationError)
            else "is malformed"
        )
        raise RecipeError(f"the recipe server's answer {kind}: {exc}") from None
    return recipe


def publish_recipe(
    server: str,
    analyst_token: str,
    draft: RecipeDraft,
    *,
    public_key: str | None = None,
    http: httpx.Client | None = None,
) -> dict[str, Any]:
    """Publish; returns a summary (ids, task, log position, whether it was new)."""
    url = f"{server.rstrip('/')}/recipes"
    body = draft.model_dump_json(exclude_none=True)
    headers = {"Authorization": f"Bearer {analyst_token}", "Content-Type": "application/json"}
    client = http or http_client(TransportPolicy(), timeout=60.0)
    try:
        response = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        raise RecipeError(
            f"cannot reach the recipe server at {server}: {http_failure(exc)}"
        ) from None
    finally:
        if http is None:
            client.close()
    if response.status_code not in (200, 201):
        raise RecipeError(f"the recipe server refused the recipe: {_refusal(response)}")
    try:
        answer: dict[str, Any] = response.json()
        recipe = answer["signed_recipe"]["recipe"]
        summary = {
            "recipe_id": recipe["recipe_id"],
            "version": recipe["version"],
            "analysis_id": recipe["analysis_id"],
            "task_id": recipe["task"]["task_id"],
            "vdaf": recipe["task"]["vdaf"],
            "min_batch_size": recipe["min_batch_size"],
            "leaf_index": answer["leaf_index"],
            "tree_size": answer["tree_head"]["tree_size"],
            "created": response.status_code == 201,
            "verified": public_key is not None,
        }
    except (ValueError, KeyError, TypeError):
        raise RecipeError("the recipe server's answer is malformed") from None
    if public_key is not None:
        _verify(answer, public_key)
    return summary


def _get_json(
    server: str,
    path: str,
    refused: str,
    *,
    params: dict[str, str] | None = None,
    http: httpx.Client | None = None,
) -> dict[str, Any]:
    """GET a JSON object from the recipe server; RecipeError with `refused` on a non-200."""
    client = http or http_client(TransportPolicy(), timeout=30.0)
    try:
        response = client.get(f"{server.rstrip('/')}{path}", params=params)
    except httpx.HTTPError as exc:
        raise RecipeError(
            f"cannot reach the recipe server at {server}: {http_failure(exc)}"
        ) from None
    finally:
        if http is None:
            client.close()
    if response.status_code != 200:
        raise RecipeError(f"{refused}: {_refusal(response)}")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise RecipeError("the recipe server's answer is malformed")
    return body


def fetch_recipe(
    server: str,
    recipe_id: str,
    public_key: str,
    *,
    version: int | None = None,
    http: httpx.Client | None = None,
) -> Recipe:
    """A published recipe, verified like a device would (signature and log inclusion)."""
    params = {} if version is None else {"version": str(version)}
    body = _get_json(
        server, f"/recipes/{recipe_id}", f"no recipe {recipe_id!r}", params=params, http=http
    )
    return _verify(body, public_key)


def list_recipes(server: str, *, http: httpx.Client | None = None) -> dict[str, Any]:
    """The server's listing: the latest tree head and the logged recipes."""
    listing = _get_json(server, "/recipes", "the recipe server refused the listing", http=http)
    if not isinstance(listing.get("recipes"), list):
        raise RecipeError("the recipe server's listing is malformed")
    return listing
