"""Self-sampling and randomized donation time: when, and whether, a device contributes.

- Poisson self-sampling (001 §4.1, 000 §3): each device answering a recipe flips its own coin
  with probability q = `recipe.sampling_rate`, using the device's own randomness (`secrets`),
  so no server learns or chooses who is in the sample; the recipe's privacy claim counts on
  the amplification this gives (`shared.recipe.accounting`). The budget is consumed whatever
  the coin says: otherwise a device could be asked again until sampled, and the sample would no
  longer be a q-sample.
- Randomized donation time (001 appendix A): the device picks i uniformly in {0, ..., m-1}
  and uploads after a wait of i K (slots of K seconds), so the arrival time of its report
  says little about when it answered. The simulator compresses the clock instead of sleeping.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

__all__ = ["DonationSchedule", "RandomSource", "device_random", "poisson_sample"]


#: The device's randomness: `secrets.SystemRandom` in use, a seeded `random.Random` in tests.
RandomSource = random.Random


def device_random() -> random.Random:
    """The device's own CSPRNG (tests pass a seeded `random.Random` instead)."""
    return secrets.SystemRandom()


def poisson_sample(q: float, rng: RandomSource) -> bool:
    """True with probability q."""
    if not 0 < q <= 1:
        raise ValueError("q must be in (0, 1]")
    return q >= 1 or rng.random() < q


@dataclass(frozen=True, slots=True)
class DonationSchedule:
    """001 appendix A's m slots of K seconds; (1, 0) uploads at once."""

    slots: int = 12
    slot_seconds: int = 300

    def __post_init__(self) -> None:
        if self.slots < 1 or self.slot_seconds < 0:
            raise ValueError("need slots >= 1 and slot_seconds >= 0")

    def donation_time(self, now: int, rng: RandomSource) -> int:
        return now + rng.randrange(self.slots) * self.slot_seconds

    def token_fetch_time(self, now: int, donation_time: int, rng: RandomSource) -> int:
        """A uniformly random time in [now, donation_time]: the token request, which the
        attester sees with the device's identity, is not timed by the upload (001 §4.x)."""
        return now + rng.randrange(donation_time - now + 1)
