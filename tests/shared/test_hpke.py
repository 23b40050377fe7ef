"""shared.hpke: RFC 9180 known answers, interop with pyhpke, rejection of bad input."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st
from pyhpke import AEADId, CipherSuite, KDFId, KEMId

from shared import hpke
from shared.dap.hpke_context import HPKE_INFO_INPUT_SHARE
from shared.dap.messages import ROLE_CLIENT, ROLE_LEADER
from shared.hpke import (
    HPKE_AEAD_AES_128_GCM,
    HPKE_KDF_HKDF_SHA256,
    HPKE_KEM_X25519_HKDF_SHA256,
    HpkeError,
    HpkeKeyPair,
)

# RFC 9180 Appendix A.1.1, "DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM", Base Setup
# Information, and A.1.1.1 Encryptions. Copied from the RFC text (the cfrg/draft-irtf-cfrg-hpke
# repository's auth48 draft numbers the same appendix B.1.1); the RFC's JSON twin is that
# repository's test-vectors.json at commit 5f503c564da00b0687b3de75f1dfbdfc4079ad31.
RFC = {
    name: bytes.fromhex(value)
    for name, value in {
        "info": "4f6465206f6e2061204772656369616e2055726e",
        "ikmE": "7268600d403fce431561aef583ee1613527cff655c1343f29812e66706df3234",
        "pkEm": "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431",
        "skEm": "52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736",
        "ikmR": "6db9df30aa07dd42ee5e8181afdb977e538f5e1fec8a06223f33f7013e525037",
        "pkRm": "3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d",
        "skRm": "4612c550263fc8ad58375df3f557aac531d26850903e55a9f23f21d8534e8ac8",
        "enc": "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431",
        "shared_secret": "fe0e18c9f024ce43799ae393c7e8fe8fce9d218875e8227b0187c04e7d2ea1fc",
        "key_schedule_context": "00725611c9d98c07c03f60095cd32d400d8347d45ed67097bbad50fc56da742d07"
        "cb6cffde367bb0565ba28bb02c90744a20f5ef37f30523526106f637abb05449",
        "secret": "12fff91991e93b48de37e7daddb52981084bd8aa64289c3788471d9a9712f397",
        "key": "4531685d41d65f03dc48f6b8302c05b0",
        "base_nonce": "56d890e5accaaf011cff4b7d",
        "exporter_secret": "45ff1c2e220db587171952c0592d5f5ebe103f1561a2614e38f2ffd47e99e3f8",
    }.items()
}
RFC_PT = bytes.fromhex("4265617574792069732074727574682c20747275746820626561757479")
# (sequence number, aad, ct). Sequence 0 is what the single-shot API produces.
RFC_ENCRYPTIONS = [
    (
        0,
        bytes.fromhex("436f756e742d30"),
        bytes.fromhex(
            "f938558b5d72f1a23810b4be2ab4f84331acc02fc97babc53a52ae8218a355a9"
            "6d8770ac83d07bea87e13c512a"
        ),
    ),
    (
        1,
        bytes.fromhex("436f756e742d31"),
        bytes.fromhex(
            "af2d7e9ac9ae7e270f46ba1f975be53c09f8d875bdc8535458c2494e8a6eab25"
            "1c03d0c22a56b8ca42c2063b84"
        ),
    ),
    (
        256,
        bytes.fromhex("436f756e742d323536"),
        bytes.fromhex(
            "957f9800542b0b8891badb026d79cc54597cb2d225b54c00c5238c25d05c30e3"
            "fbeda97d2e0e1aba483a2df9f2"
        ),
    ),
]

# X25519 u-coordinates of small order, canonical and not (RFC 7748 §5 masks bit 255, and
# values >= p are reduced): each makes the shared secret all-zero.
LOW_ORDER_POINTS = [
    bytes.fromhex(h)
    for h in [
        "00" * 32,
        "01" + "00" * 31,
        "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
        "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
        "ec" + "ff" * 30 + "7f",
        "ed" + "ff" * 30 + "7f",
        "ee" + "ff" * 30 + "7f",
        "00" * 31 + "80",
    ]
]

PYHPKE = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)

DAP_INFO = HPKE_INFO_INPUT_SHARE + bytes([ROLE_CLIENT, ROLE_LEADER])


def rfc_ephemeral() -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(
        hpke.derive_keypair(0, RFC["ikmE"]).private_key_bytes()
    )


def flipped(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def all_bit_flips(data: bytes) -> Iterator[bytes]:
    for bit in range(len(data) * 8):
        yield flipped(data, bit)


def assert_only_hpke_error(call: Callable[[], object], secret: bytes) -> None:
    """`call` raises exactly HpkeError (no subclass, nothing else); its message hides `secret`."""
    with pytest.raises(HpkeError) as info:
        call()
    assert type(info.value) is HpkeError
    if secret:
        assert secret.hex() not in str(info.value)
        assert repr(secret) not in str(info.value)


# --- RFC 9180 A.1.1 known answers ----------------------------------------------------------------


def test_derive_keypair_reproduces_rfc_recipient_and_ephemeral_keys() -> None:
    recipient = hpke.derive_keypair(3, RFC["ikmR"])
    assert recipient.private_key_bytes() == RFC["skRm"]
    assert recipient.public_key == RFC["pkRm"]
    ephemeral = hpke.derive_keypair(3, RFC["ikmE"])
    assert ephemeral.private_key_bytes() == RFC["skEm"]
    assert ephemeral.public_key == RFC["pkEm"]


def test_encap_and_decap_reproduce_rfc_shared_secret() -> None:
    shared_secret, enc = hpke._encap(RFC["pkRm"], rfc_ephemeral())
    assert enc == RFC["enc"]
    assert shared_secret == RFC["shared_secret"]
    recipient = hpke.from_private_bytes(0, RFC["skRm"])
    assert hpke._decap(RFC["enc"], recipient._private_key, RFC["pkRm"]) == RFC["shared_secret"]


def test_key_schedule_reproduces_rfc_values() -> None:
    context = hpke._key_schedule_context(RFC["info"])
    assert context == RFC["key_schedule_context"]
    secret = hpke._labeled_extract(hpke._HPKE_SUITE_ID, RFC["shared_secret"], b"secret", b"")
    assert secret == RFC["secret"]
    exporter_secret = hpke._labeled_expand(hpke._HPKE_SUITE_ID, secret, b"exp", context, 32)
    assert exporter_secret == RFC["exporter_secret"]
    assert hpke._key_schedule(RFC["shared_secret"], RFC["info"]) == (RFC["key"], RFC["base_nonce"])


def test_seal_with_rfc_ephemeral_gives_rfc_enc_and_sequence_0_ciphertext() -> None:
    _, aad, ct = RFC_ENCRYPTIONS[0]
    enc, ciphertext = hpke.seal(RFC["pkRm"], RFC["info"], aad, RFC_PT, ephemeral=rfc_ephemeral())
    assert enc == RFC["enc"]
    assert ciphertext == ct


def test_open_recovers_rfc_sequence_0_plaintext() -> None:
    _, aad, ct = RFC_ENCRYPTIONS[0]
    recipient = hpke.derive_keypair(0, RFC["ikmR"])
    assert hpke.open(recipient, RFC["enc"], RFC["info"], aad, ct) == RFC_PT


@pytest.mark.parametrize(("seq", "aad", "ct"), RFC_ENCRYPTIONS)
def test_derived_key_and_nonce_decrypt_every_rfc_encryption(
    seq: int, aad: bytes, ct: bytes
) -> None:
    # Sequence numbers above 0 lie outside the single-shot API; decrypting them with our key and
    # base_nonce (nonce = base_nonce XOR seq, RFC 9180 §5.2) checks both beyond sequence 0.
    key, base_nonce = hpke._key_schedule(RFC["shared_secret"], RFC["info"])
    nonce = (int.from_bytes(base_nonce, "big") ^ seq).to_bytes(len(base_nonce), "big")
    assert AESGCM(key).decrypt(nonce, ct, aad) == RFC_PT


# --- Interop with pyhpke -------------------------------------------------------------------------

ikms = st.binary(min_size=32, max_size=64)
infos = st.binary(max_size=64)
aads = st.binary(max_size=128)
plaintexts = st.binary(max_size=512)


@settings(max_examples=40, deadline=None)
@given(ikm=ikms, info=infos, aad=aads, plaintext=plaintexts)
def test_our_seal_opens_with_pyhpke(ikm: bytes, info: bytes, aad: bytes, plaintext: bytes) -> None:
    recipient = hpke.derive_keypair(1, ikm)
    enc, ciphertext = hpke.seal(recipient.public_key, info, aad, plaintext)
    sk = PYHPKE.kem.deserialize_private_key(recipient.private_key_bytes())
    context = PYHPKE.create_recipient_context(enc, sk, info=info)
    assert context.open(ciphertext, aad=aad) == plaintext


@settings(max_examples=40, deadline=None)
@given(ikm=ikms, info=infos, aad=aads, plaintext=plaintexts)
def test_pyhpke_seal_opens_with_ours(ikm: bytes, info: bytes, aad: bytes, plaintext: bytes) -> None:
    recipient = hpke.derive_keypair(1, ikm)
    pk = PYHPKE.kem.deserialize_public_key(recipient.public_key)
    enc, context = PYHPKE.create_sender_context(pk, info=info)
    ciphertext = context.seal(plaintext, aad=aad)
    assert hpke.open(recipient, enc, info, aad, ciphertext) == plaintext


@settings(max_examples=40, deadline=None)
@given(ikm=ikms)
def test_derive_keypair_agrees_with_pyhpke(ikm: bytes) -> None:
    theirs = PYHPKE.kem.derive_key_pair(ikm)
    ours = hpke.derive_keypair(0, ikm)
    assert ours.private_key_bytes() == theirs.private_key.to_private_bytes()
    assert ours.public_key == theirs.public_key.to_public_bytes()


# --- Round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "aad", "plaintext"),
    [(b"", b"", b""), (DAP_INFO, b"", b"x"), (DAP_INFO, b"aad" * 100, bytes(range(256)) * 20)],
)
def test_seal_then_open_round_trips(info: bytes, aad: bytes, plaintext: bytes) -> None:
    recipient = hpke.generate_keypair(9)
    enc, ciphertext = hpke.seal(recipient.public_key, info, aad, plaintext)
    assert len(enc) == 32
    assert len(ciphertext) == len(plaintext) + 16
    assert hpke.open(recipient, enc, info, aad, ciphertext) == plaintext


def test_seal_draws_a_fresh_ephemeral_key_per_message() -> None:
    recipient = hpke.generate_keypair(0)
    first = hpke.seal(recipient.public_key, DAP_INFO, b"", b"same message")
    second = hpke.seal(recipient.public_key, DAP_INFO, b"", b"same message")
    assert first[0] != second[0]
    assert first[1] != second[1]


def test_open_accepts_a_key_pair_restored_from_storage() -> None:
    original = hpke.generate_keypair(17)
    enc, ciphertext = hpke.seal(original.public_key, DAP_INFO, b"aad", b"share")
    restored = hpke.from_private_bytes(17, original.private_key_bytes())
    assert restored == original
    assert restored.public_key == original.public_key
    assert hpke.open(restored, enc, DAP_INFO, b"aad", ciphertext) == b"share"


# --- Rejection of bad input ----------------------------------------------------------------------


PLAINTEXT = b"an input share of some length"


@dataclass(frozen=True)
class Sealed:
    """One sealed message and everything needed to open it; tamper with `replace`."""

    recipient: HpkeKeyPair
    enc: bytes
    info: bytes
    aad: bytes
    ciphertext: bytes

    def open(self) -> bytes:
        return hpke.open(self.recipient, self.enc, self.info, self.aad, self.ciphertext)


def assert_rejected(message: Sealed) -> None:
    assert_only_hpke_error(message.open, message.recipient.private_key_bytes())


@pytest.fixture
def sealed() -> Sealed:
    recipient = hpke.generate_keypair(5)
    aad = b"task id and report metadata"
    enc, ciphertext = hpke.seal(recipient.public_key, DAP_INFO, aad, PLAINTEXT)
    message = Sealed(recipient, enc, DAP_INFO, aad, ciphertext)
    # Every rejection below would pass vacuously if the untampered message did not open.
    assert message.open() == PLAINTEXT
    return message


def test_every_bit_flip_in_enc_is_rejected(sealed: Sealed) -> None:
    for enc in all_bit_flips(sealed.enc):
        assert_rejected(replace(sealed, enc=enc))


def test_every_bit_flip_in_the_encrypted_body_is_rejected(sealed: Sealed) -> None:
    body, tag = sealed.ciphertext[:-16], sealed.ciphertext[-16:]
    for tampered in all_bit_flips(body):
        assert_rejected(replace(sealed, ciphertext=tampered + tag))


def test_every_bit_flip_in_the_tag_is_rejected(sealed: Sealed) -> None:
    body, tag = sealed.ciphertext[:-16], sealed.ciphertext[-16:]
    for tampered in all_bit_flips(tag):
        assert_rejected(replace(sealed, ciphertext=body + tampered))


def test_every_bit_flip_in_aad_is_rejected(sealed: Sealed) -> None:
    for aad in all_bit_flips(sealed.aad):
        assert_rejected(replace(sealed, aad=aad))
    assert_rejected(replace(sealed, aad=sealed.aad + b"\x00"))
    assert_rejected(replace(sealed, aad=b""))


def test_every_bit_flip_in_info_is_rejected(sealed: Sealed) -> None:
    for info in all_bit_flips(sealed.info):
        assert_rejected(replace(sealed, info=info))
    assert_rejected(replace(sealed, info=sealed.info + b"\x00"))
    assert_rejected(replace(sealed, info=b""))


def test_every_truncation_of_the_ciphertext_is_rejected(sealed: Sealed) -> None:
    for length in range(len(sealed.ciphertext)):
        assert_rejected(replace(sealed, ciphertext=sealed.ciphertext[:length]))


def test_extended_ciphertext_is_rejected(sealed: Sealed) -> None:
    assert_rejected(replace(sealed, ciphertext=sealed.ciphertext + b"\x00"))


@pytest.mark.parametrize("length", [0, 1, 31, 33, 64])
def test_enc_of_the_wrong_length_is_rejected(sealed: Sealed, length: int) -> None:
    assert_rejected(replace(sealed, enc=(sealed.enc * 2)[:length]))


@pytest.mark.parametrize("point", LOW_ORDER_POINTS, ids=lambda p: p.hex()[:8] + p.hex()[-2:])
def test_low_order_enc_is_rejected(sealed: Sealed, point: bytes) -> None:
    assert_rejected(replace(sealed, enc=point))


@pytest.mark.parametrize("point", LOW_ORDER_POINTS, ids=lambda p: p.hex()[:8] + p.hex()[-2:])
def test_decap_refuses_low_order_enc_before_any_aead_check(point: bytes) -> None:
    # open() would also fail on the AEAD tag; decap alone shows the point itself is refused.
    recipient = hpke.generate_keypair(0)
    assert_only_hpke_error(
        lambda: hpke._decap(point, recipient._private_key, recipient.public_key),
        recipient.private_key_bytes(),
    )


def test_all_zero_dh_output_is_rejected_whatever_the_backend_does() -> None:
    with pytest.raises(HpkeError):
        hpke._extract_and_expand(bytes(32), b"kem context")


@pytest.mark.parametrize("point", LOW_ORDER_POINTS, ids=lambda p: p.hex()[:8] + p.hex()[-2:])
def test_seal_refuses_low_order_recipient_key(point: bytes) -> None:
    ephemeral = X25519PrivateKey.generate()
    assert_only_hpke_error(
        lambda: hpke.seal(point, DAP_INFO, b"", b"pt", ephemeral=ephemeral),
        ephemeral.private_bytes_raw(),
    )


@pytest.mark.parametrize("length", [0, 31, 33])
def test_seal_refuses_recipient_key_of_the_wrong_length(length: int) -> None:
    with pytest.raises(HpkeError):
        hpke.seal(b"\x09" * length, DAP_INFO, b"", b"pt")


def test_wrong_recipient_key_is_rejected(sealed: Sealed) -> None:
    assert_rejected(replace(sealed, recipient=hpke.generate_keypair(sealed.recipient.config_id)))


def test_open_batch_agrees_with_open_on_every_message_valid_or_not() -> None:
    """The batch opens what `open` opens (small shares, and leader-sized ones past the 2 KiB at
    which AES-GCM releases the GIL) and gives None exactly where `open` raises, without one bad
    message disturbing its neighbours; the RFC's message is in the batch too."""
    keys = [hpke.generate_keypair(1), hpke.generate_keypair(2)]
    rfc_recipient = hpke.derive_keypair(0, RFC["ikmR"])
    rfc_aad, rfc_ct = RFC_ENCRYPTIONS[0][1:]
    messages: list[tuple[HpkeKeyPair, bytes, bytes, bytes]] = []
    for i, size in enumerate([0, 29, 2047, 2700, 5000]):
        key = keys[i % 2]
        aad = f"aad {i}".encode()
        enc, ct = hpke.seal(key.public_key, RFC["info"], aad, bytes([i]) * size)
        messages += [
            (key, enc, aad, ct),
            (key, enc, aad, flipped(ct, 8 * len(ct) - 1)),
            (key, enc, aad + b"!", ct),
            (keys[1 - i % 2], enc, aad, ct),
            (key, LOW_ORDER_POINTS[i % len(LOW_ORDER_POINTS)], aad, ct),
            (key, enc[:31], aad, ct),
        ]
    messages.append((rfc_recipient, RFC["enc"], rfc_aad, rfc_ct))

    def one(keypair: HpkeKeyPair, enc: bytes, aad: bytes, ct: bytes) -> bytes | None:
        try:
            return hpke.open(keypair, enc, RFC["info"], aad, ct)
        except HpkeError:
            return None

    expected = [one(*message) for message in messages]
    assert hpke.open_batch(messages, RFC["info"]) == expected
    assert [e is not None for e in expected] == [i % 6 == 0 for i in range(30)] + [True]
    assert expected[-1] == RFC_PT
    assert hpke.open_batch([], RFC["info"]) == []


