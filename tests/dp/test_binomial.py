"""`shared.dp.binomial` against `scipy.stats.binom`, the public API it stands in for: the same
values to the bit on and off the support, at the sizes and tails the accounting uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from shared.dp import binomial

SIZES = [0, 1, 2, 7, 50, 2202, 100_000, 1_000_000]
PROBABILITIES = [0.0, 1e-6, 0.0025, 0.119, 0.5, 0.88, 1.0]
TAILS = [0.0, 1e-300, 1e-12, 1e-6, 0.05, 0.5, 0.95, 1 - 1e-9, 1.0]


def points(n: int) -> np.ndarray:
    """k across the support and just off it, where the functions change their handling."""
    inner = np.unique(np.linspace(0, n, 41).round())
    return np.concatenate([[-2.0, -1.0], inner, [n + 1.0, n + 2.0]])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("p", PROBABILITIES)
@pytest.mark.parametrize("name", ["pmf", "logpmf", "cdf", "sf"])
def test_mass_and_tails_match_scipy(name: str, n: int, p: float) -> None:
    k = points(n)
    with np.errstate(divide="ignore"):
        expected = getattr(stats.binom, name)(k, n, p)
        got = getattr(binomial, name)(k, n, p)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("p", PROBABILITIES)
@pytest.mark.parametrize("name", ["ppf", "isf"])
def test_quantiles_match_scipy(name: str, n: int, p: float) -> None:
    q = np.array(TAILS)
    np.testing.assert_array_equal(
        getattr(binomial, name)(q, n, p), getattr(stats.binom, name)(q, n, p)
    )


def test_arguments_broadcast_like_scipy() -> None:
    k = np.arange(-1, 12)[:, None]
    n = np.array([3, 10, 11])
    np.testing.assert_array_equal(binomial.cdf(k, n, 0.3), stats.binom.cdf(k, n, 0.3))
    q = np.array([1e-9, 0.5])[:, None]
    np.testing.assert_array_equal(binomial.ppf(q, n, 0.7), stats.binom.ppf(q, n, 0.7))


def test_quantiles_invert_the_cdf() -> None:
    """The definitions themselves, not only scipy's word: ppf is the least k with
    cdf(k) >= q, isf the least k with sf(k) <= q."""
    n, p = 2202, 0.238
    for q in (1e-12, 1e-6, 0.3, 0.999):
        k = binomial.ppf(q, n, p)
        assert binomial.cdf(k, n, p) >= q > binomial.cdf(k - 1, n, p)
        k = binomial.isf(q, n, p)
        assert binomial.sf(k, n, p) <= q < binomial.sf(k - 1, n, p)


def test_pmf_sums_to_one_at_population_scale() -> None:
    n, p = 1_000_000, 0.119
    total = float(binomial.pmf(np.arange(n + 1), n, p).sum())
    assert total == pytest.approx(1.0, abs=1e-12)


def test_checking_a_recipe_does_not_import_scipy_stats() -> None:
    """A device's first recipe is checked without scipy.stats (a second of a process's CPU)."""
    code = (
        "import sys\n"
        "from shared.recipe.accounting import check_recipe_claims\n"
        "from tests.recipe.helpers import example_recipe\n"
        "assert check_recipe_claims(example_recipe()) == []\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "False"
