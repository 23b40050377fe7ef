"""Device SDK throughput: simulated devices per second from recipe to sealed report.

Each device runs the full on-device path of `client_sdk` (policy and budget checks, the
sampling coin, selection, local randomization, the budget transaction, Prio3 sharding, HPKE
sealing of both input shares with the recipe-binding extension, storing the sealed report)
with the simulator's batching; the upload is an in-process fake that accepts every report,
so the figure is the device side alone (no network, no tokens).

Run: ``python -m bench.devices [--devices N]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import Result, print_table
from client_sdk.device import DeviceConfig
from client_sdk.http import http_client
from client_sdk.policy import TrustedParties
from client_sdk.recipes import VerifiedRecipe
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import Simulator
from client_sdk.upload import Uploader, UploadResult
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig, HpkeConfigList
from shared.recipe.accounting import expected_vdaf
from shared.recipe.model import RecipeDraft, RecipeTask, TokenIssuerRef
from shared.recipe.signing import recipe_bytes
from shared.transport import TransportPolicy

EMOJI = ["smile", "heart", "cry", "fire", "clap", "party", "think", "wink"]

CASES: dict[str, dict[str, Any]] = {
    "one_hot d=9": {"randomizer": {"name": "one_hot", "eps0": 1.0, "symmetric": True}},
    "hcms 4x16": {"randomizer": {"name": "hcms", "eps0": 2.0, "k": 4, "m": 16}},
}


class _AcceptAll(Uploader):
    def put(self, leader: str, task_id: str, body: bytes, resent: bool = False) -> UploadResult:
        return UploadResult("sent")


def _configs(config_id: int) -> str:
    k = hpke.generate_keypair(config_id)
    cfg = HpkeConfig(k.config_id, k.kem_id, k.kdf_id, k.aead_id, k.public_key)
    return b64url_encode(HpkeConfigList((cfg,)).encode())


def _recipe(randomizer: dict[str, Any]) -> VerifiedRecipe:
    draft = RecipeDraft.model_validate(
        {
            "recipe_id": "bench.emoji",
            "version": 1,
            "analysis_id": "bench.emoji",
            "query": {
                "stream": "emoji",
                "fields": ["emoji"],
                "selection": {"kind": "random_event", "window_seconds": 86400},
            },
            "encoding": {"features": [{"kind": "categories", "field": "emoji", "values": EMOJI}]},
            "randomizer": randomizer,
            "sampling_rate": 1.0,
            "min_batch_size": 100_000,
            "privacy": {"epsilon": 1.0, "delta": 1e-6},
        }
    )
    task = RecipeTask(
        task_id=TaskId.random().to_b64url(),
        leader="http://leader.bench",
        helper="http://helper.bench",
        vdaf=expected_vdaf(draft.randomizer, draft.encoding),
        time_precision=3600,
        leader_hpke_configs=_configs(1),
        helper_hpke_configs=_configs(2),
    )
    recipe = draft.complete(task, TokenIssuerRef(url="http://issuer.bench"))
    return VerifiedRecipe(recipe, recipe_bytes(recipe), 0)


def measure(case: str, devices: int) -> float:
    verified = _recipe(CASES[case]["randomizer"])
    http = http_client(TransportPolicy())
    config = DeviceConfig(use_tokens=False, donation=DonationSchedule(1, 0))
    trusted = TrustedParties(
        leaders=("http://leader.bench",),
        helpers=("http://helper.bench",),
        token_issuers=("http://issuer.bench",),
    )
    simulator = Simulator(
        config,
        trusted=trusted,
        http=http,
        concurrency=8,
        progress=None,
        uploader=_AcceptAll(http),
    )
    start = time.perf_counter()
    summary = simulator.run("bench.emoji", devices, "emoji", verified=verified)
    elapsed = time.perf_counter() - start
    http.close()
    assert summary.uploaded == devices, summary.lines()
    return devices / elapsed


def run(devices: int = 400) -> list[Result]:
    measure("one_hot d=9", 20)  # warm-up: numba compiles the field kernels once per process
    return [
        Result("devices", case, "device reports/s", measure(case, devices), "reports/s")
        for case in CASES
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=1000)
    args = parser.parse_args()
    print_table(run(args.devices), "Device SDK throughput (no network)")


if __name__ == "__main__":
    main()
