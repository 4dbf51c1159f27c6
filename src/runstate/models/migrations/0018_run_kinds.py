"""Runs as a kind of task: ``tasks.run_of`` names the framework whose run a task
holds (NULL: an ordinary task), and ``tasks_user_kind_status`` finds a claim's
oldest task of one kind in one status by index.

Until this release an OpenAI Agents run was told apart on the client only, by
its first step's action (``openai-agents run``, the name
``runstate.integrations.openai_agents`` gives it). Such tasks already stored are
marked ``openai-agents`` here, so that a run saved before the upgrade is still
handed out by ``load_run_state``, and never by an ordinary claim.
"""

from tortoise import fields, migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops

MARK_RUNS = (
    'UPDATE "tasks" SET "run_of" = \'openai-agents\' WHERE EXISTS (SELECT 1 FROM "steps" s'
    ' WHERE s."task_id" = "tasks"."id" AND s."position" = 0'
    ' AND s."action" = \'openai-agents run\')'
)
"""Every task whose first step is an OpenAI Agents run's (one probe of the steps'
unique (task_id, position) index per task)."""


class Migration(migrations.Migration):
    dependencies = [('runstate', '0017_event_kind_descriptions')]

    initial = False

    operations = [
        ops.AddField(
            model_name='Task',
            name='run_of',
            field=fields.CharField(null=True, max_length=64),
        ),
        ops.AddIndex(
            model_name='Task',
            index=Index(fields=['user_id', 'run_of', 'status', 'id'], name='tasks_user_kind_status'),
        ),
        ops.RunSQL(MARK_RUNS),
    ]
