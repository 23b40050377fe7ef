"""Recipes: what devices are asked, how they verify it, and the public log of what was asked.

- `model`: the recipe (000 §4.1, appendix B; 001 §4.1) and the analyst's draft.
- `canonical`: RFC 8785 canonical JSON, the recipe's byte encoding.
- `signing`: Ed25519 signatures over canonical recipes; device-side verification.
- `accounting`: the recipe's (q, B) against its claimed (epsilon, delta); its expected VDAF.
- `query_class`: query classes of a device policy and the verifier of 000 §4.2.
- `log`: the RFC 9162-style Merkle transparency log, signed tree heads, proofs, `LogVerifier`.
"""
