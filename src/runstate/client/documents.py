"""The GraphQL documents the SDK sends, their field lists written from the SDK's
dataclasses (``models.selection``)."""

from __future__ import annotations

import hashlib
import re

from runstate.client.records import (
    Budget,
    Event,
    Lock,
    ResumePlan,
    Session,
    Spend,
    Step,
    Submission,
    Task,
    ToolState,
    selection,
)

PROBLEM = """
  __typename
  ... on Problem { code message }
  ... on RateLimited { retryAfterSeconds }
"""

SESSION = "... on AgentSession {" + selection(Session) + "}"

STEP_FIELDS = selection(Step)
TOOL_FIELDS = selection(ToolState)
LOCK_FIELDS = selection(Lock)
HEAD_FIELDS = selection(
    Task, "steps", "tool_states", "spend", "budget", "over_budget", "submission"
)
TASK_FIELDS = selection(Task)
SUBMISSION_FIELDS = selection(Submission)
SUBMISSION = "... on Submission {" + SUBMISSION_FIELDS + "}"

TASK = "... on Task {" + TASK_FIELDS + "}"
HEAD = "... on Task {" + HEAD_FIELDS + "}"
"""A write's answer without steps, tool states, spend or submission: the runner
knows what it changed, and a write pays for no read of its session's spend or
ledger."""
PROBLEM_DETAILS = """
  ... on VersionConflict { currentVersion }
  ... on LockHeld { holderId expiresAt }
  ... on StaleFencingToken { currentToken }
"""
BUDGET_EXCEEDED = (
    f"... on BudgetExceeded {{ scope limit: budget {{ {selection(Budget)} }}"
    f" spent: spend {{ {selection(Spend)} }} }}"
)
"""What ``BudgetExceeded`` reads: its budget and spend aliased, as a task's own
``budget`` is another type (it may be null)."""
CREATED_PROBLEMS = PROBLEM_DETAILS + BUDGET_EXCEEDED
"""What the SDK's exceptions read of the refusal of a write that makes a task
(``createTask``, ``forkTask``): one that starts no work, so never
TaskInterrupted, whose ``submission`` could not sit beside the whole task's own
(another type: it may be null) without a third alias, past the production
floor of two."""
TASK_PROBLEMS = (
    CREATED_PROBLEMS + f"... on TaskInterrupted {{ submission {{ {SUBMISSION_FIELDS} }} }}"
)
"""What the SDK's exceptions read of a task write's refusal (``TaskResult``,
``ToolStateResult``)."""


def mutation(name: str, input_type: str, selection: str) -> str:
    """``mutation($input: T!) { name(input: $input) { ... } }``."""
    return (
        f"mutation {name}($input: {input_type}!) {{ {name}(input: $input) "
        f"{{ {PROBLEM} {selection} }} }}"
    )


