"""LangGraph checkpoints stored in a task: a thread is a task, its checkpoints,
channel blobs and pending writes rows of their own (``models.GraphCheckpoint``,
``GraphBlob``, ``GraphWrite``).

The server keeps what LangGraph's serializer wrote as it is (a type and bytes,
never re-encoded) and reads only what it needs to find things: the namespace,
the ids, the channel versions and the metadata. Every write is a task write
(``write.engine``): one transaction opened by the task row's conditional UPDATE
(a lease's fencing token checked there), one event, the bytes counted in the
task's and the user's quotas.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.expressions import Q
from tortoise.models import Model

from runstate.basics.enums import GraphPruneStrategy, TaskEventKind
from runstate.models import (
    GRAPH_NAMESPACE_LENGTH,
    ID_LENGTH,
    KEY_LENGTH,
    GraphBlob,
    GraphCheckpoint,
    GraphNode,
    GraphWrite,
    Task,
)
from runstate.services.actions import sessions, tasks
from runstate.services.domain import quota, validation
from runstate.services.domain.errors import InvalidInputError, NotFoundError
from runstate.services.domain.views import TaskView, Written
from runstate.services.read import lookups
from runstate.services.threads import nodes
from runstate.services.threads.nodes import NodeRun
from runstate.services.write.engine import Change, Draft
from runstate.services.write.group_commit import Unchanged
from runstate.services.write.house import House
from runstate.storage import sql

TYPE_LENGTH = 32
VERSION_LENGTH = 128


@dataclass(frozen=True)
class Blob:
    """A value as LangGraph's serializer wrote it (``dumps_typed``)."""

    type: str
    payload: bytes


@dataclass(frozen=True)
class ChannelValue:
    """One channel's value at one version."""

    channel: str
    version: str
    value: Blob


@dataclass(frozen=True)
class PendingWrite:
    """One write of a LangGraph task against a checkpoint."""

    task_key: str
    task_path: str
    idx: int
    channel: str
    value: Blob


@dataclass(frozen=True)
class TaskWrites:
    """One LangGraph task's writes against a checkpoint, and what they say of its
    node's run (None: nothing to show)."""

    writes: Sequence[PendingWrite]
    node: NodeRun | None = None


_NEW_THREAD_FIELDS = {"ttlSeconds": "sessionTtlSeconds"}
"""``newThread``'s names of what the session's and the task's checks name otherwise."""


@dataclass(frozen=True)
class NewThread:
    """How a thread missing at its first checkpoint is made: its task, with
    ``goal``, in session ``session_id``, the session started with ``ttl_seconds``
    of idle life when it is missing too (as ``startSession`` and ``createTask``)."""

    session_id: str
    goal: str
    ttl_seconds: int

    def checked(self, limits: validation.ContentLimits) -> NewThread:
        """Refused (InvalidInput on ``newThread.<field>``) before anything is
        written, as the writes that would make the thread refuse it."""
        try:
            validation.object_id(self.session_id, "sessionId")
            validation.ttl_seconds(self.ttl_seconds, self.ttl_seconds)
            limits.goal(self.goal)
        except InvalidInputError as refused:
            message = str(refused).removeprefix(f"{refused.field}: ")
            field = _NEW_THREAD_FIELDS.get(refused.field, refused.field)
            raise InvalidInputError(f"newThread.{field}", message) from None
        return self


