"""An in-process world for device tests: recipe server, token issuer/attester, and either the
real leader and helper (`tests.aggregator.env`) or a fake leader that records what it gets.

All hosts are served through one httpx transport, so a `Device` uses a plain `httpx.Client`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from pydantic import SecretStr

from client_sdk.device import Device, DeviceConfig
from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from client_sdk.policy import AnalysisAllowance, DevicePolicy, FieldAllowance, TrustedParties
from client_sdk.recipes import VerifiedRecipe
from client_sdk.reports import AnyReport
from client_sdk.sampling import DonationSchedule
from client_sdk.upload import Uploader
from services.common.clock import TestClock
from services.recipe_server.app import create_app as recipe_app
from services.recipe_server.provision import ExistingTask, NewTask, TaskRequest
from services.recipe_server.settings import RecipeServerSettings
from services.token_issuer.app import create_app as issuer_app
from services.token_issuer.settings import TokenIssuerSettings
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap import messages19 as m19
from shared.dap.ids import TaskId
from shared.dap.messages import MEDIA_HPKE_CONFIG_LIST, HpkeConfig, HpkeConfigList, Report
from shared.dap.problems import ProblemType
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, IssuerDirectory
from shared.recipe.query_class import QueryClass
from shared.recipe.signing import RecipeSigner, recipe_bytes

NOW = 1_700_006_400
SEED = bytes(range(32))
ANALYST = "analyst-token-0123456789abcdef"
RECIPES = "http://recipes.test"
ISSUER = "http://issuer.test"
LEADER = "http://leader.test"
HELPER = "http://helper.test"
EMOJI = ["smile", "heart", "cry", "fire"]
#: What the world's devices trust: its leader, helper and token issuer.
TRUSTED = TrustedParties(leaders=(LEADER,), helpers=(HELPER,), token_issuers=(ISSUER,))
#: The issuer key pinned in a world without an issuer (its devices use no tokens).
NO_ISSUER_KEY_ID = b64url_encode(bytes(32))

Handler = Callable[[httpx.Request], httpx.Response]


def draft(**overrides: Any) -> dict[str, Any]:
    """A small recipe: a random emoji of the last day, one-hot over 5 buckets (OOV + 4),
    symmetric RAPPOR eps0 = 1 (local 2), q = 1, B = 206 (the least meeting (1, 1e-6))."""
    doc: dict[str, Any] = {
        "recipe_id": "emoji.daily",
        "version": 1,
        "analysis_id": "emoji.popular",
        "query": {
            "stream": "emoji",
            "fields": ["emoji"],
            "selection": {"kind": "random_event", "window_seconds": 86400},
        },
        "encoding": {"features": [{"kind": "categories", "field": "emoji", "values": EMOJI}]},
        "randomizer": {"name": "one_hot", "eps0": 1.0, "symmetric": True},
        "sampling_rate": 1.0,
        "min_batch_size": 206,
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "analysis": "stronger_clones"},
        "task": {"time_precision": 3600},
    }
    doc.update(overrides)
    return doc


def policy(**field_overrides: Any) -> DevicePolicy:
    """000 Table 1's shape: analysis (0.5... here 2.0 to allow a few queries), fields."""
    fields = {"emoji": FieldAllowance(local_epsilon=5, epsilon=3.0, reports=3)}
    fields.update(field_overrides)
    return DevicePolicy(
        trusted=TRUSTED,
        query_classes=(
            QueryClass(
                name="emoji",
                streams=("emoji",),
                fields=("emoji",),
                max_local_epsilon=4,
                max_epsilon=2,
                max_delta=1e-5,
            ),
        ),
        default_analysis=AnalysisAllowance(epsilon=3.0, reports=3),
        fields=fields,
    )


