"""Each record declared once per layer: views read from rows, rows copied from views,
GraphQL objects and service inputs, all led by the declared fields."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from strawberry.scalars import JSON

from runstate.basics.enums import StepStatus, TaskStatus, ToolStatus
from runstate.models import Step, Task, ToolState, box
from runstate.schema import types
from runstate.schema.inputs import StepPlanInput
from runstate.services.domain.columns import CHANGING, VERSIONED
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import (
    LockView,
    ScheduleView,
    StepView,
    SubmissionView,
    TaskView,
    ToolStateView,
)
from runstate.services.read.convert import from_row, lock_view, task_view, to_row
from runstate.services.read.history import AS_ADDED
from runstate.services.write.engine import STEP_FIELDS, TASK_FIELDS
from tests.support import opened

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def stored_step() -> Step:
    """A step row with every column set to a value of its own."""
    return Step(
        id=7,
        task_id=3,
        position=2,
        action="mail",
        input=box("done"),
        output=box({"sent": 1}),
        status=StepStatus.SUCCESS,
        idempotent=False,
        attempts=2,
        error="once",
        started_at=AT,
        completed_at=AT,
        created_seq=1,
        changed_seq=4,
    )


def test_a_view_reads_every_field_from_its_row() -> None:
    """Guards ``convert.from_row``: each view field is its column (``index`` is
    ``position``, a client's JSON unboxed: the text "done" stays text). A field left
    out of the plan fails the constructor; a JSON value not unboxed shows the box."""
    assert from_row(StepView, stored_step()) == StepView(
        index=2,
        action="mail",
        input="done",
        output={"sent": 1},
        status=StepStatus.SUCCESS,
        idempotent=False,
        attempts=2,
        error="once",
        started_at=AT,
        completed_at=AT,
    )
    tool = ToolState(
        task_id=3,
        tool_name="search",
        status=ToolStatus.SUCCESS,
        version=2,
        retry_count=1,
        max_retries=3,
        last_result=box([1]),
        last_error=None,
        rate_limit_reset_at=None,
        updated_at=AT,
    )
    view = from_row(ToolStateView, tool, task_id="t-1")
    assert (view.task_id, view.last_result) == ("t-1", [1])  # the public id, not the row's


def test_a_row_copied_from_a_view_reads_back_as_that_view() -> None:
    """Guards ``convert.to_row`` (a fork's steps): a copied row holds the view's
    values, boxed where the column keeps a client value."""
    view = from_row(StepView, stored_step())
    copy = Step(task_id=0, **to_row(Step, view))
    assert copy.input == {"v": "done"}
    assert from_row(StepView, copy) == view


def test_the_write_path_reads_back_every_column() -> None:
    """Guards the derived column lists: the opening statement's RETURNING names every
    column of the task and of the step, and the history keeps every changing one."""
    task_columns = {"session_id", *Task._meta.fields_db_projection}
    assert set(TASK_FIELDS) == task_columns
    assert set(STEP_FIELDS) == set(Step._meta.fields_db_projection) - {"task_id"}
    assert set(VERSIONED) == set(CHANGING)  # every changing column, and nothing else
    assert set(AS_ADDED) == set(VERSIONED)


@pytest.fixture
async def models(tmp_path: Path) -> AsyncIterator[None]:
    """The models initialised, as the server has them (foreign keys' columns known)."""
    async with opened(f"sqlite://{tmp_path / 'records.db'}"):
        yield


@pytest.mark.usefixtures("models")
def test_graphql_objects_copy_their_views() -> None:
    """Guards ``FromView.of``: every data field of a GraphQL type is the view's field
    of the same name, a view inside converted (the lease), the view kept."""
    row = Task(
        id=1,
        public_id="t-1",
        user_id="u",
        session_id=9,
        goal="g",
        status=TaskStatus.RUNNING,
        version=3,
        current_step=1,
        total_steps=2,
        event_seq=5,
        lock_holder="w",
        lock_token=2,
        lock_expires_at=datetime(2999, 1, 1, tzinfo=UTC),
        created_at=AT,
        updated_at=AT,
        stored_bytes=100,
    )
    view = task_view(row, "s-1", AT)
    task = types.Task.of(view)
    assert task.view is view
    assert (task.id, task.session_id, task.goal, task.status) == ("t-1", "s-1", "g", "RUNNING")
    assert (task.version, task.current_step, task.total_steps, task.event_seq) == (3, 1, 2, 5)
    assert (task.stalled, task.created_at, task.stored_bytes) == (False, AT, 100)
    assert isinstance(task.lock, types.TaskLock)
    assert (
        view.lock == lock_view(row, AT) == LockView("t-1", "w", 2, datetime(2999, 1, 1, tzinfo=UTC))
    )
    assert task.lock.fencing_token == 2
    step = types.Step.of(from_row(StepView, stored_step()), "t-1")
    assert (str(step.id), step.index, step.attempts) == ("t-1:2", 2, 2)
    assert step.input == "done"  # type: ignore[comparison-overlap]  # JSON holds any value


def test_an_input_becomes_the_service_value_in_one_call() -> None:
    """Guards ``inputs.plain``: fields copied by name, a null one taking the
    service's default (``idempotent: null`` means true, as the contract says)."""
    given = cast(JSON, {"x": 1})
    assert StepPlanInput(action="a", input=given, idempotent=None).plan() == StepPlan(
        "a", {"x": 1}, True
    )
    assert StepPlanInput(action="a", idempotent=False).plan() == StepPlan("a", None, False)


def test_every_view_field_is_declared_on_its_graphql_type() -> None:
    """The GraphQL types show each view field (``stored_bytes`` of a task included),
    so a field added to a view and not to its type shows here. Spend columns are
    shown together, as ``spend`` (and a task's budget as ``budget``)."""
    spend = {"input_tokens", "output_tokens", "cost_micros", "calls"}
    totals = {f"spent_{name}" for name in spend} | {"budget_max_tokens", "budget_max_cost_micros"}
    for view, graphql, hidden in (
        (StepView, types.Step, spend),
        (ToolStateView, types.ToolState, set()),
        (
            TaskView,
            types.Task,
            {"pk", "user_id", "session_pk", "steps", "tool_states", "submission_pk", *totals},
        ),
        (
            SubmissionView,
            types.Submission,
            {"pk", "user_id", "session_pk", "task_pk", "schedule_pk", "changed_seq", "spent"},
        ),
        (ScheduleView, types.Schedule, {"pk", "session_pk"}),
    ):
        shown = {f.name for f in dataclasses.fields(graphql)}
        assert {f.name for f in dataclasses.fields(view)} - hidden <= shown, graphql
