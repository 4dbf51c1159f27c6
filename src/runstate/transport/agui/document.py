"""The AG-UI state document of a task, and the RFC 6902 delta of one event.

The document is exactly what GraphQL answers to ``taskAt(id, seq) { ...AguiState }``
(``docs/architecture.md``, "The AG-UI endpoint's contract", §3): the fields below,
as the GraphQL types serialize them (enums by name, times by ``isoformat``, JSON
values as stored, their object keys sorted). What changes with the clock and no
event (``lock``, ``stalled``, ``updatedAt``) is left out, so that the document
after the delta of event n is the document at seq n.

The delta applies an event the way a client applies it (``client.records.Task.apply``):
the steps it carries replace theirs by index or are added, its tool state replaces
the one of its name (``/toolStates/<index>``, or is added there), and the task's own
fields are set. It opens with the ``test``
of ``/eventSeq`` so that a gap or a repeat fails to apply instead of applying to
the wrong base.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runstate.basics.enums import StepStatus
from runstate.services.domain.views import (
    EventView,
    StepView,
    TaskView,
    ToolStateView,
    current_step,
)

Document = dict[str, Any]
"""A task's state document (``AguiState``), as JSON."""

AGUI_STATE = """fragment AguiState on Task {
  id sessionId goal status version currentStep totalSteps eventSeq createdAt
  steps { id index action input output status idempotent attempts error startedAt completedAt }
  toolStates {
    toolName status version retryCount maxRetries lastResult lastError rateLimitResetAt updatedAt
  }
}"""
"""The selection the document is, as the AG-UI endpoint's contract fixes it
(``docs/architecture.md``)."""


def canonical(value: Any) -> Any:
    """A client's JSON value with every object's keys in sorted order. PostgreSQL's
    ``jsonb`` gives them back in an order of its own, the broker in the client's:
    sorted, a frame is the same bytes whether its event came live or from the log."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def _time(value: datetime | None) -> str | None:
    """A time as the GraphQL ``DateTime`` scalar writes it."""
    return None if value is None else value.isoformat()


def step_document(task_id: str, step: StepView) -> Document:
    """One step, as ``steps { ... }`` of the fragment answers it."""
    return {
        "id": f"{task_id}:{step.index}",
        "index": step.index,
        "action": step.action,
        "input": canonical(step.input),
        "output": canonical(step.output),
        "status": step.status.name,
        "idempotent": step.idempotent,
        "attempts": step.attempts,
        "error": step.error,
        "startedAt": _time(step.started_at),
        "completedAt": _time(step.completed_at),
    }


def tool_document(tool: ToolStateView) -> Document:
    """One tool state, as ``toolStates { ... }`` of the fragment answers it."""
    return {
        "toolName": tool.tool_name,
        "status": tool.status.name,
        "version": tool.version,
        "retryCount": tool.retry_count,
        "maxRetries": tool.max_retries,
        "lastResult": canonical(tool.last_result),
        "lastError": tool.last_error,
        "rateLimitResetAt": _time(tool.rate_limit_reset_at),
        "updatedAt": _time(tool.updated_at),
    }


def document(task: TaskView) -> Document:
    """The document of a task read with its steps and tool states (``history.task_at``)."""
    assert task.steps is not None, "read with task_at"
    assert task.tool_states is not None, "read with task_at"
    return {
        "id": task.id,
        "sessionId": task.session_id,
        "goal": task.goal,
        "status": task.status.name,
        "version": task.version,
        "currentStep": task.current_step,
        "totalSteps": task.total_steps,
        "eventSeq": task.event_seq,
        "createdAt": _time(task.created_at),
        "steps": [step_document(task.id, s) for s in task.steps],
        "toolStates": [tool_document(t) for t in task.tool_states],
    }


_HEAD = ("status", "version", "currentStep", "totalSteps", "eventSeq")
"""The task's own fields an event may change, in the order a delta replaces them."""


def applied(before: Document, event: EventView) -> tuple[Document, list[dict[str, Any]]]:
    """The document after ``event`` and the delta from ``before`` to it (its first op
    the ``test`` of the seq before)."""
    steps = list(before["steps"])
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/eventSeq", "value": before["eventSeq"]}]
    changed: list[dict[str, Any]] = []
    for step in event.steps:
        doc = step_document(event.task_id, step)
        if step.index < len(steps):
            if steps[step.index] != doc:
                changed.append({"op": "replace", "path": f"/steps/{step.index}", "value": doc})
            steps[step.index] = doc
        else:
            changed.append({"op": "add", "path": f"/steps/{len(steps)}", "value": doc})
            steps.append(doc)
    tools = before["toolStates"]
    tool_op: dict[str, Any] | None = None
    if event.tool_state is not None:
        tools, tool_op = _tool_changed(tools, tool_document(event.tool_state))
    after = {
        **before,
        "status": event.status.name,
        "version": event.task_version,
        "currentStep": current_step(StepStatus[s["status"]] for s in steps),
        "totalSteps": len(steps),
        "eventSeq": event.seq,
        "steps": steps,
        "toolStates": tools,
    }
    ops += [
        {"op": "replace", "path": f"/{name}", "value": after[name]}
        for name in _HEAD
        if after[name] != before[name]
    ]
    ops += changed
    if tool_op is not None:
        ops.append(tool_op)
    return after, ops


def _tool_changed(
    tools: list[Document], new: Document
) -> tuple[list[Document], dict[str, Any] | None]:
    """The tool states with ``new`` in its place (in the code-point order of names,
    the order ``taskAt`` answers), and the op that names only it: a ``replace`` at
    its index, an ``add`` there for a tool reported for the first time, None if it
    is unchanged. Replacing the whole list sent every tool's last result to every
    watcher at each report."""
    name = new["toolName"]
    index = next((i for i, t in enumerate(tools) if t["toolName"] >= name), len(tools))
    path = f"/toolStates/{index}"
    if index < len(tools) and tools[index]["toolName"] == name:
        if tools[index] == new:
            return tools, None
        return [*tools[:index], new, *tools[index + 1 :]], {
            "op": "replace",
            "path": path,
            "value": new,
        }
    return [*tools[:index], new, *tools[index:]], {"op": "add", "path": path, "value": new}
