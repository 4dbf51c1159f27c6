"""The GraphQL documents the SDK sends."""

from __future__ import annotations

PROBLEM = """
  __typename
  ... on Problem { code message }
"""

SESSION = "... on AgentSession { id status version messageCount expiresAt }"

TASK_FIELDS = """
  id sessionId goal status version currentStep eventSeq
  steps { index action input output status idempotent attempts error }
  toolStates { toolName status version retryCount maxRetries rateLimitResetAt }
  lock { holderId fencingToken expiresAt }
"""

TASK = "... on Task {" + TASK_FIELDS + "}"
PROBLEM_DETAILS = """
  ... on VersionConflict { currentVersion }
  ... on LockHeld { holderId expiresAt }
  ... on StaleFencingToken { currentToken }
"""


def mutation(name: str, input_type: str, selection: str) -> str:
    """``mutation($input: T!) { name(input: $input) { ... } }``."""
    return (
        f"mutation {name}($input: {input_type}!) {{ {name}(input: $input) "
        f"{{ {PROBLEM} {selection} }} }}"
    )


START_SESSION = mutation("startSession", "StartSessionInput", SESSION)
CREATE_TASK = mutation("createTask", "CreateTaskInput", TASK)
START_STEP = mutation("startStep", "StepRefInput", TASK + PROBLEM_DETAILS)
COMPLETE_STEP = mutation("completeStep", "CompleteStepInput", TASK + PROBLEM_DETAILS)
FAIL_STEP = mutation("failStep", "FailStepInput", TASK + PROBLEM_DETAILS)
CHECKPOINT = mutation("checkpointTask", "CheckpointTaskInput", TASK + PROBLEM_DETAILS)
SET_STATUS = mutation("setTaskStatus", "SetTaskStatusInput", TASK + PROBLEM_DETAILS)
DECIDE = mutation("decideStep", "DecideStepInput", TASK + PROBLEM_DETAILS)
RESUME = mutation(
    "resumeTask",
    "ResumeTaskInput",
    "... on ResumePlan { resumeFrom needsDecision task {"
    + TASK_FIELDS
    + "} }"
    + """
  ... on VersionConflict { currentVersion }
  ... on LockHeld { holderId expiresAt }
  ... on StaleFencingToken { currentToken }
""",
)
ACQUIRE = mutation(
    "acquireTaskLock",
    "AcquireTaskLockInput",
    "... on TaskLock { holderId fencingToken expiresAt } ... on LockHeld { holderId expiresAt }",
)
RENEW = mutation(
    "renewTaskLock",
    "RenewTaskLockInput",
    "... on TaskLock { holderId fencingToken expiresAt } ... on LockHeld { holderId expiresAt }",
)
RELEASE = mutation("releaseTaskLock", "ReleaseTaskLockInput", TASK)
TOOL = mutation(
    "recordToolCall",
    "RecordToolCallInput",
    "... on ToolState { toolName status version retryCount maxRetries rateLimitResetAt }"
    + PROBLEM_DETAILS,
)
TASK_QUERY = "query task($id: ID!) { task(id: $id) { " + PROBLEM + TASK + " } }"
WATCH = (
    "subscription watch($taskId: ID!, $afterSeq: Int) {"
    " taskProgress(taskId: $taskId, afterSeq: $afterSeq) {"
    " seq kind taskVersion stepIndex toolName at task {" + TASK_FIELDS + "} } }"
)
