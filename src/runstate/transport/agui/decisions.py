"""Answers to a run's interrupts (``RunAgentInput.resume``) made into ``decideStep``
calls (``docs/architecture.md``, "The AG-UI endpoint's contract", §6).

Every entry is checked first: an id of this task's ``<taskId>:<index>@<version>``,
one version for all, distinct steps, a status AG-UI knows, a resolved payload that
matches the interrupt's ``responseSchema``. While the task is still at that
version, the entries must answer exactly its steps in doubt. Each resolved entry
is then decided in index order, expecting the version plus the decisions applied
before it, under an idempotency key derived from the entry: of two different
answers the first wins and the other is a VersionConflict, and the same answer
sent twice (a retry, a second tab) writes once.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from ag_ui.core import ResumeEntry
from pydantic import ValidationError

from runstate.basics.enums import StepDecision, StepStatus
from runstate.services.actions import recovery
from runstate.services.domain import validation
from runstate.services.domain.errors import DomainError, InvalidInputError
from runstate.services.domain.validation import ContentLimits
from runstate.services.domain.views import TaskView
from runstate.services.read import history
from runstate.services.write import door

KEY_PREFIX = "agui:"
"""How the idempotency keys of answers begin."""


class RefusedError(Exception):
    """A resume that is not applied (whole or in part): its run is ``RUN_STARTED``
    then ``RUN_ERROR`` with this code (a ``ProblemCode`` name) and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Answer:
    """One checked resume entry."""

    entry: ResumeEntry
    index: int
    decision: StepDecision | None
    """None for a cancelled entry: the step stays in doubt."""
    output: Any = None
    note: str | None = None

    def key(self, task_id: str) -> str:
        """The idempotency key of this answer to ``task_id``'s interrupt: the same
        entry always gives the same key."""
        text = json.dumps(
            [task_id, self.entry.interrupt_id, self.entry.status, self.entry.payload],
            sort_keys=True,
            separators=(",", ":"),
        )
        return KEY_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def _invalid(message: str) -> RefusedError:
    return RefusedError("INVALID_INPUT", f"resume: {message}")


def _decision(
    entry: ResumeEntry, limits: ContentLimits
) -> tuple[StepDecision | None, Any, str | None]:
    """What a resolved entry's payload decides, checked against ``RESPONSE_SCHEMA``,
    its output and note by the rules ``decideStep`` holds them to (``validation``),
    so that no entry is applied before every one is known to pass."""
    if entry.status == "cancelled":
        return None, None, None
    payload = entry.payload
    if not isinstance(payload, dict) or "decision" not in payload:
        raise _invalid(f"{entry.interrupt_id}: payload must be an object with a decision")
    extra = set(payload) - {"decision", "output", "note"}
    if extra:
        raise _invalid(f"{entry.interrupt_id}: payload has unknown fields {sorted(extra)}")
    decision = payload["decision"]
    if not isinstance(decision, str) or decision not in StepDecision.__members__:
        raise _invalid(f"{entry.interrupt_id}: decision must be RETRY, SKIP or COMPLETE")
    note = payload.get("note")
    if note is not None and not isinstance(note, str):
        raise _invalid(f"{entry.interrupt_id}: note must be text")
    try:
        output = limits.json_payload(payload.get("output"), "output")
        note = validation.note(note)
    except InvalidInputError as bad:
        raise _invalid(f"{entry.interrupt_id}: {bad.message}") from None
    return StepDecision[decision], output, note


def answers(task_id: str, raw: list[Any], limits: ContentLimits) -> tuple[int, list[Answer]]:
    """The version the entries answer and the checked entries in step order;
    RefusedError INVALID_INPUT naming what is wrong."""
    pattern = re.compile(re.escape(task_id) + r":(\d{1,9})@(\d{1,15})")
    versions = set()
    checked: dict[int, Answer] = {}
    for item in raw:
        try:
            entry = ResumeEntry.model_validate(item)
        except ValidationError as invalid:
            first = invalid.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            raise _invalid(f"{where}: {first['msg']}") from None
        found = pattern.fullmatch(entry.interrupt_id)
        if found is None:
            raise _invalid(f"{entry.interrupt_id!r} is not an interrupt of task {task_id!r}")
        index, version = int(found[1]), int(found[2])
        if index in checked:
            raise _invalid(f"step {index} is answered twice")
        versions.add(version)
        checked[index] = Answer(entry, index, *_decision(entry, limits))
    if len(versions) != 1:
        raise _invalid("every entry must answer the same interrupts (one version)")
    return versions.pop(), [checked[i] for i in sorted(checked)]


async def decide(caller: door.Caller, task: TaskView, raw: list[Any]) -> None:
    """Apply a resume's answers to ``task`` (as the request read it) through
    ``decideStep``; RefusedError when it is refused, naming the decisions this
    request applied before the refusal (they stay)."""
    version, checked = answers(task.id, raw, caller.house.limits)
    if task.version == version:
        steps = await history.steps_at(task.pk, task.event_seq)
        doubted = {s.index for s in steps if s.status is StepStatus.IN_DOUBT}
        if doubted != {a.index for a in checked}:
            raise _invalid(
                f"the interrupts open at version {version} are steps {sorted(doubted)};"
                " a resume answers every one of them"
            )
    applied: list[str] = []
    for answer in checked:
        if answer.decision is None:
            continue
        expected = version + len(applied)
        try:
            await _decide(caller, task.id, answer, answer.decision, expected)
        except DomainError as refused:
            done = f" (applied before it: {', '.join(applied)})" if applied else ""
            raise RefusedError(
                refused.code, f"step {answer.index}: {refused.message}{done}"
            ) from None
        applied.append(f"step {answer.index} {answer.decision.name}")


async def _decide(
    caller: door.Caller, task_id: str, answer: Answer, decision: StepDecision, expected: int
) -> None:
    """One answer as ``decideStep``, through the door every write takes, under the
    key derived from the entry (its fingerprint the fields GraphQL's would be)."""
    fields = {
        "task_id": task_id,
        "step_index": answer.index,
        "expected_version": expected,
        "decision": decision.name,
        "output": answer.output,
        "note": answer.note,
    }
    write = partial(
        recovery.decide_step,
        caller.house,
        caller.user_id,
        task_id,
        answer.index,
        decision,
        expected_version=expected,
        output=answer.output,
        note=answer.note,
    )
    await door.enter(caller, "decideStep", answer.key(task_id), lambda: fields, TaskView, write)