class Router(httpx.BaseTransport):
    """Routes by host to in-process apps (TestClient) or handler functions."""

    def __init__(self) -> None:
        self.apps: dict[str, TestClient | Handler] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.apps[request.url.host]
        if not isinstance(target, TestClient):
            return target(request)
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        response = target.request(
            request.method, request.url.raw_path.decode(), headers=headers, content=request.read()
        )
        return httpx.Response(
            response.status_code, headers=response.headers, content=response.content
        )


@dataclass
class FakeAggregator:
    """Serves /hpke_config and records uploads (a DAP-09 PUT or a DAP-19 UploadRequest);
    `outdated` config ids get outdatedConfig (DAP-19: hpke_unknown_config_id)."""

    keys: list[hpke.HpkeKeyPair]
    uploads: list[AnyReport] = field(default_factory=list)
    outdated: set[int] = field(default_factory=set)
    fail_next: int = 0

    @classmethod
    def create(cls, config_id: int) -> FakeAggregator:
        return cls([hpke.generate_keypair(config_id)])

    def config_list(self) -> HpkeConfigList:
        return HpkeConfigList(
            tuple(
                HpkeConfig(k.config_id, k.kem_id, k.kdf_id, k.aead_id, k.public_key)
                for k in reversed(self.keys)  # newest first: the preferred one
            )
        )

    def key(self, config_id: int) -> hpke.HpkeKeyPair:
        return next(k for k in self.keys if k.config_id == config_id)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/hpke_config":
            return httpx.Response(
                200,
                content=self.config_list().encode(),
                headers={"Content-Type": MEDIA_HPKE_CONFIG_LIST},
            )
        assert request.url.path.endswith("/reports")
        if self.fail_next:
            self.fail_next -= 1
            return httpx.Response(503)
        if request.method == "POST":
            return self._upload_request(request)
        assert request.method == "PUT"
        report = Report.decode(request.read())
        if report.leader_encrypted_input_share.config_id in self.outdated:
            return httpx.Response(
                400,
                json={"type": ProblemType.OUTDATED_CONFIG.urn, "status": 400},
                headers={"Content-Type": "application/problem+json"},
            )
        self.uploads.append(report)
        return httpx.Response(201)

    def _upload_request(self, request: httpx.Request) -> httpx.Response:
        assert m19.media_type_message(request.headers["Content-Type"]) == "upload-req"
        refused = []
        for report in m19.UploadRequest.decode(request.read()).reports:
            if report.leader_encrypted_input_share.config_id in self.outdated:
                error = m19.ReportError.HPKE_UNKNOWN_CONFIG_ID
                refused.append(m19.ReportUploadStatus(report.report_metadata.report_id, error))
            else:
                self.uploads.append(report)
        if not refused:
            return httpx.Response(200)
        body = m19.UploadErrors(tuple(refused)).encode()
        return httpx.Response(200, content=body, headers={"Content-Type": m19.MEDIA_UPLOAD_ERRORS})


class StaticProvisioner:
    leader_url = LEADER
    helper_url = HELPER

    def __init__(self, task_id: str, leader: HpkeConfigList, helper: HpkeConfigList) -> None:
        self.task = ExistingTask(
            task_id,
            None,
            None,
            None,
            b64url_encode(leader.encode()),
            b64url_encode(helper.encode()),
        )

    def new_task_id(self) -> str:
        # Every publication gets the world's task (its fake aggregators serve only that one).
        return self.task.task_id

    def hpke_configs(self) -> tuple[str, str]:
        return self.task.leader_hpke_configs, self.task.helper_hpke_configs

    def create(self, task: NewTask) -> None:
        self.created = task

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        return self.task


