"""Twenty workers on two server processes, one budget: no step starts after the
spend that reached it (SQLite file and PostgreSQL), and the control that shows a
check made outside the write's transaction lets some through. On PostgreSQL, a
session's budget: a start waits for a report in flight in another task of the
session, with the control of a report that does not lock the session."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.test_api import create_task, events, start_session
from tests.support import Api, Server, create_token, mutate, server_on, two_servers

WORKERS = 20
STEPS = 150
TOKENS = 10
"""What each started step reports spending, once."""
BUDGET = 30 * TOKENS
CONTROL_RACES = 5
"""Runs of the control before it may say the naive check let nothing through."""
ANSWER = """
  __typename
  ... on Task { version }
  ... on Problem { code }
"""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two server processes on one fresh database, rate limits off (twenty workers of
    one user write as fast as they can)."""
    unlimited = {"RUNSTATE_RATE_LIMIT": "false"}
    with two_servers(request.param, tmp_path_factory, "budget", **unlimited) as both:
        yield both


def _state(api: Api, task_id: str) -> tuple[int, int, int | None]:
    """The task's version, tokens spent and first PENDING step (None: none left)."""
    task = api(
        "query($id: ID!) { task(id: $id) { ... on Task { version"
        " spend { inputTokens outputTokens } steps { index status } } } }",
        id=task_id,
    )["task"]
    pending = [s["index"] for s in task["steps"] if s["status"] == "PENDING"]
    tokens = task["spend"]["inputTokens"] + task["spend"]["outputTokens"]
    return task["version"], tokens, pending[0] if pending else None


def _work(api: Api, task_id: str, check_first: bool) -> int:
    """Start steps and report each one's spend until refused (or, ``check_first``,
    until the spend read before a start has reached the budget); the steps started."""
    started = 0
    while True:
        version, tokens, index = _state(api, task_id)
        if index is None or (check_first and tokens >= BUDGET):
            return started
        answer = mutate(
            api,
            "startStep",
            "StepRefInput",
            ANSWER,
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version,
        )
        if answer["__typename"] == "BudgetExceeded":
            return started
        if answer["__typename"] != "Task":
            assert answer["code"] in ("VERSION_CONFLICT", "INVALID_TRANSITION"), answer
            continue
        started += 1
        spend = {"inputTokens": TOKENS}
        reported = mutate(
            api,
            "recordSpend",
            "RecordSpendInput",
            ANSWER,
            taskId=task_id,
            stepIndex=index,
            spend=spend,
        )
        assert reported["__typename"] == "Task", reported


def _race(servers: tuple[Server, Server], budget: dict[str, Any] | None) -> tuple[int, list[Any]]:
    """Twenty workers, half on each process, on one task; the STEP_STARTED events
    after the event whose spend reached the budget, and the log."""
    one, two = servers
    token = create_token(one.database_url, "racer")
    apis = [Api((one if i % 2 else two).url, token) for i in range(WORKERS)]
    try:
        session = start_session(apis[0])
        extra = {} if budget is None else {"budget": budget}
        task_id = create_task(apis[0], session["id"], steps=STEPS, **extra)["id"]
        with ThreadPoolExecutor(WORKERS) as pool:
            counts = list(pool.map(lambda api: _work(api, task_id, budget is None), apis))
        log = events(apis[0], task_id)
    finally:
        for api in apis:
            api.close()
    spent, crossing = 0, None
    for event in log:
        if event["kind"] == "SPEND_RECORDED":
            spent += TOKENS
            if spent >= BUDGET and crossing is None:
                crossing = event["seq"]
    assert crossing is not None, "the workers never reached the budget"
    after = [e for e in log if e["kind"] == "STEP_STARTED" and e["seq"] > crossing]
    assert sum(counts) == sum(1 for e in log if e["kind"] == "STEP_STARTED")
    return len(after), log


def test_no_step_starts_after_the_spend_that_reached_the_budget(
    servers: tuple[Server, Server],
) -> None:
    """Guards the budget check inside startStep's transaction (the task row locked
    by its opening UPDATE, as every report's is): of the steps twenty workers on
    two processes start, none comes after the report that reached the budget in
    the task's log."""
    started_after, log = _race(servers, {"maxTokens": BUDGET})
    assert started_after == 0
    assert sum(1 for e in log if e["kind"] == "STEP_STARTED") >= BUDGET // TOKENS


