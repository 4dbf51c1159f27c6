"""Spend and budgets: what each step reported spending (and its history rows),
the task's running totals, and the budgets of tasks and sessions."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


def _spend(model: str) -> list[ops.AddField]:
    """A step's spend columns, on ``model`` (the step row or its history row)."""
    return [
        ops.AddField(model_name=model, name='input_tokens', field=fields.BigIntField(default=0, db_default=0)),
        ops.AddField(model_name=model, name='output_tokens', field=fields.BigIntField(default=0, db_default=0)),
        ops.AddField(model_name=model, name='cost_micros', field=fields.BigIntField(default=0, db_default=0)),
        ops.AddField(model_name=model, name='calls', field=fields.IntField(default=0, db_default=0)),
        ops.AddField(model_name=model, name='models', field=fields.JSONField(null=True)),
    ]


def _budget(model: str) -> list[ops.AddField]:
    """A budget's columns, on ``model`` (a task or a session)."""
    return [
        ops.AddField(model_name=model, name='budget_max_tokens', field=fields.BigIntField(null=True)),
        ops.AddField(model_name=model, name='budget_max_cost_micros', field=fields.BigIntField(null=True)),
    ]


class Migration(migrations.Migration):
    dependencies = [('runstate', '0014_session_items')]

    initial = False

    operations = [
        *_spend('Step'),
        *_spend('StepVersion'),
        ops.AddField(model_name='Task', name='spent_input_tokens', field=fields.BigIntField(default=0, db_default=0)),
        ops.AddField(model_name='Task', name='spent_output_tokens', field=fields.BigIntField(default=0, db_default=0)),
        ops.AddField(model_name='Task', name='spent_cost_micros', field=fields.BigIntField(default=0, db_default=0)),
        ops.AddField(model_name='Task', name='spent_calls', field=fields.IntField(default=0, db_default=0)),
        *_budget('Task'),
        *_budget('Session'),
    ]
