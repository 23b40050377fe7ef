"""`services.common.doorbell.Doorbell`: a ring wakes a waiting worker, a ring that came before
the wait is not lost, and no ring means the whole timeout."""

from __future__ import annotations

import threading
import time

from services.common.doorbell import Doorbell


def test_a_ring_before_the_wait_is_not_lost() -> None:
    bell = Doorbell()
    seen = bell.rings()
    bell.ring()  # between the worker's look for work and its wait
    # True only if rung: a timeout returns False.
    assert bell.wait(seen, timeout=30)


def test_without_a_ring_the_wait_is_the_timeout() -> None:
    bell = Doorbell()
    bell.ring()
    seen = bell.rings()  # rings before the look are not waited for again
    start = time.monotonic()
    assert not bell.wait(seen, timeout=0.2)
    assert time.monotonic() - start >= 0.2


def test_a_ring_from_another_thread_wakes_every_waiter() -> None:
    bell = Doorbell()
    seen = bell.rings()
    woke: list[bool] = []
    waiters = [
        threading.Thread(target=lambda: woke.append(bell.wait(seen, timeout=30))) for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    bell.ring()
    for waiter in waiters:
        waiter.join(timeout=30)
    assert woke == [True, True, True]
