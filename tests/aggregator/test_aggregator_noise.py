"""Aggregator randomization (004 §5, §6.1.2): both aggregators noise their aggregate shares.

End to end through a leader and a helper (SQLite and PostgreSQL): the collected aggregate is the
truth plus the two aggregators' noise (exactly so with injected seeded randomness; with the
production `secrets` source, a variance within a chi-square bound of 2 Var N_Z(0, sigma^2)); the
noise is drawn once per batch (a re-sent AggregateShareReq and a second collection job get the
same shares); negative totals decode; a task without the setting is exact.
"""

from __future__ import annotations

import random
import statistics
from fractions import Fraction
from typing import Any

import pytest
from pydantic import ValidationError
from scipy import stats

from services.aggregator.datastore import TaskRecord
from services.aggregator.noise import noised_share
from services.aggregator.service import Task, task_from_record
from services.common.clock import TestClock
from shared.dap.messages import (
    MEDIA_AGGREGATE_SHARE_REQ,
    AggregateShare,
    AggregateShareReq,
    BatchSelector,
    Collection,
    Interval,
    Query,
    Role,
)
from shared.dap.task import AggregatorNoise, TaskDefinition
from shared.dp.aggregator_noise import decode_signed
from shared.dp.gaussian import discrete_gaussian_variance
from shared.dp.samplers import discrete_gaussian_vector, discrete_laplace_vector
from tests.aggregator import helpers
from tests.aggregator.env import Env, aggregator_auth, make_env, only_job
from tests.aggregator.helpers import TaskParams

NOW = 1_700_006_400
TP = 3600
LENGTH = 64
SIGMA = "3.5"
QUERY = Query.time_interval(Interval(NOW, TP))
SELECTOR = BatchSelector.time_interval(Interval(NOW, TP))


def noisy_params(noise: dict[str, Any] | None, length: int = LENGTH) -> TaskParams:
    overrides = (
        {} if noise is None else {r: {"aggregator_noise": noise} for r in ("leader", "helper")}
    )
    return TaskParams(
        vdaf={"type": "Prio3Histogram", "length": length, "chunk_length": 8},
        overrides=overrides,
    )


GAUSSIAN = {"mechanism": "discrete_gaussian", "sigma": SIGMA}


def shares(env: Env, collection: Collection) -> tuple[list[int], list[int]]:
    field = env.params.prio3.field
    out = []
    for role, ct in (
        (Role.LEADER, collection.leader_encrypted_agg_share),
        (Role.HELPER, collection.helper_encrypted_agg_share),
    ):
        raw = helpers.decrypt_agg_share(env.params, role, SELECTOR, ct)
        out.append(field.to_ints(env.params.prio3.decode_agg_share(raw)))
    return out[0], out[1]


def signed_total(env: Env, collection: Collection) -> list[int]:
    field = env.params.prio3.field
    leader, helper = shares(env, collection)
    return decode_signed(
        field, [(a + b) % field.MODULUS for a, b in zip(leader, helper, strict=True)]
    )


def upload(env: Env, buckets: list[int]) -> list[int]:
    for b in buckets:
        assert env.upload(env.report(b, NOW + 1)).status_code == 201
    return [buckets.count(i) for i in range(env.params.prio3.flp.OUTPUT_LEN)]


def seeded(seed: str) -> Any:
    return random.Random(seed).getrandbits


def test_seeded_noise_is_exactly_the_two_draws_and_negatives_decode(
    db_factory: Any, clock: TestClock
) -> None:
    env = make_env(db_factory, clock, noisy_params(GAUSSIAN))
    env.leader_agg.noise_randbits = seeded("leader")
    env.helper_agg.noise_randbits = seeded("helper")
    truth = upload(env, [0, 3, 3, 7])
    total = signed_total(env, env.collect(QUERY))
    sigma2 = Fraction(SIGMA) ** 2
    leader_noise = discrete_gaussian_vector(sigma2, LENGTH, seeded("leader"))
    helper_noise = discrete_gaussian_vector(sigma2, LENGTH, seeded("helper"))
    expected = [t + a + b for t, a, b in zip(truth, leader_noise, helper_noise, strict=True)]
    assert total == expected
    # Most buckets are empty: about half the totals are negative, and they decode as such.
    assert sum(v < 0 for v in expected) > LENGTH // 4
    assert total != truth


