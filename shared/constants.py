"""Every protocol constant sagg uses, defined once.

Sources: draft-ietf-ppm-dap-09 (DAP), draft-irtf-cfrg-vdaf-08 (VDAF), RFC 9180 (HPKE),
RFC 9474, 9577 and 9578 (Privacy Pass). Section numbers refer to those documents.
"""

from __future__ import annotations

from typing import Final

# --- DAP-09 -----------------------------------------------------------------------------------

#: Version tag that prefixes every HPKE info string (DAP-09 §4.4.2, §4.6.4).
DAP_VERSION: Final = "dap-09"

# Media types (DAP-09 §8.1). Sent exactly, with no parameters: divviup-ts compares them verbatim.
MEDIA_HPKE_CONFIG_LIST: Final = "application/dap-hpke-config-list"
MEDIA_REPORT: Final = "application/dap-report"
MEDIA_AGGREGATION_JOB_INIT_REQ: Final = "application/dap-aggregation-job-init-req"
MEDIA_AGGREGATION_JOB_RESP: Final = "application/dap-aggregation-job-resp"
MEDIA_AGGREGATION_JOB_CONTINUE_REQ: Final = "application/dap-aggregation-job-continue-req"
MEDIA_AGGREGATE_SHARE_REQ: Final = "application/dap-aggregate-share-req"
MEDIA_AGGREGATE_SHARE: Final = "application/dap-aggregate-share"
MEDIA_COLLECT_REQ: Final = "application/dap-collect-req"
MEDIA_COLLECTION: Final = "application/dap-collection"
MEDIA_PROBLEM: Final = "application/problem+json"

#: Prefix of every DAP problem type URN (DAP-09 §3.2).
PROBLEM_URN_PREFIX: Final = "urn:ietf:params:ppm:dap:error:"

#: Header carrying the shared bearer secret between parties (interop draft §4.2, DAP-09 §3.1).
DAP_AUTH_HEADER: Final = "DAP-Auth-Token"

#: Roles (DAP-09 §4.1), as carried in HPKE info strings.
ROLE_COLLECTOR: Final = 0
ROLE_CLIENT: Final = 1
ROLE_LEADER: Final = 2
ROLE_HELPER: Final = 3

#: Query types (DAP-09 §4.1).
QUERY_TYPE_TIME_INTERVAL: Final = 1
QUERY_TYPE_FIXED_SIZE: Final = 2

#: Fixed-size query subtypes (DAP-09 §4.1).
FIXED_SIZE_BY_BATCH_ID: Final = 0
FIXED_SIZE_CURRENT_BATCH: Final = 1

#: HPKE info labels (DAP-09 §4.4.2 and §4.6.4); the role bytes follow the label.
HPKE_INFO_INPUT_SHARE: Final = b"dap-09 input share"
HPKE_INFO_AGGREGATE_SHARE: Final = b"dap-09 aggregate share"

#: Sizes of DAP identifiers in bytes (DAP-09 §4.1).
TASK_ID_SIZE: Final = 32
REPORT_ID_SIZE: Final = 16
BATCH_ID_SIZE: Final = 32
AGGREGATION_JOB_ID_SIZE: Final = 16
COLLECTION_JOB_ID_SIZE: Final = 16

# --- HPKE (RFC 9180 §7), the suite DAP-09 §6 makes mandatory -----------------------------------

HPKE_KEM_X25519_HKDF_SHA256: Final = 0x0020
HPKE_KDF_HKDF_SHA256: Final = 0x0001
HPKE_AEAD_AES_128_GCM: Final = 0x0001

# --- VDAF-08 ----------------------------------------------------------------------------------

#: Version byte in every domain-separation tag (VDAF-08 §6.2.3).
VDAF_VERSION: Final = 8

#: Algorithm classes in the DST (VDAF-08 §6.2.3).
ALGO_CLASS_VDAF: Final = 0

#: Algorithm identifiers (VDAF-08 §10); 0xFFFF0000..0xFFFFFFFF are private.
ALGO_PRIO3_COUNT: Final = 0x00000000
ALGO_PRIO3_SUM: Final = 0x00000001
ALGO_PRIO3_SUM_VEC: Final = 0x00000002
ALGO_PRIO3_HISTOGRAM: Final = 0x00000003
#: Private codepoint the VDAF-08 reference code uses for its experimental Prio3 variants.
ALGO_PRIO3_PRIVATE: Final = 0xFFFFFFFF

#: Prio3 DST usages (VDAF-08 §7.2, table "prio3-const").
USAGE_MEAS_SHARE: Final = 1
USAGE_PROOF_SHARE: Final = 2
USAGE_JOINT_RANDOMNESS: Final = 3
USAGE_PROVE_RANDOMNESS: Final = 4
USAGE_QUERY_RANDOMNESS: Final = 5
USAGE_JOINT_RAND_SEED: Final = 6
USAGE_JOINT_RAND_PART: Final = 7

#: XofTurboShake128 seed size and Prio3 sizes (VDAF-08 §6.2.1, §7.2).
XOF_SEED_SIZE: Final = 16
VERIFY_KEY_SIZE: Final = 16
NONCE_SIZE: Final = 16

# --- DAP-09, added later ----------------------------------------------------------------------

#: Size of the report-ID checksum in AggregateShareReq: XOR of SHA-256(report_id) (DAP-09 §4.6.2).
REPORT_ID_CHECKSUM_SIZE: Final = 32

