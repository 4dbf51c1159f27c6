from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0008_usage')]

    initial = False

    operations = [
        ops.AddField(
            model_name='TaskEvent',
            name='actor',
            field=fields.CharField(null=True, max_length=128),
        ),
        ops.AddField(
            model_name='TaskEvent',
            name='note',
            field=fields.TextField(null=True, unique=False),
        ),
    ]
