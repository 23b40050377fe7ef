"""RSABSSA behaviour beyond the vectors: round trips, the fault check, refused inputs."""

from __future__ import annotations

import secrets

import gmpy2
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.privacypass import rsabssa


@pytest.fixture(scope="module")
def sk() -> rsabssa.RsaPrivateKey:
    return rsabssa.RsaPrivateKey.generate(2048)


@pytest.mark.parametrize("variant", list(rsabssa.VARIANTS.values()), ids=lambda v: v.name)
def test_round_trip_every_variant(sk: rsabssa.RsaPrivateKey, variant: rsabssa.Variant) -> None:
    pk = sk.public_key
    msg = b"sagg report"
    prepared = rsabssa.prepare(variant, msg)
    assert (len(prepared) - len(msg)) == (32 if variant.randomized else 0)
    blinded, inv = rsabssa.blind(pk, prepared, variant)
    sig = rsabssa.finalize(pk, prepared, rsabssa.blind_sign(sk, blinded), inv, variant)
    rsabssa.verify(pk, prepared, sig, variant)
    pk.to_cryptography().verify(
        sig,
        prepared,
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=variant.salt_len),
        hashes.SHA384(),
    )
    with pytest.raises(rsabssa.InvalidSignatureError):
        rsabssa.verify(pk, prepared + b"x", sig, variant)


def test_randomized_prepare_draws_a_fresh_prefix() -> None:
    a = rsabssa.prepare(rsabssa.PSS_RANDOMIZED, b"m")
    b = rsabssa.prepare(rsabssa.PSS_RANDOMIZED, b"m")
    assert a != b and a[32:] == b[32:] == b"m"
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.prepare(rsabssa.PSS_DETERMINISTIC, b"m", prefix=bytes(32))
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.prepare(rsabssa.PSS_RANDOMIZED, b"m", prefix=bytes(31))


def test_blinding_is_fresh_each_time(sk: rsabssa.RsaPrivateKey) -> None:
    """Two blindings of one message are unrelated (RFC 9474 §4.2: r is uniform)."""
    pk = sk.public_key
    a, _ = rsabssa.blind(pk, b"m", rsabssa.PSSZERO_DETERMINISTIC)
    b, _ = rsabssa.blind(pk, b"m", rsabssa.PSSZERO_DETERMINISTIC)
    assert a != b


