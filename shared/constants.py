"""Every protocol constant sagg uses, defined once.

Sources: draft-ietf-ppm-dap-09 (DAP), draft-irtf-cfrg-vdaf-08 (VDAF), RFC 9180 (HPKE).
Section numbers refer to those drafts.
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
