"""The estimate bounds the answer (``schema.cost``): for every document here, the
answer's objects and encoded bytes are at most what was estimated before it ran.

In process, through the schema, on tasks whose text needs escapes (quotes,
newlines, control characters) and non-ASCII characters, with history, tool
states, a fork, and sessions with metadata.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from graphql import OperationDefinitionNode, parse

from runstate.basics.enums import ToolOutcome
from runstate.resolvers.build import build_schema
from runstate.schema.bounds import estimate_of
from runstate.schema.context import Context
from runstate.schema.cost import Estimate, Walk
from runstate.services.actions import conversation, sessions, tasks, tools
from runstate.services.actions.tokens import Principal
from runstate.services.domain import validation
from runstate.services.domain.validation import StepPlan
from runstate.services.write.house import House
from runstate.settings import Settings
from tests.support import opened

USER = "estimated"
ESCAPED = '\x01"\\\n\t' * 200 + "日本語 émoji 🚀" * 50
"""Text that encodes larger than it is typed: every character of the first part
takes 2 to 6 bytes in JSON."""
CONTROL = "\x01" * 10_000
"""The longest goal, each character answered as 6 bytes (``\\u0001``)."""
PAYLOAD = {"text": ESCAPED, "numbers": [1.5, 1e-7, 12345678901234], "nested": [[{}]] * 20}

STEP = "id index action input output status idempotent attempts error startedAt completedAt"
TOOL = """taskId toolName status version retryCount maxRetries lastResult lastError
  rateLimitResetAt updatedAt"""
TASK = f"""id sessionId goal status version currentStep totalSteps stalled createdAt updatedAt
  eventSeq storedBytes origin {{ taskId seq }} lock {{ taskId holderId fencingToken expiresAt }}
  steps {{ {STEP} }} toolStates {{ {TOOL} }}"""
EVENT = f"""taskId seq taskVersion kind stepIndex toolName at status stalled actor holder note
  epoch steps {{ {STEP} }} toolState {{ {TOOL} }} lock {{ holderId }} origin {{ seq }}
  task {{ {TASK} }}"""
PROBLEM = "... on Problem { code message } ... on NotFound { id }"

DOCUMENTS = {
    "task": f'{{ task(id: "rich") {{ __typename ... on Task {{ {TASK} }} {PROBLEM} }} }}',
    "taskAt": f'{{ taskAt(id: "rich", seq: 4) {{ ... on Task {{ {TASK} }} }} }}',
    "history": f'{{ task(id: "rich") {{ ... on Task {{ events(first: 30) {{ {EVENT} }} }} }} }}',
    "aliases": """{ a: task(id: "rich") { ... on Task { steps { o0: output o1: output input }
        b: steps { error } toolStates { lastResult r: lastResult } } }
      f: task(id: "fork") { ... on Task { goal steps { output } } } }""",
    "missing": f'{{ task(id: "none") {{ ... on Task {{ {TASK} }} {PROBLEM} }} }}',
    "tasks": f"""{{ tasks(first: 50) {{ edges {{ cursor node {{ {TASK}
        session {{ id metadata tasks(first: 5) {{ edges {{ node {{ goal }} }} }} }} }} }}
        pageInfo {{ hasNextPage endCursor }} }} }}""",
    "sessions": """{ sessions(first: 5) { edges { cursor node { id userId status metadata
        expiresAt tasks(first: 5) { edges { node { id goal events(first: 5) { kind
        steps { output error } } } } } } } } }""",
    "session": """{ session(id: "s") { ... on AgentSession { metadata tasks(first: 2) {
        edges { node { steps { action } } } } } } }""",
    "usage": "{ usage { storedBytes maxStoredBytes maxTaskBytes } __typename }",
    "escapes": '{ task(id: "escapes") { ... on Task { goal } } }',
    "escapes twice": '{ task(id: "escapes") { ... on Task { goal again: goal } } }',
    "conversation": """{ sessionItems(sessionId: "s") { ... on SessionItemPage { sessionId
        itemSeq messageCount hasMore items { seq item addedAt } } } }""",
    "conversation twice": """{ sessionItems(sessionId: "s", last: 100) { ... on SessionItemPage
        { items { item again: item } more: items { seq } } } }""",
    "fragments": """query { task(id: "rich") { ...T } } fragment T on Task { steps { ...S }
        s2: steps { ...S } } fragment S on Step { output error }""",
}


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'cost.db'}") as house:
        await sessions.start_session(
            house, USER, default_ttl=3600, session_id="s", metadata=PAYLOAD
        )
        await sessions.start_session(
            house, USER, default_ttl=3600, session_id="t", metadata=[ESCAPED]
        )
        plans = [StepPlan(f"act {ESCAPED[:150]}", input=PAYLOAD) for _ in range(6)]
        task = (
            await tasks.create_task(house, USER, "s", goal=ESCAPED, steps=plans, task_id="rich")
        ).value
        for i in range(4):
            task = (
                await tasks.start_step(house, USER, "rich", i, expected_version=task.version)
            ).value
            task = (
                await tasks.complete_step(
                    house, USER, "rich", i, expected_version=task.version, output=PAYLOAD
                )
            ).value
        task = (await tasks.start_step(house, USER, "rich", 4, expected_version=task.version)).value
        task = (
            await tasks.fail_step(
                house, USER, "rich", 4, expected_version=task.version, error=ESCAPED
            )
        ).value
        for name in ("search", "mail"):
            await tools.record_tool_call(
                house, USER, "rich", name, ToolOutcome.FAILURE, result=PAYLOAD, error=ESCAPED
            )
        await tasks.fork_task(house, USER, "rich", task.event_seq, new_id="fork")
        for i in range(3):
            await tasks.create_task(house, USER, "t", goal=f"small {i}", steps=[StepPlan("a")])
        await tasks.create_task(house, USER, "t", goal=CONTROL, steps=[], task_id="escapes")
        # More than a page of items, each needing escapes.
        await conversation.add_items(house, USER, "s", [ESCAPED[:99], {"c": CONTROL[:99]}] * 60)
        yield house


JSON_FIELDS = {"input", "output", "lastResult", "metadata", "o0", "o1", "r", "item", "again"}
"""Fields (and aliases) whose values are JSON scalars: their objects are not the
answer's."""


