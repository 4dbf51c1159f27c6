"""Derived values of task views, and their JSON form."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from runstate.basics.enums import StepStatus, TaskEventKind, TaskStatus, ToolStatus
from runstate.services.domain.views import (
    EventView,
    LockView,
    OriginView,
    StepView,
    TaskView,
    ToolStateView,
    current_step,
    from_json,
    to_json,
)

S = StepStatus


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], 0),
        ([S.PENDING], 0),
        ([S.SUCCESS, S.SKIPPED, S.PENDING, S.SUCCESS], 2),
        ([S.SUCCESS, S.FAILED], 1),
        ([S.SUCCESS, S.SKIPPED], 2),
    ],
)
def test_current_step_is_the_first_unfinished(statuses: list[StepStatus], expected: int) -> None:
    assert current_step(statuses) == expected


def test_events_round_trip_through_json() -> None:
    """Guards the broker encoding (``to_json``/``from_json``): every delta field, nested
    views, times, enums and client values (a string that looks like a number stays a
    string) come back equal."""
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    steps = (
        StepView(0, "a", {"x": [1]}, "42", S.SUCCESS, True, 1, None, at, at),
        StepView(1, "b", None, None, S.RUNNING, False, 2, "boom", at, None),
    )
    task = TaskView(
        pk=7,
        id="t",
        user_id="u",
        session_pk=3,
        session_id="s",
        goal="g",
        status=TaskStatus.RUNNING,
        version=4,
        event_seq=5,
        current_step=1,
        total_steps=2,
        created_at=at,
        updated_at=at,
        lock=LockView("t", "worker-1", 9, at),
        stalled=False,
        steps=steps,
        tool_states=(
            ToolStateView("t", "search", ToolStatus.RETRYING, 2, 1, 3, None, "429", at, at),
        ),
    )
    event = EventView(
        task_pk=7,
        session_pk=3,
        task_id="t",
        seq=5,
        task_version=4,
        kind=TaskEventKind.CHECKPOINT,
        step_index=None,
        tool_name="search",
        at=at,
        status=TaskStatus.RUNNING,
        steps=steps,
        tool_state=task.tool_states[0] if task.tool_states else None,
        lock=task.lock,
        origin=OriginView("source", 3),
        task=task,
    )
    assert from_json(EventView, json.loads(json.dumps(to_json(event)))) == event
