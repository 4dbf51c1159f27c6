"""A field asked of every item of a page costs one batch of queries for the page,
not one per item (``schema/context.Loaders``). Counted in SQLite statements, in
process, through the schema itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runstate.basics.enums import ToolOutcome
from runstate.resolvers.build import build_schema
from runstate.schema.context import Context
from runstate.services.actions import sessions, tasks, tools
from runstate.services.actions.tokens import Principal
from runstate.services.domain.validation import StepPlan
from runstate.services.write.house import House
from runstate.settings import Settings
from tests.integration.test_write_cost import Statements
from tests.support import opened

USER = "pager"
TASKS = 50
PAGE = """{ tasks(first: 50) { edges { node { id
  session { id status }
  events(first: 3) { seq kind steps { index status } } } } } }"""


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'loaders.db'}") as house:
        yield house


async def run(house: House, query: str) -> dict[str, Any]:
    schema = build_schema(Settings(rate_limit=False))
    context = Context(principal=Principal(USER, "digest"), settings=Settings(), house=house)
    result = await schema.execute(query, context_value=context)
    assert result.errors is None, result.errors
    assert result.data is not None
    return result.data


async def test_a_page_of_tasks_reads_sessions_and_events_in_batches(house: House) -> None:
    """Guards the session and events loaders: a page of 50 tasks, each with its
    session and its first 3 events with their steps, runs 5 SELECTs, and one more
    for the answer's estimate (the caller's usage: ``schema.bounds``) (it ran 201:
    one per task for the session, three for its events), and every task shows its
    own session and events."""
    made = []
    for i in range(TASKS):
        session = await sessions.start_session(
            house, USER, default_ttl=3600, session_id=f"s{i % 5}"
        )
        task = (
            await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")] * 2)
        ).value
        task = (await tasks.start_step(house, USER, task.id, 0, expected_version=1)).value
        made.append((task.id, session.id))
    async with Statements() as statements:
        data = await run(house, PAGE)
    nodes = [edge["node"] for edge in data["tasks"]["edges"]]
    assert sorted((n["id"], n["session"]["id"]) for n in nodes) == sorted(made)
    for node in nodes:
        assert node["events"] == [
            {
                "seq": 1,
                "kind": "TASK_CREATED",
                "steps": [{"index": 0, "status": "PENDING"}, {"index": 1, "status": "PENDING"}],
            },
            {"seq": 2, "kind": "STEP_STARTED", "steps": [{"index": 0, "status": "RUNNING"}]},
        ]
    reads = [s for s in statements.seen if s.startswith("SELECT")]
    assert len(reads) == 6, reads
    assert 'FROM "user_usage"' in reads[0], reads


DASHBOARD = """{ sessions(first: 20) { edges { node { id
  tasks(first: 2) { edges { cursor node { id } } pageInfo { hasNextPage } } } } } }"""


async def test_the_dashboard_poll_reads_every_sessions_tasks_in_one_query(house: House) -> None:
    """Guards the tasks loader (``lookups.session_task_pages``): the dashboard's poll
    of 20 sessions with their tasks runs 2 SELECTs (it ran 21: one per session), and
    each session shows its own newest tasks, 2 at most, with hasNextPage true exactly
    where it has more."""
    made: dict[str, list[str]] = {}
    for i in range(20):
        session = await sessions.start_session(house, USER, default_ttl=3600, session_id=f"d{i}")
        made[session.id] = [
            (await tasks.create_task(house, USER, session.id, goal="g", steps=[])).value.id
            for _ in range(i % 4)
        ]
    async with Statements() as statements:
        data = await run(house, DASHBOARD)
    shown = {
        edge["node"]["id"]: (
            [e["node"]["id"] for e in edge["node"]["tasks"]["edges"]],
            edge["node"]["tasks"]["pageInfo"]["hasNextPage"],
        )
        for edge in data["sessions"]["edges"]
    }
    assert shown == {s: (ids[::-1][:2], len(ids) > 2) for s, ids in made.items()}
    reads = [s for s in statements.seen if s.startswith("SELECT")]
    assert len(reads) == 2, reads


STEPS_PAGE = """{ tasks(first: 50) { edges { node { id
  steps { index status output } toolStates { toolName status } } } } }"""


async def test_a_page_of_tasks_reads_steps_and_tool_states_in_batches(house: House) -> None:
    """Guards the steps and tool-state loaders: a page of 50 tasks, each with its
    steps and tool states, runs 4 SELECTs (the caller's usage for the answer's
    estimate, the page, the steps of all, the tool states of all); without the
    loaders it ran 102, two per task. Every task shows its own steps and tool
    states, as they stand at its seq."""
    made = {}
    for i in range(TASKS):
        session = await sessions.start_session(
            house, USER, default_ttl=3600, session_id=f"s{i % 5}"
        )
        task = (
            await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")] * 2)
        ).value
        task = (await tasks.start_step(house, USER, task.id, 0, expected_version=1)).value
        task = (
            await tasks.complete_step(house, USER, task.id, 0, expected_version=2, output=i)
        ).value
        await tools.record_tool_call(house, USER, task.id, f"tool-{i}", ToolOutcome.SUCCESS)
        made[task.id] = i
    async with Statements() as statements:
        data = await run(house, STEPS_PAGE)
    nodes = [edge["node"] for edge in data["tasks"]["edges"]]
    assert len(nodes) == TASKS
    for node in nodes:
        i = made[node["id"]]
        assert node["steps"] == [
            {"index": 0, "status": "SUCCESS", "output": i},
            {"index": 1, "status": "PENDING", "output": None},
        ]
        assert node["toolStates"] == [{"toolName": f"tool-{i}", "status": "SUCCESS"}]
    reads = [s for s in statements.seen if s.startswith("SELECT")]
    assert len(reads) == 4, [r[:90] for r in reads]
