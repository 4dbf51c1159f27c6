"""The result unions of the contract and the helper that fills them."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import strawberry

from runstate.schema.context import Info
from runstate.schema.problems import (
    IdempotencyKeyReused,
    InvalidInput,
    InvalidTransition,
    LockHeld,
    LockNotHeld,
    NotFound,
    SessionExpired,
    StaleFencingToken,
    VersionConflict,
    to_problem,
)
from runstate.schema.types import AgentSession, Deleted, ResumePlan, Task, TaskLock, ToolState
from runstate.services import idempotency
from runstate.services.errors import DomainError

SessionResult = Annotated[
    AgentSession
    | NotFound
    | VersionConflict
    | InvalidTransition
    | InvalidInput
    | SessionExpired
    | IdempotencyKeyReused,
    strawberry.union("SessionResult"),
]
TaskResult = Annotated[
    Task
    | NotFound
    | VersionConflict
    | InvalidTransition
    | InvalidInput
    | SessionExpired
    | LockHeld
    | StaleFencingToken
    | IdempotencyKeyReused,
    strawberry.union("TaskResult"),
]
DeleteResult = Annotated[
    Deleted | NotFound | IdempotencyKeyReused, strawberry.union("DeleteResult")
]
ResumeResult = Annotated[
    ResumePlan
    | NotFound
    | VersionConflict
    | InvalidTransition
    | SessionExpired
    | LockHeld
    | StaleFencingToken
    | IdempotencyKeyReused,
    strawberry.union("ResumeResult"),
]
LockResult = Annotated[
    TaskLock
    | NotFound
    | LockHeld
    | LockNotHeld
    | InvalidInput
    | SessionExpired
    | IdempotencyKeyReused,
    strawberry.union("LockResult"),
]
ReleaseResult = Annotated[
    Task | NotFound | LockNotHeld | IdempotencyKeyReused, strawberry.union("ReleaseResult")
]
ToolStateResult = Annotated[
    ToolState
    | NotFound
    | VersionConflict
    | InvalidTransition
    | InvalidInput
    | SessionExpired
    | StaleFencingToken
    | LockHeld
    | IdempotencyKeyReused,
    strawberry.union("ToolStateResult"),
]

V = TypeVar("V")
G = TypeVar("G")


async def answer(result: Awaitable[V], convert: Callable[[V], G]) -> Any:
    """``convert`` of the service's result, or the Problem member for its refusal.

    Typed ``Any`` because each resolver declares its own union; Strawberry checks
    at run time that the value is a member of it.
    """
    try:
        return convert(await result)
    except DomainError as error:
        return to_problem(error)


async def answer_once(
    info: Info,
    input: Any,
    kind: Any,
    write: Callable[[], Awaitable[V]],
    convert: Callable[[V], G],
) -> Any:
    """``answer`` for a mutation: with ``input.idempotencyKey``, a repeat answers as
    the first call did and writes nothing (``services.idempotency``). The operation
    is the mutation's name; its fingerprint covers the input without the key.

    ``kind`` is the type of the service's answer, to read a stored one back.
    """
    try:
        payload = {k: v for k, v in dataclasses.asdict(input).items() if k != "idempotency_key"}
        call = idempotency.keyed(
            info.context.user_id, input.idempotency_key, info.field_name, payload
        )
        ttl = info.context.settings.idempotency_ttl
        return convert(await idempotency.once(call, ttl, kind, write))
    except DomainError as error:
        return to_problem(error)
