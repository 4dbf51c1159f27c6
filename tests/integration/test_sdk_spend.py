"""The SDK's spend and budgets against a real server: spend reported with a step's
result and through ``run.spend``, ``BudgetExceeded`` raised with its budget, the
runner stopping cleanly on it, and the task going on once the budget is raised."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from runstate.client import Budget, BudgetExceeded, EveryNSteps, Runstate, SpendReport, Task
from tests.support import Server, create_token, sqlite_server


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    with sqlite_server(tmp_path_factory, "sdk-spend") as server:
        yield server, create_token(server.database_url, "spender")


async def test_spend_goes_with_results_and_through_run_spend(
    sdk_server: tuple[Server, str],
) -> None:
    """Guards the SDK's spend: ``run.spend`` between a step's start and end, spend
    with ``succeed`` (written at once, and pending under EveryNSteps) and with
    ``fail``, each adding to its step as the server reads it back."""
    server, token = sdk_server
    async with Runstate(server.url, token) as rs:
        session = await rs.start_session()
        task = await rs.create_task(session.id, "write a report", ["outline", "draft", "check"])
        async with rs.run(task.id, holder="w") as run:
            await run.begin(0)
            await run.spend(0, input_tokens=100, output_tokens=10, cost_micros=55, model="m-1")
            await run.succeed(0, "ok", spend=SpendReport(input_tokens=5, model="m-2"))
        async with rs.run(task.id, holder="w", policy=EveryNSteps(5)) as run:
            await run.begin(1)
            await run.succeed(1, "drafted", spend=SpendReport(output_tokens=700, cost_micros=9))
            await run.begin(2)
            await run.fail(2, "bad", spend=SpendReport(input_tokens=1))
        done = await rs.task(task.id)
    assert done.steps is not None
    assert [(s.spend.input_tokens, s.spend.output_tokens, s.spend.calls) for s in done.steps] == [
        (105, 10, 2),
        (0, 700, 1),
        (1, 0, 1),
    ]
    assert done.steps[0].models == ("m-1", "m-2")
    assert (done.spend.input_tokens, done.spend.cost_micros, done.spend.calls) == (106, 64, 4)


async def test_the_runner_stops_cleanly_on_a_budget_and_goes_on_once_raised(
    sdk_server: tuple[Server, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Guards ``BudgetExceeded`` in the SDK: the step a budget refuses raises it with
    the budget and the spend; the runner leaves its lease and says where to raise
    the budget; ``set_budget`` raises it (its event credited with the note) and a
    new runner resumes at the refused step."""
    server, token = sdk_server
    async with Runstate(server.url, token) as rs:
        session = await rs.start_session()
        task = await rs.create_task(
            session.id, "summarise", ["read", "summarise"], budget={"max_cost_micros": 1000}
        )
        assert task.budget == Budget(max_tokens=None, max_cost_micros=1000)
        async with rs.run(task.id, holder="w") as run:
            await run.begin(0)
            await run.succeed(0, "read", spend=SpendReport(cost_micros=1200))
        with caplog.at_level(logging.WARNING), pytest.raises(BudgetExceeded) as refused:
            async with rs.run(task.id, holder="w") as run:
                await run.begin(1)
        assert refused.value.scope == "TASK"
        assert refused.value.budget.max_cost_micros == 1000
        assert refused.value.spend.cost_micros == 1200
        assert rs.dashboard_link(task.id) in caplog.text
        assert "budget is spent" in caplog.text
        said = "the task spent $0.0012 of its $0.001 budget: no new work until it is raised"
        assert refused.value.message == said
        assert said in caplog.text
        stopped = await rs.task(task.id)
        assert stopped.over_budget
        assert stopped.lock is None
        assert stopped.steps is not None
        assert stopped.steps[1].status == "PENDING"
        raised = await rs.set_budget(
            stopped.version, task_id=task.id, max_cost_micros=5000, note="approved"
        )
        assert isinstance(raised, Task)
        assert not raised.over_budget
        async with rs.run(task.id, holder="w2") as run:
            assert [s.index for s in run.remaining] == [1]
            await run.begin(1)
            await run.succeed(1, "summary")
        assert (await rs.task(task.id)).status == "COMPLETED"
        notes = [e["note"] for e in await rs.task_events(task.id) if e["kind"] == "BUDGET_CHANGED"]
        assert notes == ["approved"]
