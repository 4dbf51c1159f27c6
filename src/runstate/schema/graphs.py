"""GraphQL types and inputs of LangGraph checkpoints (``threads.checkpoints``): a
thread is a task; values are LangGraph's serializer's type and bytes, the bytes
in base64."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, cast

import strawberry
from strawberry.scalars import JSON

from runstate.basics.enums import GraphNodeStatus, GraphPruneStrategy, GraphRunEnd
from runstate.schema.inputs import IDEMPOTENCY_KEY
from runstate.schema.problems import (
    IdempotencyKeyReused,
    InvalidInput,
    LockHeld,
    NotFound,
    RateLimited,
    SessionExpired,
)
from runstate.schema.spending import SpendInput, report_of
from runstate.services.domain.errors import InvalidInputError
from runstate.services.threads import nodes
from runstate.services.threads.checkpoints import (
    Blob,
    ChannelValue,
    CheckpointPage,
    CheckpointView,
    NewThread,
    PendingWrite,
    TaskWrites,
)


def _encoded(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")


def decoded(text: str, field: str) -> bytes:
    """Base64 from a client: InvalidInput naming ``field`` when it is not."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(field, "must be base64") from None


TYPE = "The serializer's name for the value's encoding."
PAYLOAD = "The value's bytes as the serializer wrote them, in base64."


@strawberry.type(
    description=(
        "A LangGraph checkpoint of a thread (the task `threadId`): the checkpoint "
        "without its channel values (`type`, `payload`), the values its channel "
        "versions name, and the writes pending against it."
    )
)
class GraphCheckpoint:
    thread_id: strawberry.ID
    namespace: str
    checkpoint_id: strawberry.ID
    parent_id: strawberry.ID | None
    type: str = strawberry.field(description=TYPE)
    payload: str = strawberry.field(description=PAYLOAD)
    metadata: JSON
    channel_versions: JSON
    seq: int = strawberry.field(description="The task's event that stored it.")
    channels: JSON = strawberry.field(
        description=(
            "The values its channel versions name: `[{channel, version, type, payload}]` "
            "(a JSON list: a checkpoint's values are data for its saver, not objects)."
        )
    )
    pending_writes: JSON = strawberry.field(
        description=(
            "The writes pending against it, in the order LangGraph applies them: "
            "`[{taskId, taskPath, idx, channel, type, payload}]`."
        )
    )

    @classmethod
    def of(cls, view: CheckpointView) -> GraphCheckpoint:
        return cls(
            thread_id=strawberry.ID(view.thread_id),
            namespace=view.namespace,
            checkpoint_id=strawberry.ID(view.checkpoint_id),
            parent_id=None if view.parent_id is None else strawberry.ID(view.parent_id),
            type=view.checkpoint.type,
            payload=_encoded(view.checkpoint.payload),
            metadata=cast(JSON, view.metadata),
            channel_versions=cast(JSON, view.channel_versions),
            seq=view.seq,
            channels=cast(
                JSON,
                [
                    {
                        "channel": c.channel,
                        "version": c.version,
                        "type": c.value.type,
                        "payload": _encoded(c.value.payload),
                    }
                    for c in view.channels
                ],
            ),
            pending_writes=cast(
                JSON,
                [
                    {
                        "taskId": w.task_key,
                        "taskPath": w.task_path,
                        "idx": w.idx,
                        "channel": w.channel,
                        "type": w.value.type,
                        "payload": _encoded(w.value.payload),
                    }
                    for w in view.pending_writes
                ],
            ),
        )


@strawberry.type(description="Checkpoints newest first; `after` resumes after the last one.")
class GraphCheckpointPage:
    checkpoints: list[GraphCheckpoint]
    after: str | None

    @classmethod
    def of(cls, page: CheckpointPage) -> GraphCheckpointPage:
        return cls(checkpoints=[GraphCheckpoint.of(v) for v in page.items], after=page.after)


GraphCheckpointResult = Annotated[
    GraphCheckpoint | NotFound | InvalidInput | RateLimited,
    strawberry.union("GraphCheckpointResult"),
]


