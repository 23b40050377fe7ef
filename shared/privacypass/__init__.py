"""Privacy Pass token type 0x0002 (Blind RSA) for sagg: RFC 9474, RFC 9577, RFC 9578.

Pure code, no I/O. Modules, one concept each, each holding the constants of its RFC section:

- `rsabssa`: RSA blind signatures (RFC 9474), all four SHA-384 variants.
- `keys`: the RSASSA-PSS SPKI and token_key_id of an issuer key (RFC 9578 §6.5).
- `messages`: TokenChallenge, TokenRequest, TokenResponse, Token (RFC 9577 §2, RFC 9578 §6).
- `headers`: WWW-Authenticate / Authorization ``PrivateToken`` values (RFC 9577 §2.1.2, §2.2.1).
- `directory`: the issuer directory JSON (RFC 9578 §4).
- `client`: building a TokenRequest and finalizing a Token (RFC 9578 §6.1, §6.3).
- `issuance`: validating and blind-signing a TokenRequest (RFC 9578 §6.2).
- `verify`: `verify_token` / `verify_authorization` for origins (RFC 9577 §2.2.3, RFC 9578 §6.4).
- `attestation`: what a device signs for sagg's attester (not an RFC; RFC 9576 §3.5.1).
"""