# --- Key pairs -----------------------------------------------------------------------------------


def test_repr_shows_public_fields_and_hides_the_private_key() -> None:
    keypair = hpke.derive_keypair(42, RFC["ikmR"])
    text = repr(keypair)
    assert "config_id=42" in text
    assert RFC["pkRm"].hex() in text
    assert RFC["skRm"].hex() not in text
    assert repr(RFC["skRm"]) not in text
    assert "private" not in text


def test_keypair_carries_the_mandatory_suite() -> None:
    keypair = hpke.generate_keypair(1)
    assert (keypair.kem_id, keypair.kdf_id, keypair.aead_id) == (
        HPKE_KEM_X25519_HKDF_SHA256,
        HPKE_KDF_HKDF_SHA256,
        HPKE_AEAD_AES_128_GCM,
    )


def test_keypair_fields_are_read_only() -> None:
    keypair = hpke.generate_keypair(1)
    with pytest.raises(AttributeError):
        keypair.public_key = bytes(32)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        keypair.config_id = 2  # type: ignore[misc]


def test_keypair_equality_follows_config_id_and_public_key() -> None:
    a = hpke.derive_keypair(1, RFC["ikmR"])
    assert a == hpke.derive_keypair(1, RFC["ikmR"])
    assert hash(a) == hash(hpke.derive_keypair(1, RFC["ikmR"]))
    assert a != hpke.derive_keypair(2, RFC["ikmR"])
    assert a != hpke.derive_keypair(1, RFC["ikmE"])


