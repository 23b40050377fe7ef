"""shared.aes_gcm: published known answers, agreement with `cryptography`'s AESGCM on every
kind of message it accepts or refuses, and the same results without libcrypto."""

from __future__ import annotations

import os
import random
import ssl
import sys
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from shared import aes_gcm
from tests.shared.test_hpke import RFC, RFC_ENCRYPTIONS, RFC_PT

Message = tuple[bytes, bytes, bytes, bytes]

# The GCM specification's (McGrew and Viega, "The Galois/Counter Mode of Operation", 2005,
# Appendix B) Test Case 4: AES-128, 60-byte plaintext, 20-byte AAD.
GCM_TC4 = (
    bytes.fromhex("feffe9928665731c6d6a8f9467308308"),
    bytes.fromhex("cafebabefacedbaddecaf888"),
    bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2"),
    bytes.fromhex(
        "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
        "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091"
        "5bc94fbc3221a5db94fae95ae7121a47"
    ),
)
GCM_TC4_PLAINTEXT = bytes.fromhex(
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39"
)


@pytest.fixture(params=["libcrypto", "AESGCM"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both ways `decrypt_batch` can run: the compiled loop and, where libcrypto cannot be
    loaded, `AESGCM` one message at a time."""
    if request.param == "AESGCM":
        monkeypatch.setattr(aes_gcm, "_libcrypto", lambda: False)
    yield request.param


def _rfc9180_messages() -> list[tuple[Message, bytes]]:
    """RFC 9180 A.1.1.1's encryptions: nonce = base_nonce XOR the sequence number (§5.2)."""
    base = int.from_bytes(RFC["base_nonce"], "big")
    return [
        ((RFC["key"], (base ^ seq).to_bytes(12, "big"), aad, ct), RFC_PT)
        for seq, aad, ct in RFC_ENCRYPTIONS
    ]


def test_the_compiled_loop_runs_where_python_links_openssl_3() -> None:
    if sys.platform != "linux" or ssl.OPENSSL_VERSION_INFO < (3,):
        pytest.skip("libcrypto.so.3 is not this Python's OpenSSL")
    assert aes_gcm._libcrypto()


def test_published_known_answers(path: str) -> None:
    known = [(GCM_TC4, GCM_TC4_PLAINTEXT), *_rfc9180_messages()]
    assert aes_gcm.decrypt_batch([m for m, _ in known]) == [p for _, p in known]


def _tampered(message: Message, rng: random.Random) -> list[Message]:
    key, nonce, aad, sealed = message
    flip = rng.randrange(len(sealed))
    flipped = sealed[:flip] + bytes([sealed[flip] ^ 1 << rng.randrange(8)]) + sealed[flip + 1 :]
    return [
        (key, nonce, aad, flipped),
        (key, nonce, aad + b"\x00", sealed),
        (bytes(16), nonce, aad, sealed),
        (key, bytes(12), aad, sealed),
        (key, nonce, aad, sealed[:-1]),
        (key, nonce, aad, sealed[: rng.randrange(aes_gcm.TAG_SIZE)]),
    ]


def test_agrees_with_aesgcm_on_valid_and_refused_messages(path: str) -> None:
    rng = random.Random(9180)
    messages: list[Message] = []
    # Around AES's 16-byte block and `AESGCM`'s 2 KiB GIL threshold, and one of 64 KiB.
    for size in (0, 1, 15, 16, 17, 100, 2047, 2048, 2300, 65_536):
        key, nonce = os.urandom(16), os.urandom(12)
        aad = os.urandom(rng.choice((0, 1, 33, 500)))
        sealed = AESGCM(key).encrypt(nonce, os.urandom(size), aad)
        messages += [(key, nonce, aad, sealed), *_tampered((key, nonce, aad, sealed), rng)]
    rng.shuffle(messages)

    def one(key: bytes, nonce: bytes, aad: bytes, sealed: bytes) -> bytes | None:
        try:
            return AESGCM(key).decrypt(nonce, sealed, aad)
        except Exception:
            return None

    expected = [one(*m) for m in messages]
    assert sum(p is not None for p in expected) == 10
    assert aes_gcm.decrypt_batch(messages) == expected


def test_a_refused_message_leaves_its_neighbours_opened(path: str) -> None:
    """The cipher context is reused from message to message: a failed tag check must not
    carry over to the next message."""
    (good, plaintext), *_ = _rfc9180_messages()
    key, nonce, aad, sealed = good
    bad = (key, nonce, aad, sealed[:-1] + bytes([sealed[-1] ^ 0x80]))
    assert aes_gcm.decrypt_batch([bad, good, bad, bad, good]) == [
        None,
        plaintext,
        None,
        None,
        plaintext,
    ]


def test_nothing_to_open(path: str) -> None:
    assert aes_gcm.decrypt_batch([]) == []
    assert aes_gcm.decrypt_batch([(bytes(16), bytes(12), b"", b"short")]) == [None]


@pytest.mark.parametrize("key, nonce", [(bytes(32), bytes(12)), (bytes(16), bytes(8))])
def test_a_key_or_nonce_of_another_length_is_a_programming_error(
    path: str, key: bytes, nonce: bytes
) -> None:
    with pytest.raises(ValueError, match="16-byte key and a 12-byte nonce"):
        aes_gcm.decrypt_batch([(key, nonce, b"", bytes(32))])