@dataclass(frozen=True)
class CheckpointView:
    """A stored checkpoint with the channel values its versions name and its
    pending writes (ordered as LangGraph applies them: task path, task, index)."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: Blob
    metadata: dict[str, Any]
    channel_versions: dict[str, str]
    seq: int
    channels: tuple[ChannelValue, ...]
    pending_writes: tuple[PendingWrite, ...]


@dataclass(frozen=True)
class CheckpointPage:
    """Checkpoints newest first; ``after`` resumes after the last of them."""

    items: tuple[CheckpointView, ...]
    after: str | None


def encoded_bytes(payload: bytes, *texts: str | None) -> int:
    """What a row counts in the quotas: a row, its bytes as the API answers them
    (base64) and its texts as encoded (``quota.text_bytes``). So a task's stored
    bytes bound what reading its checkpoints answers (``schema.cost``)."""
    return quota.ROW_BYTES + 4 * ((len(payload) + 2) // 3) + sum(map(quota.text_bytes, texts))


def _text(value: str, field: str, most: int, *, empty: bool = False) -> str:
    if (not value and not empty) or len(value) > most:
        raise InvalidInputError(field, f"must be {0 if empty else 1} to {most} characters")
    return validation.storable(value, field)


def _blob(blob: Blob, field: str) -> int:
    _text(blob.type, f"{field}.type", TYPE_LENGTH)
    return len(blob.payload) + len(blob.type)


def _metadata(limits: validation.ContentLimits, metadata: Any) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        raise InvalidInputError("metadata", "must be a JSON object")
    limits.json_payload(metadata, "metadata")
    return metadata


async def put_checkpoint(
    house: House,
    user_id: str,
    task_id: str,
    *,
    namespace: str,
    checkpoint_id: str,
    parent_id: str | None,
    checkpoint: Blob,
    metadata: Any,
    channel_versions: Mapping[str, str],
    channels: Sequence[ChannelValue],
    held: Sequence[TaskWrites] = (),
    next_nodes: Sequence[str] = (),
    fencing_token: int | None = None,
    new_thread: NewThread | None = None,
) -> Written[TaskView]:
    """Store a checkpoint and the channel values it changed (GRAPH_CHECKPOINT).

    A channel value already stored at its version is kept (a value at a version
    never changes). The same checkpoint sent again writes nothing (no event), so a
    retry is harmless without an idempotency key; another checkpoint under a
    stored id replaces its row. At most ``checkpoint_bytes`` a call.

    ``held``: LangGraph tasks' writes against the parent checkpoint, stored first
    in the same write, as ``put_writes`` stores them (their nodes' reports too):
    a node's writes and the checkpoint that follows them are one transaction and
    one event. Nothing new in either part writes nothing.

    ``next_nodes``: the nodes the checkpoint's super-step starts (a watched graph's),
    shown RUNNING with it, so that a node's start costs no request of its own
    (``nodes.expected``); stored only with a checkpoint new to the thread.

    ``new_thread``: when the thread's task does not exist, it is made first
    (``NewThread``), its events published before the checkpoint's: a new thread's
    first checkpoint costs one request, not a refusal and two writes more."""
    if new_thread is not None:
        new_thread.checked(house.limits)
    _text(namespace, "namespace", GRAPH_NAMESPACE_LENGTH, empty=True)
    _text(checkpoint_id, "checkpointId", ID_LENGTH)
    if parent_id is not None:
        _text(parent_id, "parentId", ID_LENGTH)
    metadata = _metadata(house.limits, metadata)
    size = _blob(checkpoint, "checkpoint") + validation.json_size(metadata)
    size += _versions_size(channel_versions) + _channels_size(channels)
    size += _held_size(held, parent_id) + validation.json_size(list(next_nodes))
    _within(house.limits, size, "checkpoint")
    runs = [
        group.node.checked(house.limits, f"writes[{i}].node")
        for i, group in enumerate(held)
        if group.node is not None
    ]
    starts = nodes.expected(house.limits, namespace, metadata, next_nodes)

    async def apply(draft: Draft) -> Change:
        pk = draft.task.id
        wrote, stored, inserts = await _held_writes(draft, namespace, parent_id, held)
        inserts += [("blobs", i) for i in _new_rows(GraphBlob, _blob_rows(pk, namespace, channels))]
        made = _checkpoint_row(
            pk,
            draft.task.event_seq,
            namespace,
            checkpoint_id,
            parent_id,
            checkpoint,
            metadata,
            channel_versions,
        )
        inserts += [("checkpoint", i) for i in _new_rows(GraphCheckpoint, [made])]
        # The nodes of the ends and of the starts, read in the inserts' trip, before
        # the inserts tell which are reported (ends of new writes, starts of a new
        # checkpoint): a node read and not reported is left aside.
        lookup = nodes.lookup(draft, [*runs, *starts]) if runs or starts else None
        new, known = await _inserted(draft, inserts, lookup)
        wrote = wrote or new["writes"] is not None
        stored += (new["writes"] or 0) + (new["blobs"] or 0) + (new["checkpoint"] or 0)
        reported = [*(runs if wrote else ()), *(starts if new["checkpoint"] is not None else ())]
        shown = await nodes.record(draft, reported, known) if reported else None
        if new["checkpoint"] is None:
            stored += await _replaced(draft, made, nothing_new=new["blobs"] is None and not wrote)
        draft.stored = stored
        return Change(TaskEventKind.GRAPH_CHECKPOINT, step_index=shown)

    def put() -> Awaitable[Written[TaskView]]:
        return nodes.write_thread(house, user_id, task_id, apply, fencing_token, progress=True)

    try:
        return await put()
    except NotFoundError as missing:
        if new_thread is None or missing.id != task_id:
            raise
    made = await _made(house, user_id, task_id, new_thread)
    return (await put()).after(made)


async def _made(house: House, user_id: str, task_id: str, thread: NewThread) -> Written[TaskView]:
    """A missing thread's task made as ``thread`` says (its session too, unless it
    exists); a task made meanwhile by another write is answered as it is."""
    await sessions.start_session(
        house,
        user_id,
        default_ttl=thread.ttl_seconds,
        session_id=thread.session_id,
        ttl_seconds=thread.ttl_seconds,
    )
    return await tasks.create_task(
        house, user_id, thread.session_id, goal=thread.goal, steps=(), task_id=task_id
    )


def _versions_size(channel_versions: Mapping[str, str]) -> int:
    """A checkpoint's channel versions checked (each channel and version a text
    within its length), and what they count."""
    for channel, version in channel_versions.items():
        _text(channel, "channelVersions", KEY_LENGTH)
        _text(version, "channelVersions", VERSION_LENGTH)
    return validation.json_size(dict(channel_versions))


def _channels_size(channels: Sequence[ChannelValue]) -> int:
    """The channel values checked (each channel, version and value type a text
    within its length), and what they count."""
    size = 0
    for i, value in enumerate(channels):
        _text(value.channel, f"channels[{i}].channel", KEY_LENGTH)
        _text(value.version, f"channels[{i}].version", VERSION_LENGTH)
        size += _blob(value.value, f"channels[{i}]") + len(value.channel) + len(value.version)
    return size


def _held_size(held: Sequence[TaskWrites], parent_id: str | None) -> int:
    """What the held writes count; refused without the parent they are stored
    against."""
    if held and parent_id is None:
        raise InvalidInputError("writes", "are stored against the parent: give parentId")
    return sum(_writes_size(group.writes, f"writes[{i}].writes") for i, group in enumerate(held))


async def _held_writes(
    draft: Draft, namespace: str, parent_id: str | None, held: Sequence[TaskWrites]
) -> tuple[bool, int, list[tuple[str, sql.Statement]]]:
    """The held LangGraph tasks' writes against the parent checkpoint. A group with
    a special write (a negative index) replaces what it finds, so it is stored at
    once, as ``put_writes`` stores it; the others' rows come back as statements, to
    be inserted with the checkpoint's. Answers whether anything was stored, its
    bytes, and the statements."""
    wrote, stored = False, 0
    inserts: list[tuple[str, sql.Statement]] = []
    for group in held:
        assert parent_id is not None
        if any(w.idx < 0 for w in group.writes):  # a special write replaces what it finds
            added = await _store_writes(draft, namespace, parent_id, group.writes)
            wrote, stored = wrote or added is not None, stored + (added or 0)
            continue
        writes = _new_writes(draft.task.id, namespace, parent_id, group.writes)
        inserts += [("writes", i) for i in writes]
    return wrote, stored, inserts


def _blob_rows(pk: int, namespace: str, channels: Sequence[ChannelValue]) -> list[dict[str, Any]]:
    """The rows of the channel values, one per channel and version (the last one
    sent of each), with their bytes."""
    return [
        {
            "task_id": pk,
            "namespace": namespace,
            "channel": c.channel,
            "version": c.version,
            "type": c.value.type,
            "payload": c.value.payload,
            "stored_bytes": encoded_bytes(
                c.value.payload, namespace, c.channel, c.version, c.value.type
            ),
        }
        for c in {(c.channel, c.version): c for c in channels}.values()
    ]


def _checkpoint_row(
    pk: int,
    seq: int,
    namespace: str,
    checkpoint_id: str,
    parent_id: str | None,
    checkpoint: Blob,
    metadata: dict[str, Any],
    channel_versions: Mapping[str, str],
) -> dict[str, Any]:
    """The checkpoint's row, at the event ``seq`` of the write, with its bytes (the
    payload, its texts, its metadata and channel versions)."""
    run_id = metadata.get("run_id")
    row_bytes = encoded_bytes(
        checkpoint.payload, namespace, checkpoint_id, parent_id, checkpoint.type
    )
    row_bytes += validation.json_size(metadata) + validation.json_size(dict(channel_versions))
    return {
        "task_id": pk,
        "namespace": namespace,
        "checkpoint_id": checkpoint_id,
        "parent_id": parent_id,
        "type": checkpoint.type,
        "payload": checkpoint.payload,
        "metadata": metadata,
        "channel_versions": dict(channel_versions),
        "run_id": str(run_id)[:KEY_LENGTH] if run_id is not None else None,
        "seq": seq,
        "stored_bytes": row_bytes,
    }


async def _inserted(
    draft: Draft, inserts: Sequence[tuple[str, sql.Statement]], lookup: sql.Statement | None
) -> tuple[dict[str, int | None], nodes.Held]:
    """Each row stored unless its key is held (a value at a version never changes;
    a write at an index is kept), in one trip for all of them with the nodes'
    ``lookup``: the bytes each part (writes, blobs, checkpoint) stored, None for a
    part that stored nothing, and the nodes found."""
    new: dict[str, int | None] = {"writes": None, "blobs": None, "checkpoint": None}
    found_each, rows = await sql.stored_and_read(draft.conn, [i for _, i in inserts], lookup)
    for (part, _), found in zip(inserts, found_each, strict=True):
        if found is not None:
            new[part] = (new[part] or 0) + found
    return new, nodes.found(draft, rows)


async def _replaced(draft: Draft, made: dict[str, Any], *, nothing_new: bool) -> int:
    """A checkpoint whose id is stored already: the same one sent again (a retry:
    ``Unchanged`` when ``nothing_new`` else was stored by the write), or another
    one, which replaces the stored row. Answers the bytes it adds (or gives back)."""
    conn, key = draft.conn, [made["task_id"], made["namespace"], made["checkpoint_id"]]
    same = '"task_id" = ? AND "namespace" = ? AND "checkpoint_id" = ?'
    rows = await _rows(conn, GraphCheckpoint, same, key)
    if nothing_new and any(_as_given(row, made) for row in rows):
        raise Unchanged  # stored already, nothing to write
    added: int = made["stored_bytes"] - sum(row.stored_bytes for row in rows)
    await sql.execute(conn, f'DELETE FROM "graph_checkpoints" WHERE {same}', key)
    await sql.execute(conn, *sql.insert_rows(GraphCheckpoint, [made]))
    return added


def _as_given(row: GraphCheckpoint, made: Mapping[str, Any]) -> bool:
    """Whether a stored row is this very checkpoint."""
    return (
        row.parent_id,
        row.type,
        bytes(row.payload),
        row.metadata,
        row.channel_versions,
    ) == (
        made["parent_id"],
        made["type"],
        made["payload"],
        made["metadata"],
        made["channel_versions"],
    )


async def put_writes(
    house: House,
    user_id: str,
    task_id: str,
    *,
    namespace: str,
    checkpoint_id: str,
    writes: Sequence[PendingWrite],
    node: NodeRun | None = None,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Store a LangGraph task's pending writes against a checkpoint (GRAPH_WRITES),
    and with ``node`` what they say of the node's run, in the same write
    (``threads.nodes``: its step finished, failed or interrupted).

    Idempotent on (task, index): a write at an index already stored is kept,
    except at LangGraph's negative indexes (errors, interrupts, ...), where
    another write replaces what it finds. Nothing new to store writes nothing
    (no event), so a retry is harmless without an idempotency key."""
    _text(namespace, "namespace", GRAPH_NAMESPACE_LENGTH, empty=True)
    _text(checkpoint_id, "checkpointId", ID_LENGTH)
    _within(house.limits, _writes_size(writes, "writes"), "writes")
    if node is not None:
        node = node.checked(house.limits, "node")

    async def apply(draft: Draft) -> Change:
        added = await _store_writes(draft, namespace, checkpoint_id, writes)
        if added is None:
            raise Unchanged
        draft.stored = added
        shown = None if node is None else await nodes.record(draft, [node])
        return Change(TaskEventKind.GRAPH_WRITES, step_index=shown)

    return await nodes.write_thread(house, user_id, task_id, apply, fencing_token, progress=True)


