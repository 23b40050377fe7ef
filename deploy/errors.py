"""The base of every error the CLI and launcher raise (one error type per layer).

Each `DeployError` is a user-facing failure with a one-line message (a file that cannot be
used, a service that did not start, a refused collection...): `sagg` prints it and exits 1,
as it does the lower layers' bases (`shared.errors.SaggError`, `client_sdk.errors.ClientError`,
`services.common.problems.ServiceError`).
"""

from __future__ import annotations


class DeployError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""