def test_generated_keypairs_differ() -> None:
    assert hpke.generate_keypair(0).public_key != hpke.generate_keypair(0).public_key


@pytest.mark.parametrize("config_id", [0, 255])
def test_config_id_accepts_the_whole_u8_range(config_id: int) -> None:
    assert hpke.generate_keypair(config_id).config_id == config_id


@pytest.mark.parametrize("config_id", [-1, 256])
def test_config_id_outside_u8_is_rejected(config_id: int) -> None:
    with pytest.raises(HpkeError):
        hpke.generate_keypair(config_id)


UNSUPPORTED_SUITES = [
    (0x0010, HPKE_KDF_HKDF_SHA256, HPKE_AEAD_AES_128_GCM),  # DHKEM(P-256)
    (0x0021, HPKE_KDF_HKDF_SHA256, HPKE_AEAD_AES_128_GCM),  # DHKEM(X448)
    (HPKE_KEM_X25519_HKDF_SHA256, 0x0002, HPKE_AEAD_AES_128_GCM),  # HKDF-SHA384
    (HPKE_KEM_X25519_HKDF_SHA256, HPKE_KDF_HKDF_SHA256, 0x0002),  # AES-256-GCM
    (HPKE_KEM_X25519_HKDF_SHA256, HPKE_KDF_HKDF_SHA256, 0x0003),  # ChaCha20Poly1305
    (HPKE_KEM_X25519_HKDF_SHA256, HPKE_KDF_HKDF_SHA256, 0xFFFF),  # export-only
]


