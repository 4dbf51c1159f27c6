"""Conversation items in sessions: ``session_items``, and the sessions' item log
position (``item_seq``) and last pop or clear (``items_reset_seq``)."""

from tortoise import fields, migrations
from tortoise.fields.base import OnDelete
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('runstate', '0013_graph_nodes')]

    initial = False

    operations = [
        ops.AddField(
            model_name='Session',
            name='item_seq',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Session',
            name='items_reset_seq',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.CreateModel(
            name='SessionItem',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('session', fields.ForeignKeyField('runstate.Session', source_field='session_id', db_constraint=True, to_field='id', related_name='items', on_delete=OnDelete.CASCADE)),
                ('seq', fields.IntField()),
                ('item', fields.TextField()),
                ('added_at', fields.DatetimeField()),
                ('stored_bytes', fields.BigIntField()),
            ],
            options={'table': 'session_items', 'app': 'runstate', 'unique_together': (('session_id', 'seq'),), 'pk_attr': 'id', 'table_description': "One item of a session's conversation (an OpenAI Agents SDK input item, or any"},
            bases=['Model'],
        ),
    ]
