from tortoise import migrations
from tortoise.migrations import operations as ops
import functools
from json import dumps, loads
from tortoise import fields

class Migration(migrations.Migration):
    dependencies = [('runstate', '0004_in_doubt')]

    initial = False

    operations = [
        ops.CreateModel(
            name='IdempotencyKey',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('user_id', fields.CharField(max_length=128)),
                ('key', fields.CharField(max_length=255)),
                ('operation', fields.CharField(max_length=64)),
                ('fingerprint', fields.CharField(max_length=64)),
                ('answer', fields.JSONField(null=True, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('created_at', fields.DatetimeField(auto_now=False, auto_now_add=False)),
                ('expires_at', fields.DatetimeField(db_index=True, auto_now=False, auto_now_add=False)),
            ],
            options={'table': 'idempotency_keys', 'app': 'runstate', 'unique_together': (('user_id', 'key'),), 'pk_attr': 'id', 'table_description': "A write done under a client's idempotency key, and the answer it gave."},
            bases=['Model'],
        ),
    ]