def test_noise_variance_and_idempotent_shares(db_factory: Any, clock: TestClock) -> None:
    """Production randomness: Var(total - truth) over the coordinates matches 2 Var N_Z(0,
    sigma^2) (chi-square bound, false alarm 2e-6); the helper's stored answer and the leader's
    stored share are reused, byte for byte, on a re-sent request and a second collection."""
    length = 512
    env = make_env(db_factory, clock, noisy_params(GAUSSIAN, length))
    truth = upload(env, [1, 1, 2, 500])
    first = env.collect(QUERY)
    diffs = [v - t for v, t in zip(signed_total(env, first), truth, strict=True)]
    var = statistics.variance(diffs)
    expected_var = 2 * discrete_gaussian_variance(float(Fraction(SIGMA) ** 2))
    lo = stats.chi2.ppf(1e-6, length - 1) / (length - 1)
    hi = stats.chi2.isf(1e-6, length - 1) / (length - 1)
    assert lo * expected_var < var < hi * expected_var, (var, expected_var)
    assert abs(statistics.mean(diffs)) < 6 * (expected_var / length) ** 0.5

    # The leader re-sends the AggregateShareReq (a lost answer): the stored bytes come back.
    job_id = only_job(env, "collection_jobs")
    job = env.leader_agg.ds.collection_job(env.params.task_id.value, job_id)
    assert job is not None
    request = AggregateShareReq(SELECTOR, b"", int(job["report_count"]), bytes(job["checksum"]))
    answers = [
        env.helper.post(
            f"/tasks/{env.tid}/aggregate_shares",
            content=request.encode(),
            headers={"Content-Type": MEDIA_AGGREGATE_SHARE_REQ, **aggregator_auth()},
        )
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].content == answers[1].content
    assert AggregateShare.decode(answers[0].content).encrypted_aggregate_share == (
        first.helper_encrypted_agg_share
    )

    # A second collection job of the same batch: same noised shares, nothing to average.
    second = env.collect(QUERY)
    assert second.helper_encrypted_agg_share == first.helper_encrypted_agg_share
    assert shares(env, second) == shares(env, first)
    assert env.leader_agg.ds.count_rows("leader_noised_shares", env.params.task_id.value) == 1


def test_no_noise_without_the_setting(db_factory: Any, clock: TestClock) -> None:
    env = make_env(db_factory, clock, noisy_params(None))
    env.leader_agg.noise_randbits = env.helper_agg.noise_randbits = _no_randomness
    truth = upload(env, [0, 5, 5])
    assert signed_total(env, env.collect(QUERY)) == truth
    assert env.leader_agg.ds.count_rows("leader_noised_shares", env.params.task_id.value) == 0


def _no_randomness(bits: int) -> int:
    raise AssertionError("a task without aggregator noise drew noise")


def test_laplace_noise_of_a_share_uses_the_given_source() -> None:
    params = noisy_params({"mechanism": "discrete_laplace", "scale": "2.5"}, 16)
    env_task = _task(params)
    share = env_task.vdaf.field.from_ints([7] * 16)
    noised = noised_share(env_task.noise, env_task.vdaf.field, share, seeded("lap"))
    noise = discrete_laplace_vector(Fraction("2.5"), 16, seeded("lap"))
    assert decode_signed(env_task.vdaf.field, env_task.vdaf.field.to_ints(noised)) == [
        7 + z for z in noise
    ]
    plain = _task(noisy_params(None, 16))
    assert noised_share(plain.noise, plain.vdaf.field, share, _no_randomness) is share


def _task(params: TaskParams) -> Task:
    definition = TaskDefinition.model_validate(params.definition("helper")).model_dump(mode="json")
    return task_from_record(TaskRecord(params.task_id.value, "helper", definition, b"", None, None))


@pytest.mark.parametrize(
    ("noise", "error"),
    [
        ({"mechanism": "discrete_gaussian"}, "takes sigma"),
        ({"mechanism": "discrete_gaussian", "sigma": "2", "scale": "1"}, "takes sigma"),
        ({"mechanism": "discrete_laplace", "sigma": "2"}, "takes scale"),
        ({"mechanism": "discrete_gaussian", "sigma": "-1"}, "positive"),
        ({"mechanism": "discrete_gaussian", "sigma": "abc"}, "rational"),
        # 004 Table 2: eps 0.906 at delta 1e-9 needs sigma 8.5402 for a one-hot histogram.
        (
            {
                "mechanism": "discrete_gaussian",
                "sigma": "8.4",
                "epsilon": 0.906,
                "delta": 1e-9,
                "sensitivity": 2**0.5,
            },
            "below",
        ),
        ({"mechanism": "discrete_gaussian", "sigma": "9", "epsilon": 0.9}, "sensitivity"),
        (
            {"mechanism": "discrete_laplace", "scale": "1", "epsilon": 0.5, "sensitivity": 1},
            "below",
        ),
    ],
)
def test_noise_setting_is_validated(noise: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        AggregatorNoise.model_validate(noise)


def test_noise_setting_accepts_published_calibrations() -> None:
    for eps, sigma in ((0.317, "23.3903"), (0.906, 8.5402), (1.528, "5.1904")):
        n = AggregatorNoise.model_validate(
            {
                "mechanism": "discrete_gaussian",
                "sigma": sigma,
                "epsilon": eps,
                "delta": 1e-9,
                "sensitivity": 2**0.5,
            }
        )
        # A float is read as the decimal it prints as, so sigma^2 is exact.
        assert n.parameter == Fraction(str(sigma)) ** 2
    lap = AggregatorNoise(mechanism="discrete_laplace", scale="2", epsilon=0.5, sensitivity=1)
    assert lap.parameter == 2
