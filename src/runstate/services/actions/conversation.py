"""A session's conversation: items kept in order, added, popped, cleared and read.

Each item is any JSON value a client keeps in order (the OpenAI Agents SDK's input
items): stored as compact JSON text, answered exactly as it was sent. Its ``seq``
comes from the session's ``item_seq``, raised by the write's first statement, an
UPDATE of the session row, and read back by it (RETURNING): the row's lock (the
write lock on SQLite) orders every writer of one session, so two processes
adding at once get disjoint, gap-free runs of seqs, each batch whole. Never a
count read before the write: two writers would read the same count.

A pop or a clear takes one log position too, and marks it (``items_reset_seq``):
a reader that has seen the items up to an older position reads them all again
(the conversation stream's SNAPSHOT). Every change raises the session's version
and ``messageCount`` by the items it adds or removes, marks the session active,
and counts their bytes toward the session's and its user's (``quota``). After it
commits, the session's conversation channel is woken (``Written.wakes``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.transactions import in_transaction

from runstate.models import Session, SessionItem
from runstate.services.actions.sessions import MAX_COUNT
from runstate.services.domain import quota
from runstate.services.domain.conditions import live_session_sql
from runstate.services.domain.errors import InvalidInputError, UnmatchedWriteError
from runstate.services.domain.views import Written
from runstate.services.live.messages import conversation_channel
from runstate.services.read.lookups import get_session
from runstate.services.read.transcript import ItemView
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow

ITEMS_PER_WRITE = 1000
"""The most items one ``addSessionItems`` takes (a batch is stored whole or not at all)."""


@dataclass(frozen=True)
class ItemsChangedView:
    """What a conversation write did, and where it left the conversation."""

    session_id: str
    item_seq: int
    message_count: int
    added: int
    removed: int
    popped: ItemView | None = None


def item_text(house: House, item: Any, field: str) -> str:
    """An item as it is stored and answered: compact JSON, within the payload limits
    (the API refuses a null item, and text with NUL or an unpaired surrogate)."""
    house.limits.json_payload(item, field)
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False)


_RETURNING = ' RETURNING "id", "item_seq", "message_count", "ttl_seconds"'


async def _advance(
    conn: BaseDBAsyncClient,
    user_id: str,
    session_id: str,
    now: datetime,
    *,
    added: int = 0,
    reset: bool = False,
    added_bytes: int = 0,
) -> dict[str, Any]:
    """The write's first statement: raise the session's item log position by
    ``added`` (or by one for a ``reset``: a pop or a clear), its version by one and
    its message count by ``added``, and mark it active; its row as it now stands.
    UnmatchedWriteError when no live session of the caller's matched."""
    step = added if added else 1
    changes = [
        '"item_seq" = "item_seq" + ?',
        '"version" = "version" + 1',
        '"message_count" = "message_count" + ?',
        '"stored_bytes" = "stored_bytes" + ?',
        '"last_active_at" = ?',
    ]
    params: list[Any] = [step, added, added_bytes, sql.db_value(Session, "last_active_at", now)]
    if reset:
        changes.append('"items_reset_seq" = "item_seq" + 1')
    live, where = live_session_sql(now)
    text = f'UPDATE "sessions" SET {", ".join(changes)} WHERE "user_id" = ? AND "public_id" = ?'
    text += f" AND {live}"
    where = [user_id, session_id, *where]
    if added:
        text += ' AND "message_count" <= ?'
        where.append(MAX_COUNT - added)
    rows = await sql.fetch(conn, text + _RETURNING, [*params, *where])
    if not rows:
        raise UnmatchedWriteError
    row = rows[0]
    expires = now + timedelta(seconds=int(row["ttl_seconds"]))
    await sql.execute(
        conn,
        'UPDATE "sessions" SET "expires_at" = ? WHERE "id" = ?',
        [sql.db_value(Session, "expires_at", expires), row["id"]],
    )
    return row


async def _refused(user_id: str, session_id: str) -> Exception:
    """Why a write matched no session: NotFound or SessionExpired (raised by the
    lookup); a live session left unmatched only by a count past GraphQL's Int."""
    current = await get_session(user_id, session_id)
    return InvalidInputError(
        "items", f"would take messageCount ({current.message_count}) past {MAX_COUNT}"
    )


def _wakes(session_pk: int) -> tuple[str, ...]:
    return (conversation_channel(session_pk),)


