"""Real LangGraph graphs on RunstateSaver, against a real ``runstate serve``: the
sync and async paths, state and its history, update_state, time travel and
interrupts, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import operator
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from runstate.integrations.langgraph import RunstateSaver
from tests.integration.test_langgraph_ownership import lease_lapsed
from tests.support import AgentProcess, Api, Server


class Trip(TypedDict):
    """A trip being booked: each node adds what it did."""

    done: Annotated[list[str], operator.add]
    approved: str


def search(state: Trip) -> dict[str, Any]:
    return {"done": ["search"]}


def book(state: Trip) -> dict[str, Any]:
    return {"done": ["book"]}


def approve(state: Trip) -> dict[str, Any]:
    answer = interrupt({"question": "pay 120 EUR?", "done": state["done"]})
    return {"done": ["approve"], "approved": answer}


def pay(state: Trip) -> dict[str, Any]:
    return {"done": ["pay"]}


def trip_graph(saver: RunstateSaver, *, asking: bool = False) -> CompiledStateGraph[Any]:
    """search -> book [-> approve (an interrupt)] -> pay."""
    builder = StateGraph(Trip)
    builder.add_node("search", search)
    builder.add_node("book", book)
    builder.add_node("pay", pay)
    builder.add_edge(START, "search")
    builder.add_edge("search", "book")
    if asking:
        builder.add_node("approve", approve)
        builder.add_edge("book", "approve")
        builder.add_edge("approve", "pay")
    else:
        builder.add_edge("book", "pay")
    builder.add_edge("pay", END)
    return builder.compile(checkpointer=saver)


def thread() -> RunnableConfig:
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


def test_a_graph_runs_with_invoke_and_its_history_is_kept(served: tuple[Server, str]) -> None:
    """Guards the sync path (``put``, ``put_writes``, ``get_tuple``, ``list`` from
    ``invoke``): the run's end state, every checkpoint of its history newest first
    (input, then one per super-step), and the state as it stood at each."""
    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = trip_graph(saver)
        assert graph.invoke({"done": []}, config) == {"done": ["search", "book", "pay"]}
        state = graph.get_state(config)
        assert state.values == {"done": ["search", "book", "pay"]}
        assert state.next == ()
        history = list(graph.get_state_history(config))
    assert [h.values.get("done") for h in history] == [
        ["search", "book", "pay"],
        ["search", "book"],
        ["search"],
        [],
        [],
    ]
    assert [h.metadata["step"] for h in history if h.metadata] == [3, 2, 1, 0, -1]
    assert history[-1].next == ("__start__",)


async def test_a_graph_runs_with_ainvoke_and_astream(served: tuple[Server, str]) -> None:
    """Guards the async path: ``ainvoke`` gives the end state, and ``astream`` on
    another thread yields each node's update in order, stored as it goes."""
    server, token = served
    async with RunstateSaver.from_url(server.url, token) as saver:
        graph = trip_graph(saver)
        config = thread()
        assert await graph.ainvoke({"done": []}, config) == {"done": ["search", "book", "pay"]}
        streamed = thread()
        updates = [u async for u in graph.astream({"done": []}, streamed, stream_mode="updates")]
        assert updates == [
            {"search": {"done": ["search"]}},
            {"book": {"done": ["book"]}},
            {"pay": {"done": ["pay"]}},
        ]
        assert (await graph.aget_state(streamed)).values == {"done": ["search", "book", "pay"]}