async def clear(
    house: House, user_id: str, task_id: str, *, fencing_token: int | None = None
) -> Written[TaskView]:
    """Delete every checkpoint, channel value and pending write of the task, giving
    their bytes back (GRAPH_CLEARED); a task with none writes nothing."""

    async def apply(draft: Draft) -> Change:
        freed = 0
        for model in (GraphCheckpoint, GraphBlob, GraphWrite):
            rows = model.filter(task_id=draft.task.id).using_db(draft.conn)
            freed += sum(int(r[0]) for r in await rows.values_list("stored_bytes"))
            await rows.delete()
        if not freed:
            raise Unchanged
        draft.stored = -freed
        return Change(TaskEventKind.GRAPH_CLEARED)

    return await nodes.write_thread(house, user_id, task_id, apply, fencing_token)


async def prune(
    house: House,
    user_id: str,
    task_id: str,
    strategy: GraphPruneStrategy,
    *,
    fencing_token: int | None = None,
) -> Written[TaskView]:
    """Delete the thread's checkpoints but the latest of each namespace (KEEP_LATEST)
    or all of them (DELETE), with their pending writes and the channel values no
    remaining checkpoint names (GRAPH_PRUNED); nothing to delete writes nothing.

    KEEP_LATEST knows DeltaChannel: a delta channel's value is rebuilt from the
    writes of the ancestors since its last snapshot, which the kept checkpoint's
    ``counters_since_delta_snapshot`` counts in super-steps, so those ancestors
    are kept too (the parent chain, that many steps back)."""

    async def apply(draft: Draft) -> Change:
        rows = await GraphCheckpoint.filter(task_id=draft.task.id).using_db(draft.conn)
        kept = _kept(rows) if strategy is GraphPruneStrategy.KEEP_LATEST else set()
        gone = [r for r in rows if r.id not in kept]
        if not gone:
            raise Unchanged
        draft.stored = -await _delete(draft, gone, [r for r in rows if r.id in kept])
        return Change(TaskEventKind.GRAPH_PRUNED)

    return await nodes.write_thread(house, user_id, task_id, apply, fencing_token)


