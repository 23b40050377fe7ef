"""RFC 9474 Appendix A: every RSABSSA step reproduced byte for byte, for all four variants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gmpy2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from shared.privacypass import rsabssa
from tests.privacypass.vectors import h, load

NAMES = [
    "RSABSSA-SHA384-PSS-Randomized",
    "RSABSSA-SHA384-PSSZERO-Randomized",
    "RSABSSA-SHA384-PSS-Deterministic",
    "RSABSSA-SHA384-PSSZERO-Deterministic",
]


@pytest.fixture(scope="module")
def vectors(vectors_dir: Path) -> dict[str, Any]:
    doc = load("rfc9474-rsabssa.json", vectors_dir)
    by_name = {v["name"]: v for v in doc["vectors"]}
    assert sorted(by_name) == sorted(NAMES)
    return by_name


def _key(v: dict[str, Any]) -> rsabssa.RsaPrivateKey:
    return rsabssa.RsaPrivateKey(int(v["p"], 16), int(v["q"], 16), int(v["d"], 16), int(v["e"], 16))


@pytest.mark.parametrize("name", NAMES)
def test_variant_parameters(vectors: dict[str, Any], name: str) -> None:
    v = vectors[name]
    variant = rsabssa.VARIANTS[name]
    assert variant.salt_len == v["salt_len"]
    assert variant.randomized == v["is_randomized"]


@pytest.mark.parametrize("name", NAMES)
def test_vector_byte_for_byte(vectors: dict[str, Any], name: str) -> None:
    v = vectors[name]
    variant = rsabssa.VARIANTS[name]
    sk = _key(v)
    pk = sk.public_key
    assert int(pk.n) == int(v["n"], 16)
    assert pk.modulus_len == 512

    prepared = rsabssa.prepare(variant, h(v["msg"]), prefix=h(v["msg_prefix"]) or None)
    assert prepared == h(v["prepared_msg"])
    assert rsabssa.emsa_pss_encode(prepared, pk.bits - 1, h(v["salt"])) == h(v["encoded_msg"])

    r = int(gmpy2.invert(int(v["inv"], 16), pk.n))
    blinded, inv = rsabssa.blind(pk, prepared, variant, salt=h(v["salt"]), r=r)
    assert blinded == h(v["blinded_msg"])
    assert inv.value == int(v["inv"], 16)

    blind_sig = rsabssa.blind_sign(sk, blinded)
    assert blind_sig == h(v["blind_sig"])

    sig = rsabssa.finalize(pk, prepared, blind_sig, inv, variant)
    assert sig == h(v["sig"])
    rsabssa.verify(pk, prepared, sig, variant)


def test_superseded_draft_values_are_consistent(vectors: dict[str, Any]) -> None:
    """RFC 9474 A.4's pre-publication inv/blinded_msg/blind_sig also finalize to the same sig."""
    v = vectors["RSABSSA-SHA384-PSSZERO-Deterministic"]
    old = v["draft_repo_values_superseded"]
    sk = _key(v)
    pk = sk.public_key
    variant = rsabssa.PSSZERO_DETERMINISTIC
    r = int(gmpy2.invert(int(old["inv"], 16), pk.n))
    blinded, inv = rsabssa.blind(pk, h(v["prepared_msg"]), variant, salt=b"", r=r)
    assert blinded == h(old["blinded_msg"])
    assert rsabssa.blind_sign(sk, blinded) == h(old["blind_sig"])
    assert rsabssa.finalize(pk, h(v["prepared_msg"]), h(old["blind_sig"]), inv, variant) == h(
        v["sig"]
    )


@pytest.mark.parametrize("name", NAMES)
def test_signature_verifies_with_cryptography(vectors: dict[str, Any], name: str) -> None:
    """An independent RSASSA-PSS verifier accepts the vector signature with the exact sLen and
    refuses it with the other variant's sLen, so the salt length is not ignored."""
    v = vectors[name]
    variant = rsabssa.VARIANTS[name]
    pub = _key(v).public_key.to_cryptography()
    msg, sig = h(v["prepared_msg"]), h(v["sig"])
    pub.verify(
        sig,
        msg,
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=variant.salt_len),
        hashes.SHA384(),
    )
    other = 0 if variant.salt_len else 48
    with pytest.raises(InvalidSignature):
        pub.verify(
            sig,
            msg,
            padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=other),
            hashes.SHA384(),
        )
    # Ours refuses the wrong salt length too.
    wrong = rsabssa.Variant("wrong", other, variant.randomized)
    with pytest.raises(rsabssa.InvalidSignatureError):
        rsabssa.verify(_key(v).public_key, msg, sig, wrong)
