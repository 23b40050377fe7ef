"""Per-task DP policy (004 §5): client randomization, aggregator randomization, or both, and
which guarantee holds under which trust model (004 §3.3).

* OC -- only the client itself is trusted: only the local eps0 (replacement) holds.
* OAMC -- one aggregator and most clients honest: aggregating at least B honest eps0-LDP reports
  amplifies to the aggregate (eps, delta) (000 Theorem 3.1 and the numerical analyses; the noise
  a client hides in comes from the other B - 1 reports, which the analyses already count).
* OAOC -- one aggregator honest, every other client possibly malicious: client noise gives no
  amplification; only aggregator noise (each aggregator adds N_Z(0, sigma^2), one honest one
  suffices) gives an aggregate guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from shared.dp.amplification import Analysis, min_batch_size, shuffle_epsilon
from shared.dp.gaussian import analytic_gaussian_sigma, discrete_gaussian_delta


class TrustModel(StrEnum):
    OC = "OC"
    OAMC = "OAMC"
    OAOC = "OAOC"


@dataclass(frozen=True)
class Guarantee:
    trust_model: TrustModel
    eps: float
    delta: float
    basis: str


@dataclass(frozen=True)
class ClientRandomization:
    """Clients randomize locally at `eps0`; only batches of at least `min_batch` are released.

    `eps0` is what `analysis` takes: the replacement eps for the generic analyses, the per-bit
    eps for the symmetric-RAPPOR ones.
    """

    eps0: float
    min_batch: int
    delta: float
    analysis: Analysis

    @property
    def local_eps(self) -> float:
        """The replacement-model local eps: symmetric RAPPOR's eps0 is per bit, so 2 eps0."""
        return 2 * self.eps0 if self.analysis.startswith("sym_rappor") else self.eps0

    @property
    def aggregate_eps(self) -> float:
        return shuffle_epsilon(self.eps0, self.min_batch, self.delta, self.analysis)


@dataclass(frozen=True)
class AggregatorRandomization:
    """Every aggregator adds N_Z(0, sigma2) to each coordinate of its aggregate share.

    `shifts` is how one client's change moves the aggregate (e.g. (1, -1) for a one-hot
    histogram); `eps` is the target the sigma was calibrated for with the analytic Gaussian
    mechanism, and `delta` the exact delta of the discrete mechanism at that eps.
    """

    sigma2: float
    eps: float
    delta: float
    shifts: tuple[int, ...]

    def total_std(self, honest_aggregators: int) -> float:
        """Utility: the collector sees the sum of every honest aggregator's noise."""
        return math.sqrt(self.sigma2 * honest_aggregators)


@dataclass(frozen=True)
class DpPolicy:
    client: ClientRandomization | None = None
    aggregator: AggregatorRandomization | None = None

    def guarantee(self, model: TrustModel) -> Guarantee | None:
        """The (eps, delta) that holds under `model`, or None if nothing does."""
        local = (
            Guarantee(model, self.client.local_eps, 0.0, "local randomizer only")
            if self.client
            else None
        )
        central = (
            Guarantee(model, self.aggregator.eps, self.aggregator.delta, "aggregator noise")
            if self.aggregator
            else None
        )
        amplified = (
            Guarantee(
                model,
                self.client.aggregate_eps,
                self.client.delta,
                f"amplification by aggregation ({self.client.analysis}, B={self.client.min_batch})",
            )
            if self.client
            else None
        )
        return strongest(model, local=local, amplified=amplified, central=central)


def strongest(
    model: TrustModel,
    *,
    local: Guarantee | None,
    amplified: Guarantee | None,
    central: Guarantee | None,
) -> Guarantee | None:
    """Which guarantee to state under `model`, given what each mechanism gives on its own:
    `local` (the client's eps0), `amplified` (client noise hidden among the other honest
    clients' reports), `central` (one honest aggregator's noise).

    OC: only `local`. OAOC: `central` if it beats `local` (other clients may be malicious, so
    no amplification). OAMC: the better of `amplified` and `central`. Each mechanism's guarantee
    survives the other as post-processing, so the smaller epsilon holds; nothing here combines
    the two into a tighter joint bound.
    """
    if model is TrustModel.OC:
        options = [local]
    elif model is TrustModel.OAOC:
        options = [local, central]
    else:
        options = [amplified, central]
    present = [g for g in options if g is not None]
    if not present:
        return None
    best = min(present, key=lambda g: g.eps)
    return Guarantee(model, best.eps, best.delta, best.basis)


def client_randomization(
    eps0: float, eps: float, delta: float, analysis: Analysis = "stronger_clones"
) -> ClientRandomization:
    """Client noise at eps0 with the minimum batch size for aggregate (eps, delta)."""
    return ClientRandomization(eps0, min_batch_size(eps0, eps, delta, analysis), delta, analysis)


def aggregator_randomization(
    eps: float, delta: float, shifts: tuple[int, ...] = (1, -1)
) -> AggregatorRandomization:
    """004 §6.1.2: sigma from the analytic Gaussian mechanism at the shift vector's L2 norm."""
    sensitivity = math.sqrt(sum(s * s for s in shifts))
    sigma = analytic_gaussian_sigma(eps, delta, sensitivity)
    exact_delta = discrete_gaussian_delta(sigma * sigma, eps, shifts)
    return AggregatorRandomization(sigma * sigma, eps, exact_delta, shifts)
