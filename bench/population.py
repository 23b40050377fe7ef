"""Issue #13: simulated device populations against a real `sagg up` deployment.

Everything runs on this machine: `python -m deploy.cli up` (SQLite, free loopback ports, the
joint token issuer) and the simulators as separate processes, so each one's CPU and peak RSS
are its own (a simulator prints its CPU, `os.wait4` gives its peak RSS; /proc for a service).

- **with tokens**: `sagg devices run --workers 2` (the CLI users run, a simulator process a
  core) on README's ``demo.buckets``-shaped recipe: every device enrolls with the attester,
  fetches its two tokens in one batched request, shards, seals and uploads. Devices/s is over
  the simulation's wall time, from the first worker's recipe verification to the last upload
  accepted of either (`SimulationSummary.merge`); simulator CPU per device is the CPU the
  processes spent simulating, summed, as they print it (no interpreter start or imports:
  subtracting a one-device run's CPU instead showed 0.7 ms a device of a true 1.8), first uses
  in each fresh process included (numba's kernels loaded: about 0.12 s); issuer CPU is per
  token issued.
- **without tokens**: a task provisioned through the admin APIs bound to a recipe built here,
  requiring no tokens; the simulator (a spawned process running `Simulator.run`) at two
  population sizes, so its peak RSS shows whether memory grows with the population.
- **1 vs 2 processes**: one seeded population through one simulator process and through
  ``--workers 2``, each to its own recipe's task; both collected, the aggregates compared,
  and each set against what its simulator says the devices sent (``--summary-json``:
  `SimulationSummary.sent`).

``--full N`` runs instead the issue's population case: N devices with tokens through upload,
aggregation and collection in a fresh `sagg up`, the collected aggregate checked against what
the devices sent, the time from the first device to the collected result and each process's
peak RSS, the simulator's beside a 2,000-device run's (flat memory).

Run alone: ``python -m bench.population [--devices N] [--tokenless N,M] [--split N]
[--repeat R]`` (R runs, each in a fresh `sagg up`: each figure's median and range) or
``python -m bench.population --full 1000000``.

Where the CPU goes, per device (2,000 devices, py-spy ``--gil`` on each service and on the
simulator, the machine shared; process CPU from /proc, not wall time), before the speed work:

- simulator: 7.6 ms with tokens, 1.8 ms without. httpx + httpcore per request (about 0.6 ms
  each, four requests a device with tokens: 36%), a new thread pool per phase and chunk (3,000
  threads started: 10%), Prio3 sharding and HPKE (9%), blinding (3%); the interpreter's start
  and imports (1.5 s) are not per device.
- token issuer: 4.5 ms with tokens. FastAPI/uvicorn per request (enroll, challenge, batched
  token request: 75% of its samples); blind RSA by CRT over ``gmpy2.powmod_sec`` (15%: 0.82 ms
  a signature, where OpenSSL's RSA private operation takes 0.28 ms).
- leader: 1.1 ms with tokens, 0.7 ms without (the upload request, two token verifications,
  aggregation jobs); helper: 0.5 ms and 0.2 ms (aggregation jobs).

After the first round (one simulator thread pool at concurrency 8, blind signing by OpenSSL,
the issuer in two processes, the first nonce in the enrollment answer), 2,000 devices: with
tokens 126-132 devices/s, simulator 3.5 ms, token issuer 3.0 ms (1.5 ms a token: two requests
a device now, FastAPI's per-request cost most of it), leader 0.9, helper 0.4: 7.9 ms CPU a
device in all. Without tokens 346-428 devices/s, simulator 1.4 ms, leader 0.6, helper 0.2.

The second round (the simulator's requests over `client_sdk.http.pooled_client` instead of
httpx; the attester's device routes before FastAPI's stack, `services.common.raw_routes`; an
enrolment and its nonce, a token request's checks and charge, one transaction each; issuer keys
parsed once), before and after run alternately on the machine then (load 6-9, slower than for
the figures above): simulator 5.0 -> 3.1-3.7 ms with tokens and 1.9-2.2 -> 1.1-1.2 ms without;
token issuer 4.0 -> 2.5-3.2 ms. Left per device: the issuer's two RSA signatures (0.3 ms
each) and two Ed25519 checks (0.11 ms each), the simulator's Prio3 sharding (0.12-0.15 ms: seven
TurboSHAKE128 instances a report) and two HPKE seals (0.09 ms each, two X25519 operations),
and Python per request and per store transaction in every process.

The third round (a chunk's synthetic events in one transaction; network phases as one pool task
a thread; no log line per enrolment; the worker store without syncs; the attester's work on the
event loop in the joint model on SQLite instead of a thread hop), 2,000 devices, the simulation's
own CPU (`Simulator.run`) and each service's, six runs of each side alternated (load 4-5): with
tokens simulator 1.87 -> 1.74 ms, token issuer 1.76 -> 1.45 (0.73 ms a token), leader 0.62 and
helper 0.30 unchanged: 4.6 -> 4.2 ms a device in all; without tokens simulator 0.75 -> 0.66,
leader 0.41, helper 0.18: 1.4 -> 1.3. Left per device, measured in process: the simulator's
two blindings and finalizations (0.18 ms), two HPKE seals (0.11), Prio3 sharding (0.08), the
device's key and certificate (0.06), six store transactions (about 0.02 each) and three
requests; the issuer's two blind signatures (0.49), the certificate and request signature
checks (0.13), two store transactions of 11 statements (about 0.17) and two requests.

The fourth round (the attester's enrolment and charge in 9 statements; the device's recipe
binding kept from its answer and its cached tokens taken without counting them first; token
verification by OpenSSL, four a device: simulator two, leader and helper one each), measured in
process: attester 303 -> 296 µs a device (RSA excluded), the simulator's report_input 71 -> 52
µs, verify_token 30 -> 23 µs. End to end (2,000 devices with tokens, 7 runs of each side
alternated, load 4-5, medians): simulator 1.89 -> 1.85 ms, token issuer 1.53 -> 1.45, leader
0.64 -> 0.65, helper 0.34 -> 0.32: 4.39 -> 4.26 ms a device in all, each process's change
within its run-to-run spread (0.1-0.2 ms). Left per device, by SQL statement (thread CPU in
each process, 1,000 devices): the simulator's six store transactions cost 27 µs each in BEGIN
and COMMIT alone (0.16 ms); the leader's spent_tokens insert 12 µs, the helper's 7.

The fifth round. Where the time went, per process (py-spy ``--gil``, thread CPU from /proc):
the simulator's pool threads (enrolments, token requests, uploads) spent 1.6-2.2 ms a device
of thread CPU, much of it in `http.client` (two sends a request, the email package parsing each
answer: 85-97 µs a request, in process); a quarter of the token issuer's samples were uvicorn's
two sends of each answer (head and body written apart); the one simulator process both capped
itself at a core (the GIL) and left the services idle while its main thread made, answered and
sealed a chunk. Changes: a request in one send and its answer parsed by `client_sdk.http`
(25-32 µs a request); the services' answers in one write (`services.common.serving`); a chunk's
enrolment marks, budget charges, sealed reports and upload outcomes one transaction each
(`client_sdk.simulator.together`, a device's own writes a savepoint of it), the token pair
attached to its pending row as it arrives: 68 commits a chunk of 64 devices where there were
384; and the simulator in two processes here (``--workers 2``, `SIMULATOR_WORKERS`), their
devices/s over the span from the first start to the last end. Measured on the shared machine
(a full test suite running, load 5-6, no idle CPU left), 2,000 devices with tokens, each run in
a fresh `sagg up`, 8 runs of each alternated, medians [ranges]: main (one simulator process)
124 [100-128] devices/s, simulator 2.99 ms [2.64-3.42], token issuer 2.31, leader 1.02, helper
0.54: 6.82 ms a device in all; this round with one process 153 [123-222] devices/s, simulator
2.17 [1.99-2.60], token issuer 2.01, leader 0.87, helper 0.49: 5.54 ms (19% less CPU); with two
processes 175 [132-194] devices/s, simulator 2.42, token issuer 2.17, leader 0.95, helper 0.52:
6.06 ms (each process's first uses paid twice, and more processes contending on the loaded
machine). Not measured here: the quiet machine's figures (last 364-377 devices/s at 4.0-4.2
ms), so whether 500 devices/s is reached stays open; at 81% of the CPU the quiet machine's
4.1 ms would be 3.3 ms, 600 devices/s if both cores were kept busy.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Result, add_repeat_option, print_runs, print_table
from bench.deployment import tree_cpu_seconds
from client_sdk.device import DeviceConfig
from client_sdk.http import http_client, pooled_client
from client_sdk.policy import TrustedParties
from client_sdk.recipes import VerifiedRecipe
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import Simulator
from deploy.config import Deployment
from deploy.launcher import DEFAULT_PORTS, free_ports
from services.common.admin_client import PartyTokens
from services.common.provisioning import TaskParams, create_task
from shared.b64url import b64url_encode
from shared.dap.extensions import recipe_digest
from shared.dap.ids import TaskId
from shared.recipe.accounting import expected_vdaf
from shared.recipe.model import RecipeDraft, RecipeTask, TokenIssuerRef
from shared.recipe.signing import recipe_bytes
from shared.transport import TransportPolicy

REPO = Path(__file__).resolve().parents[1]
PRECISION = 3600
#: Token issuer processes: one a core.
ISSUER_WORKERS = 2
#: Simulator processes (`sagg devices run --workers`): one a core too. One process leaves the
#: machine idle while it works alone (making a chunk's devices, answering, sealing: the services
#: wait) and cannot use more than a core between its threads (the GIL).
SIMULATOR_WORKERS = 2
#: Devices of the case with tokens. A run of 2,000 lasted about 4 s, and each simulator process's
#: first uses (`scipy.special`'s import for the recipe check, numba's kernels: about 0.5 s of
#: CPU) and the last chunks' tail weighed on it: 455 devices/s (median of 3) against 562 at
#: 10,000 and 525 over a million, the same day. 10,000 measures the rate a population runs at.
DEVICES = 10_000
#: Seconds given the aggregators after a run before their CPU is read (they aggregate what
#: arrived meanwhile; what is left after this is not counted).
SETTLE_S = 2.0
#: The 1 vs 2 processes check's batch size: 150 reaches epsilon 4 (at delta 1e-6), not 1, so
#: a batch this small is a check only.
SPLIT_MIN_BATCH = 150
#: README's demo.buckets: 8 categories, one-hot randomized response at eps0 = 2.
DRAFT: dict[str, Any] = {
    "recipe_id": "bench.buckets",
    "version": 1,
    "analysis_id": "bench",
    "description": "which of 8 buckets a device is in",
    "query": {"stream": "demo", "fields": ["bucket"], "selection": {"kind": "latest"}},
    "encoding": {
        "features": [
            {"kind": "categories", "field": "bucket", "values": [f"b{i}" for i in range(8)]}
        ]
    },
    "randomizer": {"name": "one_hot", "eps0": 2.0, "symmetric": True},
    "sampling_rate": 1.0,
    "min_batch_size": 2203,
    "privacy": {"epsilon": 1.0, "delta": 1e-6, "analysis": "stronger_clones"},
    "task": {"query_type": "time_interval", "time_precision": PRECISION},
}


@dataclass(frozen=True, slots=True)
class Run:
    """One `sagg` process: its output, wall time and peak RSS (KiB); a simulator prints its
    own CPU (`simulated_cpu`)."""

    stdout: str
    seconds: float
    max_rss_kib: int

    @property
    def simulated_seconds(self) -> float:
        """The simulation's own time (`SimulationSummary.lines`: "12.3 s, ..."), without the
        interpreter's start."""
        for line in self.stdout.splitlines():
            head = line.split(" s, ", 1)[0]
            if head != line and head.replace(".", "", 1).isdigit():
                return float(head)
        raise ValueError(f"no duration in {self.stdout!r}")

    @property
    def simulated_cpu(self) -> float:
        """The simulation's own CPU seconds (`SimulationSummary.lines`: "..., CPU 12.34 s")."""
        for part in self.stdout.replace("\n", ",").split(","):
            words = part.split()
            if len(words) == 3 and words[0] == "CPU" and words[2] == "s":
                return float(words[1])
        raise ValueError(f"no CPU in {self.stdout!r}")

    def count(self, word: str) -> int:
        for part in self.stdout.replace(":", ",").split(","):
            words = part.split()
            if len(words) >= 2 and words[0] == word and words[1].isdigit():
                return int(words[1])
        raise ValueError(f"no {word!r} in {self.stdout!r}")


