"""A LangGraph thread's node runs as its task's steps, against a real ``runstate
serve`` on SQLite and PostgreSQL: each node a step named after it, RUNNING while
it runs (in a watched graph), SUCCESS with its writes, FAILED with its error,
PENDING with the values of its ``interrupt()``; the thread following the graph;
history, forks and cancelling as on any task."""

from __future__ import annotations

import asyncio
import itertools
import operator
import threading
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Send, interrupt

from runstate.client import InvalidInput, InvalidTransition, Runstate
from runstate.integrations.langgraph import RunstateSaver
from runstate.services.domain.validation import ContentLimits, json_size
from tests.support import Api, Server, Subscriber, create_token, mutate, wait_until

TASK = """query($id: ID!) { task(id: $id) { ... on Task {
  status currentStep totalSteps eventSeq
  steps { index action status attempts input output error }
  events(first: 100) { seq kind status steps { index action status } } } } }"""
TASK_AT = """query($id: ID!, $seq: Int!) { taskAt(id: $id, seq: $seq) { ... on Task {
  status steps { index action status } } } }"""


class Trip(TypedDict):
    done: Annotated[list[str], operator.add]
    answer: str


def plan(state: Trip) -> list[Send]:
    return [Send("search", {"done": [f"search {i}"], "answer": ""}) for i in range(2)]


def search(state: Trip) -> dict[str, Any]:
    return {"done": state["done"]}


def approve(state: Trip) -> dict[str, Any]:
    return {"answer": interrupt({"question": "pay 120 EUR?"})}


def quiet(state: Trip) -> None:
    return None


def trip_graph(saver: RunstateSaver) -> CompiledStateGraph[Any]:
    """start -> (plan sends two searches) -> approve (an interrupt) -> quiet (writes
    nothing) -> end."""
    builder = StateGraph(Trip)
    builder.add_node("start_trip", lambda state: {"done": ["start"]})
    builder.add_node("search", search)
    builder.add_node("approve", approve)
    builder.add_node("quiet", quiet)
    builder.add_edge(START, "start_trip")
    builder.add_conditional_edges("start_trip", plan, ["search"])
    builder.add_edge("search", "approve")
    builder.add_edge("approve", "quiet")
    builder.add_edge("quiet", END)
    return saver.watch(builder.compile(checkpointer=saver))


def thread() -> RunnableConfig:
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


def task_of(server: Server, token: str, config: RunnableConfig) -> dict[str, Any]:
    """The thread's task; before the saver made it, one with nothing in it."""
    with Api(server.url, token) as api:
        found: dict[str, Any] = api(TASK, id=config["configurable"]["thread_id"])["task"]
    return found or {"status": None, "steps": [], "eventSeq": 0}


def settled(server: Server, token: str, config: RunnableConfig, status: str) -> dict[str, Any]:
    """The thread's task once its status is ``status`` (a run's end is reported
    just after the run returns)."""
    wait_until(
        lambda: task_of(server, token, config)["status"] == status, 30, f"the thread {status}"
    )
    return task_of(server, token, config)


def to_the_question(server: Server, token: str) -> tuple[RunnableConfig, dict[str, Any]]:
    """A new thread run with ``trip_graph`` up to its interrupt: its config, and its
    task once AWAITING_DECISION."""
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        trip_graph(saver).invoke({"done": [], "answer": ""}, config)
    return config, settled(server, token, config, "AWAITING_DECISION")


def shown(task: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(s["action"], s["status"], s["attempts"]) for s in task["steps"]]


