"""A session's spend and budget kept on its row.

- Its running spend (``spent_*``): the sums of its tasks' ``spent_*`` columns,
  kept by every write that reports spend, in its own transaction, so a budget's
  check reads one row instead of summing every task of the session. Filled here
  from the tasks of each session as they stand (one statement, on SQLite and
  PostgreSQL alike).
- Who last changed its budget and why (``setBudget``, as a task's BUDGET_CHANGED
  event keeps its actor and note), and when: nullable, nothing to fill in.
"""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops

SPENT = ('spent_input_tokens', 'spent_output_tokens', 'spent_cost_micros', 'spent_calls')

FILL = 'UPDATE "sessions" SET ' + ', '.join(
    f'"{column}" = COALESCE((SELECT SUM(t."{column}") FROM "tasks" t'
    f' WHERE t."session_id" = "sessions"."id"), 0)'
    for column in SPENT
)
"""Each session's totals, summed from its tasks' rows (by the tasks' session index)."""


class Migration(migrations.Migration):
    dependencies = [('runstate', '0018_run_kinds')]

    initial = False

    operations = [
        ops.AddField(
            model_name='Session',
            name='budget_actor',
            field=fields.CharField(null=True, max_length=128),
        ),
        ops.AddField(
            model_name='Session',
            name='budget_changed_at',
            field=fields.DatetimeField(null=True, auto_now=False, auto_now_add=False),
        ),
        ops.AddField(
            model_name='Session',
            name='budget_note',
            field=fields.TextField(null=True, unique=False),
        ),
        ops.AddField(
            model_name='Session',
            name='spent_calls',
            field=fields.IntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Session',
            name='spent_cost_micros',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Session',
            name='spent_input_tokens',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Session',
            name='spent_output_tokens',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.RunSQL(FILL, reverse_sql=ops.RunSQL.noop),
    ]