class Cluster:
    """`sagg up` in a temporary data dir on free ports, the token issuer in `ISSUER_WORKERS`
    processes."""

    def __init__(self, base: Path) -> None:
        self.data = base / "data"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
        self.env.update(
            PYTHONPATH=str(REPO),
            SAGG_DEPLOYMENT=str(self.data / "deployment.json"),
            SAGG_AGGREGATOR_MAX_REPORT_WAIT_S="1",
            SAGG_AGGREGATOR_DRIVER_POLL_S="0.2",
            SAGG_AGGREGATOR_COLLECTION_RETRY_S="1",
            SAGG_COLLECTOR_POLL_INTERVAL="0.5",
        )
        ports = [
            arg
            for name, port in zip(DEFAULT_PORTS, free_ports(len(DEFAULT_PORTS)), strict=True)
            for arg in (f"--{name}-port", str(port))
        ]
        ports += ["--token-issuer-workers", str(ISSUER_WORKERS)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "deploy.cli", "up", "--data-dir", str(self.data), *ports],
            env=self.env,
            cwd=base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            # `sagg up` writes pids.json after deployment.json: both are there once it is.
            while not (self.data / "pids.json").exists():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("sagg up did not start")
                time.sleep(0.2)
            self.deployment = Deployment.model_validate_json(
                (self.data / "deployment.json").read_text()
            )
            self.pids: dict[str, int] = json.loads((self.data / "pids.json").read_text())
        except BaseException:
            # Not left running behind a failed start.
            self.stop()
            raise

    def sagg(self, *argv: str) -> Run:
        """``sagg ARGV`` as its own process, measured."""
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "deploy.cli", *argv],
            env=self.env,
            cwd=self.data.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert child.stdout is not None
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise RuntimeError(f"sagg {' '.join(argv[:3])} failed: {out[-500:]}")
        return Run(out, time.perf_counter() - start, usage.ru_maxrss)

    def publish(self, base: Path, recipe_id: str, min_batch_size: int, epsilon: float) -> str:
        """Publish `DRAFT` as `recipe_id` with this B and claimed epsilon; its task id."""
        privacy = {**DRAFT["privacy"], "epsilon": epsilon}
        draft = {**DRAFT, "recipe_id": recipe_id, "min_batch_size": min_batch_size}
        draft["privacy"] = privacy
        path = base / f"{recipe_id}.json"
        path.write_text(json.dumps(draft))
        task_id: str = json.loads(self.sagg("recipe", "publish", str(path)).stdout)["task_id"]
        return task_id

    def collect(self, task_id: str, wait_s: int = 300) -> dict[str, Any]:
        start = int(time.time()) // PRECISION * PRECISION - PRECISION
        out = self.sagg(
            "collect", "--task", task_id, "--interval-start", str(start),
            "--interval-duration", str(2 * PRECISION), "--format", "json",
            "--wait", str(wait_s),
        ).stdout  # fmt: skip
        body: dict[str, Any] = json.loads(out)
        return body

    def cpu_seconds(self) -> dict[str, float]:
        """Each service's CPU seconds so far (with its worker processes)."""
        return {name: tree_cpu_seconds(pid) for name, pid in self.pids.items()}

    def peak_rss_kib(self) -> dict[str, int]:
        """Each service's peak RSS so far (VmHWM)."""
        out = {}
        for name, pid in self.pids.items():
            with open(f"/proc/{pid}/status") as f:
                out[name] = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        return out

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


