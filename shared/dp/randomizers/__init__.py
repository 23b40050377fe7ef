"""Local randomizers (device side), each with its server-side debiasing and variance.

Every randomizer is a small frozen dataclass of public parameters whose batch methods take a
`numpy.random.Generator`, so a simulator can randomize many devices at once.
"""
