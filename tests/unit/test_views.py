"""Derived values and snapshots of task views."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runstate.enums import StepStatus, TaskStatus, ToolStatus
from runstate.services.views import LockView, StepView, TaskView, ToolStateView, current_step

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


def test_snapshot_round_trips() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    view = TaskView(
        pk=7,
        id="t",
        user_id="u",
        session_pk=3,
        session_id="s",
        goal="g",
        status=TaskStatus.RUNNING,
        version=4,
        event_seq=5,
        created_at=at,
        updated_at=at,
        steps=(
            StepView(0, "a", {"x": [1]}, None, S.SUCCESS, True, 1, None, at, at),
            StepView(1, "b", None, None, S.RUNNING, False, 2, "boom", at, None),
        ),
        tool_states=(
            ToolStateView("t", "search", ToolStatus.RETRYING, 2, 1, 3, None, "429", at, at),
        ),
        lock=LockView("t", "worker-1", 9, at),
    )
    assert TaskView.from_json(view.to_json()) == view
    assert (view.current_step, view.total_steps) == (1, 2)
