"""Talking to the leader: report upload (DAP-09 §4.4.2).

Uploads are ``PUT {leader}/tasks/{task_id}/reports`` with ``application/dap-report``. Network
errors and 5xx answers are retried a bounded number of times with exponential backoff and
jitter (so that thousands of simulated devices do not retry in lockstep); a 4xx is final, and
``outdatedConfig`` is reported as such so the device can send a fresh report once. The HPKE
configs (DAP-09 §4.4.1) are never fetched from the aggregators here: the device seals only to
the configs of the signed, logged recipe (`client_sdk.device`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import httpx

from shared.dap.messages import MEDIA_REPORT
from shared.dap.problems import ProblemType

__all__ = ["UploadResult", "Uploader"]


@dataclass(frozen=True, slots=True)
class UploadResult:
    status: Literal["sent", "outdated_config", "rejected", "failed"]
    detail: str = ""
    attempts: int = 1


class Uploader:
    def __init__(
        self,
        http: httpx.Client,
        *,
        retries: int = 3,
        backoff: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.http = http
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self._jitter = random.Random()  # timing only; nothing private depends on it

    def put(self, leader: str, task_id: str, body: bytes) -> UploadResult:
        url = f"{leader.rstrip('/')}/tasks/{task_id}/reports"
        detail = ""
        for attempt in range(1, self.retries + 2):
            try:
                response = self.http.put(url, content=body, headers={"Content-Type": MEDIA_REPORT})
            except httpx.HTTPError as exc:
                detail = f"network error: {type(exc).__name__}"
            else:
                if response.is_success:
                    return UploadResult("sent", attempts=attempt)
                if response.status_code < 500:
                    return self._refusal(response, attempt)
                detail = f"leader answered {response.status_code}"
            if attempt <= self.retries:
                delay = self.backoff * 2 ** (attempt - 1)
                self._sleep(delay * (0.5 + self._jitter.random()))
        return UploadResult("failed", detail, self.retries + 1)

    @staticmethod
    def _refusal(response: httpx.Response, attempt: int) -> UploadResult:
        problem: ProblemType | None = None
        try:
            body = response.json()
            if isinstance(body, dict) and isinstance(body.get("type"), str):
                problem = ProblemType.from_urn(body["type"])
        except ValueError:
            pass
        if problem is ProblemType.OUTDATED_CONFIG:
            return UploadResult("outdated_config", "outdatedConfig", attempt)
        name = problem.value if problem else str(response.status_code)
        return UploadResult("rejected", f"leader refused the report: {name}", attempt)
