"""The lean path's twins, generated from the operation table: every trusted write
the lean path runs (``resolvers.lean``), times every refusal its answer's union can
hold, times a request error, is answered by the lean path exactly as by the
standard one (Strawberry's ``Schema.execute`` with every extension).

The refusal is raised where every write enters (``services.write.door.enter``,
which both paths reach through the table's resolver), so no scenario has to be
built per write: what is compared is everything the two paths do around it
(variables, bounds, the Problem member, its serialization through the document's
selection, masking, counting). ``test_trusted.py`` compares the two over HTTP on a
real server for the writes' successes and the refusals a real task gives.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLScalarType,
    GraphQLUnionType,
    Undefined,
)
from strawberry.types import ExecutionResult

from runstate.basics.enums import AdmissionPolicy, SubmissionStatus
from runstate.resolvers.build import build_schema
from runstate.resolvers.lean import Lean, LeanWrite
from runstate.schema.context import Context
from runstate.services.actions.tokens import Principal
from runstate.services.domain import errors
from runstate.services.domain.views import BudgetView, SpendView, SubmissionView
from runstate.services.write import door
from runstate.services.write.house import House
from runstate.settings import Settings
from runstate.transport.trusted import Trusted
from tests.support import opened

SCHEMA = build_schema()
LEAN = Lean(SCHEMA, Trusted.packaged().bodies.values())

SUBMISSION = SubmissionView(
    pk=1,
    id="sub-1",
    user_id="twin",
    session_pk=1,
    session_id="s-1",
    seq=2,
    input={"text": "stop"},
    policy=AdmissionPolicy.INTERRUPT,
    status=SubmissionStatus.ACTIVE,
    reason="interrupted by submission sub-2",
    task_pk=None,
    task_id=None,
    displaced_by="sub-2",
    schedule_pk=None,
    schedule_id=None,
    scheduled_for=None,
    actor="twin",
    changed_seq=3,
    created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    updated_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
)
"""A submission a refusal of the ledger names (TaskInterrupted, SessionBusy)."""

REFUSALS: dict[str, errors.DomainError] = {
    "NotFound": errors.NotFoundError("task", "t-1"),
    "VersionConflict": errors.VersionConflictError(3, 4),
    "InvalidTransition": errors.InvalidTransitionError("step 0", "PENDING", "SUCCESS"),
    "InvalidInput": errors.InvalidInputError("goal", "must not be empty"),
    "SessionExpired": errors.SessionExpiredError("s-1"),
    "LockHeld": errors.LockHeldError("agent-1", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    "LockNotHeld": errors.LockNotHeldError(),
    "StaleFencingToken": errors.StaleFencingTokenError(1, 2),
    "IdempotencyKeyReused": errors.IdempotencyKeyReusedError("k-1"),
    "RateLimited": errors.RateLimitedError(1.5),
    "BudgetExceeded": errors.BudgetExceededError(
        "TASK",
        BudgetView(max_tokens=10),
        SpendView(input_tokens=7, output_tokens=5, calls=2),
        "USD",
    ),
    "TaskInterrupted": errors.TaskInterruptedError(SUBMISSION),
    "SessionBusy": errors.SessionBusyError(SUBMISSION),
}
"""A refusal of each kind, by the Problem member that answers it."""

SCALARS: dict[str, Any] = {
    "ID": "x-1",
    "String": "x",
    "Int": 1,
    "Long": 1,
    "Float": 1.5,
    "Boolean": True,
    "JSON": {"a": [1, "b"]},
    "DateTime": "2026-01-02T03:04:05+00:00",
    "Base64": "eA==",
}


def sample(kind: GraphQLInputType) -> Any:
    """A valid value of an input type: each required field filled, the rest left out."""
    if isinstance(kind, GraphQLNonNull):
        return sample(kind.of_type)
    if isinstance(kind, GraphQLList):
        return [sample(kind.of_type)]
    if isinstance(kind, GraphQLEnumType):
        return next(iter(kind.values))
    if isinstance(kind, GraphQLScalarType):
        return SCALARS[kind.name]
    assert isinstance(kind, GraphQLInputObjectType)
    return {
        name: sample(field.type)
        for name, field in kind.fields.items()
        if isinstance(field.type, GraphQLNonNull) and field.default_value is Undefined
    }


def variables_of(write: LeanWrite) -> dict[str, Any]:
    """The write's one variable (``$input``), sampled from its type."""
    (definition,) = write.operation.variable_definitions or ()
    kind = SCHEMA._schema.get_type(_named(definition.type))
    assert isinstance(kind, GraphQLInputObjectType)
    return {definition.variable.name.value: sample(kind)}


