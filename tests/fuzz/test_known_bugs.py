"""Bugs the fuzzers found outside shared/ (not ours to fix): strict xfails until fixed."""

from __future__ import annotations

import pytest

from tests.fuzz.apps import COLLECTOR_ADMIN, Services


@pytest.mark.xfail(
    strict=True,
    raises=OverflowError,
    reason=(
        "services/recipe_server/app.py:244-247 (sth_at): GET /log/sth/{tree_size} takes the path "
        "parameter as an unbounded int and hands it to RecipeStore.head "
        "(services/recipe_server/store.py:190-195); a size >= 2**63 overflows the database "
        "integer (OverflowError from sqlite3) and the request ends in a 500 instead of a 404 "
        "(or 400). The query parameters are bounded by _int_param (18 digits); this one is not."
    ),
)
@pytest.mark.parametrize("size", ["9223372036854775808", "18446744073709551616"])
def test_tree_head_of_a_size_beyond_int64_is_a_4xx(svc: Services, size: str) -> None:
    response = svc.recipe_server.get(f"/log/sth/{size}")
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"].startswith("application/problem+json")


DEEP = ("[" * 100_000 + "]" * 100_000).encode()


@pytest.mark.xfail(
    strict=True,
    raises=RecursionError,
    reason=(
        "services/collector/app.py:157-161 (json_body): json.loads of the request body catches "
        "ValueError only; a deeply nested JSON body (e.g. 100000 '[') raises RecursionError, "
        "which ends PUT /internal/tasks/{task_id} and POST /collections in a 500 instead of "
        "the 400 'body is not JSON'. Fix: also catch RecursionError there."
    ),
)
@pytest.mark.parametrize("route", ["PUT /internal/tasks/{task}", "POST /collections"])
def test_collector_answers_deeply_nested_json_with_400(svc: Services, route: str) -> None:
    method, path = route.split(" ")
    response = svc.collector.request(
        method,
        path.replace("{task}", svc.collector_task["task_id"]),
        content=DEEP,
        headers={"Authorization": f"Bearer {COLLECTOR_ADMIN}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
