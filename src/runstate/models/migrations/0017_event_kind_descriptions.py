"""Record the descriptions of ``TaskEvent.kind``'s newer members in the migration
state, and change nothing in the database.

A field's description is the enum's member list; 0012 to 0015 added members
(``GRAPH_*``, ``INTERRUPT_ANSWERED``, ``SPEND_RECORDED``, ``BUDGET_CHANGED``) without
recording it, so ``make migrations`` emitted an ``AlterField(TaskEvent.kind)`` for
any later change. On SQLite Tortoise runs an ``AlterField`` as a table rebuild, and
``task_events`` came out without its UNIQUE (task_id, seq) and its
``task_events_part`` index: the log's guard against a second event at one seq.
The column itself (text, 24 characters) is unchanged, so this migration alters the
state alone, with the description read from the enum: a member added later is no
column change, and makes no migration either. ``tests/integration/test_migrations_match.py`` checks that the
migrations match the models and that the guard survives every migration.
"""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops

from runstate.basics.enums import TaskEventKind


class RecordField(ops.AlterField):
    """An ``AlterField`` of the migration state only: no SQL, no table rebuild."""

    async def database_forward(self, app_label, old_state, new_state, state_editor=None):
        return None

    async def database_backward(self, app_label, old_state, new_state, state_editor=None):
        return None


class Migration(migrations.Migration):
    dependencies = [('runstate', '0016_fill_log_holes')]

    initial = False

    operations = [
        RecordField(
            model_name='TaskEvent',
            name='kind',
            field=fields.CharEnumField(
                description='\n'.join(f'{kind.name}: {kind.value}' for kind in TaskEventKind),
                enum_type=TaskEventKind,
                max_length=24,
            ),
        ),
    ]
