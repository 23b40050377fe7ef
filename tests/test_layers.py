"""Layers point one way: ``shared`` <- ``client_sdk``, ``services`` <- ``deploy``, ``bench``.

`shared` is pure (the wire formats, VDAFs, DP accounting, recipes: no network, no database, no
web framework), `client_sdk` and `services` are peers that meet only over HTTP, and `deploy`
(CLI, launcher, demo, interop harness) and `bench` sit on top. Every import of every module is
read with `ast`, including imports inside functions and under ``if TYPE_CHECKING:``, so a
lazy or type-only import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: What each top-level package may not import (`tests` may import anything).
FORBIDDEN: dict[str, frozenset[str]] = {
    "shared": frozenset({"client_sdk", "services", "deploy", "bench", "tests"}),
    "client_sdk": frozenset({"services", "deploy", "bench", "tests"}),
    "services": frozenset({"client_sdk", "deploy", "bench", "tests"}),
    "deploy": frozenset({"bench", "tests"}),
    "bench": frozenset({"tests"}),
}

#: Libraries that do network, database or process I/O, or serve HTTP: none belongs in `shared`.
#: (`shared.files` opens the owner-only files every layer keeps secrets in, with `os` alone.)
IO_LIBRARIES = frozenset(
    {
        "asyncio",
        "fastapi",
        "http",
        "httpx",
        "psycopg",
        "psycopg_pool",
        "requests",
        "socket",
        "sqlite3",
        "starlette",
        "subprocess",
        "urllib3",
        "uvicorn",
    }
)


def imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in `tree`, wherever it stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            # The tree uses absolute imports only; a relative one is reported as such.
            if node.level:
                yield node.lineno, "." * node.level + (node.module or "")
            elif node.module is not None:
                yield node.lineno, node.module


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def violations(package: str, banned: frozenset[str]) -> list[str]:
    found = []
    for path in modules(package):
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for line, module in imports(tree):
            top = module.split(".")[0]
            if module.startswith(".") or top in banned:
                found.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_upward(package: str) -> None:
    assert modules(package), f"no modules found under {package}/"
    assert violations(package, FORBIDDEN[package]) == []


def test_shared_does_no_io() -> None:
    assert violations("shared", IO_LIBRARIES) == []


def test_the_checker_sees_function_level_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from services.common import http\n"
        "def f() -> None:\n"
        "    import deploy.cli\n"
        "    from . import sibling\n"
    )
    assert sorted(imports(ast.parse(source))) == [
        (1, "typing"),
        (3, "services.common"),
        (5, "deploy.cli"),
        (6, "."),
    ]
