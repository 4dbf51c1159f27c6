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
        StepView(
            index=0,
            action="a",
            input={"x": [1]},
            output="42",
            status=S.SUCCESS,
            idempotent=True,
            attempts=1,
            error=None,
            started_at=at,
            completed_at=at,
        ),
        StepView(
            index=1,
            action="b",
            input=None,
            output=None,
            status=S.RUNNING,
            idempotent=False,
            attempts=2,
            error="boom",
            started_at=at,
            completed_at=None,
        ),
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
