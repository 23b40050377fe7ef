"""``sagg devices run``: the client SDK's simulated devices (`client_sdk.cli`), with what the
flags leave unset taken from the deployment file."""

from __future__ import annotations

from pathlib import Path

from client_sdk.cli import DevicesRun, devices_app
from deploy.cli.common import deployment, transport, url

__all__ = ["app"]


def _defaults(options: DevicesRun) -> None:
    """Fill the recipe server, its public key (pinned, rather than trusted on first use from
    GET /keys), the leader, helper and token issuer the devices trust, and the manufacturer CA
    that certifies them, from the deployment."""
    found = deployment()
    options.recipe_server = url(
        options.recipe_server, "SAGG_RECIPE_SERVER_URL", found, "recipe_server"
    )
    # Its own --ca-file wins over `sagg --ca-file`, SAGG_CA_FILE and the deployment file.
    policy = transport(found)
    options.ca_file = options.ca_file or policy.ca_file
    options.allow_insecure_http = options.allow_insecure_http or policy.allow_insecure_http
    if found is None or options.recipe_server is None:
        return
    same_server = (found.recipe_server or "").rstrip("/") == options.recipe_server.rstrip("/")
    if options.recipe_key is None and same_server:
        options.recipe_key = found.recipe_server_public_key
    if options.policy is None and same_server:
        options.leader = options.leader or ([found.leader] if found.leader else [])
        options.helper = options.helper or ([found.helper] if found.helper else [])
        if not options.token_issuer and found.token_issuer:
            options.token_issuer = [found.token_issuer]
    if (
        not options.no_tokens
        and options.manufacturer_ca is None
        and options.manufacturer_key is None
        and found.manufacturer_ca_cert
        and found.manufacturer_ca_key
    ):
        options.manufacturer_ca = Path(found.manufacturer_ca_cert)
        options.manufacturer_key = Path(found.manufacturer_ca_key)


app = devices_app(_defaults)