def _kept(rows: Sequence[GraphCheckpoint]) -> set[int]:
    """The row ids KEEP_LATEST keeps: each namespace's last written checkpoint (by
    the event that stored it, ``seq``, which a copy keeps) and the ancestors its
    delta channels need. By the largest id as text, it kept ``c9`` and deleted
    ``c10`` and ``c11``; LangGraph's ids grow with time, so for its checkpoints the
    two orders agree."""
    by_id = {(r.namespace, r.checkpoint_id): r for r in rows}
    latest: dict[str, GraphCheckpoint] = {}
    for row in rows:
        held = latest.get(row.namespace)
        if held is None or (row.seq, row.id) > (held.seq, held.id):
            latest[row.namespace] = row
    kept: set[int] = set()
    for row in latest.values():
        kept.add(row.id)
        depth = _delta_depth(row.metadata)
        current: GraphCheckpoint | None = row
        for _ in range(depth):
            assert current is not None
            current = by_id.get((row.namespace, current.parent_id or ""))
            if current is None:
                break
            kept.add(current.id)
    return kept


def _delta_depth(metadata: Mapping[str, Any]) -> int:
    """How many super-steps back the oldest delta channel's last snapshot is."""
    counters = metadata.get("counters_since_delta_snapshot")
    if not isinstance(counters, dict):
        return 0
    depths = [
        int(c[1])
        for c in counters.values()
        if isinstance(c, list | tuple) and len(c) == 2 and isinstance(c[1], int)
    ]
    return max(depths, default=0)


