"""Events become deltas: release 1 stored the whole task in every event row.

The conversion compares each v1 snapshot with the one before it: a step whose
changing fields differ gets a ``step_versions`` row at that seq, each event gets
the task's status, a tool-state event keeps the tool state it left, a lease event
the lease; steps and tool states learn the seq that added them and the seq that
last changed them. Then the snapshot column goes. Nothing of the history is lost:
``taskAt`` at every seq answers what the v1 snapshot at that seq held.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from runstate.basics.enums import StepStatus, TaskStatus
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index
from datetime import datetime

_MUTABLE = ("status", "output", "attempts", "error", "started_at", "completed_at")
_INITIAL = {"status": "PENDING", "output": None, "attempts": 0, "error": None, "started_at": None, "completed_at": None}
_TOOL = ("tool_name", "status", "version", "retry_count", "max_retries", "last_result", "last_error", "rate_limit_reset_at", "updated_at")


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


def _time(value):
    return None if value is None else datetime.fromisoformat(value)


def _json(value):
    return None if value is None else dumps(value, separators=(",", ":"))


def _box(value):
    return None if value is None else _json({"v": value})


async def snapshots_to_deltas(apps, schema_editor):
    client = schema_editor.client
    tasks = await client.execute_query_dict('SELECT "id" FROM "tasks" ORDER BY "id"')
    for task in tasks:
        task_pk = task["id"]
        rows = await client.execute_query_dict(
            _sql(client, 'SELECT "id", "seq", "kind", "snapshot" FROM "task_events" WHERE "task_id" = ? ORDER BY "seq"'),
            [task_pk],
        )
        steps = {}
        tools = {}
        step_seqs = {}
        tool_seqs = {}
        leased = False
        for row in rows:
            seq = row["seq"]
            snapshot = row["snapshot"]
            if isinstance(snapshot, str):
                snapshot = loads(snapshot)
            for step in snapshot["steps"]:
                index = step["index"]
                now = {name: step[name] for name in _MUTABLE}
                before = steps.get(index)
                if before is None:
                    step_seqs[index] = [seq, 0]
                if (before is None and now != _INITIAL) or (before is not None and now != before):
                    step_seqs[index][1] = seq
                    await client.execute_query(
                        _sql(client, 'INSERT INTO "step_versions" ("task_id", "position", "seq", "status", "output", "attempts", "error", "started_at", "completed_at") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)'),
                        [task_pk, index, seq, now["status"], _box(now["output"]), now["attempts"], now["error"], _time(now["started_at"]), _time(now["completed_at"])],
                    )
                steps[index] = now
            delta = {}
            for tool in snapshot["tool_states"]:
                name = tool["tool_name"]
                now = {key: tool[key] for key in _TOOL}
                if name not in tools:
                    tool_seqs[name] = [seq, 0]
                if tools.get(name) != now:
                    tool_seqs[name][1] = seq
                    if row["kind"] == "TOOL_STATE_CHANGED":
                        delta["tool"] = {"task_id": snapshot["id"], **now}
                tools[name] = now
            if row["kind"] in ("LOCK_ACQUIRED", "LOCK_RELEASED"):
                lock = snapshot["lock"]
                delta["lock"] = None if lock is None else {"task_id": snapshot["id"], **lock}
            leased = leased or row["kind"] == "LOCK_ACQUIRED"
            working = snapshot["status"] in ("RUNNING", "WAITING_TOOL")
            if working and snapshot["lock"] is None and leased:
                delta["stalled"] = True
            await client.execute_query(
                _sql(client, 'UPDATE "task_events" SET "status" = ?, "delta" = ? WHERE "id" = ?'),
                [snapshot["status"], _json(delta or None), row["id"]],
            )
        for index, (created, changed) in step_seqs.items():
            await client.execute_query(
                _sql(client, 'UPDATE "steps" SET "created_seq" = ?, "changed_seq" = ? WHERE "task_id" = ? AND "position" = ?'),
                [created, changed, task_pk, index],
            )
        for name, (created, changed) in tool_seqs.items():
            await client.execute_query(
                _sql(client, 'UPDATE "tool_states" SET "created_seq" = ?, "changed_seq" = ? WHERE "task_id" = ? AND "tool_name" = ?'),
                [created, changed, task_pk, name],
            )


class Migration(migrations.Migration):
    dependencies = [('runstate', '0002_installation')]

    initial = False

    operations = [
        ops.CreateModel(
            name='StepVersion',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='step_versions', on_delete=OnDelete.CASCADE)),
                ('position', fields.IntField()),
                ('seq', fields.IntField()),
                ('output', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('status', fields.CharEnumField(description='PENDING: PENDING\nRUNNING: RUNNING\nSUCCESS: SUCCESS\nFAILED: FAILED\nSKIPPED: SKIPPED', enum_type=StepStatus, max_length=16)),
                ('attempts', fields.IntField(default=0)),
                ('error', fields.TextField(null=True, unique=False)),
                ('started_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('completed_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'step_versions', 'app': 'runstate', 'unique_together': (('task_id', 'position', 'seq'),), 'pk_attr': 'id', 'table_description': "A step's changing fields as they stood just after event ``seq``: the history."},
            bases=['Model'],
        ),
        ops.AddField(
            model_name='Step',
            name='changed_seq',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Step',
            name='created_seq',
            field=fields.IntField(default=1, db_default=1),
        ),
        ops.AddField(
            model_name='TaskEvent',
            name='delta',
            field=fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads),
        ),
        ops.AddField(
            model_name='TaskEvent',
            name='status',
            field=fields.CharEnumField(description='PLANNED: PLANNED\nRUNNING: RUNNING\nWAITING_TOOL: WAITING_TOOL\nAWAITING_DECISION: AWAITING_DECISION\nCOMPLETED: COMPLETED\nFAILED: FAILED\nCANCELLED: CANCELLED', db_default=TaskStatus.PLANNED, enum_type=TaskStatus, max_length=24),
        ),
        ops.AddIndex(
            model_name='TaskEvent',
            index=Index(fields=['task_id', 'kind', 'tool_name', 'seq'], name='task_events_part'),
        ),
        ops.AddField(
            model_name='ToolState',
            name='changed_seq',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='ToolState',
            name='created_seq',
            field=fields.IntField(default=1, db_default=1),
        ),
        ops.RunPython(snapshots_to_deltas),
        ops.RemoveField(model_name='TaskEvent', name='snapshot'),
    ]
