"""Fill the holes that keyed writes which changed nothing left in task logs.

Before this release, a write that found nothing to change (a ``resumeTask`` of a
task already resumed, a LangGraph checkpoint already stored, ...) sent with an
``idempotencyKey`` committed its opening statement with the key's row: the
task's version and seq moved by one, and no event was written at that seq. Such
a task's log lacks that seq, and ``taskAt`` of it failed.

Each missing seq gets the event the write would have logged had it logged one:
TASK_STATUS_CHANGED to the status the task already had, at the time of the event
before it, the version one past that event's (the write moved it; never past the
version of the next stored event or the task's own), by the task's user, with a
note saying so. Nothing else changed at that seq, so ``taskAt`` of it is the task
as it stood at the seq before, with that version. Each filled row counts toward
the task's and its user's stored bytes as any event row does (100 bytes).
"""

from json import loads

from tortoise import migrations
from tortoise.migrations import operations as ops

ROW_BYTES = 100
NOTE = (
    "Filled by runstate's migration 0016: a write sent with an idempotency key changed"
    " nothing here, and an earlier release moved the version and seq without an event."
)


def _sql(client, text):
    if client.capabilities.dialect == "sqlite":
        return text
    n = 0
    out = []
    for ch in text:
        if ch == "?":
            n += 1
            out.append(f"${n}")
        else:
            out.append(ch)
    return "".join(out)


async def fill_holes(apps, schema_editor):
    client = schema_editor.client
    holed = await client.execute_query_dict(
        'SELECT t."id", t."event_seq", t."version", t."user_id", t."status", t."created_at"'
        ' FROM "tasks" t WHERE t."event_seq" >'
        ' (SELECT COUNT(*) FROM "task_events" e WHERE e."task_id" = t."id")'
        ' ORDER BY t."id"'
    )
    for task in holed:
        rows = await client.execute_query_dict(
            _sql(
                client,
                'SELECT "seq", "task_version", "status", "at", "delta" FROM "task_events"'
                ' WHERE "task_id" = ? ORDER BY "seq"',
            ),
            [task["id"]],
        )
        by_seq = {row["seq"]: row for row in rows}
        filled = 0
        previous = None
        for seq in range(1, task["event_seq"] + 1):
            if seq in by_seq:
                previous = by_seq[seq]
                continue
            later = [r["task_version"] for s, r in by_seq.items() if s > seq]
            ceiling = min([task["version"], *later])
            version = min(ceiling, 1 if previous is None else previous["task_version"] + 1)
            row = {
                "seq": seq,
                "task_version": version,
                "status": task["status"] if previous is None else previous["status"],
                "at": task["created_at"] if previous is None else previous["at"],
                "delta": _stalled_only(previous),
            }
            await client.execute_insert(
                _sql(
                    client,
                    'INSERT INTO "task_events" ("task_id", "seq", "task_version", "kind",'
                    ' "step_index", "tool_name", "at", "status", "delta", "actor", "note")'
                    " VALUES (?, ?, ?, 'TASK_STATUS_CHANGED', NULL, NULL, ?, ?, ?, ?, ?)",
                ),
                [
                    task["id"],
                    seq,
                    version,
                    row["at"],
                    row["status"],
                    row["delta"],
                    task["user_id"],
                    NOTE,
                ],
            )
            by_seq[seq] = previous = row
            filled += 1
        if filled:
            added = filled * ROW_BYTES
            await client.execute_query(
                _sql(client, 'UPDATE "tasks" SET "stored_bytes" = "stored_bytes" + ? WHERE "id" = ?'),
                [added, task["id"]],
            )
            await client.execute_query(
                _sql(
                    client,
                    'UPDATE "user_usage" SET "stored_bytes" = "stored_bytes" + ? WHERE "user_id" = ?',
                ),
                [added, task["user_id"]],
            )


def _stalled_only(previous):
    """The filled event's delta: the task stalled as it stood before, and nothing else
    (a tool state, a lease, a budget belong to the events that changed them)."""
    if previous is None or previous["delta"] is None:
        return None
    delta = previous["delta"]
    kept = loads(delta) if isinstance(delta, str) else delta
    return '{"stalled":true}' if kept.get("stalled") else None


class Migration(migrations.Migration):
    dependencies = [('runstate', '0015_spend')]

    initial = False

    operations = [
        ops.RunPython(fill_holes),
    ]