async def _delete(draft: Draft, gone: Sequence[GraphCheckpoint], left: Sequence[Any]) -> int:
    """Delete checkpoints of the draft's task with their pending writes, and the
    channel values none of ``left`` names; the bytes they held."""
    conn, pk = draft.conn, draft.task.id
    freed: int = sum(r.stored_bytes for r in gone)
    for ids in sql.chunks([r.id for r in gone]):
        await GraphCheckpoint.filter(id__in=ids).using_db(conn).delete()
    by_namespace: dict[str, list[str]] = {}
    for row in gone:
        by_namespace.setdefault(row.namespace, []).append(row.checkpoint_id)
    for namespace, checkpoint_ids in by_namespace.items():
        for chunk in sql.chunks(checkpoint_ids):
            writes = GraphWrite.filter(task_id=pk, namespace=namespace, checkpoint_id__in=chunk)
            writes = writes.using_db(conn)
            freed += sum(int(r[0]) for r in await writes.values_list("stored_bytes"))
            await writes.delete()
    named = {(r.namespace, c, str(v)) for r in left for c, v in r.channel_versions.items()}
    blobs = (
        await GraphBlob.filter(task_id=pk)
        .using_db(conn)
        .values_list("id", "namespace", "channel", "version", "stored_bytes")
    )
    orphans = [b for b in blobs if (b[1], b[2], b[3]) not in named]
    freed += sum(int(b[4]) for b in orphans)
    for chunk in sql.chunks([b[0] for b in orphans]):
        await GraphBlob.filter(id__in=chunk).using_db(conn).delete()
    return freed


async def delete_runs(house: House, user_id: str, run_ids: Sequence[str]) -> Written[int]:
    """Delete the caller's checkpoints made by these runs (their ``run_id``), with
    their pending writes and the channel values no other checkpoint names: one
    write (GRAPH_PRUNED) per thread touched, in the threads' id order. The answer:
    how many went. A thread another worker leases (LockHeld) or in an expired
    session (SessionExpired) refuses its write and ends the call there: the
    threads before it are done, and the call sent again does the rest."""
    for i, run_id in enumerate(run_ids):
        _text(run_id, f"runIds[{i}]", KEY_LENGTH)
    runs = sorted(set(run_ids))
    threads: set[str] = set()
    for chunk in sql.chunks(runs):
        threads.update(
            str(t)
            for t in await GraphCheckpoint.filter(task__user_id=user_id, run_id__in=chunk)
            .distinct()
            .values_list("task__public_id", flat=True)
        )
    events: list[Any] = []
    count = 0
    for thread in sorted(threads):
        deleted: list[int] = []

        async def apply(draft: Draft, deleted: list[int] = deleted) -> Change:
            rows = await GraphCheckpoint.filter(task_id=draft.task.id).using_db(draft.conn)
            gone = [r for r in rows if r.run_id in runs]
            if not gone:
                raise Unchanged
            deleted.append(len(gone))
            left = [r for r in rows if r.run_id not in runs]
            draft.stored = -await _delete(draft, gone, left)
            return Change(TaskEventKind.GRAPH_PRUNED)

        try:
            written = await nodes.write_thread(house, user_id, thread, apply, None)
        except NotFoundError:  # deleted meanwhile: nothing of it left to delete
            continue
        events.extend(written.events)
        count += sum(deleted)
    return Written(count, tuple(events))


