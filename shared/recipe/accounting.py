"""Does a recipe's (q, B) deliver the (epsilon, delta) it claims? Which VDAF must its task use?

Privacy accounting (000 §3 and §4.3 check 3; 001 §4.1 and Theorem 4), with the analyses of
`shared.dp.amplification`:

1. Aggregation: B reports, each eps0-LDP, aggregated (shuffled) are (eps_a, delta_a)-DP with
   eps_a = shuffle_epsilon(eps0, B, delta_a, analysis). eps0 is the randomizer's replacement
   epsilon for the generic analyses and the per-bit epsilon of symmetric RAPPOR for the
   ``sym_rappor_*`` ones. An SFP report is two CMS reports of the same string, so its eps0 is
   their sum, eps + eps' (basic composition, 002 Theorem 4.5).
2. Sampling: with q < 1 each device contributes with probability q (Poisson), which gives
   (ln(1 + q (e^eps_a - 1)), q delta_a). The recipe's delta is split as delta_a = delta / q
   (capped at `MAX_AGGREGATION_DELTA`, which keeps the analyses in their tested regime): any
   delta_a <= delta / q meets the claim.

The claim holds iff eps_a <= ln(1 + (e^epsilon - 1) / q) at that delta_a; the smallest B for
which it does is `required_batch_size`.

Dummy reports (001 §4.6, a recipe's optional `dummy_rate` q'): a device not sampled sends a
measurement that adds nothing with probability q', so the batch size hides how many devices
contributed. A dummy is not randomized, so it hides nobody: only the batch's real reports
amplify. Each report is real with probability rho = q / (q + (1 - q) q') (`real_report_share`),
independently of the data, so of n reports at least m = `real_reports_lower_bound` are real
except with probability delta_d = `DUMMY_DELTA_SHARE` delta_a; the aggregation is then stated at
m reports and delta_a - delta_d (a data-independent event of probability delta_d adds delta_d).

3. Aggregator noise (004 §5, a recipe's optional `aggregator_noise`): one honest aggregator's
   noise alone gives `shared.dp.aggregator_noise.noise_guarantee` at the claim's delta, for any
   batch size and whatever the other clients send (the VDAF's validity proof bounds one report's
   effect). Per trust model (004 §3.3, `shared.dp.policy.strongest`): OAMC has the better of
   amplification and noise, OAOC the better of the noise and the local eps0, OC the local eps0
   only. The recipe's claim is about OAMC, so it may rest on either mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The binomial functions (`shared.dp.binomial`, on scipy.special) are imported by the functions
# that use them: a third of a second of a process's start, and most processes importing this
# module (every service, the CLI) never call them.
from shared.dap.task import CALIBRATION_RTOL, AggregatorNoise
from shared.dp import amplification as amp
from shared.dp.aggregator_noise import noise_guarantee
from shared.dp.policy import Guarantee, TrustModel, strongest
from shared.dp.randomizers.bitpushing import BitPushing
from shared.dp.randomizers.cms import CountMeanSketch, HadamardCountMeanSketch
from shared.dp.randomizers.onehot import OneHotRandomizer as DpOneHot
from shared.dp.vdaf_mapping import bit_pushing_spec, cms_spec, hcms_spec, one_hot_spec, sfp_spec
from shared.recipe.model import (
    BitPushingRandomizer,
    CmsRandomizer,
    Encoding,
    HcmsRandomizer,
    IntegerFeature,
    OneHotRandomizer,
    PrivacyClaim,
    Randomizer,
    Recipe,
    RecipeDraft,
    SfpRandomizer,
)
from shared.vdaf.spec import VdafSpec, VdafVersion

__all__ = [
    "MAX_AGGREGATION_DELTA",
    "PrivacyAssessment",
    "aggregate_guarantee",
    "analysis_epsilon",
    "assess_privacy",
    "check_recipe_claims",
    "expected_vdaf",
    "noise_problems",
    "required_batch_size",
    "trust_model_guarantees",
]

MAX_AGGREGATION_DELTA = 1e-2

#: The share of the aggregation's delta spent on the chance that a batch holds fewer real
#: reports than the bound the analysis is stated at (module docstring, dummy reports).
DUMMY_DELTA_SHARE = 0.1


def real_report_share(q: float, dummy_rate: float | None) -> float:
    """rho: the probability that a report of the batch is real, not a dummy (001 §4.6)."""
    if not dummy_rate:
        return 1.0
    return q / (q + (1 - q) * dummy_rate)


def real_reports_lower_bound(n: int, rho: float, delta: float) -> int:
    """The largest m with P(Binomial(n, rho) < m) <= delta: at least m of n reports are real
    except with probability delta."""
    from shared.dp import binomial  # noqa: PLC0415

    if rho >= 1:
        return n
    # ppf(delta) is the least k with P(X <= k) >= delta, so P(X < k) < delta, and one more
    # would give P(X < k + 1) >= delta.
    return int(binomial.ppf(delta, n, rho))


def analysis_epsilon(randomizer: Randomizer, analysis: amp.Analysis) -> float:
    """The eps0 that `analysis` takes for this randomizer."""
    if analysis.startswith("sym_rappor"):
        if not (isinstance(randomizer, OneHotRandomizer) and randomizer.symmetric):
            raise ValueError(f"{analysis} applies to symmetric one_hot only")
        return randomizer.eps0
    return randomizer.local_epsilon


def _aggregation_target(claim: PrivacyClaim, q: float) -> tuple[float, float]:
    """(eps_a, delta_a) the aggregation must reach so that sampling at q gives the claim."""
    if q >= 1:
        return claim.epsilon, claim.delta
    return math.log1p(math.expm1(claim.epsilon) / q), min(claim.delta / q, MAX_AGGREGATION_DELTA)


def _split_for_dummies(delta_a: float, dummy_rate: float | None) -> tuple[float, float]:
    """(the aggregation's delta, delta_d) of the module docstring; delta_d 0 without dummies."""
    if not dummy_rate:
        return delta_a, 0.0
    return delta_a * (1 - DUMMY_DELTA_SHARE), delta_a * DUMMY_DELTA_SHARE


def real_batch_size(
    batch_size: int, q: float, claim: PrivacyClaim, dummy_rate: float | None
) -> int:
    """How many of `batch_size` reports the aggregation is stated at: all of them, or with
    dummies the lower bound on the real ones (module docstring)."""
    _, delta_a = _aggregation_target(claim, q)
    _, delta_d = _split_for_dummies(delta_a, dummy_rate)
    return real_reports_lower_bound(batch_size, real_report_share(q, dummy_rate), delta_d)


def aggregate_guarantee(
    randomizer: Randomizer,
    batch_size: int,
    q: float,
    claim: PrivacyClaim,
    dummy_rate: float | None = None,
) -> tuple[float, float]:
    """(epsilon, delta) of a batch of `batch_size` reports sampled at rate q, dummies sent at
    `dummy_rate`, at the claim's delta split; epsilon is +inf where the analysis does not apply
    (closed form out of range, no real report to count on)."""
    _, delta_total = _aggregation_target(claim, q)
    delta_a, _ = _split_for_dummies(delta_total, dummy_rate)
    real = real_batch_size(batch_size, q, claim, dummy_rate)
    eps0 = analysis_epsilon(randomizer, claim.analysis)
    if real < 1 or (
        claim.analysis == "closed_form" and not amp.closed_form_valid(eps0, real, delta_a)
    ):
        return math.inf, claim.delta
    eps_a = amp.shuffle_epsilon(eps0, real, delta_a, claim.analysis)
    if q >= 1:
        return eps_a, delta_total
    return amp.poisson_sampling(eps_a, delta_total, q)


def required_batch_size(
    randomizer: Randomizer, q: float, claim: PrivacyClaim, dummy_rate: float | None = None
) -> int | None:
    """Smallest B meeting the claim (None if no B up to 10^9 does)."""
    eps_a, delta_total = _aggregation_target(claim, q)
    delta_a, _ = _split_for_dummies(delta_total, dummy_rate)
    eps0 = analysis_epsilon(randomizer, claim.analysis)
    try:
        needed = amp.min_batch_size(eps0, eps_a, delta_a, claim.analysis)
    except ValueError:
        return None
    if not dummy_rate:
        return needed
    # The real-report bound grows with B: the least B whose bound reaches `needed`.
    lo, hi = needed, needed
    while real_batch_size(hi, q, claim, dummy_rate) < needed:
        lo, hi = hi + 1, 2 * hi
        if hi > amp.MAX_B:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        if real_batch_size(mid, q, claim, dummy_rate) >= needed:
            hi = mid
        else:
            lo = mid + 1
    return lo


def trust_model_guarantees(
    recipe: Recipe | RecipeDraft,
    batch_size: int,
    noise: AggregatorNoise | None = None,
    vdaf: VdafSpec | None = None,
) -> dict[TrustModel, Guarantee]:
    """The guarantee under each trust model (module docstring, 3.) of a batch of `batch_size`
    reports of `recipe` (its randomizer, claim, sampling rate q and dummy rate), with the
    aggregators' `noise` on the task's `vdaf` if any.

    The amplified guarantee is `aggregate_guarantee` (+inf epsilon where its analysis does
    not apply); the noise's is computed at the claim's delta. A VDAF without a known
    sensitivity gives the noise no guarantee (`noise_problems` refuses such recipes).
    """
    randomizer, claim = recipe.randomizer, recipe.privacy
    q, dummy_rate = recipe.sampling_rate, recipe.dummy_rate
    eps, delta = aggregate_guarantee(randomizer, batch_size, q, claim, dummy_rate)
    basis = f"amplification by aggregation ({claim.analysis}, n={batch_size})"
    if dummy_rate:
        real = real_batch_size(batch_size, q, claim, dummy_rate)
        basis += f" at {real} real reports (dummies at q'={dummy_rate:g})"
    if q < 1:
        basis += f", then Poisson sampling at q={q:g}"
    amplified = Guarantee(TrustModel.OAMC, eps, delta, basis)
    local = Guarantee(TrustModel.OC, randomizer.local_epsilon, 0.0, "local randomizer only")
    central = None
    if noise is not None:
        if vdaf is None:
            raise ValueError("the noise's guarantee needs the task's VDAF")
        found = noise_guarantee(noise, vdaf, claim.delta)
        if found is not None:
            central = Guarantee(TrustModel.OAOC, found.eps, found.delta, found.basis)
    out: dict[TrustModel, Guarantee] = {}
    for model in (TrustModel.OAMC, TrustModel.OAOC, TrustModel.OC):
        g = strongest(model, local=local, amplified=amplified, central=central)
        assert g is not None  # a recipe always has its local randomizer
        out[model] = g
    return out


@dataclass(frozen=True)
class PrivacyAssessment:
    #: The OAMC guarantee, what the claim is about (amplification and/or aggregator noise).
    epsilon: float
    delta: float
    claim_met: bool
    #: The smallest B that meets the claim (None: none does; B is never the issue when the
    #: aggregator noise alone meets it).
    required_batch_size: int | None
    basis: str = ""


def assess_privacy(recipe: Recipe | RecipeDraft, vdaf: VdafSpec | None = None) -> PrivacyAssessment:
    """Whether B = `recipe.min_batch_size` reports meet the recipe's claim, with its sampling,
    dummies and aggregator noise (on the task's `vdaf`, which the noise's guarantee needs)."""
    b, claim = recipe.min_batch_size, recipe.privacy
    oamc = trust_model_guarantees(recipe, b, recipe.aggregator_noise, vdaf)[TrustModel.OAMC]
    # The analyses' bisections overshoot by at most EPS_TOL, so compare with that slack: a B
    # the library's own min_batch_size returns must pass.
    met = oamc.eps <= claim.epsilon + amp.EPS_TOL and oamc.delta <= claim.delta * (1 + 1e-12)
    needed = (
        b
        if met
        else required_batch_size(recipe.randomizer, recipe.sampling_rate, claim, recipe.dummy_rate)
    )
    return PrivacyAssessment(oamc.eps, oamc.delta, met, needed, oamc.basis)


def noise_problems(noise: AggregatorNoise, vdaf: VdafSpec, delta: float) -> list[str]:
    """Why a recipe's aggregator noise cannot be accounted for (empty when it can): the VDAF
    must have a known sensitivity, and a stated calibration (epsilon, delta) must hold for the
    noise at the VDAF's sensitivity, not only at the stated one."""
    if noise_guarantee(noise, vdaf, delta) is None:
        return [f"no sensitivity is known for {vdaf.describe()}: the noise cannot be accounted"]
    if noise.epsilon is None:
        return []
    stated = noise_guarantee(noise, vdaf, noise.delta if noise.delta else delta)
    assert stated is not None
    # The same slack as the model's own calibration check (published sigmas are rounded).
    if stated.eps > noise.epsilon * (1 + CALIBRATION_RTOL):
        return [
            f"the noise gives epsilon={stated.eps:.4g} at delta={stated.delta:g} on "
            f"{vdaf.describe()} ({stated.basis}), more than its stated epsilon={noise.epsilon:g}"
        ]
    return []


def expected_vdaf(
    randomizer: Randomizer, encoding: Encoding, draft: VdafVersion = "VDAF-08"
) -> VdafSpec:
    """The Prio3 instance of `draft` reports of this randomizer take
    (`shared.dp.vdaf_mapping`)."""
    if isinstance(randomizer, OneHotRandomizer):
        one_hot = DpOneHot(randomizer.eps0, encoding.dimension, randomizer.symmetric)
        return one_hot_spec(one_hot, draft=draft)
    if isinstance(randomizer, CmsRandomizer):
        cms = CountMeanSketch(randomizer.eps0, randomizer.k, randomizer.m, randomizer.seed)
        return cms_spec(cms, draft=draft)
    if isinstance(randomizer, HcmsRandomizer):
        hcms = HadamardCountMeanSketch(randomizer.eps0, randomizer.k, randomizer.m, randomizer.seed)
        return hcms_spec(hcms, draft)
    if isinstance(randomizer, SfpRandomizer):
        return sfp_spec(randomizer.puzzle(), draft=draft)
    assert isinstance(randomizer, BitPushingRandomizer)
    feature = encoding.features[0]
    assert isinstance(feature, IntegerFeature)
    return bit_pushing_spec(BitPushing(feature.bits, randomizer.eps0), draft)


def check_recipe_claims(recipe: Recipe) -> list[str]:
    """Device side (001 §4.1: q and B "allow the client device to verify that the protocol
    satisfies DP"): the recipe's own claims, recomputed. Empty when they hold.

    Checks that the task's VDAF is the one the randomizer maps to (else the aggregators'
    validity proofs would not bound what a report may contribute the way the analysis
    assumes), that the aggregator noise, if any, can be accounted for, and that B reports
    sampled at q, with that noise, meet the claimed (epsilon, delta).
    """
    problems: list[str] = []
    expected = expected_vdaf(recipe.randomizer, recipe.encoding, recipe.task.vdaf_draft)
    if recipe.task.vdaf != expected:
        problems.append(
            f"task VDAF {recipe.task.vdaf.describe()} is not the randomizer's {expected.describe()}"
        )
    noise = recipe.aggregator_noise
    if noise is not None:
        problems += noise_problems(noise, expected, recipe.privacy.delta)
    assessment = assess_privacy(recipe, expected)
    if not assessment.claim_met:
        problems.append(
            f"B={recipe.min_batch_size} at q={recipe.sampling_rate:g} gives epsilon="
            f"{assessment.epsilon:.4g}, not the claimed {recipe.privacy.epsilon:g}"
        )
    return problems
