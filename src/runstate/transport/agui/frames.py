"""AG-UI frames of a run, as a pure function of the task's log, the run's base, its
``threadId`` and its ``runId`` (``docs/architecture.md``, "The AG-UI endpoint's contract",
§4-§5).

A run's frames come in groups: the opening group at its base N (``opening``),
then one group per event n > N (``render``, then ``framed`` for the run); the
group that leaves the task at a resting point ends with the terminal frames, and
the run with it. The k-th frame
of the group of seq s has the cursor ``<epoch>:<base>:<s>:<k>``, in its SSE ``id:``
and in ``metadata.runstate.cursor``. Because the same log always gives the same
groups, any server process can continue a run from any cursor, by computing the
groups again and sending what lies after it.

A run's opening and ending are built with AG-UI's own models (``ag_ui.core``, the
``ag-ui-protocol`` package) and encoded by them (camelCase, no field without a
value). An event's delta and step frames are written once per process for every
run (``Renderings``), by pydantic's own encoder, in the bytes those models would
write (the property test of ``test_history.py`` checks every frame).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
)
from pydantic_core import to_json

from runstate.basics.bounded import BoundedCache
from runstate.basics.enums import StepDecision
from runstate.services.domain.validation import NOTE_CHARS
from runstate.services.domain.views import EventView
from runstate.transport.agui.document import Document, applied

PROTOCOL_VERSION = "1.0"
"""The AG-UI version runstate speaks, declared in every ``RUN_STARTED``."""

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["decision"],
    "additionalProperties": False,
    "properties": {
        "decision": {"enum": [d.name for d in StepDecision]},
        "output": {},
        "note": {"type": "string", "maxLength": NOTE_CHARS},
    },
}
"""What an answer to an interrupt holds: ``decideStep``'s decision, output and note."""


class CursorError(ValueError):
    """A ``Last-Event-ID`` that is not a runstate cursor."""


_CURSOR = re.compile(r"(?P<epoch>[^\s]+):(?P<base>\d{1,15}):(?P<seq>\d{1,15}):(?P<k>\d{1,6})")


@dataclass(frozen=True)
class Cursor:
    """Where a frame stands: the timeline, the run's base, its event's seq and its
    place among that event's frames."""

    epoch: str
    base: int
    seq: int
    k: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.base}:{self.seq}:{self.k}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor a ``Last-Event-ID`` names; CursorError if it names none."""
        found = _CURSOR.fullmatch(text.strip())
        if found is None:
            raise CursorError("Last-Event-ID: not a cursor this server gave (<epoch>:<n>:<n>:<n>)")
        return cls(found["epoch"], int(found["base"]), int(found["seq"]), int(found["k"]))


@dataclass(frozen=True)
class Run:
    """What a run's frames depend on besides the log."""

    task_id: str
    thread_id: str
    run_id: str
    epoch: str
    base: int


@dataclass(frozen=True)
class Frame:
    """One SSE frame: an AG-UI event as JSON, with its cursor (None: a frame of a
    refused run, which nothing resumes); ``last`` when it ends the run.

    A ``STATE_SNAPSHOT`` keeps its document (``snapshot``) rather than its JSON:
    ``data`` is the event's JSON up to ``"snapshot":``, and the document is encoded
    a piece at a time as the frame is written (``pieces``), so that a run of a
    large task never holds its snapshot whole as text."""

    data: str
    cursor: Cursor | None = None
    last: bool = False
    snapshot: Document | None = None

    @classmethod
    def of(cls, event: BaseEvent, cursor: Cursor | None = None, last: bool = False) -> Frame:
        """The frame of an event built with AG-UI's models, encoded by them."""
        if isinstance(event, StateSnapshotEvent):
            document = event.snapshot
            text = event.model_copy(update={"snapshot": None}).model_dump_json(by_alias=True)
            assert text.endswith(_NULL_SNAPSHOT), "the snapshot is the event's last member"
            return cls(text[: -len(_NULL_SNAPSHOT)], cursor, last, document)
        return cls(event.model_dump_json(by_alias=True), cursor, last)

    @property
    def text(self) -> str:
        """The event's whole JSON."""
        if self.snapshot is None:
            return self.data
        return b"".join(self._snapshot_pieces()).decode()

    def encode(self) -> bytes:
        """The frame on the wire: its ``id:`` line, one ``data:`` line, LF framing."""
        return b"".join(self.pieces())

    def pieces(self) -> Iterator[bytes]:
        """The frame on the wire in pieces: a snapshot's steps and tool states one at
        a time, any other frame whole."""
        head = "" if self.cursor is None else f"id: {self.cursor}\n"
        if self.snapshot is None:
            yield f"{head}data: {self.data}\n\n".encode()
            return
        yield f"{head}data: ".encode()
        yield from self._snapshot_pieces()
        yield b"\n\n"

    def _snapshot_pieces(self) -> Iterator[bytes]:
        yield self.data.encode()
        yield from document_pieces(self.snapshot)
        yield b"}"

    @cached_property
    def size(self) -> int:
        """Its bytes on the wire (a snapshot's counted a piece at a time)."""
        return sum(len(piece) for piece in self.pieces())


