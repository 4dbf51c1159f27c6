"""The OpenAI Agents SDK on runstate (``runstate.integrations.openai_agents``), against
a real ``runstate serve`` on SQLite and PostgreSQL: a port of the SDK's own session
tests (tests/memory/test_session.py and test_session_limit.py of openai-agents
0.24.0, SQLiteSession replaced by RunstateSession), the runner driven by a
scripted model, writers in two processes, lost answers, and tool approvals
decided on the server and handed out once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    RunState,
    SessionSettings,
    TResponseInputItem,
    Usage,
)
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

from runstate.integrations.openai_agents import RunstateSession
from tests.agents.openai_agent import mailer
from tests.integration.test_sdk import LossyProxy
from tests.support import AgentProcess, Api, Server, query_value, wait_until

RUNNERS = ["run", "run_sync", "run_streamed"]


@pytest.fixture
async def open_session(served: tuple[Server, str]) -> AsyncIterator[Any]:
    """Makes RunstateSessions on the module's server, each on a fresh session id
    unless given one, and closes them after the test."""
    server, token = served
    made: list[RunstateSession] = []

    def make(session_id: str | None = None, **options: Any) -> RunstateSession:
        session = RunstateSession(
            session_id or f"oa-{uuid.uuid4().hex[:12]}", url=server.url, token=token, **options
        )
        made.append(session)
        return session

    yield make
    for session in made:
        await session.close()


async def run_agent(runner_method: str, agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    """The SDK tests' helper: the agent run by ``Runner.run``, ``run_sync`` (in a
    thread of its own, on that thread's loop) or ``run_streamed``."""
    if runner_method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if runner_method == "run_sync":
        return await asyncio.to_thread(run_sync, agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def run_sync(agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    """``Runner.run_sync`` in a thread of its own, closing the event loop it leaves
    open on that thread (the SDK keeps it for later runs; unclosed, it warns)."""
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        asyncio.get_event_loop_policy().get_event_loop().close()


def text_of(item: Any) -> Any:
    content = item.get("content")
    return content[0]["text"] if isinstance(content, list) else content


def test_it_is_the_sdks_session(open_session: Any) -> None:
    """The SDK's own runtime check of its Session protocol holds, and the settings
    default as SQLiteSession's do."""
    session = open_session()
    assert isinstance(session, Session)
    assert session.session_settings == SessionSettings()


@pytest.mark.parametrize("runner_method", RUNNERS)
async def test_session_memory_basic_functionality(open_session: Any, runner_method: str) -> None:
    """Port of test_session_memory_basic_functionality_parametrized: the second
    turn's model input holds the first turn."""
    session = open_session()
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([assistant_message("San Francisco")])
    first = await run_agent(
        runner_method, agent, "What city is the Golden Gate Bridge in?", session=session
    )
    assert first.final_output == "San Francisco"
    model.enqueue([assistant_message("California")])
    second = await run_agent(runner_method, agent, "What state is it in?", session=session)
    assert second.final_output == "California"
    assert [text_of(i) for i in model.calls[-1].input] == [
        "What city is the Golden Gate Bridge in?",
        "San Francisco",
        "What state is it in?",
    ]


@pytest.mark.parametrize("runner_method", RUNNERS)
async def test_session_memory_different_sessions(open_session: Any, runner_method: str) -> None:
    """Port of test_session_memory_different_sessions_parametrized: two session ids
    keep two conversations."""
    cats, dogs = open_session(), open_session()
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([assistant_message("I like cats")])
    await run_agent(runner_method, agent, "I like cats", session=cats)
    model.enqueue([assistant_message("I like dogs")])
    await run_agent(runner_method, agent, "I like dogs", session=dogs)
    model.enqueue([assistant_message("Yes, you mentioned cats")])
    await run_agent(runner_method, agent, "What did I say I like?", session=cats)
    assert [text_of(i) for i in model.calls[-1].input] == [
        "I like cats",
        "I like cats",
        "What did I say I like?",
    ]


async def test_session_memory_direct(open_session: Any) -> None:
    """Port of test_sqlite_session_memory_direct: add, read, clear."""
    session = open_session()
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []


async def test_empty_sessions(open_session: Any) -> None:
    """An unused session id: no items, pop None, clear and an empty add harmless."""
    session = open_session()
    assert await session.get_items() == []
    assert await session.get_items(limit=3) == []
    assert await session.pop_item() is None
    await session.clear_session()
    await session.add_items([])
    assert await session.get_items() == []


async def test_pop_item(open_session: Any) -> None:
    """Port of test_sqlite_session_memory_pop_item: newest first, then None."""
    session = open_session()
    assert await session.pop_item() is None
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "How are you?"},
    ]
    await session.add_items(items)
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    assert await session.pop_item() == items[1]
    assert await session.pop_item() == items[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_pop_different_sessions(open_session: Any) -> None:
    """Port of test_session_memory_pop_different_sessions."""
    one, two = open_session(), open_session()
    await one.add_items([{"role": "user", "content": "Session 1 message"}])
    await two.add_items(
        [
            {"role": "user", "content": "Session 2 message 1"},
            {"role": "user", "content": "Session 2 message 2"},
        ]
    )
    assert text_of(await two.pop_item()) == "Session 2 message 2"
    assert [text_of(i) for i in await one.get_items()] == ["Session 1 message"]
    assert [text_of(i) for i in await two.get_items()] == ["Session 2 message 1"]


async def test_pop_takes_the_newest_by_the_servers_order(open_session: Any) -> None:
    """Guards the runner's rewind: a pop removes the newest item the server holds,
    even one another writer (another instance, as another process) added after
    this one last wrote, and returns it exactly as stored."""
    mine = open_session()
    theirs = open_session(mine.session_id)
    await mine.add_items([{"role": "user", "content": "mine"}])
    stored = {"type": "function_call", "call_id": "c9", "name": "f", "arguments": '{"a": 1}'}
    await theirs.add_items([stored])
    popped = await mine.pop_item()
    assert json.dumps(popped) == json.dumps(stored)
    assert [text_of(i) for i in await theirs.get_items()] == ["mine"]


async def test_get_items_with_limit(open_session: Any) -> None:
    """Port of test_sqlite_session_get_items_with_limit, with a negative limit
    (everything, as SQLiteSession gives) and more than a page of the server's."""
    session = open_session()
    items = cast(
        list[TResponseInputItem],
        [
            {"role": role, "content": f"{kind} {n}"}
            for n in range(1, 4)
            for role, kind in (("user", "Message"), ("assistant", "Response"))
        ],
    )
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=4) == items[-4:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == items
    many: list[TResponseInputItem] = [{"role": "user", "content": f"m{n}"} for n in range(250)]
    await session.add_items(many)
    assert await session.get_items() == items + many
    assert await session.get_items(limit=150) == many[-150:]


async def test_session_settings_limit(open_session: Any) -> None:
    """Ports of test_get_items_uses_session_settings_limit and
    test_get_items_explicit_limit_overrides_session_settings."""
    session = open_session(session_settings=SessionSettings(limit=3))
    items: list[TResponseInputItem] = [{"role": "user", "content": f"M{n}"} for n in range(10)]
    await session.add_items(items)
    assert await session.get_items() == items[-3:]
    assert await session.get_items(limit=2) == items[-2:]


async def test_unicode_content(open_session: Any) -> None:
    """Port of test_sqlite_session_unicode_content."""
    session = open_session()
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "こんにちは"},
        {"role": "assistant", "content": "😊👍"},
        {"role": "user", "content": "Привет"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items


async def test_special_characters_and_sql_injection(open_session: Any) -> None:
    """Port of test_sqlite_session_special_characters_and_sql_injection, with
    escapes JSON must keep (quotes, backslashes, control characters)."""
    session = open_session()
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "O'Reilly"},
        {"role": "assistant", "content": "DROP TABLE sessions;"},
        {"role": "user", "content": '"SELECT * FROM users WHERE name = "admin";"'},
        {"role": "assistant", "content": "Robert'); DROP TABLE students;--"},
        {"role": "user", "content": "tab\tnew\nline \\ \x01 \u2028"},
    ]
    await session.add_items(items)
    assert json.dumps(await session.get_items()) == json.dumps(items)