def test_node_runs_are_steps_named_after_their_nodes(served: tuple[Server, str]) -> None:
    """Guards the node steps (``threads.nodes``, ``langgraph_steps``): one
    step per node run in super-step order, Send tasks named after their node, the
    writes summarised (values, ``sends``, ``next``), an interrupt as a PENDING
    step with its value and the thread AWAITING_DECISION, and the resume running
    that step again (a second attempt) to SUCCESS, the thread COMPLETED."""
    server, token = served
    config, task = to_the_question(server, token)
    assert shown(task) == [
        ("start_trip", "SUCCESS", 1),
        ("search", "SUCCESS", 1),
        ("search", "SUCCESS", 1),
        ("approve", "PENDING", 1),
    ]
    assert task["steps"][0]["output"] == {"done": ["start"], "sends": ["search", "search"]}
    assert sorted(s["output"]["done"][0] for s in task["steps"][1:3]) == ["search 0", "search 1"]
    assert task["steps"][1]["output"]["next"] == ["approve"]
    assert task["steps"][3]["output"] == {"interrupt": [{"question": "pay 120 EUR?"}]}
    assert [s["input"] for s in task["steps"]] == [{"superStep": n} for n in (1, 2, 2, 3)]
    assert task["currentStep"] == 3

    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = trip_graph(saver)
        assert graph.invoke(Command(resume="yes"), config)["answer"] == "yes"
    task = settled(server, token, config, "COMPLETED")
    assert shown(task)[3:] == [("approve", "SUCCESS", 2), ("quiet", "SUCCESS", 1)]
    assert task["steps"][3]["output"] == {"answer": "yes", "next": ["quiet"]}
    assert task["steps"][4]["output"] == {}
    assert (task["currentStep"], task["totalSteps"]) == (5, 5)


def test_a_watched_node_is_running_while_it_runs(served: tuple[Server, str]) -> None:
    """Guards the watcher (``RunstateSaver.watch``): while a node runs, its step is
    RUNNING and so is the thread; the control, the same graph unwatched, shows no
    step until the node has finished."""
    server, token = served
    for watched in (True, False):
        release = threading.Event()

        def slow(state: Trip, release: threading.Event = release) -> dict[str, Any]:
            assert release.wait(30)
            return {"done": ["slow"]}

        config = thread()
        with RunstateSaver.from_url_sync(server.url, token) as saver:
            builder = StateGraph(Trip)
            builder.add_node("slow", slow)
            builder.add_edge(START, "slow")
            builder.add_edge("slow", END)
            graph = builder.compile(checkpointer=saver)
            if watched:
                graph = saver.watch(graph)
            run = threading.Thread(target=graph.invoke, args=({"done": [], "answer": ""}, config))
            run.start()
            try:
                if watched:
                    wait_until(
                        lambda config=config: (
                            shown(task_of(server, token, config)) == [("slow", "RUNNING", 1)]
                        ),
                        30,
                        "the node's step RUNNING",
                    )
                    assert task_of(server, token, config)["status"] == "RUNNING"
                else:
                    # The input checkpoint and the start node's writes are in
                    # (LangGraph saved them before running the node): no step.
                    wait_until(
                        lambda config=config: task_of(server, token, config)["eventSeq"] >= 3,
                        30,
                        "the thread's first writes",
                    )
                    assert shown(task_of(server, token, config)) == []
            finally:
                release.set()
                run.join(30)
        assert shown(task_of(server, token, config)) == [("slow", "SUCCESS", 1)]
    assert task_of(server, token, config)["status"] == "RUNNING"  # no run end unwatched


def _moves(event: dict[str, Any]) -> list[tuple[int, str]]:
    return [(s["index"], s["status"]) for s in event["steps"]]