async def copy(house: House, user_id: str, task_id: str, new_id: str) -> Written[TaskView]:
    """Copy a thread whole, every checkpoint, channel value and pending write, into
    the task ``new_id`` (GRAPH_COPIED): a fork of the source task at its head
    (``forkTask``, its origin recorded), or the task itself when it exists. Rows
    the target holds already under the same keys are replaced."""
    source = await lookups.get_task(user_id, task_id)
    forked = not await Task.exists(user_id=user_id, public_id=validation.object_id(new_id))
    if forked:
        await tasks.fork_task(house, user_id, task_id, source.event_seq, new_id=new_id)
    limits = house.limits

    async def apply(draft: Draft) -> Change:
        conn, pk = draft.conn, draft.task.id
        if forked:  # the fork has the source's steps: its node runs map to them alike
            await _copied_nodes(conn, source.pk, pk, source.total_steps)
        size = await _copied(conn, GraphCheckpoint, source.pk, pk)
        size += await _copied(conn, GraphBlob, source.pk, pk)
        size += await _copied(conn, GraphWrite, source.pk, pk)
        if not size:
            raise Unchanged
        quota.check_task(limits, new_id, draft.task.stored_bytes, size, "taskId")
        draft.stored = size
        return Change(TaskEventKind.GRAPH_COPIED)

    return await nodes.write_thread(house, user_id, new_id, apply, None)


G = TypeVar("G", GraphCheckpoint, GraphBlob, GraphWrite)


async def _copied(conn: BaseDBAsyncClient, model: type[G], source: int, target: int) -> int:
    """Copy the source task's rows of ``model`` into the target task, in place of
    the target's own; the bytes this adds to the target."""
    rows = await model.filter(task_id=source).using_db(conn)
    held = model.filter(task_id=target).using_db(conn)
    size = sum(int(r.stored_bytes) for r in rows)
    size -= sum(int(r[0]) for r in await held.values_list("stored_bytes"))
    await held.delete()
    fields = sql.columns(model, "id", "task_id")
    copies = [model(task_id=target, **{f: getattr(r, f) for f in fields}) for r in rows]
    if copies:
        await model.bulk_create(copies, using_db=conn)
    return size


async def _copied_nodes(conn: BaseDBAsyncClient, source: int, target: int, steps: int) -> None:
    """Copy which steps show which node runs, for the ``steps`` the fork copied."""
    fields = sql.columns(GraphNode, "id", "task_id")
    rows = await GraphNode.filter(task_id=source, position__lt=steps).using_db(conn)
    copies = [GraphNode(task_id=target, **{f: getattr(r, f) for f in fields}) for r in rows]
    if copies:
        await GraphNode.bulk_create(copies, using_db=conn)


M = TypeVar("M", GraphCheckpoint, GraphWrite)


async def _rows(conn: BaseDBAsyncClient, model: type[M], where: str, params: list[Any]) -> list[M]:
    """The rows of ``model`` matching ``where`` (SQL, ``?`` placeholders), every
    column but the task's: on the write path, the statement through the ORM cost
    more than running it."""
    fields = sql.columns(model, "task_id")
    found = await sql.fetch(
        conn, f'SELECT {sql.names(fields)} FROM "{model._meta.db_table}" WHERE {where}', params
    )
    return [model(**sql.decode(model, row, fields)) for row in found]


def _writes_size(writes: Sequence[PendingWrite], field: str) -> int:
    """The bytes of pending writes toward the write's limit, or InvalidInput
    naming the field at fault."""
    size = 0
    for i, write in enumerate(writes):
        _text(write.task_key, f"{field}[{i}].taskId", KEY_LENGTH)
        _text(write.task_path, f"{field}[{i}].taskPath", GRAPH_NAMESPACE_LENGTH, empty=True)
        _text(write.channel, f"{field}[{i}].channel", KEY_LENGTH)
        size += _blob(write.value, f"{field}[{i}]") + len(write.channel)
    return size


async def _store_writes(
    draft: Draft, namespace: str, checkpoint_id: str, writes: Sequence[PendingWrite]
) -> int | None:
    """Store pending writes against a checkpoint, idempotent on (task, index): a
    write at an index already stored is kept, except at LangGraph's negative
    indexes, where another write replaces what it finds. The bytes it adds to
    the task's store, None when nothing was new."""
    if not writes:
        return None
    conn, pk = draft.conn, draft.task.id
    if all(w.idx >= 0 for w in writes):  # none replaces: stored unless held
        new = _new_writes(pk, namespace, checkpoint_id, writes)
        added = [n for n in await sql.stored_each(conn, new) if n is not None]
        return sum(added) if added else None
    keys = sorted({w.task_key for w in writes})
    mine = (
        f'"task_id" = ? AND "namespace" = ? AND "checkpoint_id" = ?'
        f' AND "task_key" IN ({sql.marks(keys)})'
    )
    found = await _rows(conn, GraphWrite, mine, [pk, namespace, checkpoint_id, *keys])
    held = {(r.task_key, r.idx): r for r in found}
    freed = 0
    replaced: list[int] = []
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for write in writes:
        key = (write.task_key, write.idx)
        old = held.get(key)
        if old is not None and (write.idx >= 0 or _same_write(old, write)):
            continue
        if old is not None:
            freed += old.stored_bytes
            replaced.append(old.id)
            del held[key]
        rows[key] = _write_row(pk, namespace, checkpoint_id, write)
    if not rows:
        return None
    for chunk in sql.chunks(replaced):
        await sql.execute(
            conn, f'DELETE FROM "graph_writes" WHERE "id" IN ({sql.marks(chunk)})', chunk
        )
    for part in sql.chunks(list(rows.values())):
        await sql.execute(conn, *sql.insert_rows(GraphWrite, part))
    return sum(int(r["stored_bytes"]) for r in rows.values()) - freed