async def test_concurrent_access(open_session: Any) -> None:
    """Port of test_sqlite_session_concurrent_access: ten adds at once from ten
    event loops in five threads; every item stored once."""
    session = open_session()
    items: list[TResponseInputItem] = [{"role": "user", "content": f"M{n}"} for n in range(10)]

    def add_one(item: TResponseInputItem) -> None:
        asyncio.run(session.add_items([item]))

    await asyncio.gather(*(asyncio.to_thread(add_one, item) for item in items))
    stored = [text_of(i) for i in await session.get_items()]
    assert sorted(stored) == sorted(f"M{n}" for n in range(10))


@pytest.mark.parametrize("runner_method", RUNNERS)
async def test_session_limit_parameter(open_session: Any, runner_method: str) -> None:
    """Port of test_session_limit_parameter: RunConfig's session settings limit the
    history the model sees; limit 0 gives it none (test_session_limit_zero)."""
    session = open_session()
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    for n in range(1, 4):
        model.enqueue([assistant_message(f"Reply {n}")])
        await run_agent(runner_method, agent, f"Message {n}", session=session)
    assert len(await session.get_items()) == 6
    model.enqueue([assistant_message("Reply 4")])
    limited = RunConfig(session_settings=SessionSettings(limit=2))
    await run_agent(runner_method, agent, "Message 4", session=session, run_config=limited)
    assert [text_of(i) for i in model.calls[-1].input] == ["Message 3", "Reply 3", "Message 4"]
    model.enqueue([assistant_message("Reply 5")])
    none = RunConfig(session_settings=SessionSettings(limit=0))
    await run_agent(runner_method, agent, "Message 5", session=session, run_config=none)
    assert [text_of(i) for i in model.calls[-1].input] == ["Message 5"]


