"""A seeded population of simulated devices, cut into chunks and shards (issue #13).

A population is `count` devices numbered 0..count-1 and a seed. Everything that decides what
the population reports is a function of the seed and a device's number (or its chunk's), never
of the order in which devices are simulated or of which process simulates them:

- each device's synthetic data and its own coins (the sampling coin, record selection, the
  donation slot, its report time within the window, whether it is offline or malicious) come
  from its own generator, `device_random(seed, purpose, device)`;
- local randomization is batched per chunk of `CHUNK` consecutive devices (one numpy call,
  each row its own noise), from the chunk's generator `chunk_noise(seed, chunk)`.

So a shard (`Shard`: every k-th chunk from the i-th) or a worker process simulates exactly the
devices and measurements one process would, and k shards together give the same aggregate.
What does not change an aggregate stays fresh from the OS CSPRNG: report ids, Prio3 share
randomness, HPKE keys, token blinding and device keys.

A simulated device's coins are reproducible by design; a real device draws them from its
CSPRNG (`client_sdk.sampling.device_random`).

`PopulationMix` makes the population the papers assume rather than a lockstep crowd: devices
offline for the window, clocks off by a few seconds or minutes, answer times spread over a
window (uniform, or diurnal: more in the evening), and optionally an adversary: a fraction of
malicious devices that replay their tokens in a second report (which the aggregators' spent
sets must refuse), and a Sybil surge of extra enrolled devices all answering one value at
one instant (the rate spike 001 §4.8's rate validation refuses). Dummy reports (001 §4.6)
follow the recipe's `dummy_rate`.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "CHUNK",
    "Arrivals",
    "PopulationMix",
    "Shard",
    "chunk_devices",
    "chunk_noise",
    "device_random",
]

#: Devices simulated together: one Prio3 `shard_batch`, one randomization call, then dropped.
CHUNK = 64


def _seed(seed: int, purpose: str, number: int) -> int:
    digest = hashlib.sha256(f"sagg population/{seed}/{purpose}/{number}".encode()).digest()
    return int.from_bytes(digest[:16], "big")


def device_random(seed: int, purpose: str, device: int) -> random.Random:
    """Device `device`'s generator for `purpose` (e.g. "data", "coins")."""
    return random.Random(_seed(seed, purpose, device))


def chunk_noise(seed: int, chunk: int) -> np.random.Generator:
    """The local randomizers' noise for chunk `chunk` (every row drawn independently)."""
    return np.random.default_rng(_seed(seed, "noise", chunk))


@dataclass(frozen=True, slots=True)
class Shard:
    """Share `index` of `count` of a population: chunks index, index + count, ..."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"a shard is i/k with 0 <= i < k, not {self.index}/{self.count}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"i/k"``."""
        index, sep, count = text.partition("/")
        if not sep or not index.strip().isdigit() or not count.strip().isdigit():
            raise ValueError(f"a shard is written i/k (e.g. 0/2), not {text!r}")
        return cls(int(index), int(count))

    def split(self, workers: int) -> list[Shard]:
        """This shard's chunks dealt over `workers` processes (together exactly this shard's)."""
        return [Shard(self.index + self.count * j, self.count * workers) for j in range(workers)]

    def chunks(self, population: int) -> range:
        """The numbers of this shard's chunks of a population of `population` devices."""
        return range(self.index, -(-population // CHUNK), self.count)

    def devices(self, population: int) -> int:
        """How many devices this shard simulates."""
        return sum(len(chunk_devices(c, population)) for c in self.chunks(population))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def chunk_devices(chunk: int, population: int) -> range:
    """The devices of chunk `chunk`."""
    return range(chunk * CHUNK, min(population, (chunk + 1) * CHUNK))


Arrivals = Literal["uniform", "diurnal"]

#: The diurnal profile's peak, seconds after midnight UTC, and its swing around the mean.
_PEAK = 20 * 3600
_SWING = 0.8


@dataclass(frozen=True, slots=True)
class PopulationMix:
    """Who is online, when each device answers, and who is an adversary (module docstring).
    Devices numbered from the population's count up are the Sybils."""

    offline: float = 0.0
    #: Standard deviation of a device's clock error, seconds.
    clock_skew: float = 0.0
    #: Answer times spread over the `window` seconds before the simulation starts.
    window: int = 0
    arrivals: Arrivals = "uniform"
    malicious: float = 0.0
    sybils: int = 0
    #: The answer every Sybil gives (a one-hot index of the recipe's encoding).
    sybil_answer: int = 0

    def __post_init__(self) -> None:
        for name in ("offline", "malicious"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} is a fraction of the population")
        if self.clock_skew < 0 or self.window < 0 or self.sybils < 0 or self.sybil_answer < 0:
            raise ValueError("clock skew, window, Sybils and the Sybil answer are >= 0")

    def is_offline(self, seed: int, device: int) -> bool:
        return self.offline > 0 and device_random(seed, "offline", device).random() < self.offline

    def is_malicious(self, seed: int, device: int) -> bool:
        return (
            self.malicious > 0
            and device_random(seed, "malicious", device).random() < self.malicious
        )

    def clock_offset(self, seed: int, device: int, start: int) -> int:
        """Seconds from the simulation's start `start` to the device's clock when it answers
        (<= 0 but for its clock error). The Sybils' is 0: they answer together."""
        rng = device_random(seed, "clock", device)
        skew = round(rng.gauss(0, self.clock_skew)) if self.clock_skew else 0
        if self.window == 0:
            return skew
        while True:
            back = rng.randrange(self.window)
            if self.arrivals == "uniform":
                return skew - back
            # Rejection sampling of 1 + SWING cos(2 pi (t - PEAK) / day).
            phase = 2 * math.pi * ((start - back - _PEAK) % 86400) / 86400
            if rng.random() * (1 + _SWING) < 1 + _SWING * math.cos(phase):
                return skew - back
