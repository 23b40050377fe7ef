"""Differential-privacy math for sagg: local randomizers, estimators, accounting, aggregator noise.

Pure functions and small frozen dataclasses; randomness is always an argument (a
`numpy.random.Generator` for simulation, an injectable cryptographic `RandomSource` for the
aggregator-noise samplers). Formulas and sources: `shared/specs/dp.md` and the module docstrings.
"""
