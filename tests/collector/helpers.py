"""Shared setup for collector tests: provisioning a task straight into a store."""

from __future__ import annotations

from typing import Any

from services.collector.store import Store
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig
from shared.dap.task import CollectorTask
from shared.vdaf.spec import VdafSpec

AUTH = "collector-token-0123456789abcdef"
LEADER = "https://leader.test/dap"


def make_task(
    vdaf: dict[str, Any] | None = None, query_type: str = "time_interval", precision: int = 3600
) -> CollectorTask:
    return CollectorTask(
        task_id=TaskId.random().to_b64url(),
        leader_endpoint=LEADER,
        query_type=query_type,  # type: ignore[arg-type]
        vdaf=VdafSpec.model_validate(
            vdaf or {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
        ),
        collector_auth_token=AUTH,
        time_precision=precision,
    )


def provision(store: Store, task: CollectorTask, now_ms: int) -> HpkeConfig:
    keypair = hpke.generate_keypair(1)
    config = HpkeConfig(1, keypair.kem_id, keypair.kdf_id, keypair.aead_id, keypair.public_key)
    store.put_task(
        task.task_id,
        task.model_dump_json(),
        b64url_encode(config.encode()),
        b64url_encode(keypair.private_key_bytes()),
        now_ms,
        lambda _: True,
    )
    return config
