"""How a run's frames reach the wire (``transport.agui.wire`` and the endpoint's
``_Stream``): in writes of at most ``CHUNK`` bytes, a snapshot included, held from
the process's budget; a stream stuck on a client that does not read is paused
when the budget runs out, lets go of its frames, and goes on from where its
bytes stood, byte for byte."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import httpx
from ag_ui.core import RunFinishedEvent, RunStartedEvent, StateSnapshotEvent

from runstate.services.domain.errors import RateLimitedError
from runstate.transport.agui.endpoint import Meter, _Stream
from runstate.transport.agui.frames import Cursor, Frame
from runstate.transport.agui.wire import CHUNK, Budget, Place, chunks
from tests.agui_client import Answer, parse

BIG = {"id": "t", "steps": [{"output": "x" * 50_000} for _ in range(20)], "toolStates": []}
"""A document of about a megabyte, in twenty steps."""


def opening() -> list[Frame]:
    """A run's opening on a large task, and its end."""
    return [
        Frame.of(RunStartedEvent(thread_id="s", run_id="r"), Cursor("e", 1, 1, 0)),
        Frame.of(StateSnapshotEvent(snapshot=BIG), Cursor("e", 1, 1, 1)),
        Frame.of(RunFinishedEvent(thread_id="s", run_id="r"), Cursor("e", 1, 1, 2), last=True),
    ]


def after(frames: list[Frame], cursor: Cursor | None) -> list[Frame]:
    """The frames after ``cursor`` (all of them after None)."""
    if cursor is None:
        return frames
    return frames[[f.cursor for f in frames].index(cursor) + 1 :]


async def run_of(
    frames: list[Frame], closed: list[str], name: str
) -> AsyncGenerator[list[Frame] | None, None]:
    """A run's frames as ``follow`` gives them; ``closed`` learns when they are let go."""
    try:
        yield None
        yield frames
        await asyncio.Event().wait()
    finally:
        closed.append(name)


def stream_of(budget: Budget, closed: list[str], name: str) -> _Stream:
    stream = _Stream(keepalive_seconds=15, stopping=asyncio.Event(), budget=budget)

    def reopen(cursor: Cursor | None) -> AsyncGenerator[list[Frame] | None, None]:
        async def reread() -> AsyncGenerator[list[Frame] | None, None]:
            yield after(opening(), cursor)

        return reread()

    stream.reopen = reopen
    stream.frames = run_of(opening(), closed, name)
    return stream


async def test_a_large_snapshot_goes_out_in_chunks_that_make_the_frame() -> None:
    """Guards the snapshot written in pieces: no write of a run opening on a 1 MB
    task carries more than ``CHUNK`` bytes (it was one write of the whole group,
    held whole for a client that might never read it), and the writes together are
    the frames' bytes, as AG-UI's models write them."""
    stream = stream_of(Budget(1 << 30), [], "one")
    assert stream.frames is not None
    await anext(stream.frames)
    writes = [chunk async for chunk in stream.body()]
    assert max(len(w) for w in writes) == CHUNK
    assert b"".join(writes) == b"".join(f.encode() for f in opening())
    snapshot = opening()[1]
    assert (
        snapshot.encode()
        == (
            f"id: e:1:1:1\ndata: {StateSnapshotEvent(snapshot=BIG).model_dump_json(by_alias=True)}"
            "\n\n"
        ).encode()
    )


async def test_a_stuck_stream_is_paused_and_goes_on_byte_for_byte() -> None:
    """Guards the budget: with 256 KiB for the process, a run stuck on its first
    write (its client reads nothing) is paused when a second run takes on its
    opening: its frames are let go and it holds only the chunk on its way. Once
    its client reads again it goes on from the database and its client gets the
    run's bytes exactly, nothing lost or repeated."""
    budget = Budget(256 * 1024)
    closed: list[str] = []
    stuck, other = stream_of(budget, closed, "stuck"), stream_of(budget, closed, "other")
    for stream in (stuck, other):
        assert stream.frames is not None
        await anext(stream.frames)
    stuck_body, other_body = stuck.body(), other.body()
    first = await anext(stuck_body)  # written; its client reads no more
    assert stuck.stuck_since is not None
    whole = sum(f.size for f in opening())
    assert budget.held(stuck) == whole  # its first write is on its way still
    await anext(other_body)
    await asyncio.sleep(0)  # the paused run's frames close in a task of their own
    assert (budget.pauses, closed) == (1, ["stuck"])
    assert budget.held(stuck) == len(first)
    assert budget.held(other) == whole
    rest = [chunk async for chunk in stuck_body]
    assert first + b"".join(rest) == b"".join(f.encode() for f in opening())
    assert budget.held(stuck) == 0
    await other.close()


def test_every_place_a_run_stops_at_goes_on_exactly() -> None:
    """Guards ``Place``: from the place after any write, the frames after its cursor
    with its offset left out are exactly the bytes not yet written."""
    frames = opening()
    whole = b"".join(f.encode() for f in frames)
    written = b""
    for chunk, place in chunks(frames, Place(None)):
        written += chunk
        rest = b"".join(c for c, _ in chunks(after(frames, place.cursor), place, place.offset))
        assert written + rest == whole


async def test_a_replay_the_budget_cannot_pay_ends_with_run_error_rate_limited() -> None:
    """Guards the replay's price: each replayed group pays a point per 128 KiB before
    it is sent; the first the caller's budget cannot pay is not sent, and the
    answer ends with ``RUN_ERROR RATE_LIMITED`` (no id: the client resumes from the
    last frame it holds once the budget allows)."""
    paid: list[float] = []

    async def charge(points: float) -> None:
        if sum(paid) + points > 2:
            raise RateLimitedError(3.0)
        paid.append(points)

    def delta(seq: int) -> list[Frame]:
        text = '{"type":"STATE_DELTA","delta":[{"op":"add","path":"/x","value":"%s"}]}'
        return [Frame(text % ("y" * 100_000), Cursor("e", 1, seq, 0))]

    async def replay() -> AsyncGenerator[list[Frame] | None, None]:
        yield None
        for seq in range(2, 8):
            yield delta(seq)

    stream = _Stream(
        keepalive_seconds=15,
        stopping=asyncio.Event(),
        meter=Meter(charge, burst=100, page_bytes=1 << 30, head=7),
    )
    stream.frames = replay()
    await anext(stream.frames)
    answer = Answer(200, httpx.Headers())
    parse(b"".join([chunk async for chunk in stream.body()]).decode(), answer)
    # 100 KB a group: the second passes 128 KiB and the third 256 KiB (a point each,
    # paid); the fourth passes 384 KiB, and its point is refused
    assert [f.id for f in answer.frames] == ["e:1:2:0", "e:1:3:0", "e:1:4:0", None]
    assert answer.frames[-1].event["type"] == "RUN_ERROR"
    assert answer.frames[-1].event["code"] == "RATE_LIMITED"
    assert paid == [1, 1]
