"""HPKE (RFC 9180), base mode, for the one suite DAP-09 §6 makes mandatory.

Suite: DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-128-GCM, ids 0x0020 / 0x0001 / 0x0001
(RFC 9180 §7.1, §7.2, §7.3). Only the single-shot API of §6.1 is offered, because DAP seals
exactly one message per encapsulation (DAP-09 §4.4.2 input shares, §4.6.4 aggregate shares):

- `seal` is SealBase (§6.1): Encap (§4.1), KeySchedule in mode_base (§5.1, §5.1.1), then
  Context.Seal with sequence number 0, whose nonce is base_nonce itself (§5.2).
- `open` is OpenBase, the mirror image with Decap; `open_batch` opens many messages at once.
- `derive_keypair` is DeriveKeyPair for X25519 (§7.1.3); private keys are serialized raw,
  unclamped, as §7.1.2 prescribes.
- An all-zero X25519 output is rejected (§7.1.4), which is what turns a low-order `enc` or
  recipient public key into an error.

Built directly on `cryptography` (X25519, HMAC-SHA256, AESGCM) rather than on pyhpke, so that
everything independent of the message is computed once: the labelled prefixes of
LabeledExtract/LabeledExpand (§4), psk_id_hash (constant in base mode), the key-schedule
context of each info string (small LRU; DAP uses a handful of info strings), the loaded
private key of each key pair and the loaded recipient public keys. An open then costs one
X25519 exchange, five HMAC-SHA256 calls and one AES-GCM decryption; `open_batch` decrypts all
of its messages in one call to `shared.aes_gcm`, which keeps the GIL.

Every failure raises `HpkeError`, with a message that never carries key material.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Sequence
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hmac import HMAC

from shared import aes_gcm
from shared.errors import SaggError

HPKE_KEM_X25519_HKDF_SHA256: Final = 0x0020

HPKE_KDF_HKDF_SHA256: Final = 0x0001

HPKE_AEAD_AES_128_GCM: Final = 0x0001


__all__ = [
    "ENC_SIZE",
    "TAG_SIZE",
    "HpkeError",
    "HpkeKeyPair",
    "check_suite",
    "derive_keypair",
    "from_private_bytes",
    "generate_keypair",
    "open",
    "open_batch",
    "seal",
]

# Algorithm sizes of the suite (RFC 9180 §7.1 table 2, §7.2 table 3, §7.3 table 5).
_N_SECRET: Final = 32
_N_ENC: Final = 32
_N_SK: Final = 32
_N_H: Final = 32
_N_K: Final = 16
_N_N: Final = 12
#: AES-128-GCM's tag (RFC 9180 §7.3 table 5, Nt): what sealing adds to a plaintext.
_N_T: Final = 16
#: Public sizes for callers bounding ciphertexts (`shared.dap.sizes`).
ENC_SIZE: Final = _N_ENC
TAG_SIZE: Final = _N_T

_MODE_BASE: Final = b"\x00"
_HPKE_V1: Final = b"HPKE-v1"
# Domain separation between the KEM's KDF calls and the rest of HPKE (§4.1, §5.1, §9.6).
_KEM_SUITE_ID: Final = b"KEM" + HPKE_KEM_X25519_HKDF_SHA256.to_bytes(2, "big")
_HPKE_SUITE_ID: Final = (
    b"HPKE"
    + HPKE_KEM_X25519_HKDF_SHA256.to_bytes(2, "big")
    + HPKE_KDF_HKDF_SHA256.to_bytes(2, "big")
    + HPKE_AEAD_AES_128_GCM.to_bytes(2, "big")
)

_SHA256: Final = hashes.SHA256()
# RFC 5869 §2.2: an absent salt is HashLen zero bytes.
_ZERO_SALT: Final = bytes(_N_H)
_ALL_ZERO_DH: Final = bytes(_N_SECRET)


class HpkeError(SaggError):
    """Any HPKE failure: malformed or low-order keys, a failed AEAD check, an unsupported suite."""


def check_suite(kem_id: int, kdf_id: int, aead_id: int) -> None:
    """Raise `HpkeError` unless the ids name the one suite this module implements."""
    if (kem_id, kdf_id, aead_id) != (
        HPKE_KEM_X25519_HKDF_SHA256,
        HPKE_KDF_HKDF_SHA256,
        HPKE_AEAD_AES_128_GCM,
    ):
        raise HpkeError(
            f"unsupported HPKE suite kem=0x{kem_id:04x} kdf=0x{kdf_id:04x} aead=0x{aead_id:04x}"
        )


# --- KDF (RFC 9180 §4) -------------------------------------------------------------------------


def _hmac(key: bytes, msg: bytes) -> bytes:
    h = HMAC(key, _SHA256)
    h.update(msg)
    return h.finalize()


def _labeled_extract(suite_id: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return _hmac(salt or _ZERO_SALT, _HPKE_V1 + suite_id + label + ikm)


def _expand_message(suite_id: bytes, label: bytes, info: bytes, length: int) -> bytes:
    # Every output of this suite is at most Nh bytes, so HKDF-Expand stops after T(1) and
    # the HMAC input is the labelled info followed by the block counter 0x01.
    return length.to_bytes(2, "big") + _HPKE_V1 + suite_id + label + info + b"\x01"


def _labeled_expand(suite_id: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    return _hmac(prk, _expand_message(suite_id, label, info, length))[:length]


# --- KEM: DHKEM(X25519, HKDF-SHA256) (RFC 9180 §4.1, §7.1) -------------------------------------

# LabeledExtract("", "eae_prk", dh) keeps its key and prefix for every message: prime an HMAC
# once and copy it, which costs a third of building a fresh one.
_EAE_PRK_HMAC: Final = HMAC(_ZERO_SALT, _SHA256)
_EAE_PRK_HMAC.update(_HPKE_V1 + _KEM_SUITE_ID + b"eae_prk")
_SHARED_SECRET_PREFIX: Final = (
    _N_SECRET.to_bytes(2, "big") + _HPKE_V1 + _KEM_SUITE_ID + b"shared_secret"
)


def _extract_and_expand(dh: bytes, kem_context: bytes) -> bytes:
    # Constant-time, as dh is secret whenever the check passes.
    if hmac.compare_digest(dh, _ALL_ZERO_DH):
        raise HpkeError("X25519 produced the all-zero shared secret (low-order public key)")
    h = _EAE_PRK_HMAC.copy()
    h.update(dh)
    eae_prk = h.finalize()
    return _hmac(eae_prk, _SHARED_SECRET_PREFIX + kem_context + b"\x01")


def _exchange(private_key: X25519PrivateKey, public_key: X25519PublicKey) -> bytes:
    try:
        return private_key.exchange(public_key)
    except ValueError:
        # OpenSSL refuses low-order points itself; `_extract_and_expand` checks again so that
        # §7.1.4 holds whatever the backend does.
        raise HpkeError("X25519 exchange failed (low-order public key)") from None


@functools.lru_cache(maxsize=32)
def _load_public_key(public_key: bytes) -> X25519PublicKey:
    if len(public_key) != _N_ENC:
        raise HpkeError(f"X25519 public key must be {_N_ENC} bytes, got {len(public_key)}")
    return X25519PublicKey.from_public_bytes(public_key)


def _encap(pk_rm: bytes, sk_e: X25519PrivateKey) -> tuple[bytes, bytes]:
    """Encap(pkR) with the ephemeral key supplied; returns (shared_secret, enc)."""
    pk_r = _load_public_key(bytes(pk_rm))
    enc = sk_e.public_key().public_bytes_raw()
    dh = _exchange(sk_e, pk_r)
    return _extract_and_expand(dh, enc + pk_rm), enc


def _decap(enc: bytes, sk_r: X25519PrivateKey, pk_rm: bytes) -> bytes:
    """Decap(enc, skR), pkRm being the serialized public key of skR; returns shared_secret."""
    if len(enc) != _N_ENC:
        raise HpkeError(f"encapsulated key must be {_N_ENC} bytes, got {len(enc)}")
    # Not cached: enc is fresh in every message.
    pk_e = X25519PublicKey.from_public_bytes(enc)
    dh = _exchange(sk_r, pk_e)
    return _extract_and_expand(dh, enc + pk_rm)


# --- Key schedule, mode_base (RFC 9180 §5.1) ---------------------------------------------------

_PSK_ID_HASH: Final = _labeled_extract(_HPKE_SUITE_ID, b"", b"psk_id_hash", b"")
# LabeledExtract(shared_secret, "secret", psk) with the empty base-mode psk.
_SECRET_MESSAGE: Final = _HPKE_V1 + _HPKE_SUITE_ID + b"secret"


def _key_schedule_context(info: bytes) -> bytes:
    info_hash = _labeled_extract(_HPKE_SUITE_ID, b"", b"info_hash", info)
    return _MODE_BASE + _PSK_ID_HASH + info_hash


@functools.lru_cache(maxsize=16)
def _key_and_nonce_messages(info: bytes) -> tuple[bytes, bytes]:
    context = _key_schedule_context(info)
    return (
        _expand_message(_HPKE_SUITE_ID, b"key", context, _N_K),
        _expand_message(_HPKE_SUITE_ID, b"base_nonce", context, _N_N),
    )


def _key_schedule(shared_secret: bytes, info: bytes) -> tuple[bytes, bytes]:
    """KeySchedule(mode_base, shared_secret, info, "", ""); returns (key, base_nonce)."""
    key_message, nonce_message = _key_and_nonce_messages(bytes(info))
    secret = _hmac(shared_secret, _SECRET_MESSAGE)
    # key and base_nonce share the HMAC key `secret`: keying once and copying is cheaper
    # than keying twice.
    keyed = HMAC(secret, _SHA256)
    key_hmac = keyed.copy()
    key_hmac.update(key_message)
    keyed.update(nonce_message)
    return key_hmac.finalize()[:_N_K], keyed.finalize()[:_N_N]


# --- Key pairs ---------------------------------------------------------------------------------


class HpkeKeyPair:
    """A recipient key pair of the mandatory suite together with its DAP `HpkeConfigId`.

    Holds the loaded X25519 private key so that `open` never parses it again. The private key
    is reachable only through `private_key_bytes()`; it is not in `repr` and not compared.
    """

    __slots__ = ("_aead_id", "_config_id", "_kdf_id", "_kem_id", "_private_key", "_public_key")

    def __init__(
        self,
        config_id: int,
        private_key: X25519PrivateKey,
        *,
        kem_id: int = HPKE_KEM_X25519_HKDF_SHA256,
        kdf_id: int = HPKE_KDF_HKDF_SHA256,
        aead_id: int = HPKE_AEAD_AES_128_GCM,
    ) -> None:
        if not 0 <= config_id <= 0xFF:
            raise HpkeError(f"HPKE config id must fit in a u8, got {config_id}")
        check_suite(kem_id, kdf_id, aead_id)
        self._config_id = config_id
        self._kem_id = kem_id
        self._kdf_id = kdf_id
        self._aead_id = aead_id
        self._private_key = private_key
        self._public_key = private_key.public_key().public_bytes_raw()

    @property
    def config_id(self) -> int:
        return self._config_id

    @property
    def kem_id(self) -> int:
        return self._kem_id

    @property
    def kdf_id(self) -> int:
        return self._kdf_id

    @property
    def aead_id(self) -> int:
        return self._aead_id

    @property
    def public_key(self) -> bytes:
        """SerializePublicKey(pkR): the 32-byte X25519 u-coordinate (RFC 9180 §7.1.1)."""
        return self._public_key

    def private_key_bytes(self) -> bytes:
        """SerializePrivateKey(skR) (RFC 9180 §7.1.2), for storage. Treat as secret."""
        return self._private_key.private_bytes_raw()

    def _identity(self) -> tuple[int, int, int, int, bytes]:
        return (self._config_id, self._kem_id, self._kdf_id, self._aead_id, self._public_key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HpkeKeyPair):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return (
            f"HpkeKeyPair(config_id={self._config_id}, kem_id=0x{self._kem_id:04x}, "
            f"kdf_id=0x{self._kdf_id:04x}, aead_id=0x{self._aead_id:04x}, "
            f"public_key={self._public_key.hex()})"
        )


def generate_keypair(config_id: int) -> HpkeKeyPair:
    """GenerateKeyPair() (RFC 9180 §4.1) from the operating system's CSPRNG."""
    return HpkeKeyPair(config_id, X25519PrivateKey.generate())