@contextmanager
def cluster() -> Iterator[tuple[Cluster, Path]]:
    with tempfile.TemporaryDirectory(prefix="sagg-bench-population-") as tmp:
        up = Cluster(Path(tmp))
        try:
            yield up, Path(tmp)
        finally:
            up.stop()


def _tokenless(deployment: Deployment, count: int, seed: int) -> tuple[int, float, float, int]:
    """In a spawned process: a tokenless task bound to a recipe built here, and `count` seeded
    devices answering it; (uploaded, wall seconds, CPU seconds of the run, peak RSS KiB)."""
    assert deployment.leader and deployment.helper and deployment.collector
    issuer = deployment.token_issuer or "http://127.0.0.1:1"
    draft = RecipeDraft.model_validate({**DRAFT, "recipe_id": f"bench.tokenless{count}"})
    vdaf = expected_vdaf(draft.randomizer, draft.encoding)
    http = http_client(TransportPolicy(), timeout=30.0)
    configs = [
        b64url_encode(http.get(f"{url}/hpke_config").raise_for_status().content)
        for url in (deployment.leader, deployment.helper)
    ]
    task = RecipeTask(
        task_id=TaskId.random().to_b64url(),
        leader=deployment.leader,
        helper=deployment.helper,
        vdaf=vdaf,
        time_precision=PRECISION,
        leader_hpke_configs=configs[0],
        helper_hpke_configs=configs[1],
    )
    recipe = draft.complete(task, TokenIssuerRef(url=issuer))
    canonical = recipe_bytes(recipe)
    tokens = {name: deployment.admin_token(name) or "" for name in ("leader", "helper")}
    create_task(
        TaskParams(
            vdaf=vdaf,
            min_batch_size=draft.min_batch_size,
            time_precision=PRECISION,
            leader=deployment.leader,
            helper=deployment.helper,
            collector=deployment.collector,
        ),
        PartyTokens(tokens["leader"], tokens["helper"], deployment.admin_token("collector") or ""),
        task_id=task.task_id,
        recipe_digest=b64url_encode(recipe_digest(canonical)),
    )
    trusted = TrustedParties(
        leaders=(deployment.leader,), helpers=(deployment.helper,), token_issuers=(issuer,)
    )
    with pooled_client(TransportPolicy(), timeout=30.0, max_idle=32) as pooled:
        simulator = Simulator(
            DeviceConfig(use_tokens=False, donation=DonationSchedule(1, 0)),
            trusted=trusted,
            http=pooled,
            concurrency=32,
            seed=seed,
            progress=None,
        )
        verified = VerifiedRecipe(recipe, canonical, 0)
        simulator.run(recipe.recipe_id, 64, "emoji", verified=verified)  # warm-up, own task
        cpu = time.process_time()
        start = time.perf_counter()
        summary = simulator.run(recipe.recipe_id, count, "emoji", verified=verified)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    http.close()
    return summary.uploaded, wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _spawned_tokenless(deployment: Deployment, count: int) -> tuple[int, float, float, int]:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_tokenless, deployment, count, 1).result()


