"""Reads of a session's conversation items (written by ``actions.conversation``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runstate.models import Session, SessionItem
from runstate.services.domain import validation
from runstate.services.domain.errors import NotFoundError
from runstate.services.read.lookups import get_session

ITEM_PAGE = validation.MAX_PAGE
"""The most items one read answers (``sessionItems``'s ``last``), as every page."""


@dataclass(frozen=True)
class ItemView:
    """One stored item, its JSON as it was added."""

    seq: int
    item: Any
    added_at: datetime


@dataclass(frozen=True)
class ItemPageView:
    """Items of a session, oldest first, and where its conversation stands."""

    session_id: str
    item_seq: int
    message_count: int
    items: tuple[ItemView, ...]
    has_more: bool


def _items(rows: list[tuple[Any, ...]]) -> tuple[ItemView, ...]:
    return tuple(ItemView(int(seq), json.loads(text), at) for seq, text, at in rows)


async def read_items(
    user_id: str, session_id: str, *, last: int | None = None, before_seq: int | None = None
) -> ItemPageView:
    """The newest ``last`` items (``ITEM_PAGE`` at most, the default) with a seq
    below ``before_seq``, oldest first; ``has_more`` when older ones are left."""
    limit = validation.page_size(ITEM_PAGE if last is None else last, "last")
    session = await get_session(user_id, session_id)
    head = await Session.filter(id=session.pk).first().values("item_seq", "message_count")
    if head is None:  # deleted since it was read
        raise NotFoundError("session", session_id)
    query = SessionItem.filter(session_id=session.pk)
    if before_seq is not None:
        query = query.filter(seq__lt=before_seq)
    rows = await query.order_by("-seq").limit(limit + 1).values_list("seq", "item", "added_at")
    return ItemPageView(
        session_id,
        int(head["item_seq"]),
        int(head["message_count"]),
        _items(list(reversed(rows[:limit]))),
        len(rows) > limit,
    )


async def items_between(
    session_pk: int, after: int, upto: int
) -> tuple[tuple[ItemView, ...], bool]:
    """The oldest ``ITEM_PAGE`` items with a seq after ``after`` and up to ``upto``,
    and whether more of them are left."""
    rows = await (
        SessionItem.filter(session_id=session_pk, seq__gt=after, seq__lte=upto)
        .order_by("seq")
        .limit(ITEM_PAGE + 1)
        .values_list("seq", "item", "added_at")
    )
    return _items(rows[:ITEM_PAGE]), len(rows) > ITEM_PAGE
