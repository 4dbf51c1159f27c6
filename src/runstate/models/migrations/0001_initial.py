from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from runstate.basics.enums import SessionStatus, StepStatus, TaskEventKind, TaskStatus, ToolStatus
from tortoise.fields.base import OnDelete
from tortoise import fields
from tortoise.indexes import Index

class Migration(migrations.Migration):
    initial = True

    operations = [
        ops.CreateModel(
            name='ApiToken',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('user_id', fields.CharField(db_index=True, max_length=128)),
                ('token_hash', fields.CharField(unique=True, max_length=64)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('revoked_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'api_tokens', 'app': 'runstate', 'pk_attr': 'id', 'table_description': 'A bearer token, of which only the SHA-256 digest is stored.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Session',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('public_id', fields.CharField(max_length=64)),
                ('user_id', fields.CharField(max_length=128)),
                ('status', fields.CharEnumField(description='ACTIVE: ACTIVE\nPAUSED: PAUSED\nCOMPLETED: COMPLETED\nEXPIRED: EXPIRED', enum_type=SessionStatus, max_length=16)),
                ('version', fields.IntField(default=1)),
                ('message_count', fields.IntField(default=0)),
                ('ttl_seconds', fields.IntField()),
                ('metadata', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('last_active_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('expires_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'sessions', 'app': 'runstate', 'unique_together': (('user_id', 'public_id'),), 'indexes': [Index(fields=['user_id', 'id'], name='sessions_user_newest'), Index(fields=['user_id', 'status', 'id'], name='sessions_user_status'), Index(fields=['status', 'expires_at'], name='sessions_expiry')], 'pk_attr': 'id', 'table_description': "One user's conversation. ``expires_at`` is kept as ``last_active_at + ttl_seconds``."},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Task',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('public_id', fields.CharField(max_length=64)),
                ('user_id', fields.CharField(max_length=128)),
                ('session', fields.ForeignKeyField('runstate.Session', source_field='session_id', db_constraint=True, to_field='id', related_name='tasks', on_delete=OnDelete.CASCADE)),
                ('goal', fields.TextField(unique=False)),
                ('status', fields.CharEnumField(description='PLANNED: PLANNED\nRUNNING: RUNNING\nWAITING_TOOL: WAITING_TOOL\nAWAITING_DECISION: AWAITING_DECISION\nCOMPLETED: COMPLETED\nFAILED: FAILED\nCANCELLED: CANCELLED', enum_type=TaskStatus, max_length=24)),
                ('version', fields.IntField(default=1)),
                ('current_step', fields.IntField(default=0)),
                ('total_steps', fields.IntField(default=0)),
                ('event_seq', fields.IntField(default=0)),
                ('lock_holder', fields.CharField(null=True, max_length=128)),
                ('lock_token', fields.IntField(default=0)),
                ('lock_expires_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('updated_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'tasks', 'app': 'runstate', 'unique_together': (('user_id', 'public_id'),), 'indexes': [Index(fields=['user_id', 'id'], name='tasks_user_newest'), Index(fields=['user_id', 'status', 'id'], name='tasks_user_status'), Index(fields=['session_id', 'id'], name='tasks_session_newest'), Index(fields=['session_id', 'status', 'id'], name='tasks_session_status')], 'pk_attr': 'id', 'table_description': 'One multi-step job. The lease lives on the task row (``lock_*``) so that the'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Step',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='steps', on_delete=OnDelete.CASCADE)),
                ('position', fields.IntField()),
                ('action', fields.CharField(max_length=200)),
                ('input', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('output', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('status', fields.CharEnumField(description='PENDING: PENDING\nRUNNING: RUNNING\nSUCCESS: SUCCESS\nFAILED: FAILED\nSKIPPED: SKIPPED', enum_type=StepStatus, max_length=16)),
                ('idempotent', fields.BooleanField(default=True)),
                ('attempts', fields.IntField(default=0)),
                ('error', fields.TextField(null=True, unique=False)),
                ('started_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('completed_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'steps', 'app': 'runstate', 'unique_together': (('task_id', 'position'),), 'pk_attr': 'id', 'table_description': "One step of a task, addressed by its ``position`` (the API's step index)."},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='TaskEvent',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='events', on_delete=OnDelete.CASCADE)),
                ('seq', fields.IntField()),
                ('task_version', fields.IntField()),
                ('kind', fields.CharEnumField(description='SNAPSHOT: SNAPSHOT\nTASK_CREATED: TASK_CREATED\nTASK_STATUS_CHANGED: TASK_STATUS_CHANGED\nSTEPS_ADDED: STEPS_ADDED\nSTEP_STARTED: STEP_STARTED\nSTEP_SUCCEEDED: STEP_SUCCEEDED\nSTEP_FAILED: STEP_FAILED\nSTEP_SKIPPED: STEP_SKIPPED\nSTEP_RESET: STEP_RESET\nCHECKPOINT: CHECKPOINT\nTOOL_STATE_CHANGED: TOOL_STATE_CHANGED\nLOCK_ACQUIRED: LOCK_ACQUIRED\nLOCK_RELEASED: LOCK_RELEASED', enum_type=TaskEventKind, max_length=24)),
                ('step_index', fields.IntField(null=True)),
                ('tool_name', fields.CharField(null=True, max_length=128)),
                ('at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('snapshot', fields.JSONField(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
            ],
            options={'table': 'task_events', 'app': 'runstate', 'unique_together': (('task_id', 'seq'),), 'pk_attr': 'id', 'table_description': "One entry of a task's change log. ``seq`` is consecutive per task and unique."},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='ToolState',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='tool_states', on_delete=OnDelete.CASCADE)),
                ('tool_name', fields.CharField(max_length=128)),
                ('status', fields.CharEnumField(description='IDLE: IDLE\nCALLING: CALLING\nSUCCESS: SUCCESS\nRETRYING: RETRYING\nFAILED: FAILED', enum_type=ToolStatus, max_length=16)),
                ('version', fields.IntField(default=1)),
                ('retry_count', fields.IntField(default=0)),
                ('max_retries', fields.IntField(default=3)),
                ('last_result', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('last_error', fields.TextField(null=True, unique=False)),
                ('rate_limit_reset_at', fields.DatetimeField(null=True, auto_now=False, auto_now_add=False)),
                ('updated_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'tool_states', 'app': 'runstate', 'unique_together': (('task_id', 'tool_name'),), 'pk_attr': 'id', 'table_description': 'Per task and tool: retries used, last result or error, rate limit.'},
            bases=['Model'],
        ),
    ]