async def test_a_bad_session_id_is_refused_before_anything_is_sent(served: Any) -> None:
    """The id rule holds before any request: one clear error naming it."""
    server, token = served
    with pytest.raises(Exception, match="session id"):
        RunstateSession("trip-valparaíso", url=server.url, token=token)


# ---------------------------------------------------------------- two processes


def together(agents: list[AgentProcess], answer: str) -> list[dict[str, Any]]:
    """Each agent's line with ``answer``, once all were ready and told to go at
    once (each waits for a line on stdin); every agent killed afterwards."""
    try:
        for agent in agents:
            agent.until(lambda line: line.get("ready"), within=60)
        for agent in agents:
            agent.send("go\n")
        return [agent.until(lambda line: answer in line, within=120) for agent in agents]
    finally:
        for agent in agents:
            agent.kill()


def writers(server: Server, token: str, session_id: str, count: int, batches: int) -> None:
    agents = [
        AgentProcess(
            server.url,
            token,
            session_id,
            "add",
            str(w),
            str(batches),
            module="tests.agents.openai_agent",
        )
        for w in range(count)
    ]
    assert together(agents, "added") == [{"added": batches}] * count


async def test_two_processes_adding_at_once_store_every_item_once(
    served: tuple[Server, str], open_session: Any
) -> None:
    """Guards the server's order across processes: two processes add 40 batches of
    three to one session at once; every item is stored exactly once, each batch
    whole (its three items adjacent, in order), and two readers agree. The
    control, a seq read before the write, is
    ``test_a_seq_read_before_the_write_loses_items``."""
    server, token = served
    session = open_session()
    await session.get_items()  # starts the session
    await asyncio.to_thread(writers, server, token, session.session_id, 2, 40)
    stored = await session.get_items()
    assert len(stored) == 2 * 40 * 3
    assert {(i["w"], i["b"], i["i"]) for i in stored} == {
        (w, b, i) for w in range(2) for b in range(40) for i in range(3)
    }
    for start in range(0, len(stored), 3):
        batch = stored[start : start + 3]
        assert [i["i"] for i in batch] == [0, 1, 2]
        assert len({(i["w"], i["b"]) for i in batch}) == 1
    assert await open_session(session.session_id).get_items() == stored


