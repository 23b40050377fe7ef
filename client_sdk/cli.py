"""`sagg devices run`: drive N simulated devices against a deployment (`client_sdk.simulator`).

::

    sagg devices run --recipe emoji.daily --count 5000 --data emoji --concurrency 32 \\
        --recipe-server http://127.0.0.1:8086 [--recipe-key B64URL] \\
        (--policy policy.toml | --leader URL --helper URL --token-issuer URL) \\
        [--manufacturer-ca ca.pem --manufacturer-key ca-key.pem | --no-tokens] \\
        [--store-dir DIR] [--slots 12 --slot-seconds 300 --time-scale 1000] [--seed 0] \\
        [--ca-file ca.pem] [--allow-insecure-http]

Wiring: `add_devices_parser(subparsers)` adds ``devices`` with its ``run`` subcommand to an
argparse parser; `main(argv)` runs it standalone (``python -m client_sdk.cli devices run ...``).
The recipe server's key is fetched from ``GET /keys`` when not given (trust on first use: a
real device pins it). The devices answer only recipes naming a leader, helper and token issuer
their policy trusts: `--policy`'s, or the `--leader`/`--helper`/`--token-issuer` given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from pydantic import ValidationError

from client_sdk.datagen import GENERATORS
from client_sdk.device import DeviceConfig
from client_sdk.http import http_client
from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from client_sdk.policy import TrustedParties, load_policy
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import Simulator
from client_sdk.tokens import DeviceIdentity
from shared.b64url import b64url_decode
from shared.transport import TransportPolicy

__all__ = ["add_devices_parser", "main", "manufactured_identities", "run_devices"]


def add_devices_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    devices = subparsers.add_parser("devices", help="simulated devices (client SDK)")
    sub = devices.add_subparsers(dest="devices_command", required=True)
    run = sub.add_parser("run", help="drive N devices answering one recipe")
    run.add_argument("--recipe", required=True, help="recipe id")
    run.add_argument("--version", type=int, default=None)
    run.add_argument("--count", type=int, default=1000)
    run.add_argument("--data", choices=GENERATORS, default="emoji")
    run.add_argument("--concurrency", type=int, default=16)
    run.add_argument("--recipe-server", default="http://127.0.0.1:8086")
    run.add_argument("--recipe-key", default=None, help="base64url Ed25519 key (default: /keys)")
    run.add_argument("--policy", type=Path, default=None, help="device policy (JSON or TOML)")
    # Without --policy, a permissive policy through these parties only (the device trusts
    # no leader, helper or token issuer a recipe merely names).
    run.add_argument("--leader", action="append", help="trusted leader URL")
    run.add_argument("--helper", action="append", help="trusted helper URL")
    run.add_argument("--token-issuer", action="append", help="trusted token issuer URL")
    run.add_argument("--attester", default=None, help="attester URL (default: the issuer)")
    run.add_argument("--manufacturer-ca", type=Path, default=None, help="CA certificate PEM")
    run.add_argument("--manufacturer-key", type=Path, default=None, help="CA private key PEM")
    run.add_argument("--no-tokens", action="store_true")
    run.add_argument("--no-binding", action="store_true")
    run.add_argument("--store-dir", type=Path, default=None, help="one store per device here")
    run.add_argument("--slots", type=int, default=1)
    run.add_argument("--slot-seconds", type=int, default=0)
    run.add_argument("--time-scale", type=float, default=float("inf"))
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--ca-file", default=None, help="PEM CAs to verify HTTPS with (default: the system's)"
    )
    run.add_argument(
        "--allow-insecure-http",
        action="store_true",
        help="also use plain http:// URLs of hosts other than loopback",
    )
    run.set_defaults(func=run_devices)


def _recipe_key(args: argparse.Namespace, http: httpx.Client) -> bytes:
    if args.recipe_key:
        return b64url_decode(args.recipe_key, "recipe key")
    response = http.get(args.recipe_server.rstrip("/") + "/keys")
    response.raise_for_status()
    return b64url_decode(response.json()["keys"][0]["public_key"], "recipe key")


def manufactured_identities(ca_cert: Path, ca_key: Path) -> Callable[[], DeviceIdentity]:
    """A factory of fresh device identities certified by the manufacturer CA (PEM files)."""
    cert = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    key = serialization.load_pem_private_key(ca_key.read_bytes(), None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SystemExit("the manufacturer key must be Ed25519")
    ca = ManufacturerCA("manufacturer", key, cert)

    def make() -> DeviceIdentity:
        return SimulatedDevice.manufacture(ca)

    return make


def _identities(args: argparse.Namespace) -> tuple[bool, Callable[[], DeviceIdentity] | None]:
    if args.no_tokens or args.manufacturer_ca is None or args.manufacturer_key is None:
        return False, None
    return True, manufactured_identities(args.manufacturer_ca, args.manufacturer_key)


def _trusted(args: argparse.Namespace) -> TrustedParties | None:
    if args.policy:
        return None
    if not (args.leader and args.helper and args.token_issuer):
        raise SystemExit(
            "without --policy, name the trusted parties: --leader, --helper and --token-issuer"
        )
    try:
        return TrustedParties(
            leaders=args.leader, helpers=args.helper, token_issuers=args.token_issuer
        )
    except ValidationError:
        raise SystemExit("--leader, --helper and --token-issuer take http(s) URLs") from None


def run_devices(args: argparse.Namespace) -> int:
    trusted = _trusted(args)
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    transport = TransportPolicy(args.ca_file, args.allow_insecure_http)
    with http_client(transport, timeout=30.0, limits=limits) as http:
        tokens, identities = _identities(args)
        config = DeviceConfig(
            recipe_server_url=args.recipe_server,
            recipe_server_key=_recipe_key(args, http),
            attester_url=args.attester,
            use_tokens=tokens,
            bind_recipe=not args.no_binding,
            donation=DonationSchedule(args.slots, args.slot_seconds),
            transport=transport,
        )
        simulator = Simulator(
            config,
            policy=load_policy(args.policy) if args.policy else None,
            trusted=trusted,
            http=http,
            identities=identities,
            directory=args.store_dir,
            concurrency=args.concurrency,
            seed=args.seed,
            time_scale=args.time_scale,
        )
        summary = simulator.run(args.recipe, args.count, args.data, version=args.version)
    for line in summary.lines():
        print(line)
    return 0 if summary.uploaded or not summary.sampled else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sagg")
    add_devices_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