async def add_items(
    house: House, user_id: str, session_id: str, items: Sequence[Any]
) -> Written[ItemsChangedView]:
    """Append ``items`` to the session's conversation, in order, as one batch."""
    if not 1 <= len(items) <= ITEMS_PER_WRITE:
        raise InvalidInputError("items", f"give 1 to {ITEMS_PER_WRITE} items")
    texts = [item_text(house, item, f"items[{i}]") for i, item in enumerate(items)]
    sizes = [quota.ROW_BYTES + len(t.encode()) for t in texts]
    now = utcnow()
    try:
        async with in_transaction() as conn:
            row = await _advance(
                conn, user_id, session_id, now, added=len(items), added_bytes=sum(sizes)
            )
            first = int(row["item_seq"]) - len(items) + 1
            inserted = [
                {
                    "session_id": row["id"],
                    "seq": first + i,
                    "item": text,
                    "added_at": now,
                    "stored_bytes": size,
                }
                for i, (text, size) in enumerate(zip(texts, sizes, strict=True))
            ]
            statements = [sql.insert_rows(SessionItem, chunk) for chunk in sql.chunks(inserted)]
            await quota.charge(conn, house.limits, user_id, sum(sizes), "items", after=statements)
    except UnmatchedWriteError:
        raise await _refused(user_id, session_id) from None
    changed = ItemsChangedView(
        session_id, int(row["item_seq"]), int(row["message_count"]), len(items), 0
    )
    return Written(changed, wakes=_wakes(int(row["id"])))


async def pop_item(house: House, user_id: str, session_id: str) -> Written[ItemsChangedView]:
    """Remove the newest item by the server's order and answer it as it was stored;
    with none, write nothing and answer ``popped`` null."""
    del house  # the same parameters as every write: nothing of the house is needed
    return await _remove(user_id, session_id, _NEWEST)


async def clear_items(house: House, user_id: str, session_id: str) -> Written[ItemsChangedView]:
    """Remove every item of the conversation; with none, write nothing."""
    del house  # the same parameters as every write: nothing of the house is needed
    return await _remove(user_id, session_id, _EVERY)


_NEWEST = (
    'DELETE FROM "session_items" WHERE "id" = (SELECT "id" FROM "session_items"'
    ' WHERE "session_id" = ? ORDER BY "seq" DESC LIMIT 1)'
    ' RETURNING "seq", "item", "added_at", "stored_bytes"'
)
_EVERY = 'DELETE FROM "session_items" WHERE "session_id" = ? RETURNING "stored_bytes"'


async def _remove(user_id: str, session_id: str, deleting: str) -> Written[ItemsChangedView]:
    """A pop or a clear: the session row advanced (its lock taken), then ``deleting``
    (its one parameter the session's row id) run; with nothing deleted, nothing
    written. A deleted row that answers its item is the one popped."""
    now = utcnow()
    try:
        async with in_transaction() as conn:
            row = await _advance(conn, user_id, session_id, now, reset=True)
            gone = await sql.fetch(conn, deleting, [row["id"]])
            if not gone:
                raise _NothingToRemoveError
            freed = sum(int(g["stored_bytes"]) for g in gone)
            count = await _shrink(conn, row["id"], len(gone), freed)
            await quota.release(conn, {user_id: freed})
    except UnmatchedWriteError:
        raise await _refused(user_id, session_id) from None
    except _NothingToRemoveError:
        return Written(await _unchanged(user_id, session_id))
    popped = None
    if "item" in gone[0]:
        added_at = sql.decode(SessionItem, gone[0], ["added_at"])["added_at"]
        popped = ItemView(int(gone[0]["seq"]), json.loads(gone[0]["item"]), added_at)
    changed = ItemsChangedView(session_id, int(row["item_seq"]), count, 0, len(gone), popped)
    return Written(changed, wakes=_wakes(int(row["id"])))


class _NothingToRemoveError(Exception):
    """A pop or a clear found no item: its transaction rolls back, nothing written."""


async def _shrink(conn: BaseDBAsyncClient, session_pk: int, removed: int, freed: int) -> int:
    """Take removed items off the session's message count and bytes; the count left."""
    rows = await sql.fetch(
        conn,
        'UPDATE "sessions" SET "message_count" = "message_count" - ?,'
        ' "stored_bytes" = "stored_bytes" - ? WHERE "id" = ? RETURNING "message_count"',
        [removed, freed, session_pk],
    )
    return int(rows[0]["message_count"])


async def _unchanged(user_id: str, session_id: str) -> ItemsChangedView:
    session = await get_session(user_id, session_id)
    head = await Session.filter(id=session.pk).first().values("item_seq")
    return ItemsChangedView(
        session_id, 0 if head is None else int(head["item_seq"]), session.message_count, 0, 0
    )