def objects(value: Any) -> int:
    """The GraphQL objects inside an answer (``value`` itself not counted)."""
    if isinstance(value, dict):
        children = [v for k, v in value.items() if k not in JSON_FIELDS]
    elif isinstance(value, list):
        children = value
    else:
        return 0
    return sum(isinstance(c, dict) + objects(c) for c in children)


async def estimated_and_answered(
    house: House, query: str, variables: dict[str, Any] | None = None
) -> tuple[Estimate, int, int]:
    schema = build_schema(Settings(rate_limit=False))
    document = parse(query)
    [operation] = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    walk = Walk(schema._schema, document, operation, variables, house.limits)
    input_bytes = len(query) + validation.json_size(variables)
    estimate = await estimate_of(walk, USER, input_bytes)
    context = Context(principal=Principal(USER, "digest"), settings=Settings(), house=house)
    result = await schema.execute(query, variable_values=variables, context_value=context)
    assert result.errors is None, result.errors
    answer = validation.encoded({"data": result.data}).encode()
    return estimate, objects(result.data), len(answer)


@pytest.mark.parametrize("name", DOCUMENTS)
async def test_the_estimate_bounds_the_answer(house: House, name: str) -> None:
    """Guards each part of the estimate: the answer has at most the estimated
    objects and bytes. Seen failing with the escapes left out of the stored bytes
    (``quota.text_bytes`` as plain UTF-8: ``escapes`` answers 60 KB of a goal stored
    as 10 KB), with a payload's aliases counted once (``escapes twice``), and with
    a task's steps counted as one object (``task``), and with a conversation's page
    counted as one item (``conversation``)."""
    estimate, found, size = await estimated_and_answered(house, DOCUMENTS[name])
    assert found <= estimate.objects
    assert size <= estimate.bytes


async def test_a_write_is_bounded_by_what_it_adds(house: House) -> None:
    """Guards the write's share (``Sizes.input_bytes``): a checkpoint that adds
    outputs answers the task with them, within the estimate made before it ran."""
    query = f"""mutation($input: CheckpointTaskInput!) {{ checkpointTask(input: $input) {{
        ... on Task {{ {TASK} }} {PROBLEM} }} }}"""
    patches = [{"index": 5, "status": "SUCCESS", "output": {"big": ESCAPED * 5}}]
    variables = {"input": {"taskId": "fork", "expectedVersion": 1, "steps": patches}}
    estimate, found, size = await estimated_and_answered(house, query, variables)
    assert found <= estimate.objects
    assert size <= estimate.bytes