def test_each_node_start_comes_before_its_end_in_the_history(served: tuple[Server, str]) -> None:
    """Guards the order of the reports (a node's end waits for its start to be
    sent) and the history of steps added past PENDING (``write.engine``): the
    events show each node RUNNING, then finished, super-step after super-step,
    and ``taskAt`` the seq of a start shows that node RUNNING, not PENDING."""
    server, token = served
    config, task = to_the_question(server, token)
    moves = [move for e in task["events"] for move in _moves(e)]
    assert moves[:4] == [(0, "RUNNING"), (0, "SUCCESS"), (1, "RUNNING"), (2, "RUNNING")]
    assert sorted(moves[4:6]) == [(1, "SUCCESS"), (2, "SUCCESS")]  # parallel: either first
    assert moves[6:] == [(3, "RUNNING"), (3, "PENDING")]
    # The first node's start is its own STEP_STARTED, or goes with the input's
    # checkpoint (``nextNodes``) when the watcher saw the run begin first.
    started = next(e for e in task["events"] if (0, "RUNNING") in _moves(e))
    assert started["status"] == "RUNNING"
    with Api(server.url, token) as api:
        then = api(TASK_AT, id=config["configurable"]["thread_id"], seq=started["seq"])["taskAt"]
    assert then["steps"] == [{"index": 0, "action": "start_trip", "status": "RUNNING"}]
    assert then["status"] == "RUNNING"


def test_a_failed_node_fails_its_step_and_a_retry_runs_it_again(
    served: tuple[Server, str],
) -> None:
    """Guards FAILED reports: the node's step FAILED with its error and the thread
    FAILED with it; the retry (invoking the thread again) runs that very step
    again, a second attempt, to SUCCESS, and the thread COMPLETED."""
    server, token = served
    config = thread()
    broken = [True]

    def book(state: Trip) -> dict[str, Any]:
        if broken[0]:
            raise ValueError("no seats left")
        return {"done": ["book"]}

    with RunstateSaver.from_url_sync(server.url, token) as saver:
        builder = StateGraph(Trip)
        builder.add_node("book", book)
        builder.add_edge(START, "book")
        builder.add_edge("book", END)
        graph = saver.watch(builder.compile(checkpointer=saver))
        with pytest.raises(ValueError, match="no seats left"):
            graph.invoke({"done": [], "answer": ""}, config)
        task = settled(server, token, config, "FAILED")
        assert shown(task) == [("book", "FAILED", 1)]
        assert task["steps"][0]["error"] == "ValueError: no seats left"
        broken[0] = False
        assert graph.invoke(None, config) == {"done": ["book"], "answer": ""}
    task = settled(server, token, config, "COMPLETED")
    assert shown(task) == [("book", "SUCCESS", 2)]
    assert task["steps"][0]["error"] is None


def test_a_new_run_takes_a_completed_thread_back_to_running(served: tuple[Server, str]) -> None:
    """Guards the thread's own status machine: a LangGraph thread runs again on a
    new input, so its next node takes it from COMPLETED back to RUNNING (its new
    steps after the old ones), where any other task's COMPLETED is final."""
    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        builder = StateGraph(Trip)
        builder.add_node("echo", lambda state: {"done": ["echo"]})
        builder.add_edge(START, "echo")
        builder.add_edge("echo", END)
        graph = saver.watch(builder.compile(checkpointer=saver))
        graph.invoke({"done": [], "answer": ""}, config)
        settled(server, token, config, "COMPLETED")
        graph.invoke({"done": [], "answer": ""}, config)
    task = settled(server, token, config, "COMPLETED")
    assert shown(task) == [("echo", "SUCCESS", 1), ("echo", "SUCCESS", 1)]
    statuses = [e["status"] for e in task["events"] if e["steps"] or e["kind"].startswith("TASK")]
    first_end = statuses.index("COMPLETED")
    assert "RUNNING" in statuses[first_end:]
    assert statuses[-1] == "COMPLETED"


