"""Give SQLite back the unique indexes that 0003 and 0004 lost.

On SQLite, Tortoise carries out RemoveField and AlterField by rebuilding the
table, and the rebuilt table kept none of its ``unique_together`` constraints nor
the indexes added before: ``task_events`` lost UNIQUE (task_id, seq) and
``task_events_part``, ``steps`` UNIQUE (task_id, position), ``step_versions``
UNIQUE (task_id, position, seq). PostgreSQL alters columns in place and kept them
all. Here they are created again under the names PostgreSQL has, on SQLite only.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

INDEXES = [
    'CREATE UNIQUE INDEX IF NOT EXISTS "uid_task_events_task_id_32ee4f"'
    ' ON "task_events" ("task_id", "seq")',
    'CREATE INDEX IF NOT EXISTS "task_events_part"'
    ' ON "task_events" ("task_id", "kind", "tool_name", "seq")',
    'CREATE UNIQUE INDEX IF NOT EXISTS "uid_steps_task_id_91e8b7"'
    ' ON "steps" ("task_id", "position")',
    'CREATE UNIQUE INDEX IF NOT EXISTS "uid_step_versio_task_id_17d559"'
    ' ON "step_versions" ("task_id", "position", "seq")',
]


async def restore(apps, schema_editor):
    client = schema_editor.client
    if client.capabilities.dialect != "sqlite":
        return
    for statement in INDEXES:
        await client.execute_script(statement)


class Migration(migrations.Migration):
    dependencies = [('runstate', '0005_idempotency_keys')]

    initial = False

    operations = [
        ops.RunPython(restore),
    ]
