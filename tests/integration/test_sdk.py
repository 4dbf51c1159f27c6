"""The Python SDK against a real server: typed problems, checkpoint policies, leases,
watch with reconnection, and a crashed SDK agent resumed by a second process."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runstate.client import (
    AtEnd,
    CheckpointPolicy,
    Event,
    EveryNSteps,
    EveryStep,
    InvalidTransition,
    KeyPoints,
    LeaseLost,
    LockHeld,
    NeedsDecision,
    NotFound,
    RateLimited,
    Runstate,
    ServerUnavailable,
    SessionExpired,
    Task,
    TaskRunner,
    Unauthorized,
    VersionConflict,
)
from runstate.client import calls as api_module
from tests.support import Server, create_token, free_port, restart

STEPS = 6


@pytest.fixture(scope="module", params=["lean", "standard"])
def sdk_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str]]:
    """The SDK's server, once with the lean path (the SDK names its documents by
    id, and its writes run on ``resolvers.lean``) and once without
    (``RUNSTATE_LEAN=false``: the same requests on the standard path): every SDK
    test runs through both."""
    tmp = tmp_path_factory.mktemp("sdk")
    url = f"sqlite://{tmp / 'sdk.db'}"
    token = create_token(url, "sdk-user")
    lean = "true" if request.param == "lean" else "false"
    server = Server(url, tmp / "server.log", RUNSTATE_LEAN=lean).start()
    yield server, token
    server.stop()


@pytest.fixture
async def rs(sdk_server: tuple[Server, str]) -> AsyncIterator[Runstate]:
    server, token = sdk_server
    async with Runstate(server.url, token) as client:
        yield client


async def new_task(rs: Runstate, steps: int = STEPS, **plan: bool) -> str:
    session = await rs.start_session()
    task = await rs.create_task(
        session.id,
        "sdk test",
        [{"action": f"step-{i}", "idempotent": plan.get(f"step-{i}", True)} for i in range(steps)],
    )
    return task.id


async def kinds(rs: Runstate, task_id: str) -> Counter[str]:
    task = await rs.task(task_id)
    events: list[Event] = []
    # Closed as it is left: a generator left open keeps its socket until collected.
    async with contextlib.aclosing(rs.watch(task_id, after_seq=0).__aiter__()) as watched:
        async for event in watched:
            events.append(event)
            if event.seq == task.event_seq:
                break
    return Counter(e.kind for e in events)


async def test_problems_become_typed_exceptions(rs: Runstate) -> None:
    task_id = await new_task(rs)
    with pytest.raises(VersionConflict) as stale:
        await rs.start_step(task_id, 0, version=9)
    assert stale.value.current_version == 1
    with pytest.raises(NotFound):
        await rs.task("no-such-task")
    cancelled = await rs.set_status(task_id, 1, "CANCELLED")
    assert (cancelled.status, cancelled.version) == ("CANCELLED", 2)
    with pytest.raises(InvalidTransition) as refused:
        await rs.set_status(task_id, 2, "RUNNING")
    assert refused.value.data["__typename"] == "InvalidTransition"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (EveryStep(), {"STEP_STARTED": STEPS, "STEP_SUCCEEDED": STEPS}),
        (EveryNSteps(4), {"CHECKPOINT": 2}),
        (EveryNSteps(1), {"CHECKPOINT": STEPS}),
        (KeyPoints(), {"CHECKPOINT": 1}),
        (AtEnd(), {"CHECKPOINT": 1}),
    ],
)
async def test_each_policy_writes_exactly_its_checkpoints(
    rs: Runstate, policy: CheckpointPolicy, expected: dict[str, int]
) -> None:
    task_id = await new_task(rs)
    async with rs.run(task_id, holder="w", policy=policy) as run:
        for step in run.remaining:
            await run.begin(step.index)
            await run.succeed(step.index, {"n": step.index})
    counted = await kinds(rs, task_id)
    common = {"TASK_CREATED": 1, "LOCK_ACQUIRED": 1, "TASK_STATUS_CHANGED": 1, "LOCK_RELEASED": 1}
    assert counted == Counter({**common, **expected})
    final = await rs.task(task_id)
    assert final.status == "COMPLETED"
    assert final.steps is not None
    assert [s.output for s in final.steps] == [{"n": i} for i in range(STEPS)]


async def test_every_n_steps_writes_during_the_run(rs: Runstate) -> None:
    task_id = await new_task(rs)
    async with rs.run(task_id, holder="w", policy=EveryNSteps(4)) as run:
        for index in range(4):
            await run.succeed(index)
        assert (await rs.task(task_id)).current_step == 4
        await run.succeed(4)
        assert (await rs.task(task_id)).current_step == 4, "the fifth waits for the next flush"


async def test_a_failure_is_written_at_once_whatever_the_policy(rs: Runstate) -> None:
    task_id = await new_task(rs)
    async with rs.run(task_id, holder="w", policy=AtEnd()) as run:
        for index in range(3):
            await run.succeed(index)
        assert (await rs.task(task_id)).current_step == 0
        await run.fail(3, "card declined")
        now = await rs.task(task_id)
        assert now.status == "FAILED"
        assert now.steps is not None
        assert [s.status for s in now.steps[:4]] == ["SUCCESS"] * 3 + ["FAILED"]
        assert now.steps[3].error == "card declined"


async def test_a_step_that_is_not_idempotent_is_marked_running_before_it_runs(
    rs: Runstate,
) -> None:
    task_id = await new_task(rs, **{"step-1": False})
    async with rs.run(task_id, holder="w", policy=AtEnd()) as run:
        await run.succeed(0)
        await run.begin(1)
        steps = (await rs.task(task_id)).steps or ()
        assert [s.status for s in steps[:2]] == ["SUCCESS", "RUNNING"]


@pytest.mark.parametrize(("policy", "flushed"), [(KeyPoints(), True), (AtEnd(), False)])
async def test_a_tool_limit_is_a_key_point(
    rs: Runstate, policy: CheckpointPolicy, flushed: bool
) -> None:
    task_id = await new_task(rs)
    async with rs.run(task_id, holder="w", policy=policy) as run:
        await run.succeed(0)
        state = await run.tool("search", "RATE_LIMITED", retry_after_seconds=30)
        assert state.status == "RETRYING"
        assert ((await rs.task(task_id)).current_step == 1) is flushed


async def test_renewal_keeps_a_long_step_leased(rs: Runstate) -> None:
    task_id = await new_task(rs, steps=1)
    async with rs.run(task_id, holder="slow", policy=EveryStep(), lease_ttl=1) as run:
        await run.begin(0)
        for _ in range(3):  # three lease lifetimes of work
            await asyncio.sleep(1)
            with pytest.raises(LockHeld):
                await rs.acquire_lock(task_id, "other", 60)
        await run.succeed(0, "done")
    assert (await rs.task(task_id)).status == "COMPLETED"


async def test_a_lost_lease_stops_the_runner(rs: Runstate) -> None:
    task_id = await new_task(rs)
    async with rs.run(task_id, holder="victim", policy=EveryStep()) as run:
        await run.begin(0)
        await rs.release_lock(task_id, "victim")
        await rs.acquire_lock(task_id, "thief", 60)
        with pytest.raises(LeaseLost):
            await run.succeed(0)
        assert run.lost.is_set()
        with pytest.raises(LeaseLost):
            await run.begin(1)
    assert (await rs.task(task_id)).lock.holder_id == "thief"  # type: ignore[union-attr]


async def test_without_a_decision_the_runner_says_one_is_needed(rs: Runstate) -> None:
    task_id = await new_task(rs, **{"step-0": False})
    async with rs.run(task_id, holder="first", policy=EveryStep(), lease_ttl=1) as run:
        await run.begin(0)
        await rs.release_lock(task_id, "first")  # as if the process had died
        run.lost.set()
    with pytest.raises(NeedsDecision) as asked:
        async with rs.run(task_id, holder="second"):
            pass
    assert asked.value.step_index == 0
    assert (await rs.task(task_id)).lock is None, "the lease is given back for the person"


async def test_watch_reconnects_after_a_server_restart(
    rs: Runstate, sdk_server: tuple[Server, str]
) -> None:
    """Also guards the live task: the snapshot plus every delta, applied by the SDK
    across the reconnect, equals the task as the server reads it at the end."""
    server, _ = sdk_server
    task_id = await new_task(rs, steps=4)
    seen: list[Event] = []
    snapshot = asyncio.Event()
    watch = rs.watch(task_id, after_seq=None, retry_seconds=0.2)

    async def follow() -> None:
        async for event in watch:
            seen.append(event)
            snapshot.set()
            if event.status == "COMPLETED":
                return

    watcher = asyncio.create_task(follow())
    await asyncio.wait_for(snapshot.wait(), 30)
    version = 1
    for index in range(2):
        version = (await rs.start_step(task_id, index, version)).version
        version = (await rs.complete_step(task_id, index, version)).version
    await asyncio.to_thread(restart, server)
    async with Runstate(server.url, rs.token) as fresh:
        for index in range(2, 4):
            version = (await fresh.start_step(task_id, index, version)).version
            version = (await fresh.complete_step(task_id, index, version)).version
    await asyncio.wait_for(watcher, 60)
    assert seen[0].kind == "SNAPSHOT"
    assert [e.seq for e in seen] == list(range(1, 10))
    assert watch.task == await rs.task(task_id)


async def test_a_killed_sdk_agent_is_resumed_without_repeating_finished_steps(
    rs: Runstate, sdk_server: tuple[Server, str], tmp_path: Path
) -> None:
    from tests.support import AgentProcess  # the same pipes and deadlines as the raw agent

    server, token = sdk_server
    session = await rs.start_session()
    task = await rs.create_task(
        session.id,
        "book a trip",
        [
            "search flights",
            "compare prices",
            {"action": "book flight", "idempotent": False},
            "send confirmation",
        ],
        id=f"trip-{uuid.uuid4().hex[:8]}",
    )
    effects = tmp_path / "effects.txt"
    kill_sdk_agent_at(server.url, token, task.id, effects, "book flight")
    second = AgentProcess(
        server.url,
        token,
        task.id,
        str(effects),
        "--decision",
        "RETRY",
        module="tests.agents.sdk_agent",
    )
    try:
        assert second.rest(within=60)[-1] == {"event": "finished"}
    finally:
        second.kill()
    assert effects.read_text().splitlines() == [
        "search flights",
        "compare prices",
        "book flight",
        "send confirmation",
    ]
    final = await rs.task(task.id)
    assert (final.status, final.event_seq) == ("COMPLETED", (await kinds_total(rs, task.id)))


def kill_sdk_agent_at(url: str, token: str, task_id: str, effects: Path, action: str) -> None:
    """Run ``tests.agents.sdk_agent`` on the task and SIGKILL it once it has begun
    ``action`` (before performing it)."""
    from tests.support import AgentProcess

    agent = AgentProcess(
        url, token, task_id, str(effects), "--pause-at", action, module="tests.agents.sdk_agent"
    )
    try:
        agent.until(lambda line: line == {"event": "began", "action": action})
    finally:
        agent.kill()


async def kinds_total(rs: Runstate, task_id: str) -> int:
    return sum((await kinds(rs, task_id)).values())


async def test_parallel_steps_killed_mid_flight_wait_for_a_person(
    rs: Runstate, sdk_server: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards recovery with parallel steps: an SDK agent begins an idempotent step
    and a charge at once and is killed. The next agent process, with nobody to
    decide, stops at the step in doubt without touching it; after a person's
    COMPLETE, a third runs what is left and never charges again. The log shows
    the charge put IN_DOUBT by the resume and completed by the decision."""
    from tests.support import AgentProcess

    server, token = sdk_server
    session = await rs.start_session()
    task = await rs.create_task(
        session.id,
        "pay for a trip",
        ["search hotels", {"action": "charge card", "idempotent": False}, "send receipt"],
    )
    effects = tmp_path / "effects.txt"
    agent = ["--parallel"]
    first = AgentProcess(
        server.url, token, task.id, str(effects), *agent, module="tests.agents.sdk_agent"
    )
    try:
        first.until(lambda line: line.get("event") == "began")
    finally:
        first.kill()
    second = AgentProcess(server.url, token, task.id, str(effects), module="tests.agents.sdk_agent")
    try:
        assert second.rest(within=60)[-1] == {"event": "needs-decision", "steps": [1]}
    finally:
        second.kill()
    assert effects.read_text().splitlines() == ["search hotels", "charge card"]
    waiting = await rs.task(task.id)
    assert waiting.status == "AWAITING_DECISION"
    await rs.decide(task.id, 1, "COMPLETE", waiting.version, output={"charged": 120})
    third = AgentProcess(server.url, token, task.id, str(effects), module="tests.agents.sdk_agent")
    try:
        assert third.rest(within=60)[-1] == {"event": "finished"}
    finally:
        third.kill()
    assert effects.read_text().splitlines() == [
        "search hotels",
        "charge card",
        "search hotels",
        "send receipt",
    ], "the charge ran once; the idempotent search ran again"
    final = await rs.task(task.id)
    assert final.status == "COMPLETED"
    assert final.steps is not None
    assert final.steps[1].output == {"charged": 120}
    log = await events_of(rs, task.id)
    resumed = next(e for e in log if any(s.status == "IN_DOUBT" for s in e.steps))
    assert [(s.index, s.status) for s in resumed.steps] == [(0, "PENDING"), (1, "IN_DOUBT")]
    assert [(e.kind, s.status) for e in log for s in e.steps if s.index == 1] == [
        ("TASK_CREATED", "PENDING"),
        ("STEP_STARTED", "RUNNING"),
        ("STEP_RESET", "IN_DOUBT"),
        ("STEP_SUCCEEDED", "SUCCESS"),
    ], "the charge: started once, in doubt after the crash, completed by the person"


