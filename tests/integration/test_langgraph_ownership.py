"""Single-writer ownership of LangGraph threads, tested as LangGraph's PR 8894
describes it: two processes load the same parent checkpoint, the first is frozen
(SIGSTOP) past its lease, the second takes over and commits, the first is
resumed and tries to commit."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from runstate.integrations.langgraph import RunstateSaver
from tests.support import AgentProcess, Api, Server, create_token, sqlite_server

USER = "owner"
TTL = "1"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """One server (the scenario is about leases, not the database), and a token."""
    with sqlite_server(tmp_path_factory, "ownership", RUNSTATE_RATE_LIMIT="false") as srv:
        yield srv, create_token(srv.database_url, USER)


def lease_lapsed(api: Api, thread_id: str, within: float = 30) -> None:
    """Until the thread's task shows no live lease (a poll with a deadline)."""
    deadline = time.monotonic() + within
    query = "query($id: ID!) { task(id: $id) { ... on Task { lock { holderId } } } }"
    while api(query, id=thread_id)["task"]["lock"] is not None:
        assert time.monotonic() < deadline, "the frozen worker's lease never lapsed"
        time.sleep(0.1)


def race(server: Server, token: str, *holders: str | None) -> tuple[dict[str, str], list[str], str]:
    """The scenario: a parent checkpoint; worker A loads it and writes, and is
    frozen; once its lease lapsed, worker B loads the same parent and commits a
    child; A is resumed and commits. What each said last, every checkpoint of the
    thread, and the parent's id."""
    thread_id = str(uuid.uuid4())
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        parent = saver.put(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )["configurable"]["checkpoint_id"]
    args = [[*(["--holder", h] if h else []), "--ttl", TTL] for h in holders]
    first = AgentProcess(server.url, token, thread_id, *args[0], module="tests.agents.graph_writer")
    said: dict[str, str] = {}
    second: AgentProcess | None = None
    try:
        first.until(lambda line: line.get("ready"))
        os.kill(first.process.pid, signal.SIGSTOP)
        with Api(server.url, token) as api:
            lease_lapsed(api, thread_id)
        second = AgentProcess(
            server.url, token, thread_id, *args[1], module="tests.agents.graph_writer"
        )
        second.until(lambda line: line.get("ready"))
        second.send("\n")
        said["B"] = str(second.until(lambda line: "committed" in line or "refused" in line))
        second.rest()
        os.kill(first.process.pid, signal.SIGCONT)
        first.send("\n")
        said["A"] = str(first.until(lambda line: "committed" in line or "refused" in line))
        first.rest()
    finally:
        if first.process.poll() is None:
            os.kill(first.process.pid, signal.SIGCONT)
        first.kill()
        if second is not None:
            second.kill()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        stored = list(saver.list({"configurable": {"thread_id": thread_id}}))
        chain = []
        config = stored[0].config
        while (found := saver.get_tuple(config)) is not None:
            chain.append(found.config["configurable"]["checkpoint_id"])
            if found.parent_config is None:
                break
            config = found.parent_config
    every = [t.config["configurable"]["checkpoint_id"] for t in stored]
    unreachable = sorted(set(every) - set(chain))
    return said, unreachable, parent


def test_a_frozen_worker_is_refused_and_the_chain_never_forks(
    served: tuple[Server, str],
) -> None:
    """Guards the saver's ownership (``holder``): the frozen worker's commit after
    the takeover is refused with StaleFencingToken and stores nothing, so the
    thread holds the parent and the second worker's child, one lineage, every
    checkpoint reachable from the latest. Seen failing with the saver taking no
    lease (then the frozen worker's commit went through: a fork)."""
    server, token = served
    said, unreachable, _ = race(server, token, "worker-a", "worker-b")
    assert said["B"].startswith("{'committed'")
    assert said["A"] == "{'refused': 'StaleFencingToken'}"
    assert unreachable == []


def test_control_without_owners_both_commit_and_the_chain_forks(
    served: tuple[Server, str],
) -> None:
    """Control: the same scenario with no holder, as LangGraph's own savers run it:
    both workers "succeed", the thread forks, and the second worker's committed
    checkpoint is unreachable from the latest (LangGraph issue 8796)."""
    server, token = served
    said, unreachable, _ = race(server, token, None, None)
    assert said["A"].startswith("{'committed'")
    assert said["B"].startswith("{'committed'")
    assert len(unreachable) == 1
    assert said["B"] == f"{{'committed': '{unreachable[0]}'}}"