def test_a_seq_read_before_the_write_loses_items(served: tuple[Server, str]) -> None:
    """Control for the server's seq: two writers that each read the conversation's
    last seq and then insert the next, interleaved as concurrent processes may be,
    pick the same seq, and the second's item is refused by the unique index: lost
    (or, without the index, the two would share a place and their order be
    undefined). The server raises the seq in the write's own first statement
    instead."""
    server, token = served
    with Api(server.url, token) as api:
        session_id = f"ctl-{uuid.uuid4().hex[:8]}"
        api("mutation($id: ID!) { startSession(input: {id: $id}) { __typename } }", id=session_id)
        api(
            "mutation($s: ID!) { addSessionItems(input: {sessionId: $s, items: [1]})"
            " { __typename } }",
            s=session_id,
        )
    url = server.database_url
    pk = query_value(url, f"SELECT id FROM sessions WHERE public_id = '{session_id}'")
    read = f"SELECT MAX(seq) FROM session_items WHERE session_id = {pk}"
    first, second = query_value(url, read), query_value(url, read)  # both read before either writes
    assert first == second == 1
    insert = (
        "INSERT INTO session_items (session_id, seq, item, added_at, stored_bytes)"
        f" VALUES ({pk}, {{seq}}, '\"{{w}}\"', CURRENT_TIMESTAMP, 0) RETURNING seq"
    )
    assert query_value(url, insert.format(seq=first + 1, w="a")) == 2
    with pytest.raises(Exception, match=r"(?i)unique"):
        query_value(url, insert.format(seq=second + 1, w="b"))
    assert query_value(url, f"SELECT COUNT(*) FROM session_items WHERE session_id = {pk}") == 2


async def test_a_lost_answer_is_retried_and_stores_nothing_twice(
    served: tuple[Server, str], open_session: Any
) -> None:
    """Guards the keyed retry: the answer to an add_items is lost after the server
    stored it; the session's client sends it again under the same key and the
    items are stored once. Control: the same loss answered by a plain resend (no
    key) stores them twice."""
    server, token = served
    proxy = LossyProxy(int(server.url.rsplit(":", 1)[1]))
    url = await proxy.start()
    try:
        lossy = RunstateSession(f"lost-{uuid.uuid4().hex[:8]}", url=url, token=token)
        await lossy.get_items()  # started, before the proxy loses anything
        proxy.drop_next(1)
        await lossy.add_items([{"role": "user", "content": "once"}])
        assert proxy.dropped == 1
        assert [text_of(i) for i in await lossy.get_items()] == ["once"]
        await lossy.close()

        body = {
            "query": "mutation($s: ID!) { addSessionItems(input: {sessionId: $s,"
            ' items: [{role: "user", content: "twice"}]}) { __typename } }',
            "variables": {"s": lossy.session_id},
        }
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as raw:
            proxy.drop_next(1)
            with pytest.raises(httpx.HTTPError):
                await raw.post("/graphql", json=body)
            assert (await raw.post("/graphql", json=body)).status_code == 200
        check = open_session(lossy.session_id)
        assert [text_of(i) for i in await check.get_items()] == ["once", "twice", "twice"]
    finally:
        await proxy.close()


# ---------------------------------------------------------------- approvals


async def stopped_run(session: RunstateSession, ran: Path) -> RunState[Any, Any]:
    """A run of the mailer stopped at its approval, its items in the session."""
    model = ScriptedModel([[function_call("send_mail", {"to": "bob"}, call_id="call-1")]])
    result = await Runner.run(mailer(ran, model), "mail bob", session=session)
    assert [i.call_id for i in result.interruptions] == ["call-1"]
    return result.to_state()


DECIDE = """mutation($i: DecideStepInput!) { decideStep(input: $i) { __typename
  ... on Task { status steps { index status } } ... on VersionConflict { currentVersion } } }"""
TASK = """query($id: ID!) { task(id: $id) { ... on Task { version status
  steps { index action status output } } } }"""


def decide(api: Api, task_id: str, decision: str, version: int, note: str | None = None) -> Any:
    answer = api(
        DECIDE,
        i={
            "taskId": task_id, "stepIndex": 1, "decision": decision,
            "expectedVersion": version, "note": note,
        },
    )  # fmt: skip
    return answer["decideStep"]


def resumers(server: Server, token: str, session_id: str, ran: Path, count: int) -> list[Any]:
    """``count`` processes asking for the session's decided run at once: each one's
    last line."""
    agents = [
        AgentProcess(
            server.url, token, session_id, "resume", str(ran), module="tests.agents.openai_agent"
        )
        for _ in range(count)
    ]
    return together(agents, "resumed")


