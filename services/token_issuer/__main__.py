"""`python -m services.token_issuer`: run the issuer and/or attester with `SAGG_TOKEN_ISSUER_*`."""

from __future__ import annotations

import sys
from functools import partial

from services.common.entry import serve_app, service_main
from services.token_issuer.app import create_app
from services.token_issuer.settings import TokenIssuerSettings

__all__ = ["main", "serve"]


def serve(settings: TokenIssuerSettings) -> None:
    """Serve in `settings.workers` processes."""
    serve_app(create_app, settings, settings.workers)


#: `sagg serve` runs `serve` with settings of its own; `main` reads them from the environment.
main = partial(service_main, TokenIssuerSettings, "token issuer", serve)

if __name__ == "__main__":
    sys.exit(main())
