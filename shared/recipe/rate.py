"""A recipe's expected report rate (001 §4.8, "Rate validation by leader and helper").

"Based on the recipe, and the number of devices, the leader and the helper have an expectation
on the rate at which contributions arrive." Here: N devices (the analyst's population
estimate) answer within the collection window W, each contributing with probability q (the
recipe's sampling rate), so q N reports arrive in W; spread evenly, a `time_precision` bucket
of tp seconds expects

    R = q N tp / W

reports. The recipe server rounds R up (an expectation that is too high only loosens the
check) and publishes N, W, M and R in the signed recipe: a device recomputes R from the
recipe's own q and tp (`shared.recipe.model.Recipe` refuses a recipe whose R does not follow),
and the aggregators refuse batches with a bucket above M x R (`shared.dap.task.RateValidation`).
"""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["expected_reports_per_bucket"]


def expected_reports_per_bucket(
    sampling_rate: float, population: int, time_precision: int, collection_window: int
) -> int:
    """ceil(q N tp / W), at least 1, computed exactly from q's decimal form (0.1 is 1/10, not
    the double nearest to it, so that every party gets the same integer)."""
    if not 0 < sampling_rate <= 1:
        raise ValueError("the sampling rate must be in (0, 1]")
    if population < 1 or time_precision < 1 or collection_window < 1:
        raise ValueError("population, time precision and collection window must be positive")
    if collection_window < time_precision:
        raise ValueError("the collection window must span at least one time_precision bucket")
    rate = Fraction(repr(sampling_rate)) * population * time_precision / collection_window
    return max(1, math.ceil(rate))
