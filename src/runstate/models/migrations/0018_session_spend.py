"""A session's budget as a task's is: who last changed it and why (``setBudget``,
as a task's BUDGET_CHANGED event keeps its actor and note), and when. Columns
added, nullable: nothing to fill in."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('runstate', '0017_event_kind_descriptions')]

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
    ]
