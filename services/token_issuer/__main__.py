"""`python -m services.token_issuer`: run the issuer and/or attester with `SAGG_TOKEN_ISSUER_*`."""

from __future__ import annotations

import sys

from services.common.entry import run_service, settings_from_env
from services.token_issuer.app import create_app
from services.token_issuer.settings import TokenIssuerSettings

__all__ = ["main", "serve"]


def serve(settings: TokenIssuerSettings) -> None:
    """Run in the foreground until SIGINT/SIGTERM."""
    run_service(
        create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level
    )


def main() -> int:
    settings = settings_from_env(TokenIssuerSettings, "SAGG_TOKEN_ISSUER_", "token issuer")
    if settings is None:
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
