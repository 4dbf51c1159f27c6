from tortoise import migrations
from tortoise.migrations import operations as ops
from tortoise.indexes import Index

class Migration(migrations.Migration):
    dependencies = [('runstate', '0006_sqlite_unique_indexes')]

    initial = False

    operations = [
        ops.AddIndex(
            model_name='Task',
            index=Index(fields=['session_id', 'updated_at'], name='tasks_session_updated'),
        ),
    ]
