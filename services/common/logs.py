"""Structured logs: every service writes one JSON object per line to stderr.

Fields: ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``msg``, any `extra`
fields the call passed, and ``exc`` when there is an exception: the type of each exception in
the chain and its frames (file, line, function), never its message or local values.
Log lines carry ids (tasks, jobs, recipes) and counts, never shares, tokens or keys: call sites
pass only those, and exception handlers log exception types rather than messages that could
quote request data. The formatter enforces the rest, for lines it does not control (uvicorn's
"Exception in ASGI application", a library's error): exception messages, which can quote a
share or token (a ValueError's repr of bytes), a URL with credentials or a PostgreSQL DSN, are
withheld; and `msg` and `extra` values are redacted of what a secret looks like: Bearer
credentials, passwords in URLs and DSNs, bytes literals, and base64url or hex runs longer than
any id sagg logs (a 32-byte task id is 43 base64url characters).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import traceback
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

__all__ = ["JsonFormatter", "configure_logging", "redact"]

#: Attributes every LogRecord has; anything else on a record came from `extra`. uvicorn's
#: `color_message` repeats `msg` with terminal escapes.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "taskName", "color_message"}
)


_REDACTED = "[redacted]"
#: What secrets look like in text. Ids stay: the longest one logged is a 43-character task id.
_SECRETS = (
    # Authorization values, and token-ish key=value pairs (a DSN's password=..., query strings).
    (re.compile(r"(?i)\b(bearer|basic|dap-auth-token:?)\s+[^\s,;\"']+"), rf"\1 {_REDACTED}"),
    (
        re.compile(r"(?i)\b(password|passwd|secret|token|key)=[^\s&,;\"']+"),
        rf"\1={_REDACTED}",
    ),
    # user:password@ in any URL (postgresql://, https://).
    (re.compile(r"(//[^/\s:@]*):[^/\s@]*@"), rf"\1:{_REDACTED}@"),
    # bytes reprs (shares, tokens, seeds), and long base64url or hex runs.
    (re.compile(r"""b(['"])(?:\\.|(?!\1).)*\1"""), f"b'{_REDACTED}'"),
    (re.compile(r"[A-Za-z0-9_-]{44,}={0,2}"), _REDACTED),
)


_TB_HEADER = "Traceback (most recent call last):"
_CHAIN = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


def _withhold_messages(text: str) -> str:
    """A traceback already formatted into a message (uvicorn logs lifespan failures so) with
    each exception's message withheld, as `JsonFormatter.formatException` does."""
    out: list[str] = []
    in_traceback = in_message = False
    for line in text.splitlines():
        if line.startswith(_TB_HEADER) or line in _CHAIN or not line:
            in_traceback, in_message = line.startswith(_TB_HEADER) or in_traceback, False
            out.append(line)
        elif not in_traceback or (line.startswith(" ") and not in_message):
            out.append(line)
        elif not in_message:
            in_message = True
            out.append(f"{line.split(':', 1)[0]}: (message withheld)")
    return "\n".join(out)


def redact(text: str) -> str:
    """`text` with anything that looks like a credential, key, share or token replaced, and
    the messages of any traceback in it withheld."""
    if _TB_HEADER in text:
        text = _withhold_messages(text)
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def _scrubbed(value: Any) -> Any:
    if isinstance(value, int | float | bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v) for v in value]
    return redact(value if isinstance(value, str) else str(value))


def _exception_lines(exc: BaseException | None, tb: TracebackType | None) -> list[str]:
    """The chain (causes first, as Python prints it) as types and frames, without messages:
    they may quote request data or secrets (architecture: nothing secret is logged)."""
    lines: list[str] = []
    seen: set[int] = set()
    chain: list[tuple[BaseException, TracebackType | None, str]] = []
    current, current_tb, link = exc, tb, ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, current_tb, link))
        if current.__cause__ is not None:
            link = "The above exception was the direct cause of the following exception:"
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            link = "During handling of the above exception, another exception occurred:"
            current = current.__context__
        else:
            current = None
        current_tb = current.__traceback__ if current is not None else None
    for error, error_tb, after in reversed(chain):
        lines.append("Traceback (most recent call last):")
        lines += [
            f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}'
            for frame in traceback.extract_tb(error_tb)
        ]
        kind = type(error)
        module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
        lines.append(f"{module}{kind.__qualname__}: (message withheld)")
        if after:
            lines += ["", after, ""]
    return lines


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = _scrubbed(value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)

    def formatException(
        self,
        ei: tuple[type[BaseException], BaseException, TracebackType | None]
        | tuple[None, None, None],
    ) -> str:
        return "\n".join(_exception_lines(ei[1], ei[2]))


def configure_logging(level: str) -> None:
    """JSON lines on stderr for the root logger and everything that propagates to it
    (uvicorn's loggers too, when uvicorn is started with ``log_config=None``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at INFO: one line per poll or relay would drown the service's own.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # An exception nothing caught (at startup, in a driver thread) would otherwise be printed
    # raw, message and all, by the interpreter: it goes through the formatter instead.
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("sagg").critical("uncaught %s", kind.__name__, exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None:
        logging.getLogger("sagg").critical(
            "uncaught %s in a thread",
            args.exc_type.__name__,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )
