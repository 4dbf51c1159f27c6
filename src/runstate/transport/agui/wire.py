"""How a run's frames reach the wire without a slow client costing the server its
memory (``docs/architecture.md``, "The AG-UI endpoint's contract", §10: "Slow
clients, prices and pages").

A run's frames are written in chunks of about ``CHUNK`` bytes (``chunks``): a
snapshot a step or tool state at a time, so no run holds a large task's snapshot
whole as text, and each write waits for its client to take the one before. Every
stream of a process holds bytes from the ``Budget`` for what it has taken on and
not yet written (the rest of its current group of frames); when the streams
together hold more than ``RUNSTATE_AGUI_BUFFER_BYTES``, the streams stuck in a
write with more than their share (the budget split evenly among the streams
holding any) are paused, longest stuck first: each lets go of its frames, its
document and its subscription, keeping only the chunk on its way and its
``Place``. Once its client takes that chunk, the stream reads the run again from
the database and goes on from that place, byte for byte: frames are a pure
function of the log (``frames``), so nothing is lost or sent twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from runstate.transport.agui.frames import Cursor, Frame

CHUNK = 65_536
"""The bytes a write carries, at most (a frame is cut across writes)."""


@dataclass(frozen=True)
class Place:
    """How far a run's bytes have gone: every frame up to ``cursor`` (None: none
    yet), and ``offset`` bytes of the frame after it."""

    cursor: Cursor | None
    offset: int = 0


def chunks(frames: list[Frame], place: Place, skip: int = 0) -> Iterator[tuple[bytes, Place]]:
    """The frames' bytes in writes of at most ``CHUNK``, each with the place the run
    stands at once it is written; the first ``skip`` bytes of the first frame
    (written before a pause) are left out. ``place`` is where the run stands
    before the frames."""
    cursor = place.cursor
    buffer = bytearray()
    for frame in frames:
        offset = 0
        for piece in frame.pieces():
            if skip:
                cut = min(skip, len(piece))
                skip -= cut
                offset += cut
                piece = piece[cut:]
            buffer += piece
            offset += len(piece)
            while len(buffer) >= CHUNK:
                out = bytes(buffer[:CHUNK])
                del buffer[:CHUNK]
                yield out, Place(cursor, offset - len(buffer))
        cursor = frame.cursor or cursor
    if buffer:
        yield bytes(buffer), Place(cursor)


class Holder(Protocol):
    """A stream as the budget sees it."""

    @property
    def stuck_since(self) -> float | None:
        """Since when (``time.monotonic``) a write of it has waited for its client;
        None while it is not writing."""

    def pause(self) -> int:
        """Let go of everything but the chunk on its way; the bytes let go of."""


class Budget:
    """The bytes the AG-UI streams of one process hold for their clients."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.pauses = 0
        """Streams paused so far."""
        self._held: dict[Holder, int] = {}

    def held(self, holder: Holder) -> int:
        """What ``holder`` holds now."""
        return self._held.get(holder, 0)

    def hold(self, holder: Holder, size: int) -> None:
        """``holder`` takes on ``size`` more bytes; past the total, the stuck streams
        over their share are paused, longest stuck first, until it is met again."""
        self._held[holder] = self._held.get(holder, 0) + size
        self.used += size
        if self.used > self.total:
            self._relieve()

    def release(self, holder: Holder, size: int) -> None:
        """``holder`` wrote ``size`` of the bytes it held (or let them go)."""
        left = self._held.get(holder, 0) - size
        self.used -= min(size, self._held.get(holder, 0))
        if left > 0:
            self._held[holder] = left
        else:
            self._held.pop(holder, None)

    def leave(self, holder: Holder) -> None:
        """``holder`` has ended: whatever it held is let go."""
        self.used -= self._held.pop(holder, 0)

    def _relieve(self) -> None:
        share = self.total // max(1, len(self._held))
        stuck = sorted(
            (h for h, size in self._held.items() if size > share and h.stuck_since is not None),
            key=lambda h: h.stuck_since or time.monotonic(),
        )
        for holder in stuck:
            if self.used <= self.total:
                return
            self.release(holder, holder.pause())
            self.pauses += 1