START_SESSION = mutation("startSession", "StartSessionInput", SESSION)
CREATE_TASK = mutation("createTask", "CreateTaskInput", TASK + CREATED_PROBLEMS)
START_STEP = mutation("startStep", "StepRefInput", HEAD + TASK_PROBLEMS)
COMPLETE_STEP = mutation("completeStep", "CompleteStepInput", HEAD + TASK_PROBLEMS)
FAIL_STEP = mutation("failStep", "FailStepInput", HEAD + TASK_PROBLEMS)
CHECKPOINT = mutation("checkpointTask", "CheckpointTaskInput", HEAD + TASK_PROBLEMS)
SET_STATUS = mutation("setTaskStatus", "SetTaskStatusInput", HEAD + TASK_PROBLEMS)
DECIDE = mutation("decideStep", "DecideStepInput", HEAD + TASK_PROBLEMS)
RESUME = mutation(
    "resumeTask",
    "ResumeTaskInput",
    "... on ResumePlan {" + selection(ResumePlan) + "}" + PROBLEM_DETAILS,
)
ACQUIRE = mutation(
    "acquireTaskLock",
    "AcquireTaskLockInput",
    "... on TaskLock {" + LOCK_FIELDS + "} ... on LockHeld { holderId expiresAt }",
)
RENEW = mutation(
    "renewTaskLock",
    "RenewTaskLockInput",
    "... on TaskLock {" + LOCK_FIELDS + "} ... on LockHeld { holderId expiresAt }",
)
RELEASE = mutation("releaseTaskLock", "ReleaseTaskLockInput", HEAD)
RECORD_SPEND = mutation("recordSpend", "RecordSpendInput", HEAD + TASK_PROBLEMS)
SET_TASK_BUDGET = (
    "mutation setTaskBudget($input: SetBudgetInput!) { setBudget(input: $input) {"
    f" {PROBLEM} ... on Task {{ {HEAD_FIELDS} budget {{ {selection(Budget)} }} overBudget }}"
    " ... on VersionConflict { currentVersion } } }"
)
SET_SESSION_BUDGET = (
    "mutation setSessionBudget($input: SetBudgetInput!) { setBudget(input: $input) {"
    f" {PROBLEM} {SESSION} ... on VersionConflict {{ currentVersion }} }} }}"
)
"""``setBudget`` of a task, and of a session: two documents, as a task's and a
session's ``status`` are of two types that one selection cannot hold."""
TOOL = mutation(
    "recordToolCall",
    "RecordToolCallInput",
    "... on ToolState {" + TOOL_FIELDS + "}" + TASK_PROBLEMS,
)
FORK = mutation("forkTask", "ForkTaskInput", TASK + CREATED_PROBLEMS)
CLAIM = mutation("claimTask", "ClaimTaskInput", "... on TaskLock {" + LOCK_FIELDS + "}")
SUBMIT = mutation(
    "submitInput",
    "SubmitInput",
    SUBMISSION + f"... on SessionBusy {{ active {{ {SUBMISSION_FIELDS} }} }}" + BUDGET_EXCEEDED,
)
CANCEL_SUBMISSION = mutation("cancelSubmission", "CancelSubmissionInput", SUBMISSION)
SUBMISSION_QUERY = (
    "query submission($id: ID!) { submission(id: $id) { " + PROBLEM + SUBMISSION + " } }"
)
SUBMISSIONS_QUERY = (
    "query submissions($sessionId: ID!, $status: SubmissionStatus, $first: Int) {"
    " session(id: $sessionId) { " + PROBLEM + " ... on AgentSession {"
    " submissions(status: $status, first: $first) { " + SUBMISSION_FIELDS + " } } } }"
)
ACTIVE_SUBMISSION_QUERY = (
    "query activeSubmission($sessionId: ID!) { session(id: $sessionId) { "
    + PROBLEM
    + " ... on AgentSession { activeSubmission { "
    + SUBMISSION_FIELDS
    + " } } } }"
)
TASK_QUERY = "query task($id: ID!) { task(id: $id) { " + PROBLEM + TASK + " } }"
TASK_AT_QUERY = (
    "query taskAt($id: ID!, $seq: Int!) { taskAt(id: $id, seq: $seq) { " + PROBLEM + TASK + " } }"
)
WATCH = (
    "subscription watch($taskId: ID!, $afterSeq: Int, $epoch: String) {"
    " taskProgress(taskId: $taskId, afterSeq: $afterSeq, epoch: $epoch) {"
    + selection(Event)
    + "} }"
)

