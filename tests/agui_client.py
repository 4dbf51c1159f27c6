"""A plain client of runstate's AG-UI endpoint for the tests: the frames of a run as
the wire carries them (``id:`` and ``data:`` lines, comments), read with httpx;
the ``AguiState`` document as GraphQL answers it; and AG-UI's own checks
(``ag-ui-validate``: the conformance rules and its RFC 6902 ``apply_patch``).
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from ag_ui_validate import PatchErr, apply_patch
from ag_ui_validate.pytest_plugin import assert_valid_agui

from runstate.transport.agui.document import AGUI_STATE
from tests.support import Api


@dataclass
class Frame:
    """One frame: its SSE id (None: a frame nothing resumes), its event, and the
    event's JSON as it came (two frames are equal when their bytes are)."""

    id: str | None
    event: dict[str, Any]
    text: str = field(default="", compare=True)

    @property
    def type(self) -> str:
        return str(self.event["type"])


@dataclass
class Answer:
    """What one request to the endpoint was answered."""

    status: int
    headers: httpx.Headers
    body: bytes = b""
    frames: list[Frame] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    @property
    def types(self) -> list[str]:
        return [f.type for f in self.frames]

    def json(self) -> Any:
        return json.loads(self.body)


def run_input(thread_id: str, run_id: str = "run-1", **extra: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` as ``HttpAgent`` sends it (no state, tools or context)."""
    return {"threadId": thread_id, "runId": run_id, "messages": [], **extra}


def parse(text: str, answer: Answer) -> None:
    """Add the frames and comments of complete SSE blocks to ``answer``."""
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        frame_id, data, text = None, None, ""
        for line in block.split("\n"):
            if line.startswith(":"):
                answer.comments.append(line)
            elif line.startswith("id: "):
                frame_id = line[4:]
            elif line.startswith("data: "):
                assert data is None, f"one data line a frame: {block!r}"
                text = line[6:]
                data = json.loads(text)
            else:
                raise AssertionError(f"unexpected line {line!r}")
        if data is not None:
            answer.frames.append(Frame(frame_id, data, text))


async def post(
    url: str,
    token: str | None,
    task_id: str,
    body: Any,
    *,
    last_event_id: str | None = None,
    cut_after: int | None = None,
    started: asyncio.Event | None = None,
    headers: dict[str, str] | None = None,
    into: Answer | None = None,
) -> Answer:
    """POST a run and read its answer to the end (or, with ``cut_after``, drop the
    connection after that many frames: a cut). ``started`` is set once the answer
    has begun (the server has read the run's base then: a write made after it is
    in the run); ``into`` is filled as frames and comments arrive."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    sent.setdefault("Accept", "text/event-stream")
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent.setdefault("Content-Type", "application/json")
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{url}/agui/tasks/{task_id}", content=content, headers=sent) as r,
    ):
        answer = into or Answer(r.status_code, r.headers)
        answer.status, answer.headers = r.status_code, r.headers
        if started is not None:
            started.set()
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            answer.body = await r.aread()
            return answer
        pending = ""
        async for chunk in r.aiter_text():
            pending += chunk
            whole, _, pending = pending.rpartition("\n\n")
            if whole:
                parse(whole + "\n\n", answer)
            if cut_after is not None and len(answer.frames) >= cut_after:
                del answer.frames[cut_after:]
                return answer
        assert not pending.strip(), f"a frame left unfinished: {pending!r}"
        return answer


def valid(answer: Answer) -> None:
    """AG-UI's validator finds no error and no warning in the run's events."""
    assert_valid_agui([f.event for f in answer.frames], max_warnings=0)


def replayed(frames: list[Frame], state: Any = None) -> tuple[Any, dict[int, Any]]:
    """The state a client holds after the frames (snapshots and deltas applied as
    ``HttpAgent`` applies them, the ``test`` op included), and after each delta by
    its seq. A delta that fails to apply fails the test."""
    after: dict[int, Any] = {}
    for frame in frames:
        if frame.type == "STATE_SNAPSHOT":
            state = copy.deepcopy(frame.event["snapshot"])
        elif frame.type == "STATE_DELTA":
            applied = apply_patch(state, frame.event["delta"])
            assert not isinstance(applied, PatchErr), applied
            state = applied.result
            after[frame.event["metadata"]["runstate"]["seq"]] = state
    return state, after


STATE_AT = (
    "query($id: ID!, $seq: Int!) { taskAt(id: $id, seq: $seq) { ... on Task { ...AguiState } } }"
    + AGUI_STATE
)
STATE_NOW = "query($id: ID!) { task(id: $id) { ... on Task { ...AguiState } } }" + AGUI_STATE


def state_at(api: Api, task_id: str, seq: int) -> dict[str, Any]:
    """``taskAt(id, seq) { ...AguiState }`` as GraphQL answers it."""
    state: dict[str, Any] = api(STATE_AT, id=task_id, seq=seq)["taskAt"]
    return state


def state_now(api: Api, task_id: str) -> dict[str, Any]:
    """``task(id) { ...AguiState }`` as GraphQL answers it."""
    state: dict[str, Any] = api(STATE_NOW, id=task_id)["task"]
    return state