def _write_row(pk: int, namespace: str, checkpoint_id: str, write: PendingWrite) -> dict[str, Any]:
    """A pending write's row, its bytes counted (``encoded_bytes``)."""
    return {
        "task_id": pk,
        "namespace": namespace,
        "checkpoint_id": checkpoint_id,
        "task_key": write.task_key,
        "task_path": write.task_path,
        "idx": write.idx,
        "channel": write.channel,
        "type": write.value.type,
        "payload": write.value.payload,
        "stored_bytes": encoded_bytes(
            write.value.payload,
            namespace,
            write.task_key,
            write.task_path,
            write.channel,
            write.value.type,
        ),
    }


def _new_rows(model: type[Model], rows: Sequence[Mapping[str, Any]]) -> list[sql.Statement]:
    """The inserts of the rows whose unique key the table does not hold yet, each
    telling what it inserted (``RETURNING``): what a lookup before the insert told
    in a statement more."""
    inserts: list[sql.Statement] = []
    for part in sql.chunks(rows):
        text, params = sql.insert_rows(model, part)
        inserts.append((f'{text} ON CONFLICT DO NOTHING RETURNING "stored_bytes"', params))
    return inserts


def _new_writes(
    pk: int, namespace: str, checkpoint_id: str, writes: Sequence[PendingWrite]
) -> list[sql.Statement]:
    """The inserts of pending writes at indexes not stored yet (``_new_rows``), the
    last of the writes at one index in ``writes`` standing for it."""
    last = {(w.task_key, w.idx): w for w in writes}.values()
    return _new_rows(GraphWrite, [_write_row(pk, namespace, checkpoint_id, w) for w in last])


def _same_write(row: GraphWrite, write: PendingWrite) -> bool:
    """Whether a stored write is this very one (a retry of it)."""
    return (row.task_path, row.channel, row.type, bytes(row.payload)) == (
        write.task_path,
        write.channel,
        write.value.type,
        write.value.payload,
    )


def _within(limits: validation.ContentLimits, size: int, field: str) -> None:
    if size > limits.checkpoint_bytes:
        raise InvalidInputError(
            field,
            f"is {size} bytes, more than the {limits.checkpoint_bytes} one write may store"
            " (RUNSTATE_MAX_CHECKPOINT_BYTES)",
        )


def _number(text: str) -> bool:
    """Whether ``text`` is a cursor's number: ASCII digits (``"²".isdigit()`` is true,
    and ``int("²")`` a ValueError), short enough for a 64-bit column."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _holdable(value: str, most: int) -> bool:
    """Whether a column of ``most`` characters could hold ``value``: a lookup of one
    it could not is refused by Tortoise (over-long) or PostgreSQL (a NUL)."""
    return len(value) <= most and validation.storable_text(value)


async def _thread(user_id: str, task_id: str) -> int:
    """The row id of the caller's task ``task_id``; NotFound without one."""
    validation.known_id(task_id, "task")
    row = await Task.filter(user_id=user_id, public_id=task_id).only("id").first()
    if row is None:
        raise NotFoundError("task", task_id)
    return row.id


async def get_checkpoint(
    user_id: str, task_id: str, namespace: str, checkpoint_id: str | None
) -> CheckpointView:
    """The checkpoint ``checkpoint_id`` of the task's namespace, or its latest: the
    last written, as ``prune`` keeps it (by the largest id as text, ``c9`` was the
    latest of ``c9``, ``c10``, ``c11`` written in that order, and KEEP_LATEST kept
    ``c11``); NotFound ("checkpoint") when there is none, at once for an id or a
    namespace no row could hold (Tortoise refuses to put one past its column in a
    query)."""
    pk = await _thread(user_id, task_id)
    if checkpoint_id is not None:
        validation.known_id(checkpoint_id, "checkpoint")
    if not _holdable(namespace, GRAPH_NAMESPACE_LENGTH):
        raise NotFoundError("checkpoint", checkpoint_id or "(none yet)")
    rows = GraphCheckpoint.filter(task_id=pk, namespace=namespace)
    if checkpoint_id is not None:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    row = await rows.order_by("-seq", "-id").first()
    if row is None:
        raise NotFoundError("checkpoint", checkpoint_id or "(none yet)")
    return (await _views([row], {pk: task_id}))[0]


