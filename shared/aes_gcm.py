"""AES-128-GCM decryption of many messages in one call (RFC 9180 §7.3 AEAD 0x0001, NIST SP
800-38D), for `shared.hpke.open_batch`.

Why not `cryptography`'s `AESGCM`, which `shared.hpke` uses for everything else: it releases
the GIL to decrypt 2 KiB or more, and a Prio3 leader input share is larger (Histogram(100):
~2.3 KiB). In a serving leader other threads are always waiting for the GIL, and each handoff
costs far more than the decryption it makes room for: the leader's upload validation spent
~28 µs of CPU a report on that one call (py-spy, `bench.deployment` DAP-19 Histogram(100)),
against ~4 µs in a quiet process; against one spinning thread a 2.3 KiB `AESGCM.decrypt` costs
27-72 µs. Decrypting in pieces with `Cipher`, which keeps the GIL, costs 12 µs a message in
Python calls. `decrypt_batch` instead runs one compiled loop over OpenSSL's EVP interface that
keeps the GIL throughout: no handoff, one cipher context for the batch, no Python call per
message.

The loop is a numba kernel calling libcrypto by symbol name, so it is cached on disk like the
field kernels; the library is the system's OpenSSL (the one this Python's `hashlib` is built on
where there is one). Where it cannot be loaded, messages are decrypted one at a time with
`AESGCM`, which gives the same results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any, Final, TypeVar, cast

import llvmlite.binding
import numpy as np
import numpy.typing as npt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from numba import njit, types

__all__ = ["KEY_SIZE", "NONCE_SIZE", "TAG_SIZE", "decrypt_batch", "decrypt_one"]

KEY_SIZE: Final = 16
NONCE_SIZE: Final = 12
TAG_SIZE: Final = 16
#: OpenSSL's limit on one EVP update's length (an ``int``); `AESGCM` refuses such inputs too.
_MAX_LENGTH: Final = 2**31 - 1
#: ``EVP_CTRL_GCM_SET_TAG`` (``openssl/evp.h``).
_EVP_CTRL_GCM_SET_TAG: Final = 0x11
#: OpenSSL 3's libcrypto by soname on Linux, then on macOS (Homebrew's is on the search path).
_LIBCRYPTO: Final = ("libcrypto.so.3", "libcrypto.3.dylib")
_SYMBOLS: Final = (
    "EVP_aes_128_gcm",
    "EVP_CIPHER_CTX_new",
    "EVP_CIPHER_CTX_free",
    "EVP_DecryptInit_ex",
    "EVP_DecryptUpdate",
    "EVP_CIPHER_CTX_ctrl",
    "EVP_DecryptFinal_ex",
)

# Pointers are passed as unsigned machine words: that is what a numpy array's `.ctypes.data`
# is in a kernel, and the C calling convention passes a pointer in the same register.
_PTR = types.uintp
_I32 = types.int32


def _external(name: str, signature: Any) -> Callable[..., int]:
    """libcrypto's function `name`, called by symbol from a kernel (numba links it as the
    kernel loads, so the kernel can be cached)."""
    return cast(Callable[..., int], types.ExternalFunction(name, signature))


_aes_128_gcm = _external("EVP_aes_128_gcm", _PTR())
_ctx_new = _external("EVP_CIPHER_CTX_new", _PTR())
_ctx_free = _external("EVP_CIPHER_CTX_free", types.void(_PTR))
_init = _external("EVP_DecryptInit_ex", _I32(_PTR, _PTR, _PTR, _PTR, _PTR))
_update = _external("EVP_DecryptUpdate", _I32(_PTR, _PTR, _PTR, _PTR, _I32))
_ctrl = _external("EVP_CIPHER_CTX_ctrl", _I32(_PTR, _I32, _I32, _PTR))
_final = _external("EVP_DecryptFinal_ex", _I32(_PTR, _PTR, _PTR))

_Fn = TypeVar("_Fn", bound=Callable[..., Any])
_Bytes = npt.NDArray[np.uint8]
_Ends = npt.NDArray[np.int64]


def _jit(fn: _Fn) -> _Fn:
    return cast(_Fn, njit(cache=True)(fn))


@_jit
def _open_all(
    keys: _Bytes,
    nonces: _Bytes,
    aads: _Bytes,
    aad_ends: _Ends,
    sealed: _Bytes,
    sealed_ends: _Ends,
    plain: _Bytes,
    opened: _Bytes,
) -> int:
    """Message i: key ``keys[16i:16i+16]``, nonce ``nonces[12i:12i+12]``, aad and ciphertext
    with its 16-byte tag between consecutive `*_ends` (each starting with 0); its plaintext goes
    to ``plain[sealed_ends[i] - 16i : sealed_ends[i+1] - 16(i+1)]`` (the tags left out) and
    ``opened[i]`` = 1 where the tag holds (else the plaintext there must not be read). Returns
    0, or -1 when OpenSSL could not set up a cipher context."""
    ctx = _ctx_new()
    if ctx == 0:
        return -1
    if _init(ctx, _aes_128_gcm(), 0, 0, 0) != 1:
        _ctx_free(ctx)
        return -1
    length = np.zeros(1, np.int32)
    out_len = length.ctypes.data
    for i in range(opened.shape[0]):
        opened[i] = 0
        start, end = sealed_ends[i], sealed_ends[i + 1] - TAG_SIZE
        if (
            _init(ctx, 0, 0, keys.ctypes.data + KEY_SIZE * i, nonces.ctypes.data + NONCE_SIZE * i)
            == 1
            and _update(
                ctx, 0, out_len, aads.ctypes.data + aad_ends[i], aad_ends[i + 1] - aad_ends[i]
            )
            == 1
            and _update(
                ctx,
                plain.ctypes.data + start - TAG_SIZE * i,
                out_len,
                sealed.ctypes.data + start,
                end - start,
            )
            == 1
            and _ctrl(ctx, _EVP_CTRL_GCM_SET_TAG, TAG_SIZE, sealed.ctypes.data + end) == 1
            # GCM has no final block: Final writes nothing, it only checks the tag.
            and _final(ctx, 0, out_len) == 1
        ):
            opened[i] = 1
    _ctx_free(ctx)
    return 0


@functools.cache
def _libcrypto() -> bool:
    """Load OpenSSL's libcrypto for the kernel's symbols, once; False where there is none."""
    for name in _LIBCRYPTO:
        try:
            llvmlite.binding.load_library_permanently(name)
        except RuntimeError:
            continue
        return all(llvmlite.binding.address_of_symbol(s) for s in _SYMBOLS)
    return False


def decrypt_one(key: bytes, nonce: bytes, aad: bytes, sealed: bytes) -> bytes | None:
    """One message with `AESGCM`: the plaintext, or None where `decrypt_batch` gives None."""
    try:
        return AESGCM(key).decrypt(nonce, sealed, aad)
    except (InvalidTag, OverflowError):
        return None


def decrypt_batch(messages: Sequence[tuple[bytes, bytes, bytes, bytes]]) -> list[bytes | None]:
    """Each (key, nonce, aad, ciphertext followed by its tag): the plaintext, or None where
    the tag does not verify (or the ciphertext is shorter than a tag, or too long for
    OpenSSL)."""
    for key, nonce, _, _ in messages:
        if len(key) != KEY_SIZE or len(nonce) != NONCE_SIZE:
            raise ValueError("AES-128-GCM takes a 16-byte key and a 12-byte nonce")
    if not _libcrypto():
        return [decrypt_one(*message) for message in messages]
    fits = [
        TAG_SIZE <= len(sealed) <= _MAX_LENGTH and len(aad) <= _MAX_LENGTH
        for _, _, aad, sealed in messages
    ]
    batch = [m for m, ok in zip(messages, fits, strict=True) if ok]
    if not batch:
        return [None] * len(messages)
    aad_ends = np.fromiter(accumulate((len(m[2]) for m in batch), initial=0), np.int64)
    sealed_ends = np.fromiter(accumulate((len(m[3]) for m in batch), initial=0), np.int64)
    plain = np.empty(int(sealed_ends[-1]) - TAG_SIZE * len(batch), np.uint8)
    opened = np.zeros(len(batch), np.uint8)
    status = _open_all(
        np.frombuffer(b"".join(m[0] for m in batch), np.uint8),
        np.frombuffer(b"".join(m[1] for m in batch), np.uint8),
        np.frombuffer(b"".join(m[2] for m in batch), np.uint8),
        aad_ends,
        np.frombuffer(b"".join(m[3] for m in batch), np.uint8),
        sealed_ends,
        plain,
        opened,
    )
    if status != 0:
        raise MemoryError("OpenSSL could not allocate an AES-GCM cipher context")
    plaintexts, ends = plain.tobytes(), sealed_ends.tolist()
    results = iter(
        plaintexts[ends[i] - TAG_SIZE * i : ends[i + 1] - TAG_SIZE * (i + 1)] if was else None
        for i, was in enumerate(opened.tolist())
    )
    return [next(results) if ok else None for ok in fits]