_NULL_SNAPSHOT = "null}"
"""How a ``STATE_SNAPSHOT`` of no document ends, as AG-UI's models write it."""

_LISTS = frozenset({"steps", "toolStates"})
"""The document's members written an item at a time."""


def document_pieces(doc: Document | None) -> Iterator[bytes]:
    """A state document's JSON, the bytes pydantic's encoder writes for it whole,
    in pieces: its steps and tool states one by one."""
    if doc is None:
        yield b"null"
        return
    for n, (key, value) in enumerate(doc.items()):
        yield (b"{" if n == 0 else b",") + to_json(key) + b":"
        if key in _LISTS and isinstance(value, list):
            yield b"["
            for i, item in enumerate(value):
                yield (b"," if i else b"") + to_json(item)
            yield b"]"
        else:
            yield to_json(value)
    yield b"}" if doc else b"{}"


@dataclass
class _Group:
    """The frames of one seq being built: each event with its own metadata."""

    events: list[tuple[type[BaseEvent], dict[str, Any], dict[str, Any]]] = field(
        default_factory=list
    )
    ended: bool = False

    def add(
        self, kind: type[BaseEvent], meta: dict[str, Any] | None = None, /, **fields: Any
    ) -> None:
        self.events.append((kind, fields, meta or {}))


def millis(at: datetime) -> int:
    """An event's ``at`` as AG-UI's timestamp: milliseconds since the Unix epoch."""
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def _numbered(group: _Group, run: Run, seq: int, millis_at: int, first: int = 0) -> list[Frame]:
    """The group's frames with their cursors (from the ``first``-th of their seq),
    metadata and timestamp."""
    frames = []
    for k, (kind, fields, meta) in enumerate(group.events, start=first):
        cursor = Cursor(run.epoch, run.base, seq, k)
        runstate = {"seq": seq, "cursor": str(cursor), **meta}
        event = kind(timestamp=millis_at, metadata={"runstate": runstate}, **fields)
        last = group.ended and k == first + len(group.events) - 1
        frames.append(Frame.of(event, cursor, last))
    return frames


def step_name(step: Document) -> str:
    """A step's ``stepName``: ``"<index>:<action>"``, unique among a task's steps."""
    return f"{step['index']}:{step['action']}"


def _step_event(group: _Group, kind: type[BaseEvent], step: Document) -> None:
    meta = {"stepIndex": step["index"], "stepId": step["id"], "status": step["status"]}
    group.add(kind, meta, step_name=step_name(step))


def _running(doc: Document) -> list[Document]:
    return [s for s in doc["steps"] if s["status"] == "RUNNING"]


def _in_doubt(doc: Document) -> list[Document]:
    return [s for s in doc["steps"] if s["status"] == "IN_DOUBT"]


def rests(doc: Document) -> bool:
    """Whether the task stands at a resting point, where a run ends (§2)."""
    return doc["status"] in ("COMPLETED", "CANCELLED", "FAILED") or bool(_in_doubt(doc))


def interrupt_id(task_id: str, index: int, version: int) -> str:
    """``<taskId>:<index>@<version>``: the step, and the episode it was asked in."""
    return f"{task_id}:{index}@{version}"


