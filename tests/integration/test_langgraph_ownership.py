"""Single-writer ownership of LangGraph threads, tested as LangGraph's PR 8894
describes it: two processes load the same parent checkpoint, the first is frozen
(SIGSTOP) past its lease, the second takes over and commits, the first is
resumed and tries to commit."""

from __future__ import annotations

import operator
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from runstate.client.exceptions import StaleFencingToken
from runstate.integrations.langgraph import RunstateSaver
from tests.support import AgentProcess, Api, Server, create_token, sqlite_server, wait_until

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


class Done(TypedDict):
    done: Annotated[list[str], operator.add]


LOCK = (
    "query($id: ID!) { task(id: $id) { ... on Task { lock { holderId fencingToken expiresAt } } } }"
)
LOCK_EVENTS = (
    "query($id: ID!) { task(id: $id) { ... on Task { events(first: 100) {"
    " kind lock { fencingToken } } } } }"
)


def lock_of(api: Api, thread_id: str) -> dict[str, Any] | None:
    """The thread's live lease as the server answers it (None: none, or no thread
    yet)."""
    lock: dict[str, Any] | None = api(LOCK, id=thread_id)["task"].get("lock")
    return lock


def lease_events(api: Api, thread_id: str) -> list[tuple[str, int | None]]:
    """The thread's lease events: (kind, fencing token granted)."""
    events = api(LOCK_EVENTS, id=thread_id)["task"]["events"]
    return [
        (e["kind"], (e["lock"] or {}).get("fencingToken"))
        for e in events
        if e["kind"] in ("LOCK_ACQUIRED", "LOCK_RELEASED")
    ]


def one_node_graph(saver: RunstateSaver, gate: threading.Event | None = None) -> Any:
    """START -> work -> END; ``work`` waits for ``gate`` when it is given."""

    def work(state: Done) -> dict[str, Any]:
        if gate is not None:
            assert gate.wait(60), "the test never let the node finish"
        return {"done": ["work"]}

    builder = StateGraph(Done)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    graph: CompiledStateGraph[Any] = builder.compile(checkpointer=saver)
    return graph


class Running:
    """``graph.invoke`` in a thread of its own: its answer, or what it raised."""

    def __init__(self, graph: Any, thread_id: str) -> None:
        running.append(self)
        self.answer: Any = None
        self.raised: BaseException | None = None
        config = {"configurable": {"thread_id": thread_id}}

        def run() -> None:
            try:
                self.answer = graph.invoke({"done": []}, config)
            except BaseException as failed:  # handed to the test
                self.raised = failed

        self.thread = threading.Thread(target=run, name=f"graph {thread_id}")
        self.thread.start()

    def joined(self) -> Running:
        running.remove(self)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the graph's run never ended"
        return self


running: list[Running] = []
"""Runs not joined yet (``let_go`` ends them when a test fails)."""


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """The gate a test's blocked node waits at, opened and its runs ended whatever
    the test did, so that no run outlives it."""
    opened = threading.Event()
    yield opened
    opened.set()
    while running:
        running[0].joined()


def renewed(api: Api, thread_id: str, times: int) -> None:
    """Until the thread's lease has shown ``times`` more expiries than the first one
    seen (each a renewal), live all along."""
    seen: list[str] = []

    def moved() -> bool:
        lock = lock_of(api, thread_id)
        assert lock is not None, "the running thread's lease was let go"
        if not seen or seen[-1] != lock["expiresAt"]:
            seen.append(lock["expiresAt"])
        return len(seen) > times

    wait_until(moved, 30, f"{times} renewals of the lease on {thread_id}", interval=0.02)


def test_a_saver_renews_only_the_leases_of_watched_runs_under_way(
    served: tuple[Server, str], gate: threading.Event
) -> None:
    """Guards the saver's leases (issue 54, item 6d): with ``holder`` and a watched
    graph, a thread's lease is renewed while its run is under way, a node blocked
    far past ``lease_ttl`` included, and released once the run's end is sent; a
    finished thread's lease is never renewed again while another thread's is.
    Seen failing with the saver renewing every lease it took until closed, as it
    did (the finished thread's lease stayed live), and with a watched run's start
    not counted (the blocked run's lease was released after a second: "the running
    thread's lease was let go")."""
    server, token = served
    done_id, busy_id = str(uuid.uuid4()), str(uuid.uuid4())
    with (
        RunstateSaver.from_url_sync(server.url, token, holder="w", lease_ttl=1) as saver,
        Api(server.url, token) as api,
    ):
        graph = saver.watch(one_node_graph(saver, gate))
        gate.set()
        finished = Running(graph, done_id).joined()
        assert finished.raised is None
        assert finished.answer == {"done": ["work"]}
        wait_until(lambda: lock_of(api, done_id) is None, 30, "the finished run's lease let go")
        gate.clear()
        busy = Running(graph, busy_id)
        wait_until(lambda: lock_of(api, busy_id) is not None, 30, "the busy thread's lease")
        renewed(api, busy_id, 8)  # 8 renewals a third of a second apart: past lease_ttl
        assert lock_of(api, done_id) is None
        gate.set()
        assert busy.joined().raised is None
        wait_until(lambda: lock_of(api, busy_id) is None, 30, "the busy run's lease let go")
        assert lease_events(api, done_id) == [("LOCK_ACQUIRED", 1), ("LOCK_RELEASED", None)]
        assert lease_events(api, busy_id) == [("LOCK_ACQUIRED", 1), ("LOCK_RELEASED", None)]


