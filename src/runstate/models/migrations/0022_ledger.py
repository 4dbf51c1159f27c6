"""A session's admission ledger and its schedules (version 5 of the contract):
``submissions`` (one input each, ``seq`` unique per session, a schedule's due time
unique per schedule), ``schedules``, the session's ledger position
(``submission_seq``) and, on each task, the submission it carries out and whether
it was asked to stop. Every column added to an existing table is nullable or has
a database default, so no table is rebuilt. The JSON columns name the standard
library's json, as 0012 does: orjson, which ``makemigrations`` finds in a dev
environment, is not installed by ``make run``."""

from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from runstate.basics.enums import AdmissionPolicy, MisfirePolicy, SubmissionStatus
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index

ONE_ACTIVE = (
    'CREATE UNIQUE INDEX "submissions_one_active" ON "submissions" ("session_id")'
    " WHERE \"status\" = 'ACTIVE'"
)
"""At most one ACTIVE submission per session, held by the database itself."""

class Migration(migrations.Migration):
    dependencies = [('runstate', '0021_checkpoints_written')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Schedule',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('public_id', fields.CharField(max_length=64)),
                ('user_id', fields.CharField(max_length=128)),
                ('session', fields.ForeignKeyField('runstate.Session', source_field='session_id', db_constraint=True, to_field='id', related_name='schedules', on_delete=OnDelete.CASCADE)),
                ('version', fields.IntField(default=1)),
                ('cron', fields.CharField(max_length=200)),
                ('timezone', fields.CharField(max_length=64)),
                ('goal', fields.TextField(unique=False)),
                ('steps', fields.JSONField(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('input', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('policy', fields.CharEnumField(description='REJECT: REJECT\nENQUEUE: ENQUEUE\nINTERRUPT: INTERRUPT\nROLLBACK: ROLLBACK', enum_type=AdmissionPolicy, max_length=16)),
                ('misfire', fields.CharEnumField(description='SKIP: SKIP\nRUN_ONCE: RUN_ONCE', enum_type=MisfirePolicy, max_length=16)),
                ('enabled', fields.BooleanField(default=True)),
                ('next_fire_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('last_fire_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('stored_bytes', fields.BigIntField(default=0, db_default=0)),
            ],
            options={'table': 'schedules', 'app': 'runstate', 'unique_together': (('user_id', 'public_id'),), 'indexes': [Index(fields=['next_fire_at'], name='schedules_due'), Index(fields=['session_id', 'id'], name='schedules_session'), Index(fields=['user_id', 'id'], name='schedules_user')], 'pk_attr': 'id', 'table_description': 'Fires a submission into its session at each due time of ``cron`` in'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Submission',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('public_id', fields.CharField(max_length=64)),
                ('user_id', fields.CharField(max_length=128)),
                ('session', fields.ForeignKeyField('runstate.Session', source_field='session_id', db_constraint=True, to_field='id', related_name='submissions', on_delete=OnDelete.CASCADE)),
                ('seq', fields.IntField()),
                ('input', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('policy', fields.CharEnumField(description='REJECT: REJECT\nENQUEUE: ENQUEUE\nINTERRUPT: INTERRUPT\nROLLBACK: ROLLBACK', enum_type=AdmissionPolicy, max_length=16)),
                ('status', fields.CharEnumField(description='QUEUED: QUEUED\nACTIVE: ACTIVE\nCOMPLETED: COMPLETED\nFAILED: FAILED\nINTERRUPTED: INTERRUPTED\nROLLED_BACK: ROLLED_BACK\nCANCELLED: CANCELLED\nSKIPPED: SKIPPED', enum_type=SubmissionStatus, max_length=16)),
                ('rank', fields.SmallIntField(default=1)),
                ('reason', fields.TextField(null=True, unique=False)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', null=True, db_constraint=True, to_field='id', related_name=False, on_delete=OnDelete.SET_NULL)),
                ('stop', fields.CharEnumField(null=True, description='QUEUED: QUEUED\nACTIVE: ACTIVE\nCOMPLETED: COMPLETED\nFAILED: FAILED\nINTERRUPTED: INTERRUPTED\nROLLED_BACK: ROLLED_BACK\nCANCELLED: CANCELLED\nSKIPPED: SKIPPED', enum_type=SubmissionStatus, max_length=16)),
                ('displaced_by', fields.CharField(null=True, max_length=64)),
                ('schedule_id', fields.IntField(null=True)),
                ('scheduled_for', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('actor', fields.CharField(max_length=144)),
                ('changed_seq', fields.IntField(default=0)),
                ('spent_input_tokens', fields.BigIntField(default=0)),
                ('spent_output_tokens', fields.BigIntField(default=0)),
                ('spent_cost_micros', fields.BigIntField(default=0)),
                ('spent_calls', fields.IntField(default=0)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('updated_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('stored_bytes', fields.BigIntField(default=0, db_default=0)),
            ],
            options={'table': 'submissions', 'app': 'runstate', 'unique_together': (('user_id', 'public_id'), ('session_id', 'seq'), ('schedule_id', 'scheduled_for')), 'indexes': [Index(fields=['session_id', 'status', 'rank', 'seq'], name='submissions_turn'), Index(fields=['user_id', 'status'], name='submissions_user_status'), Index(fields=['task_id'], name='submissions_task'), Index(fields=['session_id', 'changed_seq'], name='submissions_changed'), Index(fields=['status', 'stop'], name='submissions_stopping')], 'pk_attr': 'id', 'table_description': "One input admitted into a session's ledger (``services.write.ledger``):"},
            bases=['Model'],
        ),
        ops.AddField(
            model_name='Session',
            name='ledger_seq',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Session',
            name='submission_seq',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Task',
            name='interrupt_requested',
            field=fields.BooleanField(default=False, db_default=False),
        ),
        ops.AddField(
            model_name='Task',
            name='submission_id',
            field=fields.IntField(null=True),
        ),
        ops.RunSQL(ONE_ACTIVE),
    ]
