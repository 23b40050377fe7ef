"""Privacy Pass token type 2 costs: issuance (blind-sign) throughput and verification latency.

Run: `python -m bench.privacypass [--calls N] [--repeats R]`; `run()` feeds the same figures to
the project summary (`python -m bench`). Each figure is the fastest of R runs of N calls, on
one 2048-bit issuer key, single-threaded.

- issuance: `issue` on an encoded TokenRequest (decode, key-id check, blind-sign by OpenSSL's
  RSA private operation, the ``s^e == m`` fault check), in tokens/s. Beside it the fallback
  without OpenSSL's raw operation, CRT over ``gmpy2.powmod_sec``, and the same CRT with the
  variable-time ``gmpy2.powmod``, which shows what constant time costs there.
- verification: `verify_token` on an encoded Token (decode, digest and key-id checks,
  RSASSA-PSS-VERIFY), in µs per token; beside it, `cryptography`'s RSA-PSS verify alone.
- client: building a TokenRequest and finalizing the Token, in µs per token.
- per report: a report carries one token per aggregator (`shared.dap.extensions.TOKEN_ROLES`,
  two), each from its own issuance, so the issuer signs twice and the device builds and
  finalizes twice per report (before per-role tokens: once); each aggregator still verifies
  one token per report.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Any

import gmpy2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from bench.common import Result, print_table
from shared.dap.extensions import TOKEN_ROLES
from shared.privacypass import rsabssa
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.issuance import IssuerKey, issue
from shared.privacypass.messages import TokenChallenge
from shared.privacypass.verify import verify_token

DEFAULT_CALLS = 200
DEFAULT_REPEATS = 5
BENCH = "privacypass"


def _best_s(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Seconds per call: the fastest of `repeats` runs of `calls` calls, the run least
    disturbed by other load on the machine (as `bench.common.best_of`)."""
    fn()
    return min(timeit.repeat(fn, number=calls, repeat=repeats)) / calls


def measure(calls: int = DEFAULT_CALLS, repeats: int = DEFAULT_REPEATS) -> list[Result]:
    key = IssuerKey.generate()
    challenge = TokenChallenge(2, b"issuer.sagg", bytes(32), b"leader.sagg,helper.sagg")
    digest = challenge.digest()
    request, state = create_token_request(challenge, key.token_key)
    request_bytes = request.encode()
    token = finalize_token(state, issue(key, request_bytes)).encode()
    keys = [key.token_key]

    sk = key.private_key
    m = gmpy2.mpz(int.from_bytes(request.blinded_msg, "big"))

    def crt(powmod: Callable[[Any, Any, Any], Any]) -> Callable[[], object]:
        # `RsaPrivateKey._rsasp1`'s fallback CRT and `blind_sign`'s fault check, with `powmod`.
        def sign() -> object:
            s1 = powmod(m, sk._dp, sk._p)
            s2 = powmod(m, sk._dq, sk._q)
            s = s2 + sk._q * ((sk._qinv * (s1 - s2)) % sk._p)
            assert gmpy2.powmod(s, sk.public_key.e, sk.public_key.n) == m
            return s

        return sign

    pub = sk.to_cryptography().public_key()
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)

    response = rsabssa.blind_sign(sk, request.blinded_msg)

    issue_s = _best_s(lambda: issue(key, request_bytes), calls, repeats)
    sec_s = _best_s(crt(gmpy2.powmod_sec), calls, repeats)
    plain_s = _best_s(crt(gmpy2.powmod), calls, repeats)
    verify_s = _best_s(lambda: verify_token(token, keys, digest), calls * 5, repeats)
    crypto_s = _best_s(
        lambda: pub.verify(token[98:], token[:98], pss, hashes.SHA384()), calls * 5, repeats
    )
    client_s = _best_s(lambda: create_token_request(challenge, key.token_key), calls, repeats)
    client_s += _best_s(lambda: finalize_token(state, response), calls, repeats)
    per_report = len(TOKEN_ROLES)
    return [
        Result(BENCH, "issue, OpenSSL blind-sign", "throughput", 1 / issue_s, "tokens/s"),
        Result(BENCH, "blind-sign, powmod_sec CRT", "throughput", 1 / sec_s, "tokens/s"),
        Result(BENCH, "blind-sign, plain powmod CRT", "throughput", 1 / plain_s, "tokens/s"),
        Result(BENCH, "verify_token", "latency", verify_s * 1e6, "µs/token"),
        Result(BENCH, "cryptography RSA-PSS verify", "latency", crypto_s * 1e6, "µs/token"),
        Result(BENCH, "client request+finalize", "latency", client_s * 1e6, "µs/token"),
        Result(BENCH, "issuer CPU per report", "latency", per_report * issue_s * 1e3, "ms/report"),
        Result(BENCH, "client CPU per report", "latency", per_report * client_s * 1e3, "ms/report"),
    ]


def run() -> list[Result]:
    return measure()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args()
    print_table(measure(args.calls, args.repeats), "Privacy Pass token type 2 (2048-bit)")


if __name__ == "__main__":
    main()