class World:
    def __init__(
        self,
        tmp_path: Path,
        *,
        task_id: TaskId | None = None,
        leader_configs: HpkeConfigList | None = None,
        helper_configs: HpkeConfigList | None = None,
        clock: TestClock | None = None,
        tokens: bool = True,
    ) -> None:
        self.tmp = tmp_path
        self.clock = clock or TestClock(NOW)
        self.router = Router()
        self.http = httpx.Client(transport=self.router)
        self.task_id = task_id or TaskId.random()
        self.leader = FakeAggregator.create(1)
        self.helper = FakeAggregator.create(2)
        self.router.apps["leader.test"] = self.leader
        self.router.apps["helper.test"] = self.helper
        self.signer = RecipeSigner.from_seed(SEED)
        #: Each recipe server's provisioner, by database name (a test may change its configs).
        self.provisioners: dict[str, StaticProvisioner] = {}
        self.ca = ManufacturerCA.generate(now=NOW)
        #: What the operator pins for the issuer: its directory's keys when it runs.
        self.issuer_key_ids = [NO_ISSUER_KEY_ID]
        if tokens:
            settings = TokenIssuerSettings(
                role="joint",
                issuer_database_url=f"sqlite:///{tmp_path / 'issuer.db'}",
                attester_database_url=f"sqlite:///{tmp_path / 'attester.db'}",
                quota_tokens=100,
            )
            issuer = TestClient(
                issuer_app(settings, clock=self.clock, trust_anchors=[self.ca.certificate])
            )
            self.router.apps["issuer.test"] = issuer
            directory = IssuerDirectory.decode(issuer.get(ISSUER_DIRECTORY_PATH).content)
            self.issuer_key_ids = [
                b64url_encode(k.token_key_object().token_key_id) for k in directory.keys_of_type()
            ]
        self.recipe_server = self.make_recipe_server(
            "recipes.sqlite3",
            leader_configs or self.leader.config_list(),
            helper_configs or self.helper.config_list(),
        )
        self.router.apps["recipes.test"] = self.recipe_server

    def make_recipe_server(
        self,
        db_name: str,
        leader: HpkeConfigList,
        helper: HpkeConfigList,
        issuer: str = ISSUER,
    ) -> TestClient:
        settings = RecipeServerSettings(
            database_url=f"sqlite:///{self.tmp / db_name}",
            signing_key=SecretStr(b64url_encode(SEED)),
            analyst_token=SecretStr(ANALYST),
            leader_url=LEADER,
            helper_url=HELPER,
            collector_url="http://collector.test",
            token_issuer_url=issuer,
            token_key_ids=self.issuer_key_ids,
        )
        provisioner = StaticProvisioner(self.task_id.to_b64url(), leader, helper)
        self.provisioners[db_name] = provisioner
        return TestClient(
            recipe_app(settings, clock=self.clock, provisioner=provisioner, signer=self.signer)
        )

    def publish(self, server: TestClient | None = None, **overrides: Any) -> dict[str, Any]:
        target = server or self.recipe_server
        response = target.post(
            "/recipes", json=draft(**overrides), headers={"Authorization": f"Bearer {ANALYST}"}
        )
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    def device(
        self,
        directory: Path | None = None,
        *,
        policy_: DevicePolicy | None = None,
        tokens: bool = True,
        enroll: bool = True,
        rng: random.Random | None = None,
        identity: SimulatedDevice | None = None,
        **config: Any,
    ) -> Device:
        identity = identity or SimulatedDevice.manufacture(self.ca)
        cfg = DeviceConfig(
            recipe_server_url=RECIPES,
            recipe_server_key=self.signer.public_key,
            use_tokens=tokens,
            donation=config.pop("donation", DonationSchedule(1, 0)),
            **config,
        )
        device = Device(
            policy_ or policy(),
            cfg,
            directory=directory,
            http=self.http,
            identity=identity,
            clock=self.clock.now,
            rng=rng,
            uploader=Uploader(self.http, sleep=lambda _: None),
        )
        device.events.register_stream("emoji", 7 * 86400)
        if tokens and enroll:
            device.enroll(ISSUER)
        return device


def verified(world: World, device: Device, recipe_id: str = "emoji.daily") -> VerifiedRecipe:
    found = device.fetch_recipe(recipe_id)
    assert found is not None, device.audit.entries()
    assert recipe_bytes(found.recipe) == found.canonical
    return found
