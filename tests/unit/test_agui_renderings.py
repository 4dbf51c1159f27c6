"""Renderings (``transport.agui.frames``): an event's part of every run is rendered
once on a process and shared, and never taken for another event's."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from runstate.basics.enums import TaskEventKind, TaskStatus
from runstate.services.domain.views import EventView
from runstate.transport.agui.frames import Renderings, Run, framed

BEFORE = {
    "id": "t",
    "sessionId": "s",
    "goal": "g",
    "status": "PLANNED",
    "version": 1,
    "currentStep": 0,
    "totalSteps": 0,
    "eventSeq": 1,
    "createdAt": "2026-12-04T00:00:00+00:00",
    "steps": [],
    "toolStates": [],
}
AT = datetime(2026, 12, 4, tzinfo=UTC)
EVENT = EventView(
    task_pk=7,
    session_pk=1,
    task_id="t",
    seq=2,
    task_version=2,
    kind=TaskEventKind.TASK_STATUS_CHANGED,
    step_index=None,
    tool_name=None,
    at=AT,
    status=TaskStatus.RUNNING,
    actor="alice",
)


def test_an_event_is_rendered_once_for_every_run() -> None:
    """Guards the sharing: a second run of the same event gets the same rendering
    (not rendered again), framed with its own cursor and run."""
    renderings = Renderings()
    first = renderings.of(BEFORE, EVENT)
    assert renderings.of(BEFORE, EVENT) is first
    one, two = Run("t", "s", "run-1", "e", 1), Run("t", "s", "run-2", "e", 2)
    assert [f.cursor and str(f.cursor) for f in framed(first, one)] == ["e:1:2:0"]
    assert [f.cursor and str(f.cursor) for f in framed(first, two)] == ["e:2:2:0"]


def test_another_event_at_the_same_seq_is_rendered_anew() -> None:
    """Guards the key: the same task row and seq with another version or time (a
    row id used again after a deletion, on SQLite) is another event."""
    renderings = Renderings()
    first = renderings.of(BEFORE, EVENT)
    later = replace(EVENT, at=AT + timedelta(seconds=1))
    assert renderings.of(BEFORE, later) is not first
    assert renderings.of(BEFORE, replace(EVENT, task_version=3)) is not first


def test_a_run_that_missed_an_event_renders_on_its_own() -> None:
    """Guards the cache against a gapped run (``RUNSTATE_GAP_FILL=false``): an event
    rendered on a document that is not the seq before it is neither kept nor taken
    from the cache, so it can never reach another run."""
    renderings = Renderings()
    gapped = {**BEFORE, "eventSeq": 0}
    assert renderings.of(gapped, EVENT) is not renderings.of(gapped, EVENT)
    assert len(renderings.cache) == 0
    assert renderings.of(BEFORE, EVENT).after["eventSeq"] == 2


def test_a_document_of_its_own_is_counted_whole_and_a_chained_one_is_not() -> None:
    """Guards the cache's bound: a rendering made on a document read from elsewhere
    holds all of it and is counted so; the next one, made on the document the first
    left, shares its steps and counts only what it adds."""
    steps = [
        {
            "id": f"t:{i}",
            "index": i,
            "action": "a",
            "input": "x" * 1000,
            "status": "PENDING",
            "attempts": 0,
        }
        for i in range(50)
    ]
    renderings = Renderings()
    first = renderings.of({**BEFORE, "steps": steps, "totalSteps": 50}, EVENT)
    whole = renderings.cache.bytes
    assert whole > 50_000
    following = replace(EVENT, seq=3, task_version=3, at=AT + timedelta(seconds=1))
    renderings.of(first.after, following)
    assert renderings.cache.bytes - whole < 5_000
    assert renderings.at(7, 2, 2, AT) is first.after
