"""HPKE seal/open cost: `shared.hpke` against pyhpke, in µs per call.

Run: `python -m bench.hpke [--payload BYTES] [--calls N] [--repeats R]` for a table with the
pyhpke/sagg ratio; `run()` feeds the same figures to the project summary (`python -m bench`).
Each figure is the median over R runs of N calls. The inputs mirror a DAP-09 upload: the
input-share info string for the Leader and a plaintext the size of a small input share.
The X25519 exchange row is the floor under any open (one exchange per message).
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from pyhpke import AEADId, CipherSuite, KDFId, KEMId

from bench.common import Result
from shared import hpke
from shared.dap.hpke_context import HPKE_INFO_INPUT_SHARE
from shared.dap.messages import ROLE_CLIENT, ROLE_LEADER


def _median_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    fn()  # warm the caches that a long-running aggregator would already have warm
    runs = timeit.repeat(fn, number=calls, repeat=repeats)
    return statistics.median(runs) / calls * 1e6


Row = tuple[str, float, float | None]

DEFAULT_PAYLOAD = 1024
DEFAULT_CALLS = 2000
DEFAULT_REPEATS = 7


def measure(payload: int, calls: int, repeats: int) -> list[Row]:
    """Rows of (operation, sagg µs, pyhpke µs or None when pyhpke has no counterpart)."""
    info = HPKE_INFO_INPUT_SHARE + bytes([ROLE_CLIENT, ROLE_LEADER])
    aad = os.urandom(64)
    plaintext = os.urandom(payload)

    keypair = hpke.generate_keypair(7)
    enc, ciphertext = hpke.seal(keypair.public_key, info, aad, plaintext)

    suite = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)
    py_pk = suite.kem.deserialize_public_key(keypair.public_key)
    py_sk = suite.kem.deserialize_private_key(keypair.private_key_bytes())

    def ours_seal() -> object:
        return hpke.seal(keypair.public_key, info, aad, plaintext)

    def ours_open() -> object:
        return hpke.open(keypair, enc, info, aad, ciphertext)

    def py_seal() -> object:
        py_enc, ctx = suite.create_sender_context(py_pk, info=info)
        return py_enc, ctx.seal(plaintext, aad=aad)

    def py_open() -> object:
        return suite.create_recipient_context(enc, py_sk, info=info).open(ciphertext, aad=aad)

    if py_open() != plaintext or ours_open() != plaintext:
        raise SystemExit("benchmark inputs do not round-trip")

    sk = X25519PrivateKey.generate()
    pk = X25519PrivateKey.generate().public_key()

    return [
        ("open", _median_us(ours_open, calls, repeats), _median_us(py_open, calls, repeats)),
        ("seal", _median_us(ours_seal, calls, repeats), _median_us(py_seal, calls, repeats)),
        ("X25519 exchange (floor)", _median_us(lambda: sk.exchange(pk), calls, repeats), None),
    ]


def run() -> list[Result]:
    """The default measurement as rows of the project-wide summary table."""
    results: list[Result] = []
    for name, ours, theirs in measure(DEFAULT_PAYLOAD, DEFAULT_CALLS, DEFAULT_REPEATS):
        if theirs is None:
            results.append(Result("hpke", name, "cryptography", ours, "µs/op"))
            continue
        case = f"{name}, {DEFAULT_PAYLOAD} B"
        results.append(Result("hpke", case, "sagg", ours, "µs/op"))
        results.append(Result("hpke", case, "pyhpke", theirs, "µs/op"))
        results.append(Result("hpke", case, "pyhpke/sagg", theirs / ours, "x"))
    return results


def format_table(rows: Sequence[Row]) -> str:
    lines = [
        f"{'operation':<24} {'sagg µs':>9} {'pyhpke µs':>10} {'pyhpke/sagg':>12}",
        "-" * 58,
    ]
    for name, ours, theirs in rows:
        theirs_cell = f"{theirs:10.1f}" if theirs is not None else f"{'':>10}"
        ratio_cell = f"{theirs / ours:11.2f}x" if theirs is not None else ""
        lines.append(f"{name:<24} {ours:9.1f} {theirs_cell} {ratio_cell}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--payload", type=int, default=DEFAULT_PAYLOAD, help="plaintext bytes")
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="calls per timing run")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="runs per figure")
    args = parser.parse_args(argv)
    print(
        f"HPKE X25519/HKDF-SHA256/AES-128-GCM, {args.payload} B plaintext, "
        f"median of {args.repeats} x {args.calls} calls"
    )
    print(format_table(measure(args.payload, args.calls, args.repeats)))


if __name__ == "__main__":
    main()
