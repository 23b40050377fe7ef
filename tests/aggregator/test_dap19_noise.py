"""Aggregator randomization (004 §5) holds for DAP-19 tasks: with seeded randomness injected in
both aggregators, the collected aggregate is exactly the truth plus the two aggregators' draws
of the discrete Gaussian (the samplers are the oracle, drawn here again from the same seeds),
and negative totals decode; both shares open under DAP-19's AggregateShareAad."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from services.common.clock import TestClock
from shared.dap.messages19 import CollectionJobResp
from shared.dp.aggregator_noise import decode_signed
from shared.dp.samplers import discrete_gaussian_vector
from tests.aggregator import dap19_client as c19
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import make_env

LENGTH = 16
SIGMA = "3.5"


def seeded(seed: str) -> Any:
    return random.Random(seed).getrandbits


def test_seeded_noise_is_exactly_the_two_draws(db_factory: DbFactory, clock: TestClock) -> None:
    noise = {"mechanism": "discrete_gaussian", "sigma": SIGMA}
    task = c19.make_task(
        {"type": "Prio3Histogram", "length": LENGTH, "chunk_length": 4},
        definition={"aggregator_noise": noise},
    )
    env = make_env(db_factory, clock, task.params)
    env.leader_agg.noise_randbits = seeded("leader")
    env.helper_agg.noise_randbits = seeded("helper")
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    now = clock.now()
    measurements = [0, 3, 3, 7, 15]
    reports = [c19.make_report(task, lc, hc, m, now) for m in measurements]
    assert c19.upload(env.leader, task, reports).content == b""

    request, location = c19.create_collection(env, task, now)
    resp = CollectionJobResp.decode(c19.poll_collection(env, location).content)
    vdaf, field = task.vdaf, task.vdaf.field
    raw = request.encode()
    leader = vdaf.decode_agg_share(
        c19.open_share(task, c19.LEADER, raw, resp.leader_encrypted_agg_share)
    )
    helper = vdaf.decode_agg_share(
        c19.open_share(task, c19.HELPER, raw, resp.helper_encrypted_agg_share)
    )
    summed = [
        (a + b) % field.MODULUS
        for a, b in zip(field.to_ints(leader), field.to_ints(helper), strict=True)
    ]
    total = decode_signed(field, summed)
    sigma2 = Fraction(SIGMA) ** 2
    leader_noise = discrete_gaussian_vector(sigma2, LENGTH, seeded("leader"))
    helper_noise = discrete_gaussian_vector(sigma2, LENGTH, seeded("helper"))
    truth = [measurements.count(i) for i in range(LENGTH)]
    expected = [t + a + b for t, a, b in zip(truth, leader_noise, helper_noise, strict=True)]
    assert total == expected
    assert any(v < 0 for v in expected)
