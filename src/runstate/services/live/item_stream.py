"""Live conversation: a session's items as they are added, popped and cleared.

The database is the stream's only source: a conversation write wakes the
session's channel after it commits (``Written.wakes``), and the stream reads what
changed since the position it last sent, bounded by the head it read first, so
nothing is sent twice. Items added after that position come as ITEMS_ADDED; a
pop or a clear since (``items_reset_seq`` past it) sends the conversation again
as a SNAPSHOT. A lost wake-up (a Redis outage) costs only time: a quiet stream
reads its head again every ``interval`` seconds.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from runstate.basics.enums import SessionItemsEventKind
from runstate.models import Session
from runstate.pubsub import Broker
from runstate.services.domain.errors import InvalidInputError
from runstate.services.live.messages import conversation_channel
from runstate.services.live.streams import refuse_expired
from runstate.services.read.lookups import get_session
from runstate.services.read.transcript import ItemView, items_between


@dataclass(frozen=True)
class ItemsEventView:
    """One message of a conversation stream."""

    session_id: str
    kind: SessionItemsEventKind
    item_seq: int
    message_count: int
    items: tuple[ItemView, ...]


@dataclass(frozen=True)
class _Head:
    item_seq: int
    reset_seq: int
    message_count: int


async def conversation(
    broker: Broker,
    user_id: str,
    session_id: str,
    after_seq: int | None,
    *,
    interval: float,
) -> AsyncGenerator[ItemsEventView, None]:
    """The session's conversation: a SNAPSHOT (or, with ``after_seq``, what changed
    after that position), then every change as it commits, until the session is
    deleted (the stream ends) or expires (SessionExpired). Someone else's session
    answers NotFound before anything is sent."""
    if after_seq is not None and after_seq < 0:
        raise InvalidInputError("afterSeq", "must be 0 or more")
    session = await get_session(user_id, session_id)
    async with broker.subscription([conversation_channel(session.pk)]) as inbox:
        last = after_seq
        while True:
            head = await _head(session.pk, session_id)
            if head is None:
                return  # deleted with the session
            if last is None or last > head.item_seq or head.reset_seq > last:
                start, kind = 0, SessionItemsEventKind.SNAPSHOT
            elif head.item_seq > last:
                start, kind = last, SessionItemsEventKind.ITEMS_ADDED
            else:
                start, kind = last, None
            if kind is not None:
                async for event in _events(session.pk, session_id, head, start, kind):
                    yield event
                last = head.item_seq
            await inbox.next(interval)  # a wake-up, a resync, or a quiet spell: read again


async def _head(session_pk: int, session_id: str) -> _Head | None:
    """Where the conversation stands; None once the session is deleted,
    SessionExpiredError once it has expired."""
    row = await (
        Session.filter(id=session_pk)
        .first()
        .values_list("item_seq", "items_reset_seq", "message_count", "status", "expires_at")
    )
    if row is None:
        return None
    item_seq, reset_seq, count, status, expires_at = row
    refuse_expired(session_id, status, expires_at)
    return _Head(int(item_seq), int(reset_seq), int(count))


async def _events(
    session_pk: int,
    session_id: str,
    head: _Head,
    after: int,
    kind: SessionItemsEventKind,
) -> AsyncIterator[ItemsEventView]:
    """The items after position ``after`` up to the head, a page an event: the
    first of ``kind``, the rest ITEMS_ADDED; the last brings the reader to the head."""
    while True:
        items, more = await items_between(session_pk, after, head.item_seq)
        reached = items[-1].seq if more else head.item_seq
        yield ItemsEventView(session_id, kind, reached, head.message_count, items)
        if not more:
            return
        after, kind = reached, SessionItemsEventKind.ITEMS_ADDED