def test_update_state_and_time_travel_fork_the_thread(served: tuple[Server, str]) -> None:
    """Guards ``update_state`` (a checkpoint of source "update") and time travel: run
    again from the checkpoint after ``search``, the graph goes on from there on a
    new branch of the thread, and the first branch's checkpoints stay reachable."""
    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = trip_graph(saver)
        graph.invoke({"done": []}, config)
        first = list(graph.get_state_history(config))
        after_search = next(h for h in first if h.values.get("done") == ["search"])
        changed = graph.update_state(after_search.config, {"done": ["edited"]})
        assert graph.get_state(changed).values == {"done": ["search", "edited"]}
        assert (graph.get_state(changed).metadata or {}).get("source") == "update"
        assert graph.invoke(None, changed) == {"done": ["search", "edited", "book", "pay"]}
        again = list(graph.get_state_history(config))
        assert graph.get_state(config).values == {"done": ["search", "edited", "book", "pay"]}
        ids = {h.config["configurable"]["checkpoint_id"] for h in again}
        assert {h.config["configurable"]["checkpoint_id"] for h in first} <= ids
        assert len(again) == len(first) + 3  # the update, then book and pay again


def test_an_interrupt_waits_and_a_resume_goes_on(served: tuple[Server, str]) -> None:
    """Guards pending writes across calls: ``interrupt()`` stops the run with its
    value (stored as a pending write), and ``Command(resume=...)`` in a new saver,
    as a process started later would, goes on from there."""
    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = trip_graph(saver, asking=True)
        stopped = graph.invoke({"done": []}, config)
        assert stopped["__interrupt__"][0].value == {
            "question": "pay 120 EUR?",
            "done": ["search", "book"],
        }
        assert graph.get_state(config).next == ("approve",)
    with RunstateSaver.from_url_sync(server.url, token) as later:
        graph = trip_graph(later, asking=True)
        done = graph.invoke(Command(resume="yes"), config)
    assert done == {"done": ["search", "book", "approve", "pay"], "approved": "yes"}


