"""A person's answer to a LangGraph thread waiting at ``interrupt()``, given where
the thread is watched (the dashboard, any client) instead of where the graph
runs: stored on the waiting node's step, beside the values it asked about, with
an event that names who answered. The graph's process reads it
(``RunstateSaver.interrupt_answer``) and resumes with ``Command(resume=answer)``;
LangGraph then runs the node again, and its report replaces the step's output.

The answer is a person's word, not the graph's progress: it does not need the
thread's lease (a graph waiting at an interrupt may well hold one), only the
version the person saw, so that two people answering at once get one winner.
"""

from __future__ import annotations

from typing import Any

from runstate.basics.enums import StepStatus, TaskEventKind, TaskStatus
from runstate.models import box, unbox
from runstate.services.domain import validation
from runstate.services.domain.errors import (
    InvalidInputError,
    InvalidTransitionError,
)
from runstate.services.domain.views import TaskView, Written
from runstate.services.write.engine import Change, Draft, versioned, write_task
from runstate.services.write.house import House


async def answer_interrupt(
    house: House,
    user_id: str,
    task_id: str,
    step_index: int,
    value: Any,
    *,
    expected_version: int,
    note: str | None = None,
) -> Written[TaskView]:
    """Answer the interrupt of the thread's step ``step_index`` (PENDING, its
    output ``{"interrupt": [...]}``, the thread AWAITING_DECISION): the output
    becomes ``{"interrupt": [...], "answer": value}`` (INTERRUPT_ANSWERED, with
    the note). A step that is not waiting at an interrupt is InvalidTransition; one
    answered already, InvalidInput (the graph has not taken the answer yet: an
    answer is given once); a stale version, VersionConflict. The answer is kept
    within the step output's limits together with the interrupt it answers."""
    validation.non_negative(step_index, "stepIndex")
    house.limits.json_payload(value, "value")
    reason = validation.note(note)

    async def apply(draft: Draft) -> Change:
        step = await draft.step(step_index)
        asked = unbox(step.output)
        waiting = isinstance(asked, dict) and isinstance(asked.get("interrupt"), list)
        if step.status is not StepStatus.PENDING or not waiting:
            raise InvalidTransitionError("step", step.status, StepStatus.RUNNING)
        if draft.status is not TaskStatus.AWAITING_DECISION:
            raise InvalidTransitionError("task", draft.status, TaskStatus.RUNNING)
        if "answer" in asked:
            raise InvalidInputError("stepIndex", "this interrupt is answered already")
        output = {**asked, "answer": value}
        size, most = validation.json_size(output), house.limits.json_bytes
        if size > most:  # alone, an answer took the step's output to twice the limit
            raise InvalidInputError(
                "value",
                f"with the interrupt it answers makes the step's output {size} bytes of"
                f" JSON, more than the {most} allowed",
            )
        house.limits.json_payload(output, "value")  # one level deeper than given
        step.output = box(output)
        draft.changed.add(step.position)
        return Change(TaskEventKind.INTERRUPT_ANSWERED, step_index, note=reason)

    guard = versioned(expected_version, None, step=step_index, lease=False)
    return await write_task(house, user_id, task_id, apply, guard)