def run(
    devices: int = DEVICES, tokenless: Sequence[int] = (2000, 8000), split: int = 600
) -> list[Result]:
    results: list[Result] = []

    def row(case: str, metric: str, value: float, unit: str) -> None:
        results.append(Result("population", case, metric, value, unit))

    def services_cpu(case: str, before: dict[str, float], count: int) -> None:
        """Each service's CPU per device since `before` (the leader's and helper's include
        the aggregation they did meanwhile)."""
        time.sleep(SETTLE_S)
        after = up.cpu_seconds()
        for name in ("token-issuer", "leader", "helper"):
            row(case, f"{name} CPU/device", (after[name] - before[name]) / count * 1e3, "ms")

    with cluster() as (up, base):
        up.publish(base, "bench.buckets", 2203, 1.0)
        before = up.cpu_seconds()
        tokens = up.sagg(
            "devices", "run", "--recipe", "bench.buckets", "--count", str(devices),
            "--concurrency", "8", "--seed", "2", "--workers", str(SIMULATOR_WORKERS),
        )  # fmt: skip
        issued = 2 * tokens.count("uploaded")
        issuer_cpu = up.cpu_seconds()["token-issuer"] - before["token-issuer"]
        case = f"{devices} devices, tokens"
        row(case, "devices/s", devices / tokens.simulated_seconds, "devices/s")
        row(case, "simulator CPU/device", tokens.simulated_cpu / devices * 1e3, "ms")
        row(case, "issuer CPU/token", issuer_cpu / issued * 1e3, "ms")
        services_cpu(case, before, devices)
        row(case, "simulator peak RSS", tokens.max_rss_kib / 1024, "MiB")

        for count in tokenless:
            before = up.cpu_seconds()
            uploaded, wall, cpu, rss = _spawned_tokenless(up.deployment, count)
            if uploaded != count:
                raise RuntimeError(f"tokenless run uploaded {uploaded} of {count}")
            case = f"{count} devices, no tokens"
            row(case, "devices/s", count / wall, "devices/s")
            row(case, "simulator CPU/device", cpu / count * 1e3, "ms")
            services_cpu(case, before, count)
            row(case, "simulator peak RSS", rss / 1024, "MiB")

        one = up.publish(base, "bench.one", SPLIT_MIN_BATCH, 4.0)
        two = up.publish(base, "bench.two", SPLIT_MIN_BATCH, 4.0)
        common = ["--count", str(split), "--seed", "7", "--data", "emoji", "--concurrency", "32"]
        sent = [base / "one.sent.json", base / "two.sent.json"]
        up.sagg("devices", "run", "--recipe", "bench.one", *common, "--summary-json", str(sent[0]))
        up.sagg(
            "devices", "run", "--recipe", "bench.two", *common, "--workers", "2",
            "--summary-json", str(sent[1]),
        )  # fmt: skip
        first, second = up.collect(one), up.collect(two)
        same = first["result"] == second["result"] and first["report_count"] == split
        case = f"{split} devices, 1 vs 2 processes"
        row(case, "same aggregate", float(same), "bool")
        exact = _exact(first, sent[0], one) and _exact(second, sent[1], two)
        row(case, "aggregates exact (what was sent)", float(exact), "bool")
        if not (same and exact):
            raise RuntimeError(f"1 and 2 processes disagree or are not exact: {first} {second}")
        for name, kib in up.peak_rss_kib().items():
            row("services", f"{name} peak RSS", kib / 1024, "MiB")
    return results


