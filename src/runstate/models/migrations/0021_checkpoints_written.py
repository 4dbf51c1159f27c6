"""``graph_checkpoints_written``: a namespace's checkpoints in the order they were
written (``seq``), by which ``graphCheckpoint`` without an id answers the latest
and ``pruneGraph(KEEP_LATEST)`` keeps it: one meaning of "latest"."""

from tortoise import migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('runstate', '0020_user_spend')]

    initial = False

    operations = [
        ops.AddIndex(
            model_name='GraphCheckpoint',
            index=Index(fields=['task_id', 'namespace', 'seq'], name='graph_checkpoints_written'),
        ),
    ]
