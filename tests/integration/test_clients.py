"""Clients nobody at runstate wrote, in Node against a real server: the graphql-http
audit of GraphQL over HTTP, the Apollo Client recipe of ``docs/clients.md``, and
the frames graphql-ws receives for live progress.

Their npm packages are pinned in ``tests/clients/package-lock.json`` and installed
with ``npm ci`` on first use. Without Node and npm these tests skip loudly on a
laptop and fail under CI=true.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import IN_CI, Server, create_token, runstate

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


def possible_types(tmp_path: Path) -> Path:
    """``runstate export-schema --possible-types``, written where the script reads it."""
    path = tmp_path / "possible-types.json"
    printed = runstate("export-schema", "--possible-types", database_url="sqlite://:memory:")
    path.write_text(printed.stdout)
    return path


RECIPE_CHECKS = [
    "partial selections keep the other step fields",
    "taskAt answers the past",
    "the live task keeps its latest version after taskAt",
    "a replayed idempotent write answers as it first did",
    "the live task keeps its latest version after a replay",
    "a fork is a task of its own, PLANNED",
    "the live task keeps its latest version after a fork",
    "a Problem's fields are read through its interface",
    "NotFound answers are not one cache entity",
    "a resumed subscription misses nothing and repeats nothing",
]


def test_the_apollo_recipe_keeps_the_live_task_and_resumes_its_subscription(
    development: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards ``docs/clients.md``'s Apollo Client recipe (``tests/clients/apollo.mjs``
    is its code) and what it rests on: Step.id, ``export-schema --possible-types``,
    afterSeq. Control: with Apollo's default cache, a taskAt read and a replayed
    idempotent write overwrite the live task with an older one, ``... on Problem``
    fields are dropped, and two NotFound answers share one cache entity."""
    server, token = development
    types = str(possible_types(tmp_path))
    recipe = node("apollo.mjs", server.url, token, types)
    assert [r["check"] for r in recipe] == RECIPE_CHECKS
    assert [r for r in recipe if not r["ok"]] == []
    naive = node("apollo.mjs", server.url, token, types, "--naive")
    assert [r["check"] for r in naive if not r["ok"]] == [
        "the live task keeps its latest version after taskAt",
        "the live task keeps its latest version after a replay",
        "a Problem's fields are read through its interface",
        "NotFound answers are not one cache entity",
    ]


@pytest.fixture
def one_socket_each(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """A server that lets each user hold one WebSocket (RUNSTATE_MAX_CONNECTIONS=1)."""
    node_ready()
    url = f"sqlite://{tmp_path / 'sockets.db'}"
    token = create_token(url, "sockets")
    env = {"RUNSTATE_RATE_LIMIT": "false", "RUNSTATE_MAX_CONNECTIONS": "1"}
    server = Server(url, tmp_path / "server.log", **env).start()
    try:
        yield server, token
    finally:
        server.stop()


def test_graphql_ws_backs_off_past_the_connection_limit_and_stops_on_a_refused_token(
    one_socket_each: tuple[Server, str],
) -> None:
    """Guards the connection limit's own close code (4029) as the reference client
    takes it: retried with graphql-ws's backoff (over a second apart), not in a
    tight loop and not given up at once as its 4429 would be; and the shouldRetry
    of ``docs/clients.md`` that ends a refused token (4403) after one close."""
    server, token = one_socket_each
    over, refused = node("sockets.mjs", server.url, token)
    reason = "Too many connections: at most 1 per user"
    assert [(c["code"], c["reason"]) for c in over["closes"]] == [(4029, reason)] * 3
    assert all(c["afterMs"] >= 1_000 for c in over["closes"][1:]), over["closes"]
    assert over["gaveUp"] == 4029
    assert [c["code"] for c in refused["closes"]] == [4403]
    assert refused["gaveUp"] == 4403


def test_graphql_ws_receives_each_event_as_one_compact_next_frame(
    development: tuple[Server, str],
) -> None:
    """Guards the wire format of live progress as the reference client receives it
    (``tests/clients/frames.mjs``: two graphql-ws 6 clients, three taskProgress
    subscriptions of one task, four writes): every frame is compact JSON with its
    keys in the order graphql-transport-ws shows them (``id``, ``type``,
    ``payload``), ``connection_ack`` first on each socket; each subscription's
    ``next`` frames carry seq 1 to 5 in order, each exactly once; a live event's
    ``payload`` is the same text on every subscription of it; and graphql-ws hands
    ``next`` exactly those seqs. What a delivery path writes to a socket must stay
    these frames, whoever builds them."""
    server, token = development
    lines = node("frames.mjs", server.url, token)
    frames = [line for line in lines if "frame" in line]
    handed = [line for line in lines if "seqs" in line]
    assert handed == [
        {"client": "a", "subscription": "snapshot", "seqs": [1, 2, 3, 4, 5]},
        {"client": "a", "subscription": "after 0", "seqs": [1, 2, 3, 4, 5]},
        {"client": "b", "subscription": "snapshot", "seqs": [1, 2, 3, 4, 5]},
    ]
    for client in ("a", "b"):
        texts = [f["frame"] for f in frames if f["client"] == client]
        parsed = [json.loads(text) for text in texts]
        assert parsed[0] == {"type": "connection_ack"}
        for text, message in zip(texts, parsed, strict=True):
            assert text == json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        nexts = [m for m in parsed[1:] if m["type"] == "next"]
        assert [list(m) for m in nexts] == [["id", "type", "payload"]] * len(nexts)
        assert [m["type"] for m in parsed[1:]] == ["next"] * len(nexts)
        by_id: dict[str, list[int]] = {}
        for m in nexts:
            by_id.setdefault(m["id"], []).append(m["payload"]["data"]["taskProgress"]["seq"])
        assert sorted(by_id.values()) == [[1, 2, 3, 4, 5]] * (2 if client == "a" else 1)
    live: dict[int, set[str]] = {}
    for f in frames:
        message = json.loads(f["frame"])
        if message["type"] == "next":
            event = message["payload"]["data"]["taskProgress"]
            if event["kind"] != "SNAPSHOT" and event["seq"] > 1:
                payload = f["frame"][f["frame"].index('"payload":') :]
                live.setdefault(event["seq"], set()).add(payload)
    assert sorted(live) == [2, 3, 4, 5]
    assert all(len(payloads) == 1 for payloads in live.values()), live


def test_the_guides_recipe_is_the_code_the_test_runs() -> None:
    """``docs/clients.md`` shows the part of ``apollo.mjs`` between its recipe
    markers, as it is: the recipe a reader copies is the one tested above."""
    guide = (CLIENTS.parent.parent / "docs" / "clients.md").read_text()
    blocks = re.findall(r"^```js\n(.*?)^```$", guide, flags=re.DOTALL | re.MULTILINE)
    script = (CLIENTS / "apollo.mjs").read_text()
    start = script.index("// Keep the task with the newer eventSeq")
    end = script.index(
        "// ---------------------------------------------------------------- documents"
    )
    assert blocks[0] == script[start:end].rstrip() + "\n"
    assert blocks[1] in script, "the subscription the recipe follows"