def test_a_graph_killed_mid_run_is_resumed_by_a_new_process(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards recovery of a graph: a process killed (SIGKILL) while ``book`` runs
    leaves the checkpoint after ``search``; a fresh process goes on from it, so
    ``search`` ran once, ``book`` again (it never finished), ``pay`` once, and the
    thread ends as an uninterrupted run would. The dead process's lease lapses and
    the new one takes the thread over."""
    server, token = served
    thread_id = str(uuid.uuid4())
    effects = tmp_path / "effects.txt"
    args = ["--effects", str(effects)]
    first = AgentProcess(
        server.url, token, thread_id, *args, "--stall", module="tests.agents.graph_runner"
    )
    try:
        first.until(lambda line: line.get("node") == "book")
    finally:
        first.kill()
    with Api(server.url, token) as api:
        lease_lapsed(api, thread_id)
    second = AgentProcess(server.url, token, thread_id, *args, module="tests.agents.graph_runner")
    try:
        lines = second.rest(within=60)
    finally:
        second.kill()
    assert lines[-1] == {"finished": ["search", "book", "pay"]}
    assert effects.read_text().split() == ["search", "book", "book", "pay"]


def appended(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    """The DeltaChannel reducer of ``Log``: every write's items, in order."""
    return [*state, *(item for write in writes for item in write)]


class Log(TypedDict):
    log: Annotated[list[str], DeltaChannel(appended, snapshot_frequency=3)]


def log_graph(saver: RunstateSaver) -> CompiledStateGraph[Any]:
    """Seven nodes in a line, each appending its name to a DeltaChannel."""
    builder = StateGraph(Log)
    names = [f"n{i}" for i in range(7)]
    for name in names:
        builder.add_node(name, lambda state, name=name: {"log": [name]})
    builder.add_edge(START, names[0])
    for first, then in itertools.pairwise(names):
        builder.add_edge(first, then)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


def test_a_delta_channel_is_rebuilt_and_survives_keep_latest(served: tuple[Server, str]) -> None:
    """Guards DeltaChannel graphs: a channel stored as a snapshot every 3 updates and
    deltas between is rebuilt whole by a fresh saver (LangGraph's
    ``get_delta_channel_history`` over ``get_tuple``), and still after
    ``prune(keep_latest)``, which keeps the ancestors back to its last snapshot.
    Seen failing with KEEP_LATEST keeping the latest checkpoint alone: the log then
    came back empty, with no error (the silent loss LangGraph's ``prune`` warns of)."""
    server, token = served
    config = thread()
    whole = [f"n{i}" for i in range(7)]
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        assert log_graph(saver).invoke({"log": []}, config) == {"log": whole}
    with RunstateSaver.from_url_sync(server.url, token) as fresh:
        graph = log_graph(fresh)
        assert graph.get_state(config).values == {"log": whole}
        fresh.prune([config["configurable"]["thread_id"]], strategy="keep_latest")
        assert graph.get_state(config).values == {"log": whole}
        assert 1 < len(list(fresh.list(config))) < 9


def test_the_threads_session_outlives_a_long_wait_at_an_interrupt(
    served: tuple[Server, str],
) -> None:
    """Guards the saver's session expiry: its session is made to outlive a year of
    inactivity, not the server's default hour (after which an interrupted thread
    could never be resumed: an expired session takes no writes). Seen failing with
    the session made with the server's default."""
    server, token = served
    session_id = f"threads-{uuid.uuid4()}"
    with RunstateSaver.from_url_sync(server.url, token, session_id=session_id) as saver:
        trip_graph(saver).invoke({"done": []}, thread())
    with Api(server.url, token) as api:
        found = api(
            "query($id: ID!) { session(id: $id) { ... on AgentSession { ttlSeconds } } }",
            id=session_id,
        )
    assert found == {"session": {"ttlSeconds": 366 * 24 * 3600}}


def test_list_reads_a_named_checkpoint_by_id_and_pages_lazily(
    served: tuple[Server, str],
) -> None:
    """Guards ``RunstateSaver.list``: a config naming a checkpoint reads that one by
    its id, whatever the thread's length (no page of the list), and a listing
    reads its pages as they are consumed (the first checkpoint costs one page)."""
    from langgraph.checkpoint.base import empty_checkpoint

    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        ids = []
        parent: RunnableConfig = config
        for step in range(100):
            checkpoint = empty_checkpoint()
            parent = saver.put(parent, checkpoint, {"source": "loop", "step": step}, {})
            ids.append(checkpoint["id"])
        calls: list[str] = []
        client = saver._client
        for name in ("graph_checkpoint", "graph_checkpoints"):
            real = getattr(client, name)

            def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                calls.append(_name)
                return _real(*args, **kw)

            setattr(client, name, counted)
        oldest: RunnableConfig = {
            "configurable": {**config["configurable"], "checkpoint_id": ids[0]}
        }
        assert [t.checkpoint["id"] for t in saver.list(oldest)] == [ids[0]]
        assert calls == ["graph_checkpoint"]
        assert [t.checkpoint["id"] for t in saver.list(oldest, filter={"step": 1})] == []
        calls.clear()
        newest = next(iter(saver.list(config)))
        assert newest.checkpoint["id"] == ids[-1]
        assert calls == ["graph_checkpoints"]
        assert [t.checkpoint["id"] for t in saver.list(config)] == ids[::-1]


EVENTS = """query($id: ID!) { task(id: $id) { ... on Task {
  events(first: 100) { kind steps { action status } } } } }"""


def trip_events(server: Server, token: str, **options: Any) -> list[dict[str, Any]]:
    """The events a trip (search -> book -> pay) writes to its thread."""
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token, **options) as saver:
        trip_graph(saver).invoke({"done": []}, config, durability="sync")
    with Api(server.url, token) as api:
        events: list[dict[str, Any]] = api(EVENTS, id=config["configurable"]["thread_id"])["task"][
            "events"
        ]
    return events


