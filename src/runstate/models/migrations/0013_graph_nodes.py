"""Which step of a thread's task shows each LangGraph task (node run): ``graph_nodes``."""

from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise.fields.base import OnDelete
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0012_graphs')]

    initial = False

    operations = [
        ops.CreateModel(
            name='GraphNode',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('task', fields.ForeignKeyField('runstate.Task', source_field='task_id', db_constraint=True, to_field='id', related_name='graph_nodes', on_delete=OnDelete.CASCADE)),
                ('namespace', fields.CharField(max_length=1024)),
                ('task_key', fields.CharField(max_length=255)),
                ('position', fields.IntField()),
                ('interrupted', fields.BooleanField(default=False)),
            ],
            options={'table': 'graph_nodes', 'app': 'runstate', 'unique_together': (('task_id', 'namespace', 'task_key'),), 'pk_attr': 'id', 'table_description': "Which step of a thread's task shows one LangGraph task (a node's run),"},
            bases=['Model'],
        ),
    ]
