"""No silent field traps: every column a write changes is saved, versioned and read
back, and every plan field is compared by an idempotent ``createTask``, both
derived from the declarations (``services.domain.columns``), never listed by hand.

Each test goes over every field there is, so a field added later is covered with
no edit here. Seen failing: with a column added to ``Step`` alone and the write's
saved columns spelled by hand as they were (``StepVersion``'s), the first test
names it (the answer and ``taskAt`` read None); with a field added to
``StepPlan`` and ``tasks._fixed`` spelled by hand, the second one does.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from tortoise import fields

from runstate.basics.enums import TaskEventKind
from runstate.models import Step, Task, box, unbox
from runstate.services.actions import sessions, tasks
from runstate.services.domain.columns import CHANGING
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import StepView
from runstate.services.read import history
from runstate.services.read.convert import task_views
from runstate.services.read.lookups import get_task
from runstate.services.write.engine import Change, Draft, versioned, write_task
from runstate.services.write.house import House
from runstate.storage.clock import utcnow
from tests.support import database, opened

USER = "columnist"
_ids = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with database(request.param, tmp_path_factory.mktemp(f"columns-{request.param}")) as url:
        yield url


@pytest.fixture
async def house(database_url: str) -> AsyncIterator[House]:
    async with opened(database_url) as house:
        yield house


def another(name: str, current: Any, round_: int) -> Any:
    """A value of the step column ``name`` that differs from ``current`` (as stored:
    JSON columns boxed), led by the column's type; ``round_`` tells writes apart."""
    field = Step._meta.fields_map[name]
    if isinstance(field, fields.JSONField):
        return box({"changed": name, "round": round_})
    enum = getattr(field, "enum_type", None)
    if enum is not None:
        members = [m for m in enum if m != current]
        return members[round_ % len(members)]
    if isinstance(field, fields.BooleanField):
        return not current
    if isinstance(field, fields.DatetimeField):
        return datetime(2031, 1, 1 + round_, 12, tzinfo=UTC)
    if isinstance(field, fields.IntField):
        return (current or 0) + 7 + round_
    if isinstance(field, fields.TextField | fields.CharField):
        return f"changed {name} {round_}"
    raise AssertionError(f"Step.{name}: no test value for {type(field).__name__}")


def seen(step: StepView, values: dict[str, Any]) -> dict[str, Any]:
    """What a view shows of the changed columns (client values unboxed)."""
    return {name: getattr(step, name) for name in values}


def expected(values: dict[str, Any]) -> dict[str, Any]:
    json_columns = {n for n in values if isinstance(Step._meta.fields_map[n], fields.JSONField)}
    return {n: unbox(v) if n in json_columns else v for n, v in values.items()}


async def test_every_column_a_write_changes_is_saved_versioned_and_read_back(
    house: House,
) -> None:
    """Guards the saved columns' derivation (``columns.CHANGING``): a write that
    changes every changing column of a step shows each new value in its answer, in
    its live event, in the stored event, and in ``taskAt`` at its seq, both while
    the row is the step as it stands and once a later write moved the row on (then
    ``taskAt`` reads the history row)."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    task_id = f"t{next(_ids)}"
    plan = [StepPlan("first"), StepPlan("second")]
    await tasks.create_task(house, USER, session.id, goal="columns", steps=plan, task_id=task_id)
    rounds: dict[int, dict[str, Any]] = {}

    def changing(round_: int) -> Any:
        async def apply(draft: Draft) -> Change:
            step = await draft.step(0)
            values = {n: another(n, getattr(step, n), round_) for n in CHANGING}
            for name, value in values.items():
                setattr(step, name, value)
            draft.changed.add(0)
            rounds[round_] = expected(values)
            return Change(TaskEventKind.CHECKPOINT, step_index=0)

        return apply

    written = await write_task(house, USER, task_id, changing(1), versioned(None, None))
    (live,) = written.events
    first = rounds[1]
    assert seen(live.steps[0], first) == first, "the live event"
    row = await Task.get(user_id=USER, public_id=task_id)
    (answer,) = await task_views([row], utcnow())
    assert answer.steps is not None
    assert seen(answer.steps[0], first) == first, "the answer"
    (stored,) = await history.events(answer, live.seq - 1, 1)
    assert seen(stored.steps[0], first) == first, "the stored event"
    at = await history.task_at(await get_task(USER, task_id), live.seq)
    assert at.steps is not None
    assert seen(at.steps[0], first) == first, "taskAt, from the step row"

    await write_task(house, USER, task_id, changing(2), versioned(None, None))
    at = await history.task_at(await get_task(USER, task_id), live.seq)
    assert at.steps is not None
    assert seen(at.steps[0], first) == first, "taskAt, from the history row"


def other_plan_value(field: dataclasses.Field[Any], current: Any) -> Any:
    """A value of a ``StepPlan`` field other than ``current``, led by its type."""
    if field.type in ("bool", bool):
        return not current
    if field.type in ("str", str):
        return f"{current}, changed"
    if field.type in ("int", int):
        return current + 1
    return {"changed": field.name}


@pytest.mark.parametrize("field", dataclasses.fields(StepPlan), ids=lambda f: f.name)
async def test_a_retried_create_with_another_plan_value_is_refused(
    house: House, field: dataclasses.Field[Any]
) -> None:
    """Guards ``tasks._fixed`` (derived from ``StepPlan``): a ``createTask`` retried
    with a client-chosen id and another value of any one plan field is another task
    under the same id, answered InvalidInput(id), while the same plan is answered the
    task made first."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    task_id = f"t{next(_ids)}"
    plan = StepPlan("fetch", {"url": "a"}, idempotent=True)
    made = await tasks.create_task(
        house, USER, session.id, goal="plan", steps=[plan], task_id=task_id
    )
    again = await tasks.create_task(
        house, USER, session.id, goal="plan", steps=[plan], task_id=task_id
    )
    assert again.value.pk == made.value.pk
    changed = dataclasses.replace(
        plan, **{field.name: other_plan_value(field, getattr(plan, field.name))}
    )
    with pytest.raises(InvalidInputError) as refused:
        await tasks.create_task(
            house, USER, session.id, goal="plan", steps=[changed], task_id=task_id
        )
    assert refused.value.field == "id"