async def list_checkpoints(
    user_id: str,
    *,
    task_id: str | None,
    namespace: str | None,
    before: str | None,
    metadata: Mapping[str, Any] | None,
    first: int,
    after: str | None = None,
) -> CheckpointPage:
    """The caller's checkpoints newest first (of one task, one namespace, before a
    checkpoint, with metadata holding every pair of ``metadata``), ``first`` at
    most; ``after`` is a page's cursor. A thread's are listed as they were written
    (``seq``), as ``get_checkpoint`` answers its latest and ``prune`` keeps it, and
    ``before`` names one of them (one it does not hold: nothing is before it); all
    the caller's threads together by id, the one order they share (LangGraph's ids
    sort by time). Read in batches by the index, so a page costs the same behind
    ten thousand checkpoints as behind ten."""
    first = validation.page_size(first)
    rows = GraphCheckpoint.filter(task__user_id=user_id)
    if namespace is not None:
        if not _holdable(namespace, GRAPH_NAMESPACE_LENGTH):  # no row holds it
            return CheckpointPage((), None)
        rows = rows.filter(namespace=namespace)
    if before is not None and not _holdable(before, ID_LENGTH):
        raise InvalidInputError("before", f"must be a checkpoint id (1 to {ID_LENGTH} characters)")
    order = "checkpoint_id"
    if task_id is not None:
        try:
            rows = rows.filter(task_id=await _thread(user_id, task_id))
        except NotFoundError:  # no such thread: none of its checkpoints to list
            return CheckpointPage((), None)
        order = "seq"
        if before is not None:
            named = await rows.filter(checkpoint_id=before).order_by("-seq").first()
            if named is None:
                return CheckpointPage((), None)
            rows = rows.filter(Q(seq__lt=named.seq) | Q(seq=named.seq, id__lt=named.id))
    elif before is not None:
        rows = rows.filter(checkpoint_id__lt=before)
    if after is not None:
        last, _, last_pk = after.rpartition("/")
        cursor_ok = _number(last) if order == "seq" else _holdable(last, ID_LENGTH)
        if not _number(last_pk) or not cursor_ok:
            raise InvalidInputError("after", "is not a cursor this list gave")
        at: Any = int(last) if order == "seq" else last
        rows = rows.filter(Q(**{f"{order}__lt": at}) | Q(**{order: at, "id__lt": int(last_pk)}))
    ordered = rows.order_by(f"-{order}", "-id").select_related("task")
    found: list[GraphCheckpoint] = []
    batch = max(first, 20)
    offset = 0
    while len(found) <= first:
        page = await ordered.offset(offset).limit(batch)
        offset += len(page)
        for row in page:
            if not metadata or all(row.metadata.get(k) == v for k, v in metadata.items()):
                found.append(row)
        if len(page) < batch:
            break
    more = len(found) > first
    found = found[:first]
    views = await _views(found, {r.task_id: r.task.public_id for r in found})
    cursor = f"{getattr(found[-1], order)}/{found[-1].id}" if more and found else None
    return CheckpointPage(tuple(views), cursor)


async def _views(
    rows: Sequence[GraphCheckpoint], threads: Mapping[int, str]
) -> list[CheckpointView]:
    """Checkpoint rows as views (``threads``: each task's public id), with the
    channel values their versions name and their pending writes: two statements for
    all of them, each reading by the tables' unique keys only what the rows name
    (every version of a channel, read and dropped, made a checkpoint's read grow
    with its thread's history)."""
    named = [{str(k): str(v) for k, v in r.channel_versions.items()} for r in rows]
    tasks = {r.task_id for r in rows}
    namespaces = {r.namespace for r in rows}
    blobs: dict[tuple[int, str, str, str], GraphBlob] = {}
    channels = {c for versions in named for c in versions}
    if channels:
        for b in await GraphBlob.filter(
            task_id__in=tasks,
            namespace__in=namespaces,
            channel__in=channels,
            version__in={v for versions in named for v in versions.values()},
        ):
            blobs[(b.task_id, b.namespace, b.channel, b.version)] = b
    writes: dict[tuple[int, str, str], list[GraphWrite]] = {}
    if rows:
        for w in await GraphWrite.filter(
            task_id__in=tasks,
            namespace__in=namespaces,
            checkpoint_id__in={r.checkpoint_id for r in rows},
        ).order_by("task_path", "task_key", "idx"):
            writes.setdefault((w.task_id, w.namespace, w.checkpoint_id), []).append(w)
    views = []
    for row, versions in zip(rows, named, strict=True):
        found = (blobs.get((row.task_id, row.namespace, c, v)) for c, v in versions.items())
        views.append(
            CheckpointView(
                thread_id=threads[row.task_id],
                namespace=row.namespace,
                checkpoint_id=row.checkpoint_id,
                parent_id=row.parent_id,
                checkpoint=Blob(row.type, bytes(row.payload)),
                metadata=row.metadata,
                channel_versions=versions,
                seq=row.seq,
                channels=tuple(
                    ChannelValue(b.channel, b.version, Blob(b.type, bytes(b.payload)))
                    for b in found
                    if b is not None
                ),
                pending_writes=tuple(
                    PendingWrite(
                        w.task_key, w.task_path, w.idx, w.channel, Blob(w.type, bytes(w.payload))
                    )
                    for w in writes.get((row.task_id, row.namespace, row.checkpoint_id), [])
                ),
            )
        )
    return views