def interrupts(doc: Document) -> list[Interrupt]:
    """One interrupt per step in doubt, in index order, asked at the task's version."""
    asked = []
    for step in _in_doubt(doc):
        index, action = step["index"], step["action"]
        asked.append(
            Interrupt(
                id=interrupt_id(doc["id"], index, doc["version"]),
                reason="input_required",
                message=(
                    f"Step {index} ({action}) was running when its agent stopped, and it is"
                    " not safe to repeat. Did it happen? Answer RETRY to run it again, SKIP"
                    " to go on without it, or COMPLETE (with its output) if it did happen."
                ),
                response_schema=RESPONSE_SCHEMA,
                metadata={
                    "runstate": {
                        "kind": "step_in_doubt",
                        "taskId": doc["id"],
                        "stepIndex": index,
                        "stepId": step["id"],
                        "action": action,
                        "expectedVersion": doc["version"],
                        "attempts": step["attempts"],
                    }
                },
            )
        )
    return asked


def _failure(doc: Document) -> str:
    """What a failed task's ``RUN_ERROR`` says: its failed step and that step's error."""
    for step in doc["steps"]:
        if step["status"] == "FAILED":
            return f"step {step['index']} ({step['action']}) failed: {step['error']}"
    return "the task failed"


def _ending(group: _Group, doc: Document, run: Run) -> None:
    """The terminal frames of a resting task: its open steps finished, then the
    run's end (§2: COMPLETED, CANCELLED, FAILED, a step in doubt, in that order)."""
    for step in _running(doc):
        _step_event(group, StepFinishedEvent, step)
    ids = {"thread_id": run.thread_id, "run_id": run.run_id}
    status = doc["status"]
    if status == "COMPLETED":
        group.add(RunFinishedEvent, outcome=RunFinishedSuccessOutcome(), **ids)
    elif status == "CANCELLED":
        group.add(RunFinishedEvent, outcome=RunFinishedCancelledOutcome(), **ids)
    elif status == "FAILED":
        group.add(RunErrorEvent, code="TASK_FAILED", message=_failure(doc))
    else:
        group.add(StateSnapshotEvent, snapshot=doc)
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts(doc))
        group.add(RunFinishedEvent, outcome=outcome, **ids)
    group.ended = True


def opening(doc: Document, run: Run, at: datetime) -> list[Frame]:
    """The frames a run opens with at its base (``doc`` is the task at it, ``at`` the
    time of its event): RUN_STARTED, the snapshot, a STEP_STARTED per running step,
    and the terminal frames if the task rests there."""
    group = _Group()
    group.add(
        RunStartedEvent,
        {"taskId": run.task_id, "epoch": run.epoch},
        thread_id=run.thread_id,
        run_id=run.run_id,
        protocol_version=PROTOCOL_VERSION,
    )
    group.add(StateSnapshotEvent, snapshot=doc)
    for step in _running(doc):
        _step_event(group, StepStartedEvent, step)
    if rests(doc):
        _ending(group, doc, run)
    return _numbered(group, run, run.base, millis(at))


def _json(value: Any) -> str:
    """JSON as AG-UI's models write it (pydantic's encoder: compact, UTF-8, and
    ``0.00001`` where Python's own writes ``1e-05``)."""
    return to_json(value).decode()


@dataclass(frozen=True)
class Rendered:
    """An event's part of every run that sends it: the document after it, its
    delta, the steps it finished and started, and its metadata, the JSON written
    once. Only each run's cursor and ending are its own (``framed``): every stream
    of a task on a process can share one rendering of an event (``Renderings``)."""

    after: Document
    seq: int
    millis: int
    delta: str
    """The ``STATE_DELTA`` frame's ``metadata.runstate`` members after the cursor,
    and its ``delta``: ``,"kind":...}},"delta":[...]}``."""
    steps: tuple[tuple[str, str], ...]
    """Each step frame's type, and its JSON after the cursor."""

    @property
    def size(self) -> int:
        """About how many bytes it holds besides the steps its document shares with
        the rendering before it: its JSON, a reference a step, and a fixed cost."""
        texts = len(self.delta) + sum(len(tail) for _, tail in self.steps)
        return ENTRY_BYTES + texts + 8 * len(self.after["steps"])


ENTRY_BYTES = 2048
"""What a cached rendering holds whatever its event: its objects and the cache's."""


