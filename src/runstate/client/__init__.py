"""The runstate SDK for agents: ``Runstate`` (client), ``TaskRunner`` (leases,
versions, checkpoint policies, resume), ``watch`` (live progress) and a
session's ledger (``submit``, ``serve``).

See docs/sdk.md for a complete agent loop.
"""

from runstate.client.api import Runstate
from runstate.client.exceptions import (
    BudgetExceeded,
    InvalidInput,
    InvalidTransition,
    LeaseLost,
    LockHeld,
    LockNotHeld,
    NeedsDecision,
    NotFound,
    ProblemError,
    RateLimited,
    RunstateError,
    ServerError,
    ServerUnavailable,
    SessionBusy,
    SessionExpired,
    StaleFencingToken,
    TaskInterrupted,
    Unauthorized,
    VersionConflict,
)
from runstate.client.http import Connections
from runstate.client.policies import AtEnd, CheckpointPolicy, EveryNSteps, EveryStep, KeyPoints
from runstate.client.records import (
    Budget,
    Event,
    Lock,
    ResumePlan,
    Session,
    Spend,
    SpendReport,
    Step,
    Submission,
    Task,
    ToolState,
)
from runstate.client.runner import WAIT, TaskRunner

__all__ = [
    "WAIT",
    "AtEnd",
    "Budget",
    "BudgetExceeded",
    "CheckpointPolicy",
    "Connections",
    "Event",
    "EveryNSteps",
    "EveryStep",
    "InvalidInput",
    "InvalidTransition",
    "KeyPoints",
    "LeaseLost",
    "Lock",
    "LockHeld",
    "LockNotHeld",
    "NeedsDecision",
    "NotFound",
    "ProblemError",
    "RateLimited",
    "ResumePlan",
    "Runstate",
    "RunstateError",
    "ServerError",
    "ServerUnavailable",
    "Session",
    "SessionBusy",
    "SessionExpired",
    "Spend",
    "SpendReport",
    "StaleFencingToken",
    "Step",
    "Submission",
    "Task",
    "TaskInterrupted",
    "TaskRunner",
    "ToolState",
    "Unauthorized",
    "VersionConflict",
]
