"""The result unions of the contract: each a success type or the Problem members
its operation may answer."""

from __future__ import annotations

from typing import Annotated

import strawberry

from runstate.schema.intake import TaskInterrupted
from runstate.schema.problems import (
    BudgetExceeded,
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
)
from runstate.schema.types import AgentSession, Deleted, ResumePlan, Task, TaskLock, ToolState

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
    | RateLimited
    | BudgetExceeded
    | TaskInterrupted,
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
    | RateLimited
    | BudgetExceeded
    | TaskInterrupted,
    strawberry.union("ToolStateResult"),
]
BudgetResult = Annotated[
    Task
    | AgentSession
    | NotFound
    | VersionConflict
    | InvalidInput
    | SessionExpired
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("BudgetResult"),
]
