from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0009_event_actor')]

    initial = False

    operations = [
        ops.AddField(
            model_name='Installation',
            name='epoch',
            field=fields.CharField(null=True, max_length=36),
        ),
    ]
