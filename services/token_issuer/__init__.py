"""Privacy Pass token issuer and attester (RFC 9576, RFC 9578 token type 2) for sagg devices.

- `keys`: the issuer's per-epoch keys, rotation and storage.
- `issuer`: the Issuer role, without HTTP.
- `attester`: device enrollment and authentication, per-device quotas, relaying to the issuer.
- `app`: the FastAPI application for the joint, issuer or attester role.
- `settings`: `SAGG_TOKEN_ISSUER_*` configuration; `python -m services.token_issuer` runs it.
"""
