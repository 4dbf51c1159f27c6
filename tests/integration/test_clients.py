"""Clients nobody at runstate wrote, in Node against a real server: the graphql-http
audit of GraphQL over HTTP, and the Apollo Client recipe of ``docs/clients.md``.

Their npm packages are pinned in ``tests/clients/package-lock.json`` and installed
with ``npm ci`` on first use. Without Node and npm these tests skip loudly on a
laptop and fail under CI=true.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import IN_CI, Server, create_token

CLIENTS = Path(__file__).parent.parent / "clients"


def node_ready() -> None:
    """Node and the pinned packages, installed once; else skip loudly (fail in CI)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not found; these tests run real Node clients"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    stamp = CLIENTS / "node_modules" / ".package-lock.json"
    lock = CLIENTS / "package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=CLIENTS,
            check=True,
            timeout=600,
        )


def node(script: str, *args: str) -> list[dict[str, Any]]:
    """Run ``tests/clients/<script>`` and return the JSON lines it printed."""
    done = subprocess.run(
        ["node", script, *args], cwd=CLIENTS, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def development(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A development server (GraphiQL, GET queries and introspection on, as `make run`
    has them) on SQLite, and a token; rate limits off, since one token sends all."""
    node_ready()
    tmp = tmp_path_factory.mktemp("clients")
    url = f"sqlite://{tmp / 'clients.db'}"
    token = create_token(url, "apollo")
    server = Server(url, tmp / "server.log", RUNSTATE_RATE_LIMIT="false").start()
    try:
        yield server, token
    finally:
        server.stop()


AUDITS = 61
"""What graphql-http 1.23.1 checks of a server (MUST, SHOULD and MAY together)."""


def test_the_graphql_over_http_audit_passes_without_a_warning(
    development: tuple[Server, str],
) -> None:
    """Guards answers by the GraphQL-over-HTTP draft (``media``, ``GraphQLView``): with
    Strawberry's own answers the audit warns 8 times (22EB, 865D, 556A, D586, 51FE,
    74FF, 5E5B, 86EE)."""
    server, token = development
    results = node("audit.mjs", f"{server.url}/graphql", token)
    assert len(results) == AUDITS
    assert [r for r in results if r["status"] != "ok"] == []
