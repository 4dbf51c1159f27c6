"""Data flows one way: services and models know neither GraphQL nor HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import runstate

PACKAGE = Path(runstate.__file__).parent
TRANSPORT = ("strawberry", "starlette", "uvicorn", "graphql", "httpx", "cross_web")
LOWER_LAYERS = ["services", "models", "enums.py", "db.py"]


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def transport_imports(layer: str) -> list[str]:
    root = PACKAGE / layer
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    return [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in files
        for name in sorted(imports(path))
        if name.split(".")[0] in TRANSPORT
        or name.startswith(("runstate.schema", "runstate.resolvers", "runstate.http"))
    ]


@pytest.mark.parametrize("layer", LOWER_LAYERS)
def test_lower_layers_do_not_import_transports(layer: str) -> None:
    assert transport_imports(layer) == []


def test_the_check_sees_transport_imports() -> None:
    """Control: the resolvers do import strawberry, and the check reports it."""
    assert any("strawberry" in line for line in transport_imports("resolvers"))