ITEMS_CHANGED = (
    "... on SessionItemsChanged { itemSeq messageCount added removed popped { seq item } }"
)
ADD_SESSION_ITEMS = mutation("addSessionItems", "AddSessionItemsInput", ITEMS_CHANGED)
POP_SESSION_ITEM = mutation("popSessionItem", "PopSessionItemInput", ITEMS_CHANGED)
CLEAR_SESSION_ITEMS = mutation("clearSessionItems", "ClearSessionItemsInput", ITEMS_CHANGED)
SESSION_ITEMS_QUERY = (
    "query sessionItems($sessionId: ID!, $last: Int, $beforeSeq: Int) {"
    " sessionItems(sessionId: $sessionId, last: $last, beforeSeq: $beforeSeq) { "
    + PROBLEM
    + " ... on SessionItemPage { itemSeq hasMore items { seq item } } } }"
)
TASK_EVENTS_QUERY = (
    "query taskEvents($id: ID!, $afterSeq: Int) { task(id: $id) { "
    + PROBLEM
    + " ... on Task { events(afterSeq: $afterSeq, first: 100) { seq kind stepIndex actor note }"
    " } } }"
)
ITEM_PAGE = 100
"""The most items the server answers a read (``sessionItems``'s ``last``)."""

GRAPH_PAGE = 40
"""Checkpoints a listing asks for at a time (a literal of the document: the
server's node estimate counts a variable ``first`` at its largest)."""
GRAPH_CHECKPOINT_FIELDS = (
    "threadId namespace checkpointId parentId type payload metadata channelVersions seq"
    " channels pendingWrites"
)
"""A LangGraph checkpoint as ``integrations.langgraph`` reads it back."""
PUT_GRAPH_CHECKPOINT = mutation(
    "putGraphCheckpoint", "PutGraphCheckpointInput", HEAD + TASK_PROBLEMS
)
PUT_GRAPH_WRITES = mutation("putGraphWrites", "PutGraphWritesInput", HEAD + TASK_PROBLEMS)
RECORD_GRAPH_RUN = mutation("recordGraphRun", "RecordGraphRunInput", HEAD + TASK_PROBLEMS)
CLEAR_GRAPH = mutation("clearGraph", "ClearGraphInput", HEAD + TASK_PROBLEMS)
PRUNE_GRAPH = mutation("pruneGraph", "PruneGraphInput", HEAD + TASK_PROBLEMS)
COPY_GRAPH = mutation("copyGraph", "CopyGraphInput", HEAD + TASK_PROBLEMS)
DELETE_GRAPH_RUNS = mutation(
    "deleteGraphRuns", "DeleteGraphRunsInput", "... on GraphRunsDeleted { checkpoints }"
)
GRAPH_CHECKPOINT_QUERY = (
    "query graphCheckpoint($threadId: ID!, $namespace: String!, $checkpointId: ID) {"
    " graphCheckpoint(threadId: $threadId, namespace: $namespace, checkpointId: $checkpointId)"
    " { " + PROBLEM + " ... on GraphCheckpoint { " + GRAPH_CHECKPOINT_FIELDS + " } } }"
)
GRAPH_CHECKPOINTS_QUERY = (
    "query graphCheckpoints($threadId: ID, $namespace: String, $before: ID, $metadata: JSON,"
    " $after: String) { graphCheckpoints(threadId: $threadId, namespace: $namespace,"
    f" before: $before, metadata: $metadata, first: {GRAPH_PAGE}, after: $after)"
    " { __typename after checkpoints { " + GRAPH_CHECKPOINT_FIELDS + " } } }"
)


def document_id(text: str) -> str:
    """A document's id as a request names it (``documentId``): ``sha256:`` and the
    hex digest of its UTF-8 text, as the GraphQL-over-HTTP draft's persisted
    documents write it (the manifest keeps the digest alone, as Apollo's does)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def operations() -> dict[str, str]:
    """The queries and mutations of this module by their operation's name: the
    documents a runstate server registers as trusted (``web/static/documents.json``) and
    the SDK sends by id. Subscriptions go over the WebSocket, as text."""
    found: dict[str, str] = {}
    for value in globals().values():
        kind = re.match(r"(query|mutation) (\w+)", value) if isinstance(value, str) else None
        if kind is not None:
            found[kind.group(2)] = value
    return dict(sorted(found.items()))
