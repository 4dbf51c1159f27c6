"""The GraphQL documents the SDK sends, their field lists written from the SDK's
dataclasses (``models.selection``)."""

from __future__ import annotations

import hashlib
import re

from runstate.client.records import (
    Event,
    Lock,
    ResumePlan,
    Session,
    Step,
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
HEAD_FIELDS = selection(Task, "steps", "tool_states")
TASK_FIELDS = selection(Task)

TASK = "... on Task {" + TASK_FIELDS + "}"
HEAD = "... on Task {" + HEAD_FIELDS + "}"
"""A write's answer without steps or tool states: the runner knows what it changed."""
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
START_STEP = mutation("startStep", "StepRefInput", HEAD + PROBLEM_DETAILS)
COMPLETE_STEP = mutation("completeStep", "CompleteStepInput", HEAD + PROBLEM_DETAILS)
FAIL_STEP = mutation("failStep", "FailStepInput", HEAD + PROBLEM_DETAILS)
CHECKPOINT = mutation("checkpointTask", "CheckpointTaskInput", HEAD + PROBLEM_DETAILS)
SET_STATUS = mutation("setTaskStatus", "SetTaskStatusInput", HEAD + PROBLEM_DETAILS)
DECIDE = mutation("decideStep", "DecideStepInput", HEAD + PROBLEM_DETAILS)
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
TOOL = mutation(
    "recordToolCall",
    "RecordToolCallInput",
    "... on ToolState {" + TOOL_FIELDS + "}" + PROBLEM_DETAILS,
)
FORK = mutation("forkTask", "ForkTaskInput", TASK)
CLAIM = mutation("claimTask", "ClaimTaskInput", "... on TaskLock {" + LOCK_FIELDS + "}")
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
    "putGraphCheckpoint", "PutGraphCheckpointInput", HEAD + PROBLEM_DETAILS
)
PUT_GRAPH_WRITES = mutation("putGraphWrites", "PutGraphWritesInput", HEAD + PROBLEM_DETAILS)
RECORD_GRAPH_RUN = mutation("recordGraphRun", "RecordGraphRunInput", HEAD + PROBLEM_DETAILS)
CLEAR_GRAPH = mutation("clearGraph", "ClearGraphInput", HEAD + PROBLEM_DETAILS)
PRUNE_GRAPH = mutation("pruneGraph", "PruneGraphInput", HEAD + PROBLEM_DETAILS)
COPY_GRAPH = mutation("copyGraph", "CopyGraphInput", HEAD)
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
