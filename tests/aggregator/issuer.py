"""An in-process Privacy Pass issuer (services.token_issuer, issuer role) for the token tests.

Tokens are requested over the issuer's attester-facing endpoint with the attester secret, so the
tests need no simulated device: what the aggregators check is the token, not how it was got.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

from services.common.clock import Clock
from services.common.db import Database
from services.token_issuer.app import create_app
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.settings import TokenIssuerSettings
from shared.b64url import b64url_encode
from shared.dap.extensions import token_challenge
from shared.dap.ids import TaskId
from shared.dap.messages import Role
from shared.dap.task import TokenPolicy
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, IssuerDirectory
from shared.privacypass.issuance import IssuerKey
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, Token

SECRET = "attester-issuer-secret-0123456789"
ISSUER_URL = "http://issuer.test/"
ISSUER_NAME = "issuer.test"


@dataclass
class Issuer:
    client: TestClient
    clock: Clock

    def policy(
        self, window_seconds: int = 86_400, key_ids: list[str] | None = None
    ) -> dict[str, Any]:
        """The task's token policy; it pins the keys the issuer's directory lists now unless
        `key_ids` says otherwise."""
        if key_ids is None:
            directory = IssuerDirectory.decode(self.client.get(ISSUER_DIRECTORY_PATH).content)
            key_ids = [
                b64url_encode(k.token_key_object().token_key_id) for k in directory.keys_of_type()
            ]
        return {
            "issuer_url": ISSUER_URL,
            "issuer_name": ISSUER_NAME,
            "window_seconds": window_seconds,
            "key_ids": key_ids,
        }

    def token(
        self, task_id: TaskId, report_time: int, role: Role, window_seconds: int = 86_400
    ) -> Token:
        """A fresh token for `role`'s share of a report of the task and time window, as a
        device would hold."""
        policy = TokenPolicy.model_validate(self.policy(window_seconds))
        return self.token_for(token_challenge(task_id, report_time, policy, role))

    def token_for(self, challenge: Any) -> Token:
        directory = IssuerDirectory.decode(self.client.get(ISSUER_DIRECTORY_PATH).content)
        selected = directory.select_key(self.clock.now())
        assert selected is not None
        request, state = create_token_request(challenge, selected.token_key_object())
        r = self.client.post(
            "/token-request",
            content=request.encode(),
            headers={"Content-Type": MEDIA_TOKEN_REQUEST, "Authorization": f"Bearer {SECRET}"},
        )
        assert r.status_code == 200, r.text
        return finalize_token(state, r.content)


def make_issuer(
    db_url: str, clock: Clock, generate: Callable[[], IssuerKey], **settings: Any
) -> Iterator[Issuer]:
    values: dict[str, Any] = {
        "role": "issuer",
        "issuer_database_url": db_url,
        "attester_secret": SECRET,
    }
    values.update(settings)

    def store(db: Database, schedule: KeySchedule, c: Clock) -> KeyStore:
        return KeyStore(db, schedule, c, generate=generate)

    app = create_app(TokenIssuerSettings(**values), clock=clock, key_store_factory=store)
    with TestClient(app) as client:
        yield Issuer(client, clock)
