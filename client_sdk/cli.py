"""`sagg devices run`: drive N simulated devices against a deployment (`client_sdk.simulator`).

::

    sagg devices run --recipe emoji.daily --count 5000 --data emoji --concurrency 32 \\
        --recipe-server http://127.0.0.1:8086 [--recipe-key B64URL] \\
        (--policy policy.toml | --leader URL --helper URL --token-issuer URL) \\
        [--manufacturer-ca ca.pem --manufacturer-key ca-key.pem | --no-tokens] \\
        [--store-dir DIR] [--slots 12 --slot-seconds 300 --time-scale 1000] [--seed 0] \\
        [--workers N] [--shard i/k] [--ca-file ca.pem] [--allow-insecure-http] \\
        [--offline 0.1] [--clock-skew 30] [--window 3600 --arrivals diurnal] \\
        [--malicious 0.01] [--sybils 500 --sybil-answer 3]

The population is seeded (`client_sdk.population`): ``--shard i/k`` simulates share i of k of
it (k machines, one deployment, the same totals as one), and ``--workers N`` deals this
machine's share over N processes, each with its own store (`--store-dir`, or a temporary one).
The population's realism and adversaries (`client_sdk.population.PopulationMix`): offline
devices, clock skew, answer times over a window, malicious devices replaying their tokens, and
a Sybil surge; dummy reports (001 §4.6) are the recipe's (its `dummy_rate` q'), which devices
follow and the accounting and the collector count with.

Wiring: `devices_app(defaults)` is the ``devices`` command group (Typer); `defaults` fills what
the flags left unset (`deploy.cli` takes it from the deployment file); `main(argv)` runs it
standalone (``python -m client_sdk.cli devices run ...``). The recipe server's key is fetched
from ``GET /keys`` when not given (trust on first use: a real device pins it). The devices
answer only recipes naming a leader, helper and token issuer their policy trusts:
`--policy`'s, or the `--leader`/`--helper`/`--token-issuer` given.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from pydantic import ValidationError

from client_sdk.datagen import GENERATORS
from client_sdk.device import DeviceConfig
from client_sdk.errors import ClientError
from client_sdk.http import HttpClient, pooled_client
from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from client_sdk.policy import TrustedParties, load_policy
from client_sdk.population import PopulationMix, Shard
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import SimulationSummary, Simulator
from client_sdk.tokens import DeviceIdentity
from shared.b64url import b64url_decode
from shared.transport import TransportPolicy

__all__ = [
    "DEFAULT_RECIPE_SERVER",
    "AllowInsecureHttp",
    "DevicesError",
    "DevicesRun",
    "devices_app",
    "main",
    "manufactured_identities",
    "run_devices",
    "run_shard",
]

#: Where devices fetch recipes unless told (`sagg up`'s recipe server).
DEFAULT_RECIPE_SERVER = "http://127.0.0.1:8086"


class DevicesError(ClientError):
    """The simulation cannot start as configured; the message says why."""


@dataclass
class DevicesRun:
    """What `sagg devices run` was told (None: not told, a default or the deployment's)."""

    recipe: str
    count: int = 1000
    data: str = "emoji"
    version: int | None = None
    concurrency: int = 16
    recipe_server: str | None = None
    recipe_key: str | None = None
    policy: Path | None = None
    leader: list[str] = field(default_factory=list)
    helper: list[str] = field(default_factory=list)
    token_issuer: list[str] = field(default_factory=list)
    attester: str | None = None
    manufacturer_ca: Path | None = None
    manufacturer_key: Path | None = None
    no_tokens: bool = False
    no_binding: bool = False
    store_dir: Path | None = None
    slots: int = 1
    slot_seconds: int = 0
    time_scale: float = float("inf")
    seed: int = 0
    workers: int = 1
    shard: Shard = field(default_factory=Shard)
    mix: PopulationMix = field(default_factory=PopulationMix)
    ca_file: str | None = None
    allow_insecure_http: bool = False
    relay: bool = False
    summary_json: Path | None = None


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _arrivals(name: str) -> str:
    if name not in ("uniform", "diurnal"):
        raise typer.BadParameter(f"{name!r} is not uniform or diurnal")
    return name


def _fraction(help: str) -> typer.models.OptionInfo:
    """A `typer.Option` taking a number in [0, 1]."""
    return typer.Option(min=0.0, max=1.0, help=help)  # type: ignore[no-any-return]


def _generator(name: str) -> str:
    if name not in GENERATORS:
        raise typer.BadParameter(f"{name!r} is not one of {', '.join(GENERATORS)}")
    return name


#: `--allow-insecure-http`, here and as `sagg`'s global option.
AllowInsecureHttp = Annotated[
    bool,
    typer.Option(
        "--allow-insecure-http", help="also use plain http:// URLs of hosts other than loopback"
    ),
]
Trusted = Annotated[list[str] | None, typer.Option(metavar="URL")]


def devices_app(defaults: Callable[[DevicesRun], None] | None = None) -> typer.Typer:
    """The ``devices`` command group; `defaults` completes the options before the run."""
    app = typer.Typer(help="simulated devices (client SDK)")

    @app.command()
    def run(
        recipe: Annotated[str, typer.Option(help="recipe id")],
        version: Annotated[int | None, typer.Option(min=1)] = None,
        count: Annotated[int, typer.Option(min=1)] = 1000,
        data: Annotated[
            str, typer.Option(parser=_generator, help=f"one of {', '.join(GENERATORS)}")
        ] = "emoji",
        concurrency: Annotated[int, typer.Option(min=1)] = 16,
        recipe_server: Annotated[
            str | None, typer.Option(metavar="URL", help=f"default {DEFAULT_RECIPE_SERVER}")
        ] = None,
        recipe_key: Annotated[
            str | None, typer.Option(help="base64url Ed25519 key (default: GET /keys)")
        ] = None,
        policy: Annotated[Path | None, typer.Option(help="device policy (JSON or TOML)")] = None,
        # Without --policy, a permissive policy through these parties only (the device trusts
        # no leader, helper or token issuer a recipe merely names).
        leader: Trusted = None,
        helper: Trusted = None,
        token_issuer: Trusted = None,
        attester: Annotated[
            str | None, typer.Option(metavar="URL", help="attester (default: the issuer)")
        ] = None,
        manufacturer_ca: Annotated[Path | None, typer.Option(help="CA certificate PEM")] = None,
        manufacturer_key: Annotated[Path | None, typer.Option(help="CA private key PEM")] = None,
        no_tokens: Annotated[bool, typer.Option("--no-tokens")] = False,
        no_binding: Annotated[bool, typer.Option("--no-binding")] = False,
        store_dir: Annotated[Path | None, typer.Option(help="one store per device here")] = None,
        slots: Annotated[int, typer.Option(min=1)] = 1,
        slot_seconds: Annotated[int, typer.Option(min=0)] = 0,
        time_scale: Annotated[float, typer.Option()] = float("inf"),
        seed: Annotated[int, typer.Option(help="the population's seed")] = 0,
        workers: Annotated[int, typer.Option(min=1, help="simulator processes")] = 1,
        shard: Annotated[
            Shard | None,
            typer.Option(parser=_shard, metavar="I/K", help="simulate share I of K"),
        ] = None,
        ca_file: Annotated[
            str | None, typer.Option(help="PEM CAs to verify HTTPS with (default: the system's)")
        ] = None,
        allow_insecure_http: AllowInsecureHttp = False,
        offline: Annotated[float, _fraction(help="fraction of devices offline")] = 0.0,
        clock_skew: Annotated[
            float, typer.Option(min=0, help="std dev of device clock error, s")
        ] = 0.0,
        window: Annotated[int, typer.Option(min=0, help="answer times over the last S s")] = 0,
        arrivals: Annotated[
            str, typer.Option(parser=_arrivals, help="uniform or diurnal")
        ] = "uniform",
        malicious: Annotated[
            float, _fraction(help="fraction replaying their tokens in a second report")
        ] = 0.0,
        sybils: Annotated[int, typer.Option(min=0, help="extra devices answering together")] = 0,
        sybil_answer: Annotated[int, typer.Option(min=0, help="the Sybils' answer (index)")] = 0,
        relay: Annotated[
            bool,
            typer.Option(
                "--relay",
                help="send a chunk's DAP-19 reports in one UploadRequest, as an upload relay would",
            ),
        ] = False,
        summary_json: Annotated[
            Path | None,
            typer.Option(
                metavar="FILE",
                help="also write the summary as JSON here (with each task's sent aggregate)",
            ),
        ] = None,
    ) -> int:
        """Drive N devices answering one recipe."""
        options = DevicesRun(
            recipe=recipe,
            version=version,
            count=count,
            data=data,
            concurrency=concurrency,
            recipe_server=recipe_server,
            recipe_key=recipe_key,
            policy=policy,
            leader=leader or [],
            helper=helper or [],
            token_issuer=token_issuer or [],
            attester=attester,
            manufacturer_ca=manufacturer_ca,
            manufacturer_key=manufacturer_key,
            no_tokens=no_tokens,
            no_binding=no_binding,
            store_dir=store_dir,
            slots=slots,
            slot_seconds=slot_seconds,
            time_scale=time_scale,
            seed=seed,
            workers=workers,
            shard=shard or Shard(),
            mix=PopulationMix(
                offline=offline,
                clock_skew=clock_skew,
                window=window,
                arrivals="diurnal" if arrivals == "diurnal" else "uniform",
                malicious=malicious,
                sybils=sybils,
                sybil_answer=sybil_answer,
            ),
            ca_file=ca_file,
            allow_insecure_http=allow_insecure_http,
            relay=relay,
            summary_json=summary_json,
        )
        if defaults is not None:
            defaults(options)
        return run_devices(options)

    return app


def _recipe_key(options: DevicesRun, server: str, http: HttpClient) -> bytes:
    if options.recipe_key:
        return b64url_decode(options.recipe_key, "recipe key")
    response = http.get(server.rstrip("/") + "/keys")
    if response.status_code != 200:
        raise DevicesError(f"the recipe server answered {response.status_code} for its keys")
    return b64url_decode(response.json()["keys"][0]["public_key"], "recipe key")


def manufactured_identities(ca_cert: Path, ca_key: Path) -> Callable[[], DeviceIdentity]:
    """A factory of fresh device identities certified by the manufacturer CA (PEM files)."""
    cert = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    key = serialization.load_pem_private_key(ca_key.read_bytes(), None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise DevicesError("the manufacturer key must be Ed25519")
    ca = ManufacturerCA("manufacturer", key, cert)

    def make() -> DeviceIdentity:
        return SimulatedDevice.manufacture(ca)

    return make


def _identities(options: DevicesRun) -> tuple[bool, Callable[[], DeviceIdentity] | None]:
    if options.no_tokens or options.manufacturer_ca is None or options.manufacturer_key is None:
        return False, None
    return True, manufactured_identities(options.manufacturer_ca, options.manufacturer_key)


def _trusted(options: DevicesRun) -> TrustedParties | None:
    if options.policy:
        return None
    if not (options.leader and options.helper and options.token_issuer):
        raise DevicesError(
            "without --policy, name the trusted parties: --leader, --helper and --token-issuer"
        )
    try:
        return TrustedParties(
            leaders=tuple(options.leader),
            helpers=tuple(options.helper),
            token_issuers=tuple(options.token_issuer),
        )
    except ValidationError:
        raise DevicesError("--leader, --helper and --token-issuer take http(s) URLs") from None


def run_devices(options: DevicesRun) -> int:
    """Run the simulation (this machine's shard, over `options.workers` processes); prints its
    summary. Exit status 1 if devices were sampled but none uploaded."""
    _trusted(options)  # refuse a bad configuration before starting any process
    if options.summary_json is not None and not options.summary_json.parent.is_dir():
        # Before the run, not after it: the summary would be lost with a long simulation.
        raise DevicesError(f"--summary-json: no directory {options.summary_json.parent}")
    if options.workers == 1:
        summary = run_shard(options, options.shard)
    else:
        shards = options.shard.split(options.workers)
        # Spawned, not forked: the parent may hold threads and open connections.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(options.workers, mp_context=context) as pool:
            parts = list(pool.map(run_shard, [options] * len(shards), shards))
        summary = SimulationSummary()
        for part in parts:
            summary.merge(part)
    for line in summary.lines():
        print(line)
    if options.summary_json is not None:
        options.summary_json.write_text(json.dumps(summary.as_json()) + "\n")
    return 0 if summary.uploaded or not summary.sampled else 1


def run_shard(options: DevicesRun, shard: Shard) -> SimulationSummary:
    """Share `shard` of the population, in this process (its own connections and store)."""
    trusted = _trusted(options)
    server = options.recipe_server or DEFAULT_RECIPE_SERVER
    transport = TransportPolicy(options.ca_file, options.allow_insecure_http)
    with pooled_client(transport, timeout=30.0, max_idle=options.concurrency) as http:
        tokens, identities = _identities(options)
        config = DeviceConfig(
            recipe_server_url=server,
            recipe_server_key=_recipe_key(options, server, http),
            attester_url=options.attester,
            use_tokens=tokens,
            bind_recipe=not options.no_binding,
            donation=DonationSchedule(options.slots, options.slot_seconds),
            transport=transport,
        )
        # One progress display: the first worker's (the others' shares move alike).
        first = shard.index < options.shard.count
        simulator = Simulator(
            config,
            policy=load_policy(options.policy) if options.policy else None,
            trusted=trusted,
            http=http,
            identities=identities,
            directory=options.store_dir,
            concurrency=options.concurrency,
            seed=options.seed,
            time_scale=options.time_scale,
            progress=sys.stderr if first else None,
            mix=options.mix,
            relay=options.relay,
        )
        return simulator.run(
            options.recipe, options.count, options.data, version=options.version, shard=shard
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m client_sdk.cli devices run ...``: the same command without a deployment."""
    app = typer.Typer()
    app.add_typer(devices_app(), name="devices")
    try:
        code = typer.main.get_command(app).main(
            args=list(sys.argv[1:] if argv is None else argv),
            prog_name="sagg",
            standalone_mode=False,
        )
    except typer.TyperException as exc:
        print(f"sagg: error: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    except ClientError as exc:
        print(f"sagg: {exc}", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