def test_a_cancelled_thread_stops_its_graph(served: tuple[Server, str]) -> None:
    """Guards CANCELLED being final for a thread too: a person cancels a thread
    waiting at its interrupt, and the resume is refused with InvalidTransition at
    its first write; the thread keeps its steps and its checkpoints as they were."""
    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = trip_graph(saver)
        graph.invoke({"done": [], "answer": ""}, config)
        task = settled(server, token, config, "AWAITING_DECISION")
        with Api(server.url, token) as api:
            version = api(
                "query($id: ID!) { task(id: $id) { ... on Task { version } } }",
                id=config["configurable"]["thread_id"],
            )["task"]["version"]
            cancelled = mutate(
                api,
                "setTaskStatus",
                "SetTaskStatusInput",
                "... on Task { status }",
                taskId=config["configurable"]["thread_id"],
                expectedVersion=version,
                status="CANCELLED",
            )
        assert cancelled == {"status": "CANCELLED"}
        checkpoints = len(list(saver.list(config)))
        with pytest.raises(InvalidTransition):
            graph.invoke(Command(resume="yes"), config)
        assert len(list(saver.list(config))) == checkpoints
    after = task_of(server, token, config)
    assert after["status"] == "CANCELLED"
    assert after["steps"] == task["steps"]


def test_a_copied_thread_goes_on_in_its_own_steps(served: tuple[Server, str]) -> None:
    """Guards the copy of the node map (``checkpoints.copy``): a thread copied at its
    interrupt (``copy_thread``, a fork of its task) has the source's steps, and
    resuming the copy runs the copy's own waiting step again rather than adding
    another; the source is left waiting."""
    server, token = served
    source, copy = thread(), thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = trip_graph(saver)
        graph.invoke({"done": [], "answer": ""}, source)
        before = settled(server, token, source, "AWAITING_DECISION")
        saver.copy_thread(source["configurable"]["thread_id"], copy["configurable"]["thread_id"])
        assert shown(task_of(server, token, copy)) == shown(before)
        graph.invoke(Command(resume="no"), copy)
    task = settled(server, token, copy, "COMPLETED")
    assert shown(task)[3:] == [("approve", "SUCCESS", 2), ("quiet", "SUCCESS", 1)]
    assert shown(task_of(server, token, source)) == shown(before)
    assert task_of(server, token, source)["status"] == "AWAITING_DECISION"


def test_bad_node_reports_are_refused_and_write_nothing(served: tuple[Server, str]) -> None:
    """Guards the checks of a node report (``NodeRun.checked``): InvalidInput
    naming the field, and the thread's task as it was."""
    server, token = served
    config, before = to_the_question(server, token)
    thread_id = config["configurable"]["thread_id"]
    node = {"graphTaskId": "t-1", "name": "plan", "status": "SUCCESS"}
    bad = {
        "nodes": [],
        "nodes[0].error": [node | {"status": "FAILED"}],
        "nodes[0].name": [node | {"name": "n" * 201}],
        "nodes[1].graphTaskId": [node, node | {"graphTaskId": ""}],
        "nodes[0].output": [node | {"output": {"big": "x" * 70_000}}],
    }
    with Api(server.url, token) as api:
        for field, nodes in bad.items():
            refused = mutate(
                api,
                "recordGraphRun",
                "RecordGraphRunInput",
                "__typename ... on InvalidInput { field }",
                taskId=thread_id,
                nodes=nodes,
            )
            assert refused == {"__typename": "InvalidInput", "field": field}
    assert task_of(server, token, config) == before


def echo_thread(server: Server, token: str, session: str, **options: Any) -> str:
    """A new thread in ``session`` that ran one node, unwatched (a saver made with
    ``options``); its id."""
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token, session_id=session, **options) as saver:
        builder = StateGraph(Trip)
        builder.add_node("echo", lambda state: {"done": ["echo"]})
        builder.add_edge(START, "echo")
        builder.add_edge("echo", END)
        builder.compile(checkpointer=saver).invoke({"done": [], "answer": ""}, config)
    return str(config["configurable"]["thread_id"])


def sdk_task(api: Api, session: str) -> dict[str, Any]:
    """A one-step task created in ``session`` beside its threads."""
    return mutate(
        api,
        "createTask",
        "CreateTaskInput",
        "... on Task { id }",
        sessionId=session,
        goal="an SDK task",
        steps=[{"action": "work"}],
    )


