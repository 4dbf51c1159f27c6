"""The result unions of the contract and the helper that fills them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import strawberry

from runstate.schema.problems import (
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
from runstate.services.errors import DomainError

SessionResult = Annotated[
    AgentSession | NotFound | VersionConflict | InvalidTransition | InvalidInput | SessionExpired,
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
    | StaleFencingToken,
    strawberry.union("TaskResult"),
]
DeleteResult = Annotated[Deleted | NotFound, strawberry.union("DeleteResult")]
ResumeResult = Annotated[
    ResumePlan
    | NotFound
    | VersionConflict
    | InvalidTransition
    | SessionExpired
    | LockHeld
    | StaleFencingToken,
    strawberry.union("ResumeResult"),
]
LockResult = Annotated[
    TaskLock | NotFound | LockHeld | LockNotHeld | InvalidInput | SessionExpired,
    strawberry.union("LockResult"),
]
ReleaseResult = Annotated[Task | NotFound | LockNotHeld, strawberry.union("ReleaseResult")]
ToolStateResult = Annotated[
    ToolState
    | NotFound
    | VersionConflict
    | InvalidTransition
    | InvalidInput
    | SessionExpired
    | StaleFencingToken
    | LockHeld,
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