def derive_keypair(config_id: int, ikm: bytes) -> HpkeKeyPair:
    """DeriveKeyPair(ikm) for X25519 (RFC 9180 §7.1.3).

    `ikm` must be at least Nsk = 32 bytes: §7.1.3 asks for that much entropy, and a shorter
    input is almost certainly a mistake.
    """
    if len(ikm) < _N_SK:
        raise HpkeError(f"DeriveKeyPair needs at least {_N_SK} bytes of ikm, got {len(ikm)}")
    dkp_prk = _labeled_extract(_KEM_SUITE_ID, b"", b"dkp_prk", ikm)
    sk = _labeled_expand(_KEM_SUITE_ID, dkp_prk, b"sk", b"", _N_SK)
    return HpkeKeyPair(config_id, X25519PrivateKey.from_private_bytes(sk))


def from_private_bytes(
    config_id: int,
    sk: bytes,
    *,
    kem_id: int = HPKE_KEM_X25519_HKDF_SHA256,
    kdf_id: int = HPKE_KDF_HKDF_SHA256,
    aead_id: int = HPKE_AEAD_AES_128_GCM,
) -> HpkeKeyPair:
    """DeserializePrivateKey(sk) (RFC 9180 §7.1.2): the inverse of `private_key_bytes()`.

    The suite ids default to the mandatory suite; pass the stored ones to have a key of
    another suite refused rather than misused.
    """
    check_suite(kem_id, kdf_id, aead_id)
    if len(sk) != _N_SK:
        raise HpkeError(f"X25519 private key must be {_N_SK} bytes, got {len(sk)}")
    return HpkeKeyPair(config_id, X25519PrivateKey.from_private_bytes(sk))