@strawberry.input
class GraphChannelInput:
    channel: str
    version: str
    type: str = strawberry.field(description=TYPE)
    payload: str = strawberry.field(description=PAYLOAD)


@strawberry.input
class GraphWriteInput:
    idx: int
    channel: str
    type: str = strawberry.field(description=TYPE)
    payload: str = strawberry.field(description=PAYLOAD)


@strawberry.input(
    description=(
        "One run of a LangGraph node (a LangGraph task), shown as a step of the "
        "thread's task named after the node: RUNNING, SUCCESS with its writes "
        "summarised as `output`, FAILED with its `error`, or INTERRUPTED with the "
        "interrupts' values as `output`."
    )
)
class GraphNodeInput:
    graph_task_id: str = strawberry.field(description="LangGraph's task id.")
    name: str = strawberry.field(description="The node's name.")
    status: GraphNodeStatus
    namespace: str = ""
    super_step: int | None = None
    output: JSON | None = None
    error: str | None = None
    spend: SpendInput | None = strawberry.field(
        default=None,
        description="At its end: what the node's model calls spent (added to its step once).",
    )

    def run(self) -> nodes.NodeRun:
        return nodes.NodeRun(
            namespace=self.namespace,
            task_key=self.graph_task_id,
            name=self.name,
            status=self.status,
            super_step=self.super_step,
            output=self.output,
            error=self.error,
            spend=report_of(self.spend),
        )


def _pending(
    task_id: str, task_path: str, writes: list[GraphWriteInput], field: str
) -> list[PendingWrite]:
    """One LangGraph task's writes as stored; a payload not in base64 is
    InvalidInput named from ``field``."""
    return [
        PendingWrite(
            task_id,
            task_path,
            w.idx,
            w.channel,
            Blob(w.type, decoded(w.payload, f"{field}[{i}].payload")),
        )
        for i, w in enumerate(writes)
    ]


@strawberry.input(
    description=(
        "One LangGraph task's writes against the parent checkpoint, sent with the "
        "checkpoint that follows them (`PutGraphCheckpointInput.writes`)."
    )
)
class GraphTaskWritesInput:
    graph_task_id: str = strawberry.field(description="LangGraph's task id.")
    graph_task_path: str = ""
    writes: list[GraphWriteInput]
    node: GraphNodeInput | None = strawberry.field(
        default=None, description="What the writes say of the node's run, shown on its step."
    )

    def pending(self, field: str) -> list[PendingWrite]:
        return _pending(self.graph_task_id, self.graph_task_path, self.writes, field)


@strawberry.input(
    description=(
        "The thread's task to make when it does not exist yet "
        "(`PutGraphCheckpointInput.newThread`)."
    )
)
class NewGraphThreadInput:
    session_id: strawberry.ID = strawberry.field(
        description="The session the task goes in: started now when it does not exist."
    )
    goal: str = strawberry.field(description="The task's goal, as createTask takes it.")
    session_ttl_seconds: int | None = strawberry.field(
        default=None,
        description=(
            "A session started now idles at most this long; the server default when omitted."
        ),
    )

    def thread(self, default_ttl: int) -> NewThread:
        ttl = default_ttl if self.session_ttl_seconds is None else self.session_ttl_seconds
        return NewThread(self.session_id, self.goal, ttl)