def test_a_nodes_writes_go_with_the_checkpoint_that_follows_them(
    served: tuple[Server, str],
) -> None:
    """Guards the held writes (``RunstateSaver``'s ``hold_writes``): each node's
    pending writes reach the server in the request of the checkpoint that follows
    them, one write (a GRAPH_CHECKPOINT event) per super-step, the node's step
    finished in it (held up to 5 s, so that a slow machine cannot make a write
    go alone: merged, none waits); sent alone (``hold_writes=0``, the control) each of the four
    LangGraph tasks (``__start__`` and the three nodes) costs a GRAPH_WRITES write
    more."""
    server, token = served
    held = trip_events(server, token, hold_writes=5.0)  # a slow machine waits no more
    assert [e["kind"] for e in held] == ["TASK_CREATED"] + ["GRAPH_CHECKPOINT"] * 5
    assert [[(s["action"], s["status"]) for s in e["steps"]] for e in held[-3:]] == [
        [("search", "SUCCESS")],
        [("book", "SUCCESS")],
        [("pay", "SUCCESS")],
    ]
    alone = [e["kind"] for e in trip_events(server, token, hold_writes=0)]
    assert (alone.count("GRAPH_CHECKPOINT"), alone.count("GRAPH_WRITES")) == (5, 4)


def crash_and_resume(
    server: Server, token: str, kind: str, tmp_path: Path
) -> tuple[list[list[Any]], list[str], list[str]]:
    """``tests.agents.graph_crash`` with the saver ``kind``: killed (SIGKILL) once
    ``fast``'s writes are acknowledged while ``slow``, its sibling, still runs,
    then run again to the end. The writes the second process found pending, the
    nodes run (the effects, in order) and the state it finished with."""
    thread_id = str(uuid.uuid4())
    effects = tmp_path / f"{kind}-effects.txt"
    args = ["--saver", kind, "--effects", str(effects), "--sqlite", str(tmp_path / "lg.db")]
    module = "tests.agents.graph_crash"
    first = AgentProcess(server.url, token, thread_id, *args, "--stall", module=module)
    try:
        first.until(lambda line: ["done", ["fast"]] in line.get("writes", []))
    finally:
        first.kill()
    second = AgentProcess(server.url, token, thread_id, *args, module=module)
    try:
        lines = second.rest(within=60)
    finally:
        second.kill()
    pending = next(line["pending"] for line in lines if "pending" in line)
    return pending, effects.read_text().split(), lines[-1]["finished"]


@pytest.mark.parametrize("kind", ["runstate", "sqlite"])
def test_an_acknowledged_write_survives_sigkill_and_its_node_runs_once(
    served: tuple[Server, str], tmp_path: Path, kind: str
) -> None:
    """Guards what ``aput_writes`` acknowledges while it holds writes for the next
    checkpoint: durable. ``fast`` finished and its writes were acknowledged (sent
    alone once the hold passed, ``slow`` still running); the process is killed;
    the new one finds them pending, so ``fast`` does not run again, ``search``
    (a finished super-step) neither, and ``slow`` (never finished) does. The same
    holds for LangGraph's ``AsyncSqliteSaver`` (``sqlite``), run as the anchor;
    ``test_a_write_acknowledged_before_it_is_stored_is_lost`` shows the check
    failing."""
    server, token = served
    pending, effects, finished = crash_and_resume(server, token, kind, tmp_path)
    assert ["done", ["fast"]] in pending
    assert sorted(effects) == ["fast", "join", "search", "slow", "slow"]
    assert sorted(finished) == ["fast", "join", "search", "slow"]


def test_a_write_acknowledged_before_it_is_stored_is_lost(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    """The control of the SIGKILL test: a saver that acknowledges a write before
    storing it (``graph_crash``'s ``early``, holding it for the checkpoint that
    never comes) loses it to the kill, and ``fast`` runs twice."""
    server, token = served
    pending, effects, _ = crash_and_resume(server, token, "early", tmp_path)
    assert ["done", ["fast"]] not in pending
    assert sorted(effects) == ["fast", "fast", "join", "search", "slow", "slow"]