# --- Single-shot API (RFC 9180 §6.1) -----------------------------------------------------------


def seal(
    public_key: bytes,
    info: bytes,
    aad: bytes,
    plaintext: bytes,
    *,
    ephemeral: X25519PrivateKey | None = None,
) -> tuple[bytes, bytes]:
    """SealBase(pkR, info, aad, pt) (RFC 9180 §6.1); returns (enc, ciphertext).

    `ephemeral` exists only for known-answer tests: a fixed ephemeral key makes the output
    deterministic, and reusing one across messages destroys confidentiality (§9.7.5).
    Production callers leave it unset so that a fresh key is drawn for every message.
    """
    sk_e = X25519PrivateKey.generate() if ephemeral is None else ephemeral
    shared_secret, enc = _encap(public_key, sk_e)
    key, base_nonce = _key_schedule(shared_secret, info)
    try:
        return enc, AESGCM(key).encrypt(base_nonce, plaintext, aad)
    except OverflowError:
        raise HpkeError("plaintext or aad too long for AES-128-GCM") from None


# Named after RFC 9180's Open and paired with `seal`; shadowing the builtin is harmless because
# callers use it qualified (`hpke.open`) and this module never opens files.
def open(
    keypair: HpkeKeyPair,
    enc: bytes,
    info: bytes,
    aad: bytes,
    ciphertext: bytes,
) -> bytes:
    """OpenBase(enc, skR, info, aad, ct) (RFC 9180 §6.1); returns the plaintext."""
    shared_secret = _decap(enc, keypair._private_key, keypair.public_key)
    key, base_nonce = _key_schedule(shared_secret, info)
    plaintext = aes_gcm.decrypt_one(key, base_nonce, aad, ciphertext)
    if plaintext is None:
        raise HpkeError("HPKE decryption failed")
    return plaintext


def open_batch(
    messages: Sequence[tuple[HpkeKeyPair, bytes, bytes, bytes]], info: bytes
) -> list[bytes | None]:
    """`open` of each (keypair, enc, aad, ciphertext) under one info string: its plaintext, or
    None where `open` would raise.

    Every Decap and key schedule first, then every AEAD open in one call (`aes_gcm`, which
    says why it keeps the GIL where `AESGCM` hands it over).
    """
    keys: list[tuple[bytes, bytes] | None] = []
    for keypair, enc, _, _ in messages:
        try:
            shared_secret = _decap(enc, keypair._private_key, keypair.public_key)
        except HpkeError:
            keys.append(None)
            continue
        keys.append(_key_schedule(shared_secret, info))
    decrypted = iter(
        aes_gcm.decrypt_batch(
            [
                (*key_and_nonce, aad, ciphertext)
                for key_and_nonce, (_, _, aad, ciphertext) in zip(keys, messages, strict=True)
                if key_and_nonce is not None
            ]
        )
    )
    return [None if key_and_nonce is None else next(decrypted) for key_and_nonce in keys]