def render(before: Document, event: EventView) -> Rendered:
    """An event's frames but their cursors and the run's ending (``Rendered``)."""
    after, delta = applied(before, event)
    meta: dict[str, Any] = {"kind": event.kind.name, "actor": event.actor}
    if event.note is not None:
        meta["note"] = event.note
    steps: list[tuple[str, str]] = []

    def step_frame(kind: str, step: Document) -> None:
        tail = (
            f',"stepIndex":{step["index"]},"stepId":{_json(step["id"])},'
            f'"status":{_json(step["status"])}}}}},"stepName":{_json(step_name(step))}}}'
        )
        steps.append((kind, tail))

    old = {s["index"]: s for s in before["steps"]}
    for step in after["steps"]:
        was = old.get(step["index"])
        entered = step["attempts"] > (0 if was is None else was["attempts"])
        running = step["status"] == "RUNNING"
        if was is not None and was["status"] == "RUNNING" and (entered or not running):
            step_frame("STEP_FINISHED", step)
        if entered:
            step_frame("STEP_STARTED", step)
            if not running:
                step_frame("STEP_FINISHED", step)
    members = _json(meta)[1:-1]
    tail = f',{members}}}}},"delta":{_json(delta)}}}'
    return Rendered(after, event.seq, millis(event.at), tail, tuple(steps))


def framed(rendered: Rendered, run: Run) -> list[Frame]:
    """An event's frames in ``run``: the rendered ones with the run's cursors, then
    the run's terminal frames if the event leaves the task resting."""
    seq, at = rendered.seq, rendered.millis
    frames = []
    for k, (kind, tail) in enumerate((("STATE_DELTA", rendered.delta), *rendered.steps)):
        cursor = Cursor(run.epoch, run.base, seq, k)
        head = (
            f'{{"type":"{kind}","timestamp":{at},'
            f'"metadata":{{"runstate":{{"seq":{seq},"cursor":{_json(str(cursor))}'
        )
        frames.append(Frame(head + tail, cursor))
    if rests(rendered.after):
        ending = _Group()
        _ending(ending, rendered.after, run)
        frames += _numbered(ending, run, seq, at, first=len(frames))
    return frames


class Renderings:
    """The events rendered lately on this process, shared by the runs that send
    them (keyed by the task's row, the event's seq, version and time, so that a
    row id used again after a deletion never finds another task's event).

    A run follows the chain of cached documents: it opens on the document a cached
    rendering left at its base when there is one (``at``), and each rendering's
    document shares its unchanged steps with the one before it. A rendering made on
    a document from elsewhere (a run's opening read from the database) holds that
    whole document, and is counted so."""

    def __init__(self, max_items: int = 10_000, max_bytes: int = 64 * 1_048_576) -> None:
        self.cache: BoundedCache[tuple[int, int, int, datetime], Rendered] = BoundedCache(
            max_items, max_bytes, on_evict=self._evicted
        )
        self._chained: set[int] = set()
        """The documents cached renderings left (by ``id``, each held by its entry):
        a rendering made on one of them holds only what it changes."""

    def at(self, task_pk: int, seq: int, version: int, at: datetime) -> Document | None:
        """The document a cached rendering left at this event, if one did."""
        found = self.cache.get((task_pk, seq, version, at))
        return None if found is None else found.after

    def of(self, before: Document, event: EventView) -> Rendered:
        """The rendering of ``event``, ``before`` being the document at the seq just
        before it (the same in every run, since the log is). A run that missed an
        event (``RUNSTATE_GAP_FILL=false``) renders on its own, never shared."""
        if before["eventSeq"] != event.seq - 1:
            return render(before, event)
        key = (event.task_pk, event.seq, event.task_version, event.at)
        found = self.cache.get(key)
        if found is None:
            found = render(before, event)
            size = found.size
            if id(before) not in self._chained:  # a document of its own: held whole
                size += len(to_json(before))
            self._chained.add(id(found.after))
            self.cache.put(key, found, size)
        return found

    def _evicted(self, _key: tuple[int, int, int, datetime], gone: Rendered) -> None:
        self._chained.discard(id(gone.after))


def refused(run: Run, code: str, message: str) -> list[Frame]:
    """A run refused at its start: ``RUN_STARTED`` then ``RUN_ERROR``, with no ids
    (ag-ui-validate 0.4.0 flags a stream that opens with ``RUN_ERROR``)."""
    started = RunStartedEvent(
        thread_id=run.thread_id,
        run_id=run.run_id,
        protocol_version=PROTOCOL_VERSION,
        metadata={"runstate": {"taskId": run.task_id, "epoch": run.epoch}},
    )
    return [Frame.of(started), error(code, message)]


def error(code: str, message: str) -> Frame:
    """A ``RUN_ERROR`` that ends a run with no id: nothing resumes it."""
    return Frame.of(RunErrorEvent(code=code, message=message), last=True)