async def events_of(rs: Runstate, task_id: str) -> list[Event]:
    """The task's whole log, through watch(after_seq=0)."""
    last = (await rs.task(task_id)).event_seq
    found: list[Event] = []
    async with contextlib.aclosing(rs.watch(task_id, after_seq=0).__aiter__()) as watched:
        async for event in watched:
            found.append(event)
            if event.seq == last:
                return found
    return found


class LossyProxy:
    """A TCP proxy in front of the server that can lose answers: armed with
    ``drop_next(n)``, it forwards the next n requests but closes the client's
    connection as soon as the server starts answering, so the write commits and
    the caller never hears of it (a timeout after commit)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.drops = 0
        self.dropped = 0
        self.dark = False
        """Set: the server is unreachable (every connection is cut)."""
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        """Both ends of every connection forwarded: cut on ``close``, since a client
        keeping connections in a pool (``RunstateSession``'s) leaves them open."""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def drop_next(self, count: int) -> None:
        self.drops = count

    async def close(self) -> None:
        for writer in self._open:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.dark:
            writer.transport.abort()
            return
        self._open.add(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._open.add(up_writer)

        async def upstream() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                if self.dark:
                    writer.transport.abort()
                    up_writer.close()
                    return
                if self.drops:
                    self.drops -= 1
                    self.dropped += 1
                    writer.transport.abort()  # the answer is lost on the way
                    up_writer.close()
                    return
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(upstream(), downstream(), return_exceptions=True)


async def test_a_write_whose_answer_is_lost_is_retried_and_written_once(
    rs: Runstate, sdk_server: tuple[Server, str]
) -> None:
    """Guards the SDK's idempotency keys and retries: the answers to a startStep and
    to a tool failure are lost after the server committed them; the SDK retries
    with the same key and gets the first answer: one event, one retry counted.
    Control: the same loss with a plain retry (no key) answers VersionConflict for
    the caller's own write and counts the tool failure twice."""
    import httpx

    server, token = sdk_server
    proxy = LossyProxy(int(server.url.rsplit(":", 1)[1]))
    url = await proxy.start()
    try:
        task_id = await new_task(rs, steps=2)
        async with Runstate(url, token) as lossy:
            proxy.drop_next(1)
            started = await lossy.start_step(task_id, 0, 1)
            proxy.drop_next(1)
            failed = await lossy.record_tool_call(task_id, "pay-api", "FAILURE", error="503")
        assert proxy.dropped == 2
        assert (started.version, failed.retry_count) == (2, 1)
        assert (await kinds(rs, task_id))["STEP_STARTED"] == 1

        control = await new_task(rs, steps=2)
        start = (
            "mutation($i: StepRefInput!) { startStep(input: $i) { __typename"
            " ... on VersionConflict { currentVersion } } }"
        )
        fail = (
            'mutation($t: ID!) { recordToolCall(input: {taskId: $t, toolName: "pay-api",'
            " outcome: FAILURE}) { ... on ToolState { retryCount } } }"
        )
        first_step = {"taskId": control, "stepIndex": 0, "expectedVersion": 1}
        requests = [
            {"query": start, "variables": {"i": first_step}},
            {"query": fail, "variables": {"t": control}},
        ]
        answers = []
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as plain:
            for body in requests:
                proxy.drop_next(1)
                with pytest.raises(httpx.TransportError):
                    await plain.post(f"{url}/graphql", json=body)
                answers.append((await plain.post(f"{url}/graphql", json=body)).json()["data"])
        assert answers[0]["startStep"] == {"__typename": "VersionConflict", "currentVersion": 2}
        assert answers[1]["recordToolCall"] == {"retryCount": 2}
    finally:
        await proxy.close()


async def test_a_runner_that_cannot_renew_stops_before_its_lease_lapses(
    rs: Runstate, sdk_server: tuple[Server, str]
) -> None:
    """Guards the renewer: with the server unreachable, the runner gives its lease
    up (``lost``) while the lease is still live on the server, and every later call
    raises LeaseLost, so nothing it does can land after a takeover. Its exit does
    not raise for the release it cannot send."""
    server, token = sdk_server
    proxy = LossyProxy(int(server.url.rsplit(":", 1)[1]))
    url = await proxy.start()
    task_id = await new_task(rs, steps=2)
    try:
        async with (
            Runstate(url, token, retries=2) as cut_off,
            cut_off.run(task_id, holder="cut-off", lease_ttl=3) as run,
        ):
            await run.begin(0)
            version = run.version
            proxy.dark = True
            await asyncio.wait_for(run.lost.wait(), 10)
            lease = (await rs.task(task_id)).lock
            assert lease is not None
            assert lease.holder_id == "cut-off"
            assert lease.expires_at > datetime.now(UTC), "given up before it lapsed"
            with pytest.raises(LeaseLost):
                await run.succeed(0, "late")
    finally:
        await proxy.close()
    after = await rs.task(task_id)
    assert after.version == version, "nothing written after the lease was given up"


async def test_a_pool_worker_finishes_the_task_of_a_killed_one(
    rs: Runstate, sdk_server: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards claimTask in the SDK's worker loop: an agent process is killed mid
    step; once its lease lapses the task is stalled, and a worker running
    ``rs.work`` claims it, resumes it and finishes it, with nobody deciding."""

    server, token = sdk_server
    session = await rs.start_session()
    task = await rs.create_task(session.id, "crawl", ["fetch", "parse", "store"])
    effects = tmp_path / "effects.txt"
    kill_sdk_agent_at(server.url, token, task.id, effects, "parse")
    stop = asyncio.Event()
    finished: list[str] = []

    async def handle(run: TaskRunner) -> None:
        for step in run.remaining:
            await run.begin(step.index)
            with effects.open("a") as out:
                out.write(step.action + "\n")
            await run.succeed(step.index, {"by": "pool"})
        finished.append(run.task_id)
        stop.set()

    await asyncio.wait_for(
        rs.work("pool-1", handle, session_id=session.id, lease_ttl=5, idle_seconds=0.2, stop=stop),
        30,
    )
    assert finished == [task.id]
    # EveryNSteps(2) had not written "fetch" yet when its agent died: it runs again.
    assert effects.read_text().splitlines() == ["fetch", "fetch", "parse", "store"]
    final = await rs.task(task.id)
    assert (final.status, final.stalled) == ("COMPLETED", False)


async def test_a_fork_of_a_begun_task_is_claimed_and_finished_from_its_first_unfinished_step(
    rs: Runstate,
) -> None:
    """Guards forks people can run: a fork of a task that had begun (one step done,
    one RUNNING, one FAILED) is PLANNED, so ``claimTask`` hands it to a pool worker,
    whose runner resumes it and runs only the unfinished steps; its first event
    names its origin. With the fork given RUNNING and no lease (version 2), no
    worker ever claims it and the wait times out."""
    session = await rs.start_session()
    source = await rs.create_task(session.id, "crawl", ["fetch", "parse", "store", "index"])
    version = (await rs.start_step(source.id, 0, 1)).version
    version = (await rs.complete_step(source.id, 0, version, {"pages": 3})).version
    version = (await rs.start_step(source.id, 1, version)).version
    version = (await rs.fail_step(source.id, 1, version, "parser crashed")).version
    version = (await rs.start_step(source.id, 2, version)).version
    head = await rs.task(source.id)

    fork = await rs.fork(source.id, head.event_seq)
    assert (fork.status, fork.lock) == ("PLANNED", None)
    events = [e async for e in _first_events(rs, fork.id, 1)]
    assert events[0].origin is not None
    assert (events[0].origin.task_id, events[0].origin.seq) == (source.id, head.event_seq)

    ran: list[str] = []
    stop = asyncio.Event()

    async def handle(run: TaskRunner) -> None:
        for step in run.remaining:
            await run.begin(step.index)
            ran.append(step.action)
            await run.succeed(step.index, {"by": "pool"})
        stop.set()

    await asyncio.wait_for(
        rs.work("pool-fork", handle, session_id=session.id, idle_seconds=0.2, stop=stop), 20
    )
    assert ran == ["parse", "store", "index"], "the finished step is not run again"
    done = await rs.task(fork.id)
    assert done.status == "COMPLETED"
    assert done.steps is not None
    assert done.steps[0].output == {"pages": 3}
    assert (await rs.task(source.id)).status == "RUNNING", "the source is left as it was"


async def _first_events(rs: Runstate, task_id: str, count: int) -> AsyncIterator[Event]:
    """The task's first ``count`` stored events, through the SDK's watch."""
    async with contextlib.aclosing(aiter(rs.watch(task_id, after_seq=0))) as events:
        for _ in range(count):
            yield await anext(events)


async def test_a_refused_token_raises_unauthorized_over_http_and_websocket(
    sdk_server: tuple[Server, str],
) -> None:
    """Guards the SDK's own exception for a 401 (its UNAUTHENTICATED code) and a 4403
    close: before, a wrong token raised gql's TransportQueryError, and a watch
    reconnected for ever."""
    server, _ = sdk_server
    async with Runstate(server.url, "rs_wrong") as rs:
        with pytest.raises(Unauthorized, match="refused the token"):
            await rs.start_session()
        with pytest.raises(Unauthorized):
            async for _ in rs.watch("any"):
                pass


async def test_a_server_that_never_answers_raises_server_unavailable() -> None:
    """Guards ``ServerUnavailable``: raised once the SDK's retries are spent (gql's
    TransportConnectionFailed before)."""
    async with Runstate(f"http://127.0.0.1:{free_port()}", "rs_any", retries=3) as rs:
        with pytest.raises(ServerUnavailable, match=r"did not answer task .* 3 tries"):
            await rs.task("any")


def budget_server(
    tmp_path_factory: pytest.TempPathFactory, burst: int, per_second: int
) -> Iterator[tuple[Server, str]]:
    """A server whose users' budgets hold ``burst`` points, regained at ``per_second``."""
    tmp = tmp_path_factory.mktemp("budget")
    url = f"sqlite://{tmp / 'budget.db'}"
    token = create_token(url, "spender")
    env = {"RUNSTATE_RATE_BURST": str(burst), "RUNSTATE_RATE_PER_SECOND": str(per_second)}
    with Server(url, tmp / "server.log", **env) as server:
        yield server, token


@pytest.fixture(scope="module")
def tight_budget(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server whose rate limit a few writers exhaust: 4 points, 20 a second."""
    yield from budget_server(tmp_path_factory, 4, 20)


async def test_rate_limited_writes_are_waited_out_not_raised(
    tight_budget: tuple[Server, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the SDK's wait for RateLimited: twenty writers of one user racing on one
    session all succeed. Control: with no time to wait, the same race raises
    RateLimited, each with a wait above zero."""
    server, token = tight_budget
    async with Runstate(server.url, token) as rs:
        session = await rs.start_session()

        async def writers() -> list[Task | BaseException]:
            return await asyncio.gather(
                *(rs.create_task(session.id, f"t{i}", ["a"]) for i in range(20)),
                return_exceptions=True,
            )

        made = await writers()
        assert [type(t) for t in made] == [Task] * 20

        monkeypatch.setattr(api_module, "RATE_LIMIT_WAIT", 0.0)
        refused = [t for t in await writers() if isinstance(t, RateLimited)]
        assert refused, "without the wait, the race is refused"
        assert all(r.retry_after > 0 for r in refused)


WAITING_AGENT = """
import asyncio, sys
from runstate.client import WAIT, Runstate

async def main():
    async with Runstate(sys.argv[1], sys.argv[2]) as rs:
        async with rs.run(sys.argv[3], holder="agent-w", decision=WAIT, lease_ttl=5) as run:
            print("resumed", [s.status.value for s in run.task.steps], flush=True)

asyncio.run(main())
"""


async def test_waiting_for_a_decision_says_so_on_stderr_with_the_dashboard_link(
    rs: Runstate, sdk_server: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards the runner's line for WAIT: an agent with no logging set up says, in one
    line on stderr, which step waits for a person and where to decide; once a
    person decides, it goes on."""
    server, token = sdk_server
    task_id = await new_task(rs, steps=2, **{"step-1": False})
    version = (await rs.checkpoint(task_id, 1, [{"index": 0, "status": "SUCCESS"}])).version
    await rs.start_step(task_id, 1, version)  # then the agent died
    script = tmp_path / "agent.py"
    script.write_text(WAITING_AGENT)
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        server.url,
        token,
        task_id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert agent.stderr is not None
    line = (await asyncio.wait_for(agent.stderr.readline(), 30)).decode()
    assert line == (
        f'runstate: task {task_id} waits for a person to decide step 1 "step-1":'
        f" {server.url}/#task={task_id}\n"
    )
    head = await rs.task(task_id)
    await rs.decide(task_id, 1, "SKIP", head.version, note="the agent's mail went out")
    out, err = await asyncio.wait_for(agent.communicate(), 30)
    assert agent.returncode == 0, err
    assert out.decode() == "resumed ['SUCCESS', 'SKIPPED']\n"
    assert err == b"", "one line, no more"


async def test_watch_raises_session_expired_when_its_session_expires(rs: Runstate) -> None:
    """Guards ``watch``'s reading of how its subscription ended: the session's
    expiry raises SessionExpired (it raised NotFound, as for an unknown task), and
    an unknown task still raises NotFound."""
    session = await rs.start_session(ttl_seconds=1)
    task = await rs.create_task(session.id, "short-lived", ["a"])
    kinds: list[str] = []
    with pytest.raises(SessionExpired):
        await follow_to_the_end(rs.watch(task.id), kinds)
    assert kinds == ["SNAPSHOT"]
    with pytest.raises(NotFound):
        await follow_to_the_end(rs.watch("no-such-task"), kinds)


async def follow_to_the_end(watch: AsyncIterable[Event], kinds: list[str]) -> None:
    async for event in watch:
        kinds.append(event.kind)


@pytest.fixture(scope="module")
def small_budget(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server with a budget of 10 points regained at 1 a second."""
    yield from budget_server(tmp_path_factory, 10, 1)


async def test_a_rate_limited_watch_waits_and_then_follows(
    small_budget: tuple[Server, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards ``watch`` through a refused subscription (it cost 5 points, the budget
    was spent): it waits the limit out and subscribes again, instead of raising
    NotFound as it did, on the socket it has: a socket opened for each try paid
    its upgrade's point out of the five waited for, and was refused again for
    ever (a point short each time)."""
    server, token = small_budget
    accepted = '"WebSocket /graphql" [accepted]'
    opened = server.log().count(accepted)
    waits: list[float] = []
    pause = api_module._pause

    async def recorded(name: str, wait: float) -> float:
        waits.append(wait)
        return await pause(name, wait)

    monkeypatch.setattr(api_module, "_pause", recorded)
    async with Runstate(server.url, token) as client:
        session = await client.start_session()
        task = await client.create_task(session.id, "watched", ["a", "b"])
        task = await client.start_step(task.id, 0, task.version)
        task = await client.complete_step(task.id, 0, task.version)
        await client.start_step(task.id, 1, task.version)  # all 10 points spent
        # Refused unless the five writes took 5 s: 1 point a second is regained.
        async with contextlib.aclosing(aiter(client.watch(task.id))) as events:
            first = await asyncio.wait_for(anext(events), 60)
        assert (first.kind, first.seq) == ("SNAPSHOT", 4)
    assert waits, "the first subscription was refused and waited out"
    assert all(w > 0 for w in waits)
    assert server.log().count(accepted) - opened == 1


async def test_a_task_created_for_its_agent_is_not_a_workers_to_claim(rs: Runstate) -> None:
    """Guards ``create_task(holder=...)``: the task comes back leased to that holder
    (token 1), no worker's claim takes it, and the holder's runner starts it with that
    token. Control: created without a holder, the first claim takes it."""
    session = await rs.start_session()
    task = await rs.create_task(session.id, "mine", ["a"], holder="agent-1", lease_ttl=30)
    assert task.lock is not None
    assert (task.lock.holder_id, task.lock.fencing_token) == ("agent-1", 1)
    assert await rs.claim("worker", 30, session_id=session.id) is None
    free = await rs.create_task(session.id, "anyone's", ["a"])
    claimed = await rs.claim("worker", 30, session_id=session.id)
    assert claimed is not None
    assert claimed.task_id == free.id
    async with rs.run(task.id, holder="agent-1") as run:
        assert run.fencing_token == 1