@contextmanager
def rested(
    served: tuple[Server, str], gate: threading.Event, thread_id: str, holder: str
) -> Iterator[tuple[RunstateSaver, Api, Running]]:
    """A one-node graph run on ``thread_id`` by a saver of ``holder`` (lease 1 s),
    its node held at ``gate`` until the thread's lease is let go: the thread rests."""
    server, token = served
    with (
        RunstateSaver.from_url_sync(server.url, token, holder=holder, lease_ttl=1) as saver,
        Api(server.url, token) as api,
    ):
        running = Running(one_node_graph(saver, gate), thread_id)
        wait_until(lambda: lock_of(api, thread_id) is not None, 30, "the thread's lease")
        wait_until(lambda: lock_of(api, thread_id) is None, 30, "the quiet thread's lease let go")
        yield saver, api, running


def test_an_unwatched_thread_rests_when_quiet_and_goes_on_with_the_next_token(
    served: tuple[Server, str], gate: threading.Event
) -> None:
    """Guards the saver's leases for graphs it does not watch (issue 54, item 6d):
    a thread it wrote nothing to for ``lease_ttl`` is no longer renewed (its lease
    released, its token kept), here while its node is still blocked; the node's
    write then takes the lease again with the next token, since no other worker was
    granted it, and the run finishes, one lineage; quiet again, the lease is
    released. Seen failing with the saver renewing every lease until closed (the
    lease never let go), and with a rested thread's write going on with its old
    token without asking for the lease again (the write went through, but no second
    LOCK_ACQUIRED: nothing held the thread while the run went on)."""
    thread_id = str(uuid.uuid4())
    with rested(served, gate, thread_id, "u") as (saver, api, running):
        gate.set()
        assert running.joined().raised is None
        assert running.answer == {"done": ["work"]}
        wait_until(lambda: lock_of(api, thread_id) is None, 30, "the lease let go again")
        assert lease_events(api, thread_id) == [
            ("LOCK_ACQUIRED", 1),
            ("LOCK_RELEASED", None),
            ("LOCK_ACQUIRED", 2),
            ("LOCK_RELEASED", None),
        ]
        stored = list(saver.list({"configurable": {"thread_id": thread_id}}))
        parents = {
            t.parent_config["configurable"]["checkpoint_id"] for t in stored if t.parent_config
        }
        ids = [t.config["configurable"]["checkpoint_id"] for t in stored]
        assert len(parents) == len(ids) - 1  # a chain: every checkpoint but the first a parent


def test_a_rested_thread_another_worker_took_refuses_the_saver_s_next_write(
    served: tuple[Server, str], gate: threading.Event
) -> None:
    """Guards ``RunstateSaver._resumed``: a thread that rested while its node ran,
    and that another worker leased meanwhile, is not taken again: the saver's next
    write carries its old token and is refused (StaleFencingToken), and nothing of
    it is stored. Seen failing with ``_resumed`` adopting whatever token it was
    granted (the run finished on top of the other worker's: a fork)."""
    thread_id = str(uuid.uuid4())
    with rested(served, gate, thread_id, "slow") as (saver, api, running):
        for name in ("acquireTaskLock", "releaseTaskLock"):
            other = {"holderId": "other"} | (
                {"ttlSeconds": 30} if name == "acquireTaskLock" else {}
            )
            kind = "AcquireTaskLockInput" if name == "acquireTaskLock" else "ReleaseTaskLockInput"
            answer = api(
                f"mutation($input: {kind}!) {{ {name}(input: $input) {{ __typename }} }}",
                input={"taskId": thread_id, **other},
            )[name]
            assert answer["__typename"] in ("TaskLock", "Task"), answer
        before = len(list(saver.list({"configurable": {"thread_id": thread_id}})))
        gate.set()
        assert isinstance(running.joined().raised, StaleFencingToken)
        assert len(list(saver.list({"configurable": {"thread_id": thread_id}}))) == before
        assert lease_events(api, thread_id) == [
            ("LOCK_ACQUIRED", 1),
            ("LOCK_RELEASED", None),
            ("LOCK_ACQUIRED", 2),
            ("LOCK_RELEASED", None),
            ("LOCK_ACQUIRED", 3),
            ("LOCK_RELEASED", None),
        ]