def _exact(collected: dict[str, Any], summary: Path, task_id: str) -> bool:
    """Whether a collection is exactly what a simulator's `--summary-json` says its devices
    sent to the task (`SimulationSummary.sent`), report count and aggregate."""
    sent = json.loads(summary.read_text())["sent"][task_id]
    return bool(
        collected["report_count"] == sent["reports"] and collected["result"] == sent["aggregate"]
    )


def full(devices: int) -> list[Result]:
    """The issue's population run: `devices` devices with tokens (``--workers 2``) through
    upload, aggregation and collection in one fresh `sagg up`; the collected aggregate set
    against what the devices sent, the time from the first device to the collected result,
    and each process's peak RSS (the simulator's against a 2,000-device run's: flat memory)."""
    results: list[Result] = []

    def row(metric: str, value: float, unit: str) -> None:
        results.append(
            Result("population", f"{devices} devices, tokens, collected", metric, value, unit)
        )

    with cluster() as (up, base):
        up.publish(base, "bench.small", 2203, 1.0)
        task = up.publish(base, "bench.full", 2203, 1.0)
        small = up.sagg(
            "devices", "run", "--recipe", "bench.small", "--count", "2000", "--seed", "4",
            "--concurrency", "8", "--workers", str(SIMULATOR_WORKERS),
        )  # fmt: skip
        summary = base / "full.sent.json"
        before = up.cpu_seconds()
        start = time.perf_counter()
        run = up.sagg(
            "devices", "run", "--recipe", "bench.full", "--count", str(devices), "--seed", "3",
            "--concurrency", "8", "--workers", str(SIMULATOR_WORKERS),
            "--summary-json", str(summary),
        )  # fmt: skip
        collected = up.collect(task, wait_s=3600)
        seconds = time.perf_counter() - start
        after = up.cpu_seconds()
        exact = _exact(collected, summary, task)
        row("devices/s (simulation)", devices / run.simulated_seconds, "devices/s")
        row("first device to collected", seconds / 60, "min")
        row("aggregate exact (what was sent)", float(exact), "bool")
        row("simulator peak RSS", run.max_rss_kib / 1024, "MiB")
        row("simulator peak RSS, 2,000 devices", small.max_rss_kib / 1024, "MiB")
        for name in ("token-issuer", "leader", "helper"):
            row(f"{name} CPU/device", (after[name] - before[name]) / devices * 1e3, "ms")
        for name, kib in up.peak_rss_kib().items():
            row(f"{name} peak RSS", kib / 1024, "MiB")
        if not exact:
            raise RuntimeError(f"the collection is not what the devices sent: {collected}")
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=DEVICES, help="devices with tokens")
    parser.add_argument("--tokenless", default="2000,8000", help="population sizes, no tokens")
    parser.add_argument("--split", type=int, default=600, help="devices of the 1 vs 2 check")
    parser.add_argument(
        "--full",
        type=int,
        default=0,
        metavar="N",
        help="instead: N devices with tokens through collection, the aggregate checked",
    )
    add_repeat_option(parser, "the cases, each time in a fresh sagg up")
    args = parser.parse_args(argv)
    if args.full:
        print_table(full(args.full), "A device population through collection, against sagg up")
        return
    if args.split < SPLIT_MIN_BATCH:
        parser.error(f"--split: the 1 vs 2 check collects a batch of at least {SPLIT_MIN_BATCH}")
    sizes = [int(n) for n in args.tokenless.split(",") if n]
    runs = [run(args.devices, sizes, args.split) for _ in range(args.repeat)]
    print_runs(runs, "Device populations against sagg up")


if __name__ == "__main__":
    main()
