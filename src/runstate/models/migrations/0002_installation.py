from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0001_initial')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Installation',
            fields=[
                ('id', fields.CharField(primary_key=True, unique=True, db_index=True, max_length=36)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'installation', 'app': 'runstate', 'pk_attr': 'id', 'table_description': 'One row naming this database, so that processes sharing it share broker channels.'},
            bases=['Model'],
        ),
    ]
