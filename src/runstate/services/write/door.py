"""The one way a write comes in, whichever door it uses: a GraphQL mutation (over
HTTP, a trusted document, a WebSocket) or an AG-UI resume's decision. ``enter``
charges it, fingerprints it under its idempotency key, runs it at most once per
key and publishes its events after commit; no door restates any of it.

What a value may hold is the services' own check (``domain.validation``), and
every body and message is read by one parser (``transport.strict_json``): a door
adds no rule of its own, so the same bad value gets the same refusal at each
(``tests/integration/test_doors.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from runstate.services.domain.ratelimit import WRITE_COST
from runstate.services.domain.views import Written
from runstate.services.write import idempotency
from runstate.services.write.house import House

V = TypeVar("V")

Pay = Callable[[float], Awaitable[None]]
"""Take points from the caller's budget; RateLimitedError when it cannot."""


@dataclass(frozen=True)
class Caller:
    """Who writes, through which app, paying how, keeping keys how long."""

    house: House
    user_id: str
    pay: Pay
    key_ttl: int
    """Seconds an idempotency key answers repeats (``RUNSTATE_IDEMPOTENCY_TTL``)."""
    owe: Pay | None = None
    """Take points for work done, into debt if need be (``rows_price``); None for
    a door whose writes each store a few rows at most (AG-UI's decisions)."""


def price(writes: int) -> float:
    """What ``writes`` writes cost: ``WRITE_COST`` each, as ``enter`` charges them."""
    return WRITE_COST * writes


ROWS_PER_POINT = 16
"""Step rows a write stores for a point beyond its price. Measured on SQLite, a
createTask of 1,000 steps took the server 360 ms of CPU (8.3 s for 10,000) where a
small write takes 10-20 ms: priced alike, four forks of 10,000 steps held the one
writer for seconds for 8 points. A point buys what a small write's does."""


def rows_price(written: Written[Any]) -> float:
    """What the step rows ``written`` stored cost beyond its price: a point per
    ``ROWS_PER_POINT`` past the first ``ROWS_PER_POINT`` (an ordinary plan pays
    nothing more)."""
    rows = sum(len(event.steps) for event in written.events)
    return max(0, rows - ROWS_PER_POINT) / ROWS_PER_POINT


async def enter(
    caller: Caller,
    operation: str,
    key: str | None,
    fields: Callable[[], Mapping[str, Any]],
    kind: Any,
    write: Callable[[], Awaitable[Written[V]]],
) -> V:
    """``write()``'s answer, charged to ``caller``; with ``key``, a repeat of the same
    ``operation`` and ``fields()`` (the input without its key, read only when there
    is a key) answers as the first call did and writes nothing, and a reuse of the
    key with other fields is refused (``idempotency``). ``kind`` is the type of the
    answer, to read a stored one back. A write that stored many step rows pays for
    them once written (``rows_price``, ``Caller.owe``): the caller's next request
    waits for the budget to come back."""
    await caller.pay(price(1))
    call = None if key is None else idempotency.keyed(caller.user_id, key, operation, fields())
    owed = 0.0

    async def counted() -> Written[V]:
        nonlocal owed
        written = await write()
        owed = rows_price(written)
        return written

    answer = await idempotency.once(caller.house, call, caller.key_ttl, kind, counted)
    if owed and caller.owe is not None:  # written already: paid after, into debt
        await caller.owe(owed)
    return answer


class Prepaid:
    """Points paid before the writes they are for: an AG-UI resume pays for its
    stream and all its decisions at once, so that a refusal is a 429 before any
    frame (``docs/architecture.md``, "The AG-UI endpoint's contract", §9); each
    decision ``enter``s with this as its ``pay``."""

    def __init__(self, points: float) -> None:
        self.left = points

    async def __call__(self, points: float) -> None:
        if points > self.left:
            raise RuntimeError(f"{points} points were not paid for ({self.left} left)")
        self.left -= points
