from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0010_epoch')]

    initial = False

    operations = [
        ops.AddField(
            model_name='IdempotencyKey',
            name='stored_bytes',
            field=fields.BigIntField(default=0, db_default=0),
        ),
    ]
