"""A tool report's ``STATE_DELTA`` (``transport.agui.document``): it names the one
tool state that changed, and a client applying it ends with the document after
the event."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from ag_ui_validate import PatchErr, apply_patch

from runstate.basics.enums import TaskEventKind, TaskStatus, ToolStatus
from runstate.services.domain.views import EventView, ToolStateView
from runstate.transport.agui.document import applied, tool_document

AT = datetime(2026, 12, 4, tzinfo=UTC)


def tool(name: str, version: int = 1, result: Any = None) -> ToolStateView:
    return ToolStateView("t", name, ToolStatus.SUCCESS, version, 0, 3, result, None, None, AT)


BEFORE = {
    "id": "t",
    "sessionId": "s",
    "goal": "g",
    "status": "RUNNING",
    "version": 4,
    "currentStep": 0,
    "totalSteps": 0,
    "eventSeq": 4,
    "createdAt": AT.isoformat(),
    "steps": [],
    "toolStates": [tool_document(tool(n, result={"blob": n * 1000})) for n in ("a", "c", "e")],
}


def reported(state: ToolStateView) -> EventView:
    return EventView(
        task_pk=7,
        session_pk=1,
        task_id="t",
        seq=5,
        task_version=5,
        kind=TaskEventKind.TOOL_STATE_CHANGED,
        step_index=None,
        tool_name=state.tool_name,
        at=AT,
        status=TaskStatus.RUNNING,
        tool_state=state,
    )


def client_applies(before: dict[str, Any], delta: list[dict[str, Any]]) -> Any:
    patched = apply_patch(copy.deepcopy(before), json.loads(json.dumps(delta)))
    assert not isinstance(patched, PatchErr), patched
    return patched.result


def test_a_tool_report_replaces_only_its_own_tool_state() -> None:
    """Guards the size of a tool report's delta: the tool that changed is replaced at
    its index (``/toolStates/1``), never the whole list, which sent every tool's
    last result to every watcher at each report (62 MB to 10 watchers of a 6 MB
    task); applied, the delta gives the document after the event."""
    changed = tool("c", version=2, result={"n": 1})
    after, delta = applied(BEFORE, reported(changed))
    assert delta == [
        {"op": "test", "path": "/eventSeq", "value": 4},
        {"op": "replace", "path": "/version", "value": 5},
        {"op": "replace", "path": "/eventSeq", "value": 5},
        {"op": "replace", "path": "/toolStates/1", "value": tool_document(changed)},
    ]
    assert client_applies(BEFORE, delta) == after
    assert [t["toolName"] for t in after["toolStates"]] == ["a", "c", "e"]


def test_a_new_tool_is_added_at_its_place_in_name_order() -> None:
    """Guards the order of tool states (by code point, as ``taskAt`` answers them): a
    tool reported for the first time is added at its index, the others untouched."""
    new = tool("d")
    after, delta = applied(BEFORE, reported(new))
    assert delta[-1] == {"op": "add", "path": "/toolStates/2", "value": tool_document(new)}
    assert len(delta) == 4
    assert client_applies(BEFORE, delta) == after
    assert [t["toolName"] for t in after["toolStates"]] == ["a", "c", "d", "e"]