def ran_lines(ran: Path) -> list[str]:
    return ran.read_text().splitlines() if ran.exists() else []


async def test_an_approved_tool_runs_once_when_two_processes_resume(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards approvals decided on the server and handed out once: the run stops at
    the tool's approval; save_run_state makes its approval a step in doubt (the
    task AWAITING_DECISION, nothing handed out yet); two devices decide at once
    and one wins; two processes then ask for the run at once: one gets it and the
    tool runs once, the task shows the approval and the resumed run's end.
    Control: the SDK's own RunState, resumed twice from one JSON, runs it twice."""
    server, token = served
    ran = tmp_path / "ran.log"
    session = open_session()
    state = await stopped_run(session, ran)
    task_id = await session.save_run_state(state)
    with Api(server.url, token) as api:
        waiting = api(TASK, id=task_id)["task"]
        assert waiting["status"] == "AWAITING_DECISION"
        assert [s["status"] for s in waiting["steps"]] == ["SUCCESS", "IN_DOUBT", "PENDING"]
        assert waiting["steps"][1]["action"] == 'approve send_mail({"to":"bob"})'
        assert (
            await open_session(session.session_id).load_run_state(mailer(ran, ScriptedModel()))
            is None
        )  # undecided: not handed out
        first = decide(api, task_id, "RETRY", waiting["version"], "ok by Ann")
        second = decide(api, task_id, "SKIP", waiting["version"], "no by Bob")
        assert (first["__typename"], second["__typename"]) == ("Task", "VersionConflict")
    answers = await asyncio.to_thread(resumers, server, token, session.session_id, ran, 2)
    assert sorted(a["resumed"] for a in answers) == [False, True]
    assert ran_lines(ran) == ["bob"]
    with Api(server.url, token) as api:
        done = api(TASK, id=task_id)["task"]
    assert done["status"] == "COMPLETED"
    assert [s["status"] for s in done["steps"]] == ["SUCCESS", "SUCCESS", "SUCCESS"]
    assert done["steps"][2]["output"] == "mail handled"
    items = await session.get_items()
    assert [i.get("type") for i in items][-2:] == ["function_call_output", "message"]

    control = tmp_path / "control.log"
    stored = (await stopped_run(open_session(), control)).to_json()
    for _ in range(2):
        agent = mailer(control, ScriptedModel([[assistant_message("again")]]))
        resumed = await RunState.from_json(agent, stored)
        resumed.approve(resumed.get_interruptions()[0])
        await Runner.run(agent, resumed)
    assert ran_lines(control) == ["bob", "bob"]