def test_control_a_check_outside_the_transaction_lets_steps_through(
    servers: tuple[Server, Server],
) -> None:
    """The control: with no budget on the server and each worker checking the spend
    it read before starting (a check outside the write's transaction), steps
    start after the report that reached the budget: a report needs no version, so
    the start's compare-and-swap does not see it. A race: up to ``CONTROL_RACES``
    runs, one of which lets a step through."""
    leaked = []
    for _ in range(CONTROL_RACES):  # a race: some runs of it may happen to lose none
        started_after, _ = _race(servers, None)
        leaked.append(started_after)
        if started_after:
            break
    assert max(leaked) > 0, leaked


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with server_on("postgres", tmp_path_factory, "budget-lock") as server:
        yield server


def _session_budget(api: Api) -> tuple[str, str, str]:
    """A session with a budget of 100 tokens and two tasks: the first with its step
    RUNNING, the second PENDING; their ids."""
    session = start_session(api, budget={"maxTokens": 100})
    first = create_task(api, session["id"], steps=1)["id"]
    second = create_task(api, session["id"], steps=1)["id"]
    ref = {"taskId": first, "stepIndex": 0, "expectedVersion": 1}
    assert mutate(api, "startStep", "StepRefInput", ANSWER, **ref)["__typename"] == "Task"
    return session["id"], first, second


async def _report_in_flight(url: str, session_id: str, task_id: str, lock: bool) -> Any:
    """An open transaction doing what a report of 100 tokens on ``task_id`` does
    before it commits: the task's total raised and, with ``lock``, the session's
    running total too (``spend.added_to_session``), which locks the session's row.
    The connection, to commit or roll back. The session is marked active first, so
    that the start's own touch of its row cannot be what waits."""
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(url.replace("postgres://", "postgresql://", 1))
    # The session counts as touched just now: a write moves lastActiveAt at most once
    # a second, and that UPDATE would wait for the row whatever the budget's check.
    await conn.execute(
        """UPDATE "sessions" SET "last_active_at" = now() + interval '1 hour'"""
        ' WHERE "public_id" = $1',
        session_id,
    )
    await conn.execute("BEGIN")
    await conn.execute(
        'UPDATE "tasks" SET "spent_input_tokens" = 100 WHERE "public_id" = $1', task_id
    )
    if lock:
        await conn.execute(
            'UPDATE "sessions" SET "spent_input_tokens" = "spent_input_tokens" + 100'
            ' WHERE "public_id" = $1',
            session_id,
        )
    return conn


async def _waiting_on_a_lock(url: str) -> bool:
    """Whether a statement of the database waits to lock a session's row."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgres://", "postgresql://", 1))
    try:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database() AND query LIKE '%\"sessions\"%FOR UPDATE%'"
        )
        return bool(waiting)
    finally:
        await conn.close()


async def test_a_start_waits_for_a_report_in_flight_in_its_session(pg_server: Server) -> None:
    """Guards the session's lock (``spend.session_spent``): on PostgreSQL a start in
    a session with a budget reads the session's running total with its row locked
    (``FOR UPDATE``), and every report raises that total in its own transaction,
    locking the row, so a start sent while a report that reaches the budget is in
    flight waits for it and is refused (a plain read would see the total committed
    before the report, and pass)."""
    api = Api(pg_server.url, create_token(pg_server.database_url, "locker"))
    session_id, first, second = _session_budget(api)
    report = await _report_in_flight(pg_server.database_url, session_id, first, lock=True)
    ref = {"taskId": second, "stepIndex": 0, "expectedVersion": 1}
    start = asyncio.get_running_loop().run_in_executor(
        None, lambda: mutate(api, "startStep", "StepRefInput", ANSWER, **ref)
    )
    deadline = time.monotonic() + 15
    while not await _waiting_on_a_lock(pg_server.database_url):
        assert not start.done(), f"the start did not wait: {start.result()}"
        assert time.monotonic() < deadline, "the start never waited for the session's lock"
        await asyncio.sleep(0.05)
    await report.execute("COMMIT")
    await report.close()
    assert (await start) == {"__typename": "BudgetExceeded", "code": "BUDGET_EXCEEDED"}
    api.close()


async def test_control_a_report_not_locking_the_session_lets_a_start_through(
    pg_server: Server,
) -> None:
    """The control: a report in flight that does not take the session's row (as
    reports did before the lock, raising the task's total alone) leaves a start
    free to read the spend committed before it, under the budget: the step
    starts."""
    api = Api(pg_server.url, create_token(pg_server.database_url, "unlocked"))
    session_id, first, second = _session_budget(api)
    report = await _report_in_flight(pg_server.database_url, session_id, first, lock=False)
    ref = {"taskId": second, "stepIndex": 0, "expectedVersion": 1}
    started = await asyncio.get_running_loop().run_in_executor(
        None, lambda: mutate(api, "startStep", "StepRefInput", ANSWER, **ref)
    )
    await report.execute("COMMIT")
    await report.close()
    assert started["__typename"] == "Task"
    api.close()
