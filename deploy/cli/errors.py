"""The one place where `sagg` turns failures into messages and exit statuses.

- usage errors (unknown command, missing or invalid option): ``sagg CMD: error: ...`` and 2;
- the layers' expected errors (`EXPECTED`): ``sagg: <message>`` and 1, never a traceback;
- anything else is a bug: still one line, naming the exception type, and 1.

A new layer error is handled by adding its class to `EXPECTED`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import httpx
from typer import Abort, TyperException

# Typer vendors click (`typer._click`) and exports neither its usage error nor its command type.
from typer._click.core import Command
from typer._click.exceptions import UsageError

from client_sdk.cli import DevicesError
from client_sdk.tokens import TokenError
from client_sdk.upload import UploadError
from deploy.cli.common import CliError
from deploy.collect import CollectError
from deploy.config import DeploymentError
from deploy.demo import DemoError
from deploy.keys import KeysError
from deploy.launcher import LaunchError
from deploy.recipes import RecipeError
from deploy.tls import TlsError
from services.common.admin_client import ProvisionError
from shared.transport import http_failure

__all__ = ["EXIT_ERROR", "EXIT_USAGE", "EXPECTED", "run"]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Errors whose message is written for the user (or, for OSError, names the file and the
#: reason): printed as is.
EXPECTED: tuple[type[Exception], ...] = (
    CliError,
    CollectError,
    DemoError,
    DeploymentError,
    DevicesError,
    KeysError,
    LaunchError,
    OSError,  # a file the command reads or writes (shared.files refuses links, too)
    ProvisionError,
    RecipeError,
    TlsError,
    TokenError,
    UploadError,
)


def _usage(exc: UsageError) -> str:
    where = exc.ctx.command_path if exc.ctx is not None else "sagg"
    message = exc.format_message().replace("\n", " ")
    return f"{where}: error: {message} (see --help)"


def run(command: Command, argv: Sequence[str]) -> int:
    """Run `command` on `argv`; the exit status, after at most one line on stderr."""
    try:
        code = command.main(args=list(argv), prog_name="sagg", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except UsageError as exc:
        print(_usage(exc), file=sys.stderr)
        return EXIT_USAGE
    except TyperException as exc:
        print(f"sagg: {exc.format_message()}", file=sys.stderr)
    except Abort:
        print("sagg: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except EXPECTED as exc:
        print(f"sagg: {exc}", file=sys.stderr)
    except httpx.HTTPError as exc:  # a server unreachable where no layer names it
        print(f"sagg: HTTP request failed: {http_failure(exc)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("sagg: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: still one line, and the type names it for a report
        print(f"sagg: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EXIT_ERROR
