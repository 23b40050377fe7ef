"""`sagg privacy ...`: the accounting of `shared.dp.api`, explained in a few lines.

Each function returns an `Answer`: explanation lines, the one number the command is about
(printed alone on the last line, so `$(sagg privacy batch-size ...)`-style scripts can take
`tail -n 1`), and the JSON document of `--json`. Every number is computed here and now by
`shared.dp.api`; the method is always named, never a bare figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.dp import api
from shared.dp.amplification import Analysis

__all__ = ["Answer", "amplification", "batch_size", "gaussian_sigma", "sampling"]

_GENERIC = ("closed_form", "clones", "stronger_clones")


@dataclass(frozen=True)
class Answer:
    lines: list[str]
    value: float | int
    document: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        return "\n".join([*self.lines, _number(self.value)])


def _number(value: float | int) -> str:
    # repr keeps every digit: the last line is for machines as much as for people.
    return str(value) if isinstance(value, int) else repr(float(value))


def _replacement_eps0(eps0: float, deletion: bool, analysis: Analysis) -> tuple[float, str]:
    """The eps0 the analysis takes, and how it was obtained.

    The generic analyses bound replacement-model randomizers; an eps0-DP deletion-model
    randomizer is 2*eps0-DP under replacement (000 §3), so it enters as 2*eps0.
    """
    if not deletion:
        return eps0, f"{eps0:g}-LDP (replacement model)"
    if analysis not in _GENERIC:
        raise ValueError(
            f"--deletion applies to the generic analyses ({', '.join(_GENERIC)}); "
            f"{analysis} already fixes its model"
        )
    return 2 * eps0, f"{eps0:g}-LDP in the deletion model, so {2 * eps0:g} under replacement"


def amplification(
    eps0: float, n: int, delta: float, *, deletion: bool = False, analysis: Analysis
) -> Answer:
    used, how = _replacement_eps0(eps0, deletion, analysis)
    result = api.amplification(used, n, delta, analysis)
    lines = [
        f"Aggregating n = {n} reports, each {how}, gives",
        f"(eps, delta) = ({result.eps:.6g}, {delta:g}) by the {analysis} analysis.",
    ]
    if analysis != "closed_form":
        lines.append(
            f"000 Theorem 3.1's closed form: {result.closed_form:.6g}"
            if result.closed_form is not None
            else "000 Theorem 3.1's closed form does not apply at these parameters."
        )
    lines.append("Aggregate epsilon:")
    document = {
        "eps0": eps0,
        "deletion": deletion,
        "eps0_replacement": used,
        "n": n,
        "delta": delta,
        "analysis": analysis,
        "eps": result.eps,
        "closed_form_eps": result.closed_form,
    }
    return Answer(lines, result.eps, document)


def batch_size(
    eps0: float, eps: float, delta: float, *, deletion: bool = False, analysis: Analysis
) -> Answer:
    used, how = _replacement_eps0(eps0, deletion, analysis)
    b = api.batch_size(used, eps, delta, analysis)
    lines = [
        f"The smallest batch of reports, each {how}, whose aggregate is",
        f"({eps:g}, {delta:g})-DP by the {analysis} analysis: min_batch_size B =",
    ]
    document = {
        "eps0": eps0,
        "deletion": deletion,
        "eps0_replacement": used,
        "eps": eps,
        "delta": delta,
        "analysis": analysis,
        "min_batch_size": b,
    }
    return Answer(lines, b, document)


def sampling(eps: float, q: float, delta: float = 0.0) -> Answer:
    eps_q, delta_q = api.sampling(eps, delta, q)
    lines = [
        f"An ({eps:g}, {delta:g})-DP computation run on a Poisson sample of rate q = {q:g}",
        f"is (ln(1 + q(e^eps - 1)), q delta) = ({eps_q:.6g}, {delta_q:g})-DP (001 Theorem 4).",
        "Amplified epsilon:",
    ]
    document = {"eps": eps, "delta": delta, "q": q, "eps_sampled": eps_q, "delta_sampled": delta_q}
    return Answer(lines, eps_q, document)


def gaussian_sigma(eps: float, delta: float, sensitivity: float, aggregators: int = 1) -> Answer:
    result = api.gaussian_sigma(eps, delta, sensitivity, aggregators)
    lines = [
        f"Analytic Gaussian mechanism (004 §6.1.2): L2 sensitivity {sensitivity:g} at",
        f"({eps:g}, {delta:g})-DP needs noise of standard deviation sigma per aggregator;",
        f"with {aggregators} honest aggregator(s) adding it the collector sees "
        f"{result.total_std:.6g}.",
    ]
    if result.discrete_delta is not None:
        lines.append(
            f"A discrete Gaussian of this sigma has exact delta {result.discrete_delta:.4g} "
            f"at eps {eps:g}."
        )
    lines.append("sigma:")
    document = {
        "eps": eps,
        "delta": delta,
        "sensitivity": sensitivity,
        "honest_aggregators": aggregators,
        "sigma": result.sigma,
        "total_std": result.total_std,
        "discrete_delta": result.discrete_delta,
    }
    return Answer(lines, result.sigma, document)