async def test_a_rejection_on_the_server_wins_over_an_approval_in_the_client(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards distrust of the client's state: the client approves the call itself
    before saving; a person rejects it on the server with a note; the resumed run
    never runs the tool, and the model is told the person's note."""
    server, token = served
    ran = tmp_path / "ran.log"
    session = open_session()
    state = await stopped_run(session, ran)
    state.approve(state.get_interruptions()[0])
    task_id = await session.save_run_state(state)
    with Api(server.url, token) as api:
        version = api(TASK, id=task_id)["task"]["version"]
        assert decide(api, task_id, "SKIP", version, "not to Bob")["__typename"] == "Task"
    model = ScriptedModel([[assistant_message("understood")]])
    agent = mailer(ran, model)
    resumed = await session.load_run_state(agent)
    assert resumed is not None
    result = await Runner.run(agent, resumed, session=session)
    await session.finish_run(output=result.final_output)
    assert ran_lines(ran) == []
    outputs = [i for i in model.calls[-1].input if i.get("type") == "function_call_output"]
    assert "not to Bob" in str(cast(dict[str, Any], outputs[-1])["output"])
    assert await session.load_run_state(agent) is None  # handed out once, and finished


def test_the_extra_installs_beside_runstates_own_dependencies() -> None:
    """Guards the extra's pins (``runstate[openai-agents]``): with the SDK installed
    beside runstate's own dependencies (and the test tools), ``pip check`` finds no
    conflict (the SDK pins websockets below 17, which runstate allows)."""
    import subprocess
    import sys

    checked = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.strip() == "No broken requirements found."


LEASE = "query($id: ID!) { task(id: $id) { ... on Task { stalled lock { expiresAt } } } }"


async def test_a_handed_out_run_keeps_its_lease_while_it_goes_on(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards the renewal of a handed-out run's lease: with a lease of 2 s, the run
    is still held (not stalled, not handed to another session) well after its
    first lease would have lapsed. Control: with the renewal stopped, the same run
    is stalled within seconds (claimable, its resume step to be put in doubt)."""
    server, token = served
    ran = tmp_path / "ran.log"
    session = open_session(lease_ttl=2)
    task_id = await session.save_run_state(await stopped_run(session, ran))
    with Api(server.url, token) as api:
        version = api(TASK, id=task_id)["task"]["version"]
        assert decide(api, task_id, "RETRY", version)["__typename"] == "Task"
        agent = mailer(ran, ScriptedModel())
        assert await session.load_run_state(agent) is not None
        first = api(LEASE, id=task_id)["task"]["lock"]["expiresAt"]

        def renewed() -> bool:
            lock = api(LEASE, id=task_id)["task"]["lock"]
            return lock is not None and lock["expiresAt"] > first

        await asyncio.to_thread(wait_until, renewed, 10, "the lease renewed")
        ended = datetime.fromisoformat(first) + timedelta(seconds=1)
        passed = lambda: datetime.now(UTC) > ended  # noqa: E731
        await asyncio.to_thread(wait_until, passed, 10, "past the first lease's end")
        assert api(LEASE, id=task_id)["task"]["stalled"] is False
        assert await open_session(session.session_id).load_run_state(agent) is None

        running = session._running
        assert running is not None
        running.stop_soon()
        stalled = lambda: api(LEASE, id=task_id)["task"]["stalled"]  # noqa: E731
        await asyncio.to_thread(wait_until, stalled, 10, "the run stalled without renewal")


SPENT = """query($id: ID!) { task(id: $id) { ... on Task {
  spend { inputTokens outputTokens costMicros calls }
  steps { action models spend { inputTokens outputTokens costMicros calls } } } } }"""


async def test_a_runs_usage_is_recorded_on_its_steps(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards the run's spend (``RunstateSession._spent``): the tokens a run used up
    to its stop are its run step's, what the resumed run used after that is its
    resume step's (not counted twice, though the resumed state's usage includes
    the first part), each priced by the session's ``prices``."""
    server, token = served
    session = open_session(prices={"gpt-4o": (2.5, 10.0)})
    ran = tmp_path / "ran.log"
    first = ScriptedModel(
        [[function_call("send_mail", {"to": "bob"}, call_id="call-1")]],
        default_usage=Usage(requests=1, input_tokens=1000, output_tokens=100, total_tokens=1100),
    )
    agent = mailer(ran, first)
    agent.model = "gpt-4o"  # the name the prices know; the scripted model answers
    stopped = await Runner.run(
        agent, "mail bob", run_config=RunConfig(model=first), session=session
    )
    task_id = await session.save_run_state(stopped.to_state())
    with Api(server.url, token) as api:
        version = api(TASK, id=task_id)["task"]["version"]
        assert decide(api, task_id, "RETRY", version)["__typename"] == "Task"
    second = ScriptedModel(
        [[assistant_message("sent")]],
        default_usage=Usage(requests=1, input_tokens=300, output_tokens=40, total_tokens=340),
    )
    resumed_agent = mailer(ran, second)
    resumed = await session.load_run_state(resumed_agent)
    assert resumed is not None
    result = await Runner.run(resumed_agent, resumed, session=session)
    await session.finish_run(
        output=result.final_output, usage=result.context_wrapper.usage, model="gpt-4o"
    )
    with Api(server.url, token) as api:
        task = api(SPENT, id=task_id)["task"]
    spends = {s["action"]: (s["spend"], s["models"]) for s in task["steps"]}
    assert spends["openai-agents run"] == (
        {"inputTokens": 1000, "outputTokens": 100, "costMicros": 3500, "calls": 1},
        ["gpt-4o"],
    )
    resumed_step = task["steps"][-1]
    assert resumed_step["spend"] == {
        "inputTokens": 300,
        "outputTokens": 40,
        "costMicros": 1150,
        "calls": 1,
    }
    assert task["spend"]["inputTokens"] == 1300
