"""Twenty workers on two server processes, one budget: no step starts after the
spend that reached it (SQLite file and PostgreSQL), and the control that shows a
check made outside the write's transaction lets some through."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.test_api import create_task, events, start_session
from tests.support import Api, Server, create_token, database, mutate

WORKERS = 20
STEPS = 150
TOKENS = 10
"""What each started step reports spending, once."""
BUDGET = 30 * TOKENS
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
    tmp = tmp_path_factory.mktemp(f"budget-{request.param}")
    with database(request.param, tmp) as url:
        env = {"RUNSTATE_RATE_LIMIT": "false"}
        one = Server(url, tmp / "one.log", **env).start()
        two = Server(url, tmp / "two.log", **env).start()
        try:
            yield one, two
        finally:
            one.stop()
            two.stop()


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
    the start's compare-and-swap does not see it."""
    started_after, _ = _race(servers, None)
    assert started_after > 0
