"""``sagg recipe publish|list``: the analyst's side of the recipe server (`deploy.recipes`)."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from deploy.cli.common import CliError, deployment, http, url
from deploy.config import Deployment
from deploy.recipes import list_recipes, load_draft, publish_recipe
from deploy.tables import table_text

__all__ = ["app"]

app = typer.Typer(help="publish and list recipes")

Server = Annotated[str | None, typer.Option(metavar="URL")]


def _server(flag: str | None, found: Deployment | None) -> str:
    server = url(flag, "SAGG_RECIPE_SERVER_URL", found, "recipe_server")
    if server is None:
        raise CliError("no recipe server URL: pass --recipe-server or run `sagg up` first")
    return server


@app.command()
def publish(
    file: Annotated[str, typer.Argument(help="a RecipeDraft as JSON or TOML")],
    recipe_server: Server = None,
) -> None:
    """Publish a recipe draft: validate, provision its task, sign, log; prints a summary."""
    found = deployment()
    server = _server(recipe_server, found)
    token = os.environ.get("SAGG_ANALYST_TOKEN") or (found.analyst_token if found else None)
    if not token:
        raise CliError("no analyst token: set SAGG_ANALYST_TOKEN or run `sagg up` first")
    draft = load_draft(file)
    # Verify the answer against the key the deployment pins, unless the server was overridden.
    pinned = None
    if (
        found is not None
        and found.recipe_server is not None
        and server.rstrip("/") == found.recipe_server.rstrip("/")
    ):
        pinned = found.recipe_server_public_key
    with http(found, 60.0) as client:
        summary = publish_recipe(server, token, draft, public_key=pinned, http=client)
    print(json.dumps(summary, indent=2))


@app.command("list")
def list_(
    recipe_server: Server = None,
    as_json: Annotated[bool, typer.Option("--json", help="the server's listing")] = False,
) -> None:
    """The recipes in the server's log."""
    found = deployment()
    with http(found, 30.0) as client:
        listing = list_recipes(_server(recipe_server, found), http=client)
    if as_json:
        print(json.dumps(listing, indent=2))
        return
    columns = ("recipe_id", "version", "analysis_id", "task_id", "leaf_index")
    rows = [[r.get(c) for c in columns] for r in listing["recipes"]]
    print(table_text(("recipe", "version", "analysis", "task", "leaf"), rows, right=(1, 4)))
    size = listing.get("tree_head", {}).get("tree_size")
    print(f"{len(listing['recipes'])} recipes; log tree size {size}")
