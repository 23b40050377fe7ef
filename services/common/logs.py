"""Structured logs: every service writes one JSON object per line to stderr.

Fields: ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``msg``, any `extra`
fields the call passed, and ``exc`` (the exception type and traceback) when there is one.
Log lines carry ids (tasks, jobs, recipes) and counts, never shares, tokens or keys: call sites
pass only those, and exception handlers log exception types rather than messages that could
quote request data.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "configure_logging"]

#: Attributes every LogRecord has; anything else on a record came from `extra`. uvicorn's
#: `color_message` repeats `msg` with terminal escapes.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "taskName", "color_message"}
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


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