def test_check_suite_accepts_the_mandatory_suite() -> None:
    hpke.check_suite(HPKE_KEM_X25519_HKDF_SHA256, HPKE_KDF_HKDF_SHA256, HPKE_AEAD_AES_128_GCM)


@pytest.mark.parametrize(("kem_id", "kdf_id", "aead_id"), UNSUPPORTED_SUITES)
def test_unsupported_suites_are_rejected(kem_id: int, kdf_id: int, aead_id: int) -> None:
    with pytest.raises(HpkeError):
        hpke.check_suite(kem_id, kdf_id, aead_id)
    with pytest.raises(HpkeError):
        HpkeKeyPair(0, X25519PrivateKey.generate(), kem_id=kem_id, kdf_id=kdf_id, aead_id=aead_id)
    with pytest.raises(HpkeError):
        hpke.from_private_bytes(0, bytes(32), kem_id=kem_id, kdf_id=kdf_id, aead_id=aead_id)


@pytest.mark.parametrize("length", [0, 31, 33])
def test_private_key_of_the_wrong_length_is_rejected(length: int) -> None:
    assert_only_hpke_error(lambda: hpke.from_private_bytes(0, b"\x07" * length), b"\x07" * length)


def test_derive_keypair_refuses_ikm_shorter_than_nsk() -> None:
    with pytest.raises(HpkeError):
        hpke.derive_keypair(0, RFC["ikmR"][:31])
