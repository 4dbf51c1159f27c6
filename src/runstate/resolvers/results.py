"""The result unions of the contract and the helper that fills them."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import strawberry

from runstate.ratelimit import READ_COST, WRITE_COST
from runstate.schema.context import Info
from runstate.schema.problems import (
    IdempotencyKeyReused,
    InvalidInput,
    InvalidTransition,
    LockHeld,
    LockNotHeld,
    NotFound,
    RateLimited,
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
    | IdempotencyKeyReused
    | RateLimited,
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
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("TaskResult"),
]
DeleteResult = Annotated[
    Deleted | NotFound | InvalidInput | IdempotencyKeyReused | RateLimited,
    strawberry.union("DeleteResult"),
]
ResumeResult = Annotated[
    ResumePlan
    | NotFound
    | VersionConflict
    | InvalidTransition
    | InvalidInput
    | SessionExpired
    | LockHeld
    | StaleFencingToken
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("ResumeResult"),
]
LockResult = Annotated[
    TaskLock
    | NotFound
    | LockHeld
    | LockNotHeld
    | InvalidInput
    | SessionExpired
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("LockResult"),
]
ReleaseResult = Annotated[
    Task | NotFound | LockNotHeld | InvalidInput | IdempotencyKeyReused | RateLimited,
    strawberry.union("ReleaseResult"),
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
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("ToolStateResult"),
]

V = TypeVar("V")
G = TypeVar("G")


async def answer(info: Info, read: Callable[[], Awaitable[V]], convert: Callable[[V], G]) -> Any:
    """``convert`` of the service's result, or the Problem member for its refusal
    (RateLimited when the caller's budget cannot pay for a read).

    Typed ``Any`` because each resolver declares its own union; Strawberry checks
    at run time that the value is a member of it.
    """
    try:
        await info.context.charge(READ_COST)
        return convert(await read())
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
        await info.context.charge(WRITE_COST)
        payload = {k: v for k, v in dataclasses.asdict(input).items() if k != "idempotency_key"}
        call = idempotency.keyed(
            info.context.user_id, input.idempotency_key, info.field_name, payload
        )
        ttl = info.context.settings.idempotency_ttl
        return convert(await idempotency.once(call, ttl, kind, write))
    except DomainError as error:
        return to_problem(error)
