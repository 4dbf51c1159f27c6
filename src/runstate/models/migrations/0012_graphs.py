"""LangGraph checkpoints, their channel blobs and pending writes, per task.

The event kinds gain GRAPH_CHECKPOINT, GRAPH_WRITES, GRAPH_CLEARED, GRAPH_PRUNED
and GRAPH_COPIED. Only the field's description changes with them (the column
stays a VARCHAR(24)), so that change is made to the migration state alone: an
AlterField would rebuild ``task_events`` on SQLite, losing its indexes (see
0006), for nothing.
"""

from typing import Any

from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from runstate.basics.enums import TaskEventKind
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index

class DescribeField(ops.AlterField):
    """An AlterField of the migration state only: the column itself is unchanged."""

    async def database_forward(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def database_backward(self, *args: Any, **kwargs: Any) -> None:
        return None


class Migration(migrations.Migration):
    dependencies = [('runstate', '0011_key_bytes')]

    initial = False

    operations = [
        ops.CreateModel(
            name='GraphBlob',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='graph_blobs', on_delete=OnDelete.CASCADE)),
                ('namespace', fields.CharField(max_length=1024)),
                ('channel', fields.CharField(max_length=255)),
                ('version', fields.CharField(max_length=128)),
                ('type', fields.CharField(max_length=32)),
                ('payload', fields.BinaryField()),
                ('stored_bytes', fields.BigIntField()),
            ],
            options={'table': 'graph_blobs', 'app': 'runstate', 'unique_together': (('task_id', 'namespace', 'channel', 'version'),), 'pk_attr': 'id', 'table_description': "One channel's value at one version in a thread's namespace, as the saver's"},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='GraphCheckpoint',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='graph_checkpoints', on_delete=OnDelete.CASCADE)),
                ('namespace', fields.CharField(max_length=1024)),
                ('checkpoint_id', fields.CharField(max_length=64)),
                ('parent_id', fields.CharField(null=True, max_length=64)),
                ('type', fields.CharField(max_length=32)),
                ('payload', fields.BinaryField()),
                ('metadata', fields.JSONField(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('channel_versions', fields.JSONField(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('run_id', fields.CharField(null=True, max_length=255)),
                ('seq', fields.IntField()),
                ('stored_bytes', fields.BigIntField()),
            ],
            options={'table': 'graph_checkpoints', 'app': 'runstate', 'unique_together': (('task_id', 'namespace', 'checkpoint_id'),), 'indexes': [Index(fields=['task_id', 'checkpoint_id'], name='graph_checkpoints_newest'), Index(fields=['run_id'], name='graph_checkpoints_run')], 'pk_attr': 'id', 'table_description': 'One LangGraph checkpoint of a thread, the thread being the task.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='GraphWrite',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='graph_writes', on_delete=OnDelete.CASCADE)),
                ('namespace', fields.CharField(max_length=1024)),
                ('checkpoint_id', fields.CharField(max_length=64)),
                ('task_key', fields.CharField(max_length=255)),
                ('task_path', fields.CharField(default='', max_length=1024)),
                ('idx', fields.IntField()),
                ('channel', fields.CharField(max_length=255)),
                ('type', fields.CharField(max_length=32)),
                ('payload', fields.BinaryField()),
                ('stored_bytes', fields.BigIntField()),
            ],
            options={'table': 'graph_writes', 'app': 'runstate', 'unique_together': (('task_id', 'namespace', 'checkpoint_id', 'task_key', 'idx'),), 'pk_attr': 'id', 'table_description': 'A pending write of one LangGraph task (``task_key``) against a checkpoint:'},
            bases=['Model'],
        ),
        DescribeField(
            model_name='TaskEvent',
            name='kind',
            field=fields.CharEnumField(description='SNAPSHOT: SNAPSHOT\nTASK_CREATED: TASK_CREATED\nTASK_STATUS_CHANGED: TASK_STATUS_CHANGED\nSTEPS_ADDED: STEPS_ADDED\nSTEP_STARTED: STEP_STARTED\nSTEP_SUCCEEDED: STEP_SUCCEEDED\nSTEP_FAILED: STEP_FAILED\nSTEP_SKIPPED: STEP_SKIPPED\nSTEP_RESET: STEP_RESET\nCHECKPOINT: CHECKPOINT\nTOOL_STATE_CHANGED: TOOL_STATE_CHANGED\nLOCK_ACQUIRED: LOCK_ACQUIRED\nLOCK_RELEASED: LOCK_RELEASED\nGRAPH_CHECKPOINT: GRAPH_CHECKPOINT\nGRAPH_WRITES: GRAPH_WRITES\nGRAPH_CLEARED: GRAPH_CLEARED\nGRAPH_PRUNED: GRAPH_PRUNED\nGRAPH_COPIED: GRAPH_COPIED', enum_type=TaskEventKind, max_length=24),
        ),
    ]