def _named(node: Any) -> str:
    while not hasattr(node, "name"):
        node = node.type
    return str(node.name.value)


def members(write: LeanWrite) -> list[str]:
    """The Problem members of the write's answer union."""
    union = write.definition.type
    while isinstance(union, GraphQLNonNull):
        union = union.of_type
    assert isinstance(union, GraphQLUnionType)
    return [t.name for t in union.types if "Problem" in {i.name for i in t.interfaces}]


CASES = [
    (body, kind)
    for body, write in sorted(LEAN.writes.items(), key=lambda item: item[1].name)
    for kind in members(write)
]


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite://{Path(tmp_path_factory.mktemp('twins')) / 'runstate.db'}"


@pytest.fixture
async def context(sqlite_url: str) -> AsyncIterator[Context]:
    """A caller's context on an app's house, as the view builds it."""
    async with opened(sqlite_url) as house:
        yield _context(house)


def _context(house: House) -> Context:
    return Context(principal=Principal("twin", "digest"), settings=Settings(), house=house)


def answered(result: ExecutionResult) -> tuple[str, list[Any]]:
    """A result as the view encodes it: the data's JSON (in key order) and the
    formatted errors."""
    return json.dumps(result.data), [e.formatted for e in result.errors or ()]


async def both(write: LeanWrite, context: Context, variables: dict[str, Any]) -> Any:
    """The write's answer on the lean path and on the standard path."""
    lean = await LEAN.execute(write, context, variables)
    standard = await SCHEMA.execute(
        write.body, variable_values=variables, context_value=context, operation_name=write.name
    )
    return answered(lean), answered(standard)


def test_every_lean_write_and_refusal_kind_is_a_case() -> None:
    """The table is whole: every write the lean path compiled is in it, each with at
    least the refusal every write can answer (a rate limit), and every kind of refusal
    is some write's."""
    assert {w.name for w in LEAN.writes.values()} == {LEAN.writes[b].name for b, _ in CASES}
    assert len(LEAN.writes) >= 20
    for write in LEAN.writes.values():
        assert "RateLimited" in members(write), write.name
    assert {kind for _, kind in CASES} == set(REFUSALS)


@pytest.mark.parametrize(
    ("body", "kind"), CASES, ids=[f"{LEAN.writes[b].name}-{k}" for b, k in CASES]
)
async def test_a_lean_write_refused_answers_as_the_standard_path(
    body: str, kind: str, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the lean path's answer of each refusal its write can give: the same
    data, key for key in order, and the same errors as the standard path. Seen
    failing with the lean path's plan dropping ``__typename`` (every case) and with
    ``to_problem`` left out of ``Lean._run`` (every case: an error, not data)."""
    refusal = REFUSALS[kind]

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise refusal

    monkeypatch.setattr(door, "enter", refused)
    write = LEAN.writes[body]
    lean, standard = await both(write, context, variables_of(write))
    assert lean == standard
    assert f'"__typename": "{kind}"' in lean[0] or f'"code": "{refusal.code}"' in lean[0]


@pytest.mark.parametrize("body", sorted(LEAN.writes), ids=lambda b: LEAN.writes[b].name)
async def test_a_lean_write_given_bad_variables_answers_as_the_standard_path(
    body: str, context: Context
) -> None:
    """Guards the request errors: an input that is no object is the same error
    (graphql-core's coercion) on both paths, and no data."""
    write = LEAN.writes[body]
    (definition,) = write.operation.variable_definitions or ()
    lean, standard = await both(write, context, {definition.variable.name.value: [5]})
    assert lean == standard
    assert lean[0] == "null"
    assert lean[1]
