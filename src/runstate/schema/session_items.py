"""GraphQL types and inputs of a session's conversation items (``actions.conversation``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry
from strawberry.scalars import JSON

from runstate.basics.enums import SessionItemsEventKind
from runstate.schema.inputs import IDEMPOTENCY_KEY
from runstate.schema.problems import (
    IdempotencyKeyReused,
    InvalidInput,
    NotFound,
    RateLimited,
    SessionExpired,
)
from runstate.schema.types import FromView, register
from runstate.services.read.transcript import ItemView

ITEM_SEQ = (
    "The conversation's log position: each item added takes the next seq, each pop"
    " or clear one more."
)


@strawberry.type(description="One item of a session's conversation, exactly as it was added.")
class SessionItem(FromView):
    seq: int = strawberry.field(description="Its place in the conversation, given by the server.")
    item: JSON
    added_at: datetime


@strawberry.type(description="Items of a session's conversation, oldest first.")
class SessionItemPage(FromView):
    session_id: strawberry.ID
    item_seq: int = strawberry.field(description=ITEM_SEQ)
    message_count: int
    items: list[SessionItem]
    has_more: bool = strawberry.field(description="Older items are left: read them with beforeSeq.")


@strawberry.type(description="What a conversation write did.")
class SessionItemsChanged(FromView):
    session_id: strawberry.ID
    item_seq: int = strawberry.field(description=ITEM_SEQ)
    message_count: int
    added: int = strawberry.field(
        description="Items added: their seqs are itemSeq - added + 1 to itemSeq."
    )
    removed: int = strawberry.field(description="Items removed.")
    popped: SessionItem | None = strawberry.field(
        description="popSessionItem: the item removed, exactly as it was stored (null: none was)."
    )


@strawberry.type(description="A change of a session's conversation, in order.")
class SessionItemsEvent(FromView):
    session_id: strawberry.ID
    kind: SessionItemsEventKind
    item_seq: int = strawberry.field(
        description="The log position this event brings you to: resume with afterSeq = itemSeq."
    )
    message_count: int
    items: list[SessionItem]


register(ItemView, SessionItem)


@strawberry.input(description="Items to add to a session's conversation, in order, as one batch.")
class AddSessionItemsInput:
    session_id: strawberry.ID
    items: list[JSON] = strawberry.field(
        description="1 to 1000 JSON values (not null), stored whole or not at all."
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(description="The conversation whose newest item to remove.")
class PopSessionItemInput:
    session_id: strawberry.ID
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(description="The conversation to empty.")
class ClearSessionItemsInput:
    session_id: strawberry.ID
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


SessionItemsResult = Annotated[
    SessionItemPage | NotFound | InvalidInput | SessionExpired | RateLimited,
    strawberry.union("SessionItemsResult"),
]
SessionItemsChangeResult = Annotated[
    SessionItemsChanged
    | NotFound
    | InvalidInput
    | SessionExpired
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("SessionItemsChangeResult"),
]
