"""HPKE seal/open cost: `shared.hpke` against pyhpke, in µs per call.

Run: `python -m bench.hpke [--payload BYTES] [--calls N] [--repeats R]` for a table with the
pyhpke/sagg ratio; `run()` feeds the same figures to the project summary (`python -m bench`).
Each figure is the median over R runs of N calls. The inputs mirror a DAP-09 upload: the
input-share info string for the Leader and a plaintext the size of a small input share.
The X25519 exchange row is the floor under any open (one exchange per message).

A second table times the AEAD step of `hpke.open_batch` on leader-sized messages (a DAP-19
Histogram(100) leader share, 2.3 KB): `shared.aes_gcm.decrypt_batch` against `AESGCM` one
message at a time, in CPU seconds of the calling thread, alone and beside a thread that never
waits (as a serving leader's other threads often don't): `AESGCM` hands that thread the GIL
for every message of 2 KiB or more, and getting it back is what costs (`shared.aes_gcm`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import timeit
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pyhpke import AEADId, CipherSuite, KDFId, KEMId

from bench.common import Result
from shared import aes_gcm, hpke
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


#: Bytes of a DAP-19 Histogram(100) leader input share (`bench.deployment`'s DAP-19 case).
LEADER_SHARE_PAYLOAD = 2300
AEAD_BATCH = 100
AEAD_ROUNDS = 20


def _thread_us(fn: Callable[[], object], rounds: int, per_round: int) -> float:
    """CPU µs of this thread per item, median of `rounds` calls of `fn`."""
    fn()
    runs = []
    for _ in range(rounds):
        start = time.thread_time()
        fn()
        runs.append(time.thread_time() - start)
    return statistics.median(runs) / per_round * 1e6


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        pass


def measure_aead(payload: int, batch: int, rounds: int) -> list[tuple[str, float, float]]:
    """Rows of (condition, `decrypt_batch` µs a message, `AESGCM` µs a message)."""
    messages = []
    for _ in range(batch):
        key, nonce, aad = os.urandom(aes_gcm.KEY_SIZE), os.urandom(aes_gcm.NONCE_SIZE), b"a" * 64
        messages.append((key, nonce, aad, AESGCM(key).encrypt(nonce, os.urandom(payload), aad)))
    expected = [AESGCM(k).decrypt(n, c, a) for k, n, a, c in messages]
    if aes_gcm.decrypt_batch(messages) != expected:
        raise SystemExit("decrypt_batch disagrees with AESGCM")

    def batched() -> object:
        return aes_gcm.decrypt_batch(messages)

    def one_by_one() -> object:
        return [AESGCM(k).decrypt(n, c, a) for k, n, a, c in messages]

    def both() -> tuple[float, float]:
        return _thread_us(batched, rounds, batch), _thread_us(one_by_one, rounds, batch)

    rows = [("alone", *both())]
    stop = threading.Event()
    busy = threading.Thread(target=_spin, args=(stop,), daemon=True)
    busy.start()
    try:
        rows.append(("beside a busy thread", *both()))
    finally:
        stop.set()
        busy.join()
    return rows


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
    for condition, batched, single in measure_aead(LEADER_SHARE_PAYLOAD, AEAD_BATCH, AEAD_ROUNDS):
        case = f"AES-GCM open, {LEADER_SHARE_PAYLOAD} B, {condition}"
        results.append(Result("hpke", case, "decrypt_batch", batched, "µs/op"))
        results.append(Result("hpke", case, "AESGCM", single, "µs/op"))
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
    print(
        f"\nAES-128-GCM open of {AEAD_BATCH} messages of {LEADER_SHARE_PAYLOAD} B, CPU of the"
        f" calling thread, median of {AEAD_ROUNDS}"
    )
    print(f"{'condition':<22} {'decrypt_batch µs':>17} {'AESGCM µs':>10} {'ratio':>7}")
    for condition, batched, single in measure_aead(LEADER_SHARE_PAYLOAD, AEAD_BATCH, AEAD_ROUNDS):
        print(f"{condition:<22} {batched:17.1f} {single:10.1f} {single / batched:6.1f}x")


if __name__ == "__main__":
    main()
