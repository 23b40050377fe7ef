"""What the drivers share: HTTP plumbing to the helper and retry timing."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from services.aggregator.settings import AggregatorSettings
from shared.dap.problems import ProblemType


@dataclass(frozen=True)
class HelperError(Exception):
    """The helper answered with a 4xx: retrying the same request will not help."""

    status: int
    problem: ProblemType | None


class HelperUnavailableError(Exception):
    """Network failure or 5xx: worth retrying later."""


def helper_url(endpoint: str, path: str) -> str:
    return endpoint.rstrip("/") + "/" + path.lstrip("/")


def check_response(response: httpx.Response) -> None:
    """Raise HelperUnavailableError for 5xx/429, HelperError for other non-2xx answers."""
    if response.status_code >= 500 or response.status_code == 429:
        raise HelperUnavailableError(f"helper answered {response.status_code}")
    if response.status_code >= 400:
        problem = None
        try:
            body = json.loads(response.content)
            if isinstance(body, dict) and isinstance(body.get("type"), str):
                problem = ProblemType.from_urn(body["type"])
        except ValueError:
            pass
        raise HelperError(response.status_code, problem)


def backoff(settings: AggregatorSettings, attempts: int) -> int:
    """Seconds to wait before attempt `attempts + 1` (exponential, capped, at least 1)."""
    delay = settings.retry_base_s * 2 ** max(0, attempts - 1)
    return max(1, int(min(settings.retry_max_s, delay)))