# --- Privacy Pass token types (RFC 9578 §8.2) ----------------------------------------------

#: Blind RSA (SHA-384, 2048-bit), publicly verifiable: the only type sagg issues (RFC 9578 §6).
TOKEN_TYPE_BLIND_RSA: Final = 0x0002
#: VOPRF(P-384, SHA-384), privately verifiable (RFC 9578 §5); recognized, never issued.
TOKEN_TYPE_VOPRF: Final = 0x0001

#: Reserved ("greased") token types that clients must ignore (RFC 9577 §6.2.1).
GREASE_TOKEN_TYPES: Final = frozenset(
    {
        0x0000, 0x02AA, 0x1132, 0x2E96, 0x3CD3, 0x4473, 0x5A63, 0x6D32, 0x7F3F,
        0x8D07, 0x916B, 0xA6A4, 0xBEAB, 0xC3F3, 0xDA42, 0xE944, 0xF057,
    }
)  # fmt: skip

# --- Sizes (RFC 9577 §2.2, RFC 9578 §6) -------------------------------------------------------

#: Client nonce in TokenInput and Token (RFC 9577 §2.2).
TOKEN_NONCE_SIZE: Final = 32
#: SHA-256 digest of the TokenChallenge (RFC 9577 §2.2).
CHALLENGE_DIGEST_SIZE: Final = 32
#: Nid: SHA-256 of the issuer key's SPKI (RFC 9578 §6, Nid = 32).
TOKEN_KEY_ID_SIZE: Final = 32
#: A redemption_context is empty or exactly this long (RFC 9577 §2.1.1).
REDEMPTION_CONTEXT_SIZE: Final = 32
#: Issuer RSA modulus for token type 2, in bits (RFC 9578 §6: "Blind RSA (SHA-384, 2048-bit)").
BLIND_RSA_MODULUS_BITS: Final = 2048
#: Nk for token type 2: the RSA modulus length in bytes (RFC 9578 §6).
BLIND_RSA_NK: Final = BLIND_RSA_MODULUS_BITS // 8
#: The public exponent sagg generates keys with (RFC 9578 §6.5 leaves it open; 65537 is the
#: value of every published vector and of the SPKI template).
BLIND_RSA_PUBLIC_EXPONENT: Final = 65537
#: PSS salt length for token type 2: the SHA-384 output size (RFC 9578 §6.4, §6.5).
BLIND_RSA_SALT_LEN: Final = 48
#: The PrepareRandomize prefix length (RFC 9474 §4.1).
RSABSSA_PREFIX_LEN: Final = 32

# --- HTTP (RFC 9577 §2, RFC 9578 §4, §6, §8) --------------------------------------------------

#: The HTTP authentication scheme name (RFC 9577 §2).
PRIVATE_TOKEN_AUTH_SCHEME: Final = "PrivateToken"
#: Well-known path of the issuer directory (RFC 9578 §4, §8.1).
ISSUER_DIRECTORY_PATH: Final = "/.well-known/private-token-issuer-directory"

# Media types (RFC 9578 §8.3), sent and matched exactly, with no parameters.
MEDIA_TOKEN_REQUEST: Final = "application/private-token-request"
MEDIA_TOKEN_RESPONSE: Final = "application/private-token-response"
MEDIA_ISSUER_DIRECTORY: Final = "application/private-token-issuer-directory"

# --- Recipes and the recipe transparency log (sagg's own formats) ----------------------------
# Every signature the recipe server makes is over a context string followed by the signed bytes,
# so a signature of one kind can never be replayed as another.

#: The `format` member of every recipe; a device refuses formats it does not know.
RECIPE_FORMAT: Final = "sagg-recipe/1"

#: Ed25519 signature contexts (prepended to the signed bytes, each ends with a NUL).
RECIPE_SIGNATURE_CONTEXT: Final = b"sagg recipe v1\x00"
TREE_HEAD_SIGNATURE_CONTEXT: Final = b"sagg recipe log tree head v1\x00"

#: Signature algorithm name as the key directory (`GET /keys`) states it.
SIGNATURE_ALGORITHM: Final = "Ed25519"

#: Media types of the recipe server's JSON documents.
MEDIA_SIGNED_RECIPE: Final = "application/sagg-signed-recipe+json"
MEDIA_RECIPE_LIST: Final = "application/sagg-recipe-list+json"
MEDIA_TREE_HEAD: Final = "application/sagg-tree-head+json"

#: SHA-256 output length: leaf and node hashes of the recipe log (RFC 9162 §2.1.1).
LOG_HASH_SIZE: Final = 32

# --- sagg's private DAP report extensions (DAP-09 §4.4.2 leaves codepoints open) ---------------

#: A Privacy Pass token (RFC 9577 §2.2 `Token`) that the report spends, in both input shares.
EXTENSION_PRIVACY_PASS_TOKEN: Final = 0xFE00
#: The recipe the device answered and its minimum batch size B, in both input shares (001 §4.8).
EXTENSION_RECIPE_BINDING: Final = 0xFE01

# --- operations -------------------------------------------------------------------------------

#: Prometheus text exposition format 0.0.4, as every service's `GET /metrics` answers it.
MEDIA_PROMETHEUS_TEXT: Final = "text/plain; version=0.0.4; charset=utf-8"