def test_no_claim_takes_a_thread_whose_graph_stopped(served: tuple[Server, str]) -> None:
    """Guards claimTask passing LangGraph threads by
    (``conditions.GRAPH_THREAD_SQL``): a thread whose owner let go mid-run
    (unwatched: still RUNNING, its lease released) is stalled, as any task whose
    agent is gone, yet a claim takes the SDK's task beside it, created later, and
    then finds nothing more."""
    server, token = served
    session = f"s-{uuid.uuid4().hex[:8]}"
    thread_id = echo_thread(server, token, session, holder="g1")
    with Api(server.url, token) as api:
        stalled = api(
            "query($id: ID!) { task(id: $id) { ... on Task { status stalled } } }",
            id=thread_id,
        )["task"]
        assert stalled == {"status": "RUNNING", "stalled": True}
        made = sdk_task(api, session)

        def claim() -> dict[str, Any]:
            return mutate(
                api,
                "claimTask",
                "ClaimTaskInput",
                "__typename ... on TaskLock { taskId }",
                holderId="worker",
                ttlSeconds=30,
                sessionId=session,
            )

        assert claim() == {"__typename": "TaskLock", "taskId": made["id"]}
        assert claim() == {"__typename": "NotFound"}


def test_a_thread_is_told_from_a_task_in_a_list(served: tuple[Server, str]) -> None:
    """Guards ``Task.graphThread`` (``lookups.graph_threads``), which the
    dashboard's list reads to count a thread's nodes run instead of a share of a
    plan: true for a saver's thread, false for a task beside it in the same page of
    the session's tasks, and true on ``taskAt`` before the thread's first node."""
    server, token = served
    session = f"s-{uuid.uuid4().hex[:8]}"
    thread_id = echo_thread(server, token, session)
    with Api(server.url, token) as api:
        made = sdk_task(api, session)
        listed = api(
            "query($id: ID!) { session(id: $id) { ... on AgentSession {"
            " tasks(first: 10) { edges { node { id graphThread } } } } } }",
            id=session,
        )["session"]["tasks"]["edges"]
        assert sorted((e["node"]["id"], e["node"]["graphThread"]) for e in listed) == sorted(
            [(thread_id, True), (made["id"], False)]
        )
        first = api(
            "query($id: ID!) { taskAt(id: $id, seq: 1) { ... on Task { graphThread } } }",
            id=thread_id,
        )
        assert first["taskAt"] == {"graphThread": True}