@strawberry.input(
    description=(
        "Store a checkpoint in the thread's task, with the channel values it changed "
        "(a value already stored at its version is kept)."
    )
)
class PutGraphCheckpointInput:
    task_id: strawberry.ID
    namespace: str = ""
    checkpoint_id: strawberry.ID
    parent_id: strawberry.ID | None = None
    type: str = strawberry.field(description=TYPE)
    payload: str = strawberry.field(description=PAYLOAD)
    metadata: JSON
    channel_versions: JSON
    channels: list[GraphChannelInput]
    writes: list[GraphTaskWritesInput] = strawberry.field(
        default_factory=list,
        description=(
            "Writes pending against the parent checkpoint (`parentId`), one entry per "
            "LangGraph task, stored first in the same write: a node's writes and the "
            "checkpoint that follows them cost one request and one transaction."
        ),
    )
    next_nodes: list[str] = strawberry.field(
        default_factory=list,
        description=(
            "The nodes this checkpoint's super-step starts next (a watched graph's), "
            "shown RUNNING with it, so that their starts cost no request: each node's "
            "first report under its LangGraph task id takes the step. Recorded only "
            "with a checkpoint new to the thread."
        ),
    )
    new_thread: NewGraphThreadInput | None = strawberry.field(
        default=None,
        description=(
            "When the thread's task does not exist: make it first (its session too, "
            "when missing), as startSession and createTask would, then store the "
            "checkpoint, so that a new thread's first checkpoint is one request. Its "
            "TASK_CREATED event comes before the GRAPH_CHECKPOINT. Ignored when the "
            "task exists."
        ),
    )
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)

    def checkpoint(self) -> Blob:
        return Blob(self.type, decoded(self.payload, "payload"))

    def values(self) -> list[ChannelValue]:
        return [
            ChannelValue(
                c.channel,
                c.version,
                Blob(c.type, decoded(c.payload, f"channels[{i}].payload")),
            )
            for i, c in enumerate(self.channels)
        ]

    def held(self) -> list[TaskWrites]:
        return [
            TaskWrites(
                group.pending(f"writes[{i}].writes"),
                None if group.node is None else group.node.run(),
            )
            for i, group in enumerate(self.writes)
        ]

    def versions(self) -> dict[str, str]:
        given = self.channel_versions
        if not isinstance(given, dict) or not all(
            isinstance(v, str | int | float) and not isinstance(v, bool) for v in given.values()
        ):
            raise InvalidInputError("channelVersions", "must map channels to versions")
        return {str(k): str(v) for k, v in given.items()}


@strawberry.input(
    description=(
        "Report node runs of a LangGraph thread (typically their starts) and, with "
        "`ended`, the end of a run: COMPLETED completes the thread unless a node "
        "waits at an interrupt, FAILED fails it."
    )
)
class RecordGraphRunInput:
    task_id: strawberry.ID
    nodes: list[GraphNodeInput] = strawberry.field(default_factory=list)
    ended: GraphRunEnd | None = None
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Store one LangGraph task's writes pending against a checkpoint: a write at an "
        "index already stored is kept, except at negative (special) indexes."
    )
)
class PutGraphWritesInput:
    task_id: strawberry.ID
    namespace: str = ""
    checkpoint_id: strawberry.ID
    graph_task_id: str = strawberry.field(description="LangGraph's task id.")
    graph_task_path: str = ""
    writes: list[GraphWriteInput]
    node: GraphNodeInput | None = strawberry.field(
        default=None, description="What the writes say of the node's run, shown on its step."
    )
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)

    def pending(self) -> list[PendingWrite]:
        return _pending(self.graph_task_id, self.graph_task_path, self.writes, "writes")


@strawberry.input(description="Delete every checkpoint of a thread's task.")
class ClearGraphInput:
    task_id: strawberry.ID
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Delete a thread's checkpoints but the latest of each namespace (with the "
        "ancestors its delta channels need), or all of them."
    )
)
class PruneGraphInput:
    task_id: strawberry.ID
    strategy: GraphPruneStrategy = GraphPruneStrategy.KEEP_LATEST
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(description="Delete the caller's checkpoints made by these LangGraph runs.")
class DeleteGraphRunsInput:
    run_ids: list[str]
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Copy a thread whole into the task `newTaskId`: a fork of the thread's task "
        "(or that task, when it exists) with every checkpoint, value and write."
    )
)
class CopyGraphInput:
    task_id: strawberry.ID
    new_task_id: strawberry.ID
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.type(description="How many checkpoints a deleteGraphRuns deleted.")
class GraphRunsDeleted:
    checkpoints: int


GraphRunsResult = Annotated[
    GraphRunsDeleted
    | InvalidInput
    | SessionExpired
    | LockHeld
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("GraphRunsResult"),
]
