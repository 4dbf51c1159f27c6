"""The server's LangGraph storage (``threads.checkpoints``) where the conformance suite
does not look: which pending write wins, bytes and orphan rows after deletes,
DeltaChannel-aware pruning, bad input, and reads that cost the same behind ten
thousand checkpoints as behind ten."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tortoise import connections

from runstate.basics.enums import GraphPruneStrategy
from runstate.models import GraphBlob, GraphCheckpoint, GraphWrite, Task
from runstate.services.actions import sessions, tasks
from runstate.services.domain import quota
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.validation import ContentLimits
from runstate.services.threads import checkpoints
from runstate.services.write import engine
from runstate.services.write.house import House
from runstate.storage.clock import utcnow
from tests.integration.test_write_cost import Statements
from tests.support import opened

USER = "grapher"


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    limits = ContentLimits(checkpoint_bytes=4096)
    async with opened(f"sqlite://{tmp_path / 'checkpoints.db'}", limits=limits) as house:
        session = await sessions.start_session(house, USER, default_ttl=3600, session_id="s")
        await tasks.create_task(house, USER, session.id, goal="thread", steps=[], task_id="t")
        yield house


def blob(text: str) -> checkpoints.Blob:
    return checkpoints.Blob("msgpack", text.encode())


async def put(
    house: House, checkpoint_id: str, parent: str | None, values: dict[str, str], **metadata: Any
) -> None:
    """A checkpoint whose channels are ``values`` (each at the version of its value)."""
    await checkpoints.put_checkpoint(
        house,
        USER,
        "t",
        namespace="",
        checkpoint_id=checkpoint_id,
        parent_id=parent,
        checkpoint=blob(checkpoint_id),
        metadata=metadata,
        channel_versions={c: v for c, v in values.items()},
        channels=[checkpoints.ChannelValue(c, v, blob(v)) for c, v in values.items()],
    )


def pending(task: str, idx: int, value: str) -> checkpoints.PendingWrite:
    return checkpoints.PendingWrite(task, "", idx, "ch", blob(value))


async def write(house: House, checkpoint_id: str, idx: int, value: str) -> None:
    await checkpoints.put_writes(
        house,
        USER,
        "t",
        namespace="",
        checkpoint_id=checkpoint_id,
        writes=[pending("node", idx, value)],
    )


async def counts() -> tuple[int, int, int]:
    return (
        await GraphCheckpoint.all().count(),
        await GraphBlob.all().count(),
        await GraphWrite.all().count(),
    )


async def test_a_stored_index_keeps_its_first_write_and_a_special_one_the_last(
    house: House,
) -> None:
    """Guards ``put_writes``'s idempotence as LangGraph's savers have it: a task's
    write at an index already stored is kept (a retried super-step writes nothing
    new), while at a negative (special) index, an error or an interrupt, the last
    one stands. Seen failing with every index replaced."""
    await put(house, "c1", None, {})
    await write(house, "c1", 0, "first")
    await write(house, "c1", 0, "again")
    await write(house, "c1", -1, "old error")
    await write(house, "c1", -1, "new error")
    found = await checkpoints.get_checkpoint(USER, "t", "", "c1")
    assert [(w.idx, w.value.payload) for w in found.pending_writes] == [
        (-1, b"new error"),
        (0, b"first"),
    ]


async def test_a_checkpoint_or_a_write_sent_again_writes_nothing(house: House) -> None:
    """Guards idempotence by content, which lets the saver send no idempotency key
    (its statements were a fifth of a graph write): the same checkpoint and the same
    writes, a special one included, sent again log no event and change no row;
    another checkpoint under the same id replaces it. Seen failing with the stored
    checkpoint replaced whatever it held (one event more)."""
    await put(house, "c1", None, {"a": "1"})
    await write(house, "c1", 0, "x")
    await write(house, "c1", -1, "error")
    before = await Task.get(public_id="t")
    await put(house, "c1", None, {"a": "1"})
    await write(house, "c1", 0, "x")
    await write(house, "c1", -1, "error")
    after = await Task.get(public_id="t")
    assert (after.event_seq, after.stored_bytes) == (before.event_seq, before.stored_bytes)
    await put(house, "c1", None, {"a": "2"})
    replaced = await checkpoints.get_checkpoint(USER, "t", "", "c1")
    assert replaced.channel_versions == {"a": "2"}
    assert (await Task.get(public_id="t")).event_seq == before.event_seq + 1


async def test_a_checkpoint_carries_the_writes_against_its_parent_in_one_write(
    house: House,
) -> None:
    """Guards ``put_checkpoint``'s ``held``: the writes of two LangGraph tasks against
    the parent and the child checkpoint are one event, and the parent reads back
    with them pending; the same call
    again writes nothing, and a call whose writes are stored but whose checkpoint
    is new stores the checkpoint alone."""
    await put(house, "c0", None, {"a": "0"})
    before = await Task.get(public_id="t")
    held = [
        checkpoints.TaskWrites([pending("n1", 0, "x"), pending("n1", 1, "y")]),
        checkpoints.TaskWrites([pending("n2", 0, "z")]),
    ]
    given: dict[str, Any] = {
        "namespace": "",
        "parent_id": "c0",
        "checkpoint": blob("c1"),
        "metadata": {},
        "channel_versions": {"a": "1"},
        "channels": [checkpoints.ChannelValue("a", "1", blob("1"))],
        "held": held,
    }
    await checkpoints.put_checkpoint(house, USER, "t", checkpoint_id="c1", **given)
    after = await Task.get(public_id="t")
    assert after.event_seq == before.event_seq + 1
    parent = await checkpoints.get_checkpoint(USER, "t", "", "c0")
    assert [(w.task_key, w.idx, w.value.payload) for w in parent.pending_writes] == [
        ("n1", 0, b"x"),
        ("n1", 1, b"y"),
        ("n2", 0, b"z"),
    ]
    await checkpoints.put_checkpoint(house, USER, "t", checkpoint_id="c1", **given)
    assert (await Task.get(public_id="t")).event_seq == after.event_seq
    await checkpoints.put_checkpoint(house, USER, "t", checkpoint_id="c2", **given)
    assert (await Task.get(public_id="t")).event_seq == after.event_seq + 1
    assert await counts() == (3, 2, 3)


async def test_deletes_give_every_byte_back_and_leave_no_orphan_rows(house: House) -> None:
    """Guards the byte counts and the orphan sweep of prune and clear: KEEP_LATEST
    leaves the latest checkpoint, its writes and the values it names (no other);
    clearing leaves none, and the task and the user hold what they did before,
    but for the events' own rows. Seen failing with the values no checkpoint names
    left behind."""
    before = await Task.get(public_id="t")
    held = await quota.held(USER)
    await put(house, "c1", None, {"a": "1", "b": "1"})
    await write(house, "c1", 0, "x")
    await put(house, "c2", "c1", {"a": "2", "b": "1"})
    await write(house, "c2", 0, "y")
    await put(house, "c3", "c2", {"a": "3", "b": "1"})
    assert await counts() == (3, 4, 2)
    await checkpoints.prune(house, USER, "t", GraphPruneStrategy.KEEP_LATEST)
    assert await counts() == (1, 2, 0)
    assert {(b.channel, b.version) for b in await GraphBlob.all()} == {("a", "3"), ("b", "1")}
    await checkpoints.clear(house, USER, "t")
    assert await counts() == (0, 0, 0)
    after = await Task.get(public_id="t")
    events = after.event_seq - before.event_seq
    assert after.stored_bytes == before.stored_bytes + events * quota.ROW_BYTES
    assert await quota.held(USER) == held + events * quota.ROW_BYTES


async def test_keep_latest_keeps_the_ancestors_a_delta_channel_is_rebuilt_from(
    house: House,
) -> None:
    """Guards DeltaChannel-aware pruning: a latest checkpoint whose metadata says its
    delta channel's last snapshot is 3 super-steps back keeps those 3 ancestors
    (and their writes); the control, the same chain without the counters, keeps
    the latest alone."""
    parent = None
    for i in range(6):
        counters = {"counters_since_delta_snapshot": {"log": [2, 3]}} if i == 5 else {}
        await put(house, f"c{i}", parent, {}, **counters)
        await write(house, f"c{i}", 0, f"w{i}")
        parent = f"c{i}"
    await checkpoints.prune(house, USER, "t", GraphPruneStrategy.KEEP_LATEST)
    kept = (
        await GraphCheckpoint.all()
        .order_by("checkpoint_id")
        .values_list("checkpoint_id", flat=True)
    )
    assert [str(k) for k in kept] == ["c2", "c3", "c4", "c5"]
    assert await GraphWrite.all().count() == 4
    await checkpoints.clear(house, USER, "t")
    for i in range(3):
        await put(house, f"d{i}", f"d{i - 1}" if i else None, {})
    await checkpoints.prune(house, USER, "t", GraphPruneStrategy.KEEP_LATEST)
    left = await GraphCheckpoint.all().values_list("checkpoint_id", flat=True)
    assert [str(k) for k in left] == ["d2"]


async def listed(**where: Any) -> list[str]:
    """The ids ``list_checkpoints`` answers for ``where``, a page of 10."""
    page = await checkpoints.list_checkpoints(
        USER,
        **{"task_id": "t", "namespace": "", "before": None, "metadata": None} | where,
        first=10,
    )
    return [c.checkpoint_id for c in page.items]


async def test_latest_is_the_last_written_checkpoint_everywhere(house: House) -> None:
    """Guards one meaning of "latest": of ``c9``, ``c10`` and ``c11`` written in
    that order, ``c11`` is the latest a read without an id answers, the first of
    the thread's list (``before`` counting in the same order), and what
    KEEP_LATEST keeps, so a prune never changes what the latest read answers.
    By the largest id as text, KEEP_LATEST once kept ``c9`` (issue 38, item 8),
    and then the read still answered ``c9`` while KEEP_LATEST kept ``c11``. A
    cursor that is not the thread's (a seq and a row id, ASCII digits) is refused:
    ``"²"`` passes ``isdigit`` and failed ``int``."""
    parent = None
    for name in ("c9", "c10", "c11"):
        await put(house, name, parent, {})
        parent = name
    latest = await checkpoints.get_checkpoint(USER, "t", "", None)
    assert latest.checkpoint_id == "c11"
    assert await listed() == ["c11", "c10", "c9"]
    assert await listed(before="c10") == ["c9"]
    assert await listed(before="c1") == []  # not among the thread's: nothing before it
    for cursor in ("²/1", "1/²", "c9/1", "9" * 30 + "/1"):  # a thread's cursor is seq/row
        with pytest.raises(InvalidInputError, match="after: is not a cursor this list gave"):
            await listed(after=cursor)
    await checkpoints.prune(house, USER, "t", GraphPruneStrategy.KEEP_LATEST)
    left = await GraphCheckpoint.all().values_list("checkpoint_id", flat=True)
    assert [str(k) for k in left] == ["c11"]
    assert (await checkpoints.get_checkpoint(USER, "t", "", None)).checkpoint_id == "c11"


async def test_bad_input_is_refused_and_writes_nothing(house: House) -> None:
    """Guards the checks before a write: a checkpoint past RUNSTATE_MAX_CHECKPOINT_BYTES
    (4 KiB here, the writes it carries counted in), metadata that is not an object,
    an empty checkpoint id, writes carried without the parent they are written
    against and a carried write without its task id are InvalidInput naming the
    field, and the task is left as it was."""
    before = await Task.get(public_id="t")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"channels": [checkpoints.ChannelValue("a", "1", blob("x" * 5000))]}, "checkpoint"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"checkpoint_id": ""}, "checkpointId"),
        ({"held": [checkpoints.TaskWrites([pending("node", 0, "x")])]}, "writes"),
        (
            {"parent_id": "c0", "held": [checkpoints.TaskWrites([pending("node", 0, "x" * 5000)])]},
            "checkpoint",
        ),
        (
            {"parent_id": "c0", "held": [checkpoints.TaskWrites([pending("", 0, "x")])]},
            "writes[0].writes[0].taskId",
        ),
    ]
    for change, field in cases:
        given: dict[str, Any] = {
            "namespace": "",
            "checkpoint_id": "c1",
            "parent_id": None,
            "checkpoint": blob("c"),
            "metadata": {},
            "channel_versions": {"a": "1"},
            "channels": [],
            **change,
        }
        with pytest.raises(InvalidInputError) as refused:
            await checkpoints.put_checkpoint(house, USER, "t", **given)
        assert refused.value.field == field
    after = await Task.get(public_id="t")
    assert (after.version, after.event_seq, await counts()) == (
        before.version,
        before.event_seq,
        (0, 0, 0),
    )


async def add_checkpoints(prefix: str, count: int) -> None:
    """``count`` more checkpoints in the thread, older than any the test writes,
    each with a version of channel "a" of its own."""
    pk = (await Task.get(public_id="t")).id
    ids = [f"{prefix}{i:08}" for i in range(count)]
    rows = [
        GraphCheckpoint(
            task_id=pk,
            namespace="",
            checkpoint_id=checkpoint_id,
            type="msgpack",
            payload=b"old",
            metadata={"step": i},
            channel_versions={"a": checkpoint_id},
            seq=1,
            stored_bytes=0,
        )
        for i, checkpoint_id in enumerate(ids)
    ]
    await GraphCheckpoint.bulk_create(rows, batch_size=1000)
    blobs = [
        GraphBlob(
            task_id=pk,
            namespace="",
            channel="a",
            version=version,
            type="msgpack",
            payload=b"old",
            stored_bytes=0,
        )
        for version in ids
    ]
    await GraphBlob.bulk_create(blobs, batch_size=1000)


async def read_statements(house: House, new: str) -> list[str]:
    """The statements of storing a checkpoint ``new`` (naming a new version of "a"),
    reading the latest and a page of the list, as run (SQLite's trace fills the
    values in)."""
    async with Statements() as statements:
        await put(house, new, None, {"a": new})
        await checkpoints.get_checkpoint(USER, "t", "", None)
        await checkpoints.list_checkpoints(
            USER, task_id="t", namespace="", before=None, metadata=None, first=10
        )
    return statements.seen


def shapes(statements: list[str]) -> list[str]:
    """Statements with their values left out."""
    return [re.sub(r"'(?:[^']|'')*'|\b\d+\b", "?", s) for s in statements]


async def test_reads_cost_the_same_behind_ten_thousand_checkpoints(
    house: House, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the indexes of the graph tables and what is read by them: storing a
    checkpoint, reading the latest and a page of the list run the same statements
    behind 10,000 checkpoints (each with a version of the same channel) as behind
    10; SQLite searches each table by an index, never scans one, and finds channel
    values by their whole key, version included. Seen failing with the values
    looked up by channel alone (every version of it read, then dropped). The
    write path's clock stands still: a write a second after the session's last
    touch touches it again (one statement more), and which write that is depends
    on this machine's speed."""
    still = utcnow()
    monkeypatch.setattr(engine, "utcnow", lambda: still)
    await add_checkpoints("a", 10)
    few = await read_statements(house, "z1")
    await add_checkpoints("b", 9990)
    many = await read_statements(house, "z2")
    assert shapes(few) == shapes(many)
    client = connections.get("default")
    for statement in many:
        if statement.startswith("SELECT"):
            _, plan = await client.execute_query(f"EXPLAIN QUERY PLAN {statement}")
            details = [str(row[-1]) for row in plan]
            scans = [d for d in details if d.startswith("SCAN") and d != "SCAN CONSTANT ROW"]
            assert not scans, (statement, details)  # a constant row is not a table
            if 'FROM "graph_checkpoints"' in statement:  # the latest and the list
                sorts = [d for d in details if "TEMP B-TREE" in d]
                assert not sorts, (statement, details)  # ordered by an index, not sorted
            if 'FROM "graph_blobs"' in statement:
                assert any("version=?" in d for d in details), (statement, details)
