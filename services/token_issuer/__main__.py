"""`python -m services.token_issuer`: run the issuer and/or attester with `SAGG_TOKEN_ISSUER_*`."""

from __future__ import annotations

import sys

from services.common.entry import service_main
from services.token_issuer.app import create_app
from services.token_issuer.settings import TokenIssuerSettings

__all__ = ["main"]


def main() -> int:
    return service_main(TokenIssuerSettings, "SAGG_TOKEN_ISSUER_", "token issuer", create_app)


if __name__ == "__main__":
    sys.exit(main())