def test_blind_sign_refuses_on_fault(
    sk: rsabssa.RsaPrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CRT fault (wrong dP) gives s with s^e != m; BlindSign must refuse, not return s."""
    # The CRT computed here (OpenSSL's is out of reach of a patch; the next test covers it).
    monkeypatch.setattr(sk, "_openssl", None)
    monkeypatch.setattr(sk, "_openssl_tried", True)
    blinded, _ = rsabssa.blind(sk.public_key, b"m", rsabssa.PSS_DETERMINISTIC)
    rsabssa.blind_sign(sk, blinded)  # fine before the fault
    monkeypatch.setattr(sk, "_dp", sk._dp + 2)
    with pytest.raises(rsabssa.SigningFailureError):
        rsabssa.blind_sign(sk, blinded)


def test_blind_sign_refuses_on_flipped_result(
    sk: rsabssa.RsaPrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever corrupts the exponentiation, the s^e == m check catches it."""
    blinded, _ = rsabssa.blind(sk.public_key, b"m", rsabssa.PSS_DETERMINISTIC)
    original = rsabssa.RsaPrivateKey._rsasp1
    monkeypatch.setattr(rsabssa.RsaPrivateKey, "_rsasp1", lambda self, m: original(self, m) ^ 1)
    with pytest.raises(rsabssa.SigningFailureError):
        rsabssa.blind_sign(sk, blinded)


def test_openssl_private_operation_is_textbook_rsa(sk: rsabssa.RsaPrivateKey) -> None:
    """OpenSSL's RSASP1 and the CRT here both give m^d mod n, computed by Python's pow."""
    key = sk._openssl_key()
    if key is None:
        pytest.skip("no OpenSSL 3 libcrypto to load")
    n, d = int(sk.public_key.n), int(sk._d)
    plain = rsabssa.RsaPrivateKey(int(sk._p), int(sk._q), d, int(sk.public_key.e))
    plain._openssl_tried = True  # its own CRT
    for m in (0, 1, 2, n - 1, secrets.randbelow(n), secrets.randbelow(n)):
        expected = pow(m, d, n)
        assert int.from_bytes(key.rsasp1(m.to_bytes(sk.public_key.modulus_len, "big"))) == expected
        assert int(plain._rsasp1(gmpy2.mpz(m))) == expected


def test_blind_sign_refuses_bad_input(sk: rsabssa.RsaPrivateKey) -> None:
    k = sk.public_key.modulus_len
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.blind_sign(sk, bytes(k - 1))
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.blind_sign(sk, int(sk.public_key.n).to_bytes(k, "big"))


def test_finalize_refuses_a_wrong_signature(sk: rsabssa.RsaPrivateKey) -> None:
    pk = sk.public_key
    v = rsabssa.PSS_DETERMINISTIC
    blinded, inv = rsabssa.blind(pk, b"m", v)
    blind_sig = bytearray(rsabssa.blind_sign(sk, blinded))
    blind_sig[-1] ^= 1
    with pytest.raises(rsabssa.InvalidSignatureError):
        rsabssa.finalize(pk, b"m", bytes(blind_sig), inv, v)
    with pytest.raises(rsabssa.InvalidSignatureError):
        rsabssa.finalize(pk, b"m", bytes(blind_sig[:-1]), inv, v)
    # A signature from another key does not finalize either (the blinded message is reduced
    # mod the other modulus, which may be the smaller one).
    other = rsabssa.RsaPrivateKey.generate(2048)
    with pytest.raises(rsabssa.InvalidSignatureError):
        reduced = int.from_bytes(blinded, "big") % int(other.public_key.n)
        other_sig = rsabssa.blind_sign(other, reduced.to_bytes(len(blinded), "big"))
        rsabssa.finalize(pk, b"m", other_sig, inv, v)


def test_blind_refuses_bad_parameters(sk: rsabssa.RsaPrivateKey) -> None:
    pk = sk.public_key
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.blind(pk, b"m", rsabssa.PSS_DETERMINISTIC, salt=bytes(47))
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.blind(pk, b"m", rsabssa.PSS_DETERMINISTIC, r=0)
    with pytest.raises(rsabssa.BlindingError):
        rsabssa.blind(pk, b"m", rsabssa.PSS_DETERMINISTIC, r=int(sk._p))
    small = rsabssa.RsaPublicKey(gmpy2.next_prime(2**350) * gmpy2.next_prime(2**300), 65537)
    with pytest.raises(rsabssa.MessageTooLongError):
        rsabssa.blind(small, b"m", rsabssa.PSS_DETERMINISTIC)


def test_key_construction_is_checked(sk: rsabssa.RsaPrivateKey) -> None:
    p, q, d = int(sk._p), int(sk._q), int(sk._d)
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.RsaPrivateKey(p, q, d + 2, 65537)
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.RsaPrivateKey(p, p, d, 65537)
    with pytest.raises(rsabssa.InvalidInputError):
        rsabssa.RsaPublicKey(2**2048, 65537)


def test_private_key_round_trips_through_cryptography(sk: rsabssa.RsaPrivateKey) -> None:
    again = rsabssa.RsaPrivateKey.from_cryptography(sk.to_cryptography())
    assert again.public_key == sk.public_key


def test_reprs_hide_secrets(sk: rsabssa.RsaPrivateKey) -> None:
    _, inv = rsabssa.blind(sk.public_key, b"m", rsabssa.PSS_DETERMINISTIC)
    text = repr(sk) + repr(inv) + repr(sk.public_key)
    for secret in (sk._p, sk._q, sk._d, inv.value):
        assert str(int(secret)) not in text
        assert format(int(secret), "x") not in text
    assert "2048" in repr(sk)


@settings(max_examples=30, deadline=None)
@given(msg=st.binary(max_size=200), flip=st.integers(min_value=0, max_value=255 * 8 - 1))
def test_emsa_pss_rejects_any_single_bit_flip(
    sk: rsabssa.RsaPrivateKey, msg: bytes, flip: int
) -> None:
    """RSASSA-PSS-VERIFY accepts the RSA signature of EMSA-PSS-ENCODE's encoding, not with
    another salt length, and not that of the encoding with any one bit flipped."""
    pk = sk.public_key
    em_bits = pk.bits - 1

    def sign(em: bytes) -> bytes:
        # Reduced: the encoding with its top bit flipped can exceed n.
        return rsabssa._i2osp(sk._rsasp1(rsabssa._os2ip(em) % pk.n), pk.modulus_len)

    em = bytearray(rsabssa.emsa_pss_encode(msg, em_bits, bytes(range(48))))
    rsabssa.verify(pk, msg, sign(bytes(em)), rsabssa.PSS_DETERMINISTIC)
    with pytest.raises(rsabssa.InvalidSignatureError):
        rsabssa.verify(pk, msg, sign(bytes(em)), rsabssa.PSSZERO_DETERMINISTIC)
    em[flip // 8] ^= 1 << (flip % 8)
    with pytest.raises(rsabssa.InvalidSignatureError):
        rsabssa.verify(pk, msg, sign(bytes(em)), rsabssa.PSS_DETERMINISTIC)