async def test_a_subscriber_sees_the_nodes_run_live(served: tuple[Server, str]) -> None:
    """Guards the node steps reaching ``taskProgress`` as they commit (published
    after their writes, as every task write): a subscriber from before the run
    sees the first node RUNNING, then SUCCESS, the searches, and the thread
    AWAITING_DECISION with the interrupt's step, in that order."""
    server, token = served
    config = thread()
    thread_id = config["configurable"]["thread_id"]
    async with RunstateSaver.from_url(server.url, token) as saver:
        graph = trip_graph(saver)
        with Api(server.url, token) as api:  # the thread's task, made first to follow it
            mutate(api, "startSession", "StartSessionInput", "__typename", id=saver.session_id)
            mutate(
                api,
                "createTask",
                "CreateTaskInput",
                "__typename",
                id=thread_id,
                sessionId=saver.session_id,
                goal=f"LangGraph thread {thread_id}",
                steps=[],
            )
        query = (
            "subscription($id: ID!) { taskProgress(taskId: $id) {"
            " seq kind status steps { index action status output } } }"
        )
        async with Subscriber(server.url, token, query, {"id": thread_id}) as live:
            await live.next()  # the SNAPSHOT
            run = asyncio.create_task(graph.ainvoke({"done": [], "answer": ""}, config))
            events = await live.until(lambda e: e["taskProgress"]["status"] == "AWAITING_DECISION")
            await run
    moves = [(s["action"], s["status"]) for e in events for s in e["taskProgress"]["steps"]]
    assert moves[:3] == [
        ("start_trip", "RUNNING"),
        ("start_trip", "SUCCESS"),
        ("search", "RUNNING"),
    ]
    assert moves[-2:] == [("approve", "RUNNING"), ("approve", "PENDING")]
    last = events[-1]["taskProgress"]
    assert last["steps"][0]["output"] == {"interrupt": [{"question": "pay 120 EUR?"}]}
    seqs = [e["taskProgress"]["seq"] for e in events[1:]]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_a_thread_id_runstate_refuses_is_refused_before_anything_is_sent(
    served: tuple[Server, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Guards the saver's and the SDK's id check (``client.ids``): a thread id with
    an accented letter (as the LangGraph demo's "trip-valparaíso-..." once had) is
    refused by the graph's first call with one InvalidInput naming the character
    and the characters allowed; the caller's server holds nothing new (no session,
    no task) and the watcher logs nothing. The SDK refuses a session's and a task's
    id the same way. Without the check the server refused the first write while the
    watcher's node reports failed beside it, in two different messages."""
    server, _ = served
    token = create_token(server.database_url, f"ids-{uuid.uuid4().hex[:8]}")
    config: RunnableConfig = {"configurable": {"thread_id": "trip-valparaíso-1"}}
    allowed = "an id is 1 to 64 ASCII letters, digits or _.:@-, starting with a letter or digit"
    with (
        RunstateSaver.from_url_sync(server.url, token) as saver,
        pytest.raises(InvalidInput) as refused,
    ):
        trip_graph(saver).invoke({"done": [], "answer": ""}, config)
    assert refused.value.message.startswith(
        "thread_id 'trip-valparaíso-1' is not a runstate id: it has 'í'; " + allowed
    )
    assert [r.getMessage() for r in caplog.records if r.name.startswith("runstate")] == []

    async def sdk() -> list[str]:
        async with Runstate(server.url, token) as rs:
            said = []
            for call in (
                rs.start_session("café"),
                rs.create_task("s", "g", ["a"], id="a task"),
            ):
                with pytest.raises(InvalidInput) as bad:
                    await call
                said.append(bad.value.message)
            return said

    assert asyncio.run(sdk()) == [
        "session id 'café' is not a runstate id: it has 'é'; " + allowed + " (a UUID is one)",
        "task id 'a task' is not a runstate id: it has ' '; " + allowed + " (a UUID is one)",
    ]
    with Api(server.url, token) as api:
        assert api("{ sessions { edges { cursor } } }")["sessions"]["edges"] == []


ANSWERED = "__typename ... on Task { version } ... on Problem { code message }"


def answer(api: Api, task_id: str, version: int, value: Any, **more: Any) -> dict[str, Any]:
    """``answerInterrupt`` of the thread's step 3 (``approve``)."""
    answered: dict[str, Any] = mutate(
        api,
        "answerInterrupt",
        "AnswerInterruptInput",
        ANSWERED,
        taskId=task_id,
        stepIndex=3,
        expectedVersion=version,
        value=value,
        **more,
    )
    return answered


def version_of(api: Api, task_id: str) -> int:
    found: int = api("query($id: ID!) { task(id: $id) { ... on Task { version } } }", id=task_id)[
        "task"
    ]["version"]
    return found


def test_an_interrupt_answered_where_it_is_watched_resumes_the_graph(
    served: tuple[Server, str],
) -> None:
    """Guards ``answerInterrupt`` (``threads.interrupts``) and the saver's
    ``interrupt_answer``: a thread waiting at ``interrupt()`` is answered by a
    person through the API (as the dashboard does), with a note; the graph's
    process, already waiting for the answer, gets exactly that value and resumes
    with it to COMPLETED. The answer's event names who answered and why. Refused:
    a stale version (VersionConflict: of two answers one wins), a second answer
    (InvalidInput: the first stands), an answer once the thread went on
    (InvalidTransition)."""
    server, token = served
    config, _ = to_the_question(server, token)
    thread_id = config["configurable"]["thread_id"]
    given = {"approved": True, "limit": 120}
    resumed: list[dict[str, Any]] = []

    async def resume_with_the_answer() -> None:
        async with RunstateSaver.from_url(server.url, token) as saver:
            graph = trip_graph(saver)
            value = await asyncio.wait_for(saver.interrupt_answer(config), 30)
            resumed.append(await graph.ainvoke(Command(resume=value), config))

    with Api(server.url, token) as api:
        version = version_of(api, thread_id)
        waiting = threading.Thread(target=lambda: asyncio.run(resume_with_the_answer()))
        waiting.start()
        assert answer(api, thread_id, version - 1, "no")["code"] == "VERSION_CONFLICT"
        answered = answer(api, thread_id, version, given, note="the budget allows it")
        assert answered == {"__typename": "Task", "version": version + 1}
        again = answer(api, thread_id, version + 1, "no")
        assert (again["code"], again["message"]) == (
            "INVALID_INPUT",
            "stepIndex: this interrupt is answered already",
        )
        waiting.join(60)
        assert [r["answer"] for r in resumed] == [given]
        done = settled(server, token, config, "COMPLETED")
        assert shown(done)[3] == ("approve", "SUCCESS", 2)
        events = api(
            "query($id: ID!) { task(id: $id) { ... on Task { events(first: 100) {"
            " kind actor note stepIndex steps { output } } } } }",
            id=thread_id,
        )["task"]["events"]
        (event,) = [e for e in events if e["kind"] == "INTERRUPT_ANSWERED"]
        assert (event["actor"], event["note"], event["stepIndex"]) == (
            "graph-builder",
            "the budget allows it",
            3,
        )
        assert event["steps"][0]["output"] == {
            "interrupt": [{"question": "pay 120 EUR?"}],
            "answer": given,
        }
        late = answer(api, thread_id, version_of(api, thread_id), "no")
        assert late["code"] == "INVALID_TRANSITION"


def test_an_answer_keeps_the_step_output_within_the_payload_limit(
    served: tuple[Server, str],
) -> None:
    """Guards the answer's size check (``answer_interrupt``): the answer is stored in
    the step's output beside the interrupt it answers, so the two together keep to
    RUNSTATE_MAX_JSON_BYTES. An answer of the whole limit alone was stored, the step
    output twice the limit; now it is refused, nothing written, and one that fits
    beside the interrupt to the byte is taken."""
    server, token = served
    config, _ = to_the_question(server, token)
    thread_id = config["configurable"]["thread_id"]
    most = ContentLimits().json_bytes
    asked = {"interrupt": [{"question": "pay 120 EUR?"}]}
    with Api(server.url, token) as api:
        version = version_of(api, thread_id)
        whole = "x" * (most - 2)  # as JSON, the whole limit
        refused = answer(api, thread_id, version, whole)
        size = json_size({**asked, "answer": whole})
        assert (refused["code"], refused["message"]) == (
            "INVALID_INPUT",
            f"value: with the interrupt it answers makes the step's output {size} bytes"
            f" of JSON, more than the {most} allowed",
        )
        assert version_of(api, thread_id) == version
        fits = "x" * (most - 2 - (size - most))
        assert json_size({**asked, "answer": fits}) == most
        assert answer(api, thread_id, version, fits) == {
            "__typename": "Task",
            "version": version + 1,
        }


def test_an_interrupt_is_answered_while_its_graph_holds_the_thread(
    served: tuple[Server, str],
) -> None:
    """Guards the answer's guard (``versioned(..., lease=False)``): the graph's
    process waiting for the answer may hold the thread's lease (a saver with
    ``holder=``); a person's answer goes through it on the version alone. With the
    lease checked, it was LockHeld."""
    server, token = served
    config, _ = to_the_question(server, token)
    thread_id = config["configurable"]["thread_id"]
    with Api(server.url, token) as api:
        held = mutate(
            api,
            "acquireTaskLock",
            "AcquireTaskLockInput",
            "__typename",
            taskId=thread_id,
            holderId="graph-process",
            ttlSeconds=60,
        )
        assert held == {"__typename": "TaskLock"}
        version = version_of(api, thread_id)
        answered = answer(api, thread_id, version, "yes")
        assert answered == {"__typename": "Task", "version": version + 1}


class Count(TypedDict):
    count: int


def counting(*names: str) -> StateGraph[Count]:
    """The nodes in a line, each adding one."""
    builder = StateGraph(Count)
    for name in names:
        builder.add_node(name, lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, names[0])
    for first, then in itertools.pairwise(names):
        builder.add_edge(first, then)
    builder.add_edge(names[-1], END)
    return builder


def counting_chain(saver: RunstateSaver, *names: str, **options: Any) -> CompiledStateGraph[Any]:
    """The nodes in a line, each adding one, watched."""
    return saver.watch(counting(*names).compile(checkpointer=saver, **options))


def test_a_watched_super_step_sends_its_starts_with_the_checkpoint(
    served: tuple[Server, str],
) -> None:
    """Guards the starts folded into the checkpoint (``RunstateSaver._next_nodes``,
    ``nodes.expected``): a watched chain run with ``durability="sync"`` shows each
    node RUNNING, then SUCCESS, in order, yet no start went on its own
    (no STEP_STARTED event: each came with the checkpoint before it), and
    ``taskAt`` that checkpoint's seq shows the next node RUNNING. The control,
    the saver sending no expected starts, sends each start alone."""
    server, token = served
    for folded in (True, False):
        config = thread()
        with RunstateSaver.from_url_sync(server.url, token) as saver:
            if not folded:
                saver._next_nodes = lambda *_: []  # type: ignore[method-assign]
            graph = counting_chain(saver, "a", "b", "c")
            assert graph.invoke({"count": 0}, config, durability="sync")["count"] == 3
        task = settled(server, token, config, "COMPLETED")
        assert shown(task) == [("a", "SUCCESS", 1), ("b", "SUCCESS", 1), ("c", "SUCCESS", 1)]
        moves = [(s["index"], s["status"]) for e in task["events"] for s in e["steps"]]
        assert moves == [(i, status) for i in range(3) for status in ("RUNNING", "SUCCESS")]
        kinds = [e["kind"] for e in task["events"]]
        assert kinds.count("STEP_STARTED") == (0 if folded else 3)
    b_started = [{"index": 1, "action": "b", "status": "RUNNING"}]
    started = next(e for e in task["events"] if e["steps"][-1:] == b_started)
    with Api(server.url, token) as api:
        then = api(TASK_AT, id=config["configurable"]["thread_id"], seq=started["seq"])["taskAt"]
    assert then["steps"][1] == {"index": 1, "action": "b", "status": "RUNNING"}


def test_a_node_expected_but_not_run_waits_in_its_step_for_its_run(
    served: tuple[Server, str],
) -> None:
    """Guards the expected start's step taken by the node's own report
    (``nodes._adopted``): a graph stopped before ``b`` (``interrupt_before``) has
    shown ``b`` starting with the checkpoint; the run's end puts it back to
    PENDING, and the next run runs ``b`` in that same step: two steps, not three
    (``b`` shown started twice: two attempts)."""
    server, token = served
    config = thread()
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = counting_chain(saver, "a", "b", interrupt_before=["b"])
        graph.invoke({"count": 0}, config, durability="sync")
    assert shown(task_of(server, token, config)) == [("a", "SUCCESS", 1), ("b", "PENDING", 1)]
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        graph = counting_chain(saver, "a", "b", interrupt_before=["b"])
        assert graph.invoke(None, config, durability="sync")["count"] == 2
    task = settled(server, token, config, "COMPLETED")
    assert shown(task) == [("a", "SUCCESS", 1), ("b", "SUCCESS", 2)]
