"""Regressions for crashes the fuzzers found in the services (each once a 500)."""

from __future__ import annotations

import pytest

from tests.fuzz.apps import COLLECTOR_ADMIN, Services


@pytest.mark.parametrize("size", ["9223372036854775808", "18446744073709551616"])
def test_tree_head_of_a_size_beyond_int64_is_a_4xx(svc: Services, size: str) -> None:
    """The store keeps sizes as signed 64-bit integers: a larger size used to overflow it."""
    response = svc.recipe_server.get(f"/log/sth/{size}")
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"].startswith("application/problem+json")


DEEP = ("[" * 100_000 + "]" * 100_000).encode()


@pytest.mark.parametrize("route", ["PUT /internal/tasks/{task}", "POST /collections"])
def test_collector_answers_deeply_nested_json_with_400(svc: Services, route: str) -> None:
    """json.loads raises RecursionError, not ValueError, on very deep nesting."""
    method, path = route.split(" ")
    response = svc.collector.request(
        method,
        path.replace("{task}", svc.collector_task["task_id"]),
        content=DEEP,
        headers={"Authorization": f"Bearer {COLLECTOR_ADMIN}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
