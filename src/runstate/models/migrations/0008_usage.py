from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0007_session_updates')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Usage',
            fields=[
                ('user_id', fields.CharField(primary_key=True, unique=True, db_index=True, max_length=128)),
                ('stored_bytes', fields.BigIntField(default=0)),
            ],
            options={'table': 'user_usage', 'app': 'runstate', 'pk_attr': 'user_id', 'table_description': "How many bytes one user's sessions and tasks hold, kept by every write that"},
            bases=['Model'],
        ),
        ops.AddField(
            model_name='Session',
            name='stored_bytes',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Task',
            name='stored_bytes',
            field=fields.BigIntField(default=0, db_default=0),
        ),
    ]
