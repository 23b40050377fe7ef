"""Publication retries: a task created before a failed log append is reused, never doubled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.clock import TestClock
from services.common.db import Database
from services.recipe_server.provision import ProvisionError
from services.recipe_server.service import Analyst, ProvisioningFailedError, RecipeService
from services.recipe_server.store import RecipeStore
from shared.b64url import b64url_encode
from shared.dap.extensions import recipe_digest
from shared.recipe.model import RecipeDraft, TokenIssuerRef
from shared.recipe.signing import RecipeSigner
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import ISSUER, ISSUER_KEY_ID, FakeProvisioner

SIGNER = RecipeSigner.from_seed(bytes(range(32)))


def _service(tmp_path: Path, provisioner: FakeProvisioner) -> RecipeService:
    db = Database.open(f"sqlite:///{tmp_path / 'recipes.sqlite3'}")
    service = RecipeService(
        RecipeStore(db),
        SIGNER,
        provisioner,
        TestClock(),
        (TokenIssuerRef(url=ISSUER, key_ids=(ISSUER_KEY_ID,)),),
    )
    service.start()
    return service


class _AppendFails:
    def __init__(self, service: RecipeService) -> None:
        self.real = service.store.append
        self.failures = 1

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        return self.real(*args, **kwargs)


def _publish_once_failing_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[FakeProvisioner, RecipeService, RecipeDraft, str]:
    """A publication whose task is made but whose log append fails once: the provisioner, the
    service, the draft and the task id provisioned."""
    provisioner = FakeProvisioner()
    service = _service(tmp_path, provisioner)
    draft = RecipeDraft.model_validate(draft_json())
    monkeypatch.setattr(service.store, "append", _AppendFails(service))
    with pytest.raises(OSError):
        service.publish(draft, Analyst("a"))
    (task_id,) = provisioner.tasks
    return provisioner, service, draft, task_id


def test_retry_after_a_failed_append_reuses_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provisioner, service, draft, task_id = _publish_once_failing_the_append(tmp_path, monkeypatch)
    result = service.publish(draft, Analyst("a"))
    assert result.created and result.record.task_id == task_id
    assert len(provisioner.created) == 1
    # The logged bytes are the ones the task is bound to.
    made = provisioner.tasks[task_id]
    assert made.recipe_digest == b64url_encode(recipe_digest(result.record.canonical))
    assert service.store.pending(draft.recipe_id, draft.version) is None
    # And the publication stays idempotent afterwards.
    again = service.publish(draft, Analyst("a"))
    assert not again.created and again.record == result.record


def test_retry_after_a_half_made_task_starts_over(tmp_path: Path) -> None:
    provisioner = FakeProvisioner()
    service = _service(tmp_path, provisioner)
    draft = RecipeDraft.model_validate(draft_json())

    def half(task: Any) -> None:
        provisioner.missing.add(task.task_id)  # e.g. the helper refused after the collector
        raise ProvisionError("the helper refused the task: HTTP 500")

    real_create = provisioner.create
    provisioner.create = half  # type: ignore[method-assign]
    with pytest.raises(ProvisioningFailedError):
        service.publish(draft, Analyst("a"))
    pending = service.store.pending(draft.recipe_id, draft.version)
    assert pending is not None
    provisioner.create = real_create  # type: ignore[method-assign]
    result = service.publish(draft, Analyst("a"))
    assert result.created and result.record.task_id != pending.task_id
    assert list(provisioner.tasks) == [result.record.task_id]


def test_an_outage_while_checking_keeps_the_pending_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provisioner, service, draft, task_id = _publish_once_failing_the_append(tmp_path, monkeypatch)
    provisioner.fail = "cannot reach the leader"
    with pytest.raises(ProvisioningFailedError):
        service.publish(draft, Analyst("a"))
    provisioner.fail = None
    assert service.publish(draft, Analyst("a")).record.task_id == task_id
