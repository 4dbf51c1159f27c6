"""Every from/to pair of the step, task and session state machines, allowed or refused."""

from __future__ import annotations

import itertools

import pytest

from runstate.basics.enums import SessionStatus, StepStatus, TaskStatus
from runstate.services.domain.errors import InvalidTransitionError
from runstate.services.domain.moves import (
    DECISION_MOVES,
    RESUME_MOVES,
    check_session_move,
    check_step_move,
    check_task_move,
)

S, T = StepStatus, TaskStatus

# semantics.md, "Task and step state machines", written out pair by pair.
STEP_ALLOWED = {
    (S.PENDING, S.RUNNING),
    (S.RUNNING, S.SUCCESS),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.PENDING),
    (S.FAILED, S.PENDING),
    (S.PENDING, S.SKIPPED),
    (S.RUNNING, S.SKIPPED),
    (S.FAILED, S.SKIPPED),
}

STEP_JUMPS = STEP_ALLOWED | {
    (S.PENDING, S.SUCCESS),
    (S.PENDING, S.FAILED),
    (S.FAILED, S.RUNNING),
    (S.FAILED, S.SUCCESS),
}
"""A checkpoint jumps along allowed paths, but never back to where a step stands:
nothing moves a step RUNNING -> RUNNING, and nothing but a resume or a decision
enters or leaves IN_DOUBT."""

RESUME_ALLOWED = {(S.RUNNING, S.PENDING), (S.RUNNING, S.IN_DOUBT), (S.FAILED, S.PENDING)}
DECISION_ALLOWED = STEP_ALLOWED | {
    (S.IN_DOUBT, S.PENDING),
    (S.IN_DOUBT, S.SKIPPED),
    (S.IN_DOUBT, S.SUCCESS),
}

_LIVE = (T.PLANNED, T.RUNNING, T.WAITING_TOOL, T.AWAITING_DECISION, T.FAILED)
TASK_ALLOWED = (
    {(T.PLANNED, T.RUNNING), (T.RUNNING, T.WAITING_TOOL), (T.WAITING_TOOL, T.RUNNING)}
    | {(T.RUNNING, T.AWAITING_DECISION), (T.AWAITING_DECISION, T.RUNNING), (T.FAILED, T.RUNNING)}
    | {(old, T.FAILED) for old in _LIVE if old is not T.FAILED}
    | {(old, T.CANCELLED) for old in _LIVE}
)
"""Moves allowed whatever the steps say; COMPLETED is allowed only with every step finished."""


@pytest.mark.parametrize(("old", "new"), list(itertools.product(StepStatus, StepStatus)))
def test_step_moves(old: StepStatus, new: StepStatus) -> None:
    if (old, new) in STEP_ALLOWED:
        check_step_move(old, new)
    else:
        with pytest.raises(InvalidTransitionError) as refused:
            check_step_move(old, new)
        assert (refused.value.from_status, refused.value.to_status) == (old, new)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(StepStatus, StepStatus)))
def test_step_jumps_in_a_checkpoint(old: StepStatus, new: StepStatus) -> None:
    if (old, new) in STEP_JUMPS:
        check_step_move(old, new, jump=True)
    else:
        with pytest.raises(InvalidTransitionError):
            check_step_move(old, new, jump=True)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(StepStatus, StepStatus)))
def test_resume_and_decision_moves(old: StepStatus, new: StepStatus) -> None:
    """Only a resume enters IN_DOUBT, only a decision leaves it."""
    for moves, allowed in ((RESUME_MOVES, RESUME_ALLOWED), (DECISION_MOVES, DECISION_ALLOWED)):
        if (old, new) in allowed:
            check_step_move(old, new, moves=moves)
        else:
            with pytest.raises(InvalidTransitionError):
                check_step_move(old, new, moves=moves)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(TaskStatus, TaskStatus)))
def test_task_moves_with_work_left(old: TaskStatus, new: TaskStatus) -> None:
    if (old, new) in TASK_ALLOWED:
        check_task_move(old, new, all_steps_finished=False)
    else:
        with pytest.raises(InvalidTransitionError):
            check_task_move(old, new, all_steps_finished=False)


@pytest.mark.parametrize("old", list(TaskStatus))
def test_task_completes_only_from_a_live_status_with_every_step_finished(old: TaskStatus) -> None:
    if old in _LIVE:
        check_task_move(old, T.COMPLETED, all_steps_finished=True)
    else:
        with pytest.raises(InvalidTransitionError):
            check_task_move(old, T.COMPLETED, all_steps_finished=True)


@pytest.mark.parametrize("old", [T.COMPLETED, T.CANCELLED])
@pytest.mark.parametrize("new", list(TaskStatus))
def test_final_tasks_never_move_even_by_jump(old: TaskStatus, new: TaskStatus) -> None:
    with pytest.raises(InvalidTransitionError):
        check_task_move(old, new, all_steps_finished=True, jump=True)


SESSION_ALLOWED = {
    (SessionStatus.ACTIVE, SessionStatus.PAUSED),
    (SessionStatus.PAUSED, SessionStatus.ACTIVE),
    (SessionStatus.ACTIVE, SessionStatus.COMPLETED),
    (SessionStatus.PAUSED, SessionStatus.COMPLETED),
} | {(s, s) for s in SessionStatus}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(SessionStatus, SessionStatus)))
def test_session_moves(old: SessionStatus, new: SessionStatus) -> None:
    if (old, new) in SESSION_ALLOWED:
        check_session_move(old, new)
    else:
        with pytest.raises(InvalidTransitionError):
            check_session_move(old, new)
