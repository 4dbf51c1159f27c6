"""A user's spend kept on its ``user_usage`` row, capped at 2^53 - 1.

Each user's running spend (``spent_*``): the sums of its sessions' ``spent_*``
columns, kept by every write that reports spend in the statement that charges
its bytes, so that ``usage`` reads one row and a report that would take the sum
past 2^53 - 1 (the API's ``Long``) is refused. Summing every task of a user when
read overflowed SQLite's 64-bit SUM once the tasks held more than 2^63 together.

Filled here from the sessions as they stand, added up in Python (no SQL sum that
could overflow). A session holding more than 2^53 - 1, and a user whose
sessions hold more than that together, which only an earlier release let
happen, are set to 2^53 - 1: no read answers past it, and such a user reports
no more spend until a session is deleted.
"""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops

MAX_LONG = 2**53 - 1
SPENT = ('spent_input_tokens', 'spent_output_tokens', 'spent_cost_micros', 'spent_calls')


def _sql(client, text):
    """``?`` placeholders as the dialect wants them."""
    if client.capabilities.dialect == "sqlite":
        return text
    parts = text.split("?")
    return parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], 1))


async def fill_user_spend(apps, schema_editor):
    client = schema_editor.client
    for column in SPENT[:3]:  # calls count writes
        await client.execute_script(
            f'UPDATE "sessions" SET "{column}" = {MAX_LONG} WHERE "{column}" > {MAX_LONG}'
        )
    rows = await client.execute_query_dict(
        'SELECT "user_id", ' + ", ".join(f'"{c}"' for c in SPENT) + ' FROM "sessions"'
    )
    totals = {}
    for row in rows:
        held = totals.setdefault(row["user_id"], [0] * len(SPENT))
        for i, column in enumerate(SPENT):
            held[i] += int(row[column])
    for user_id, held in sorted(totals.items()):
        await client.execute_query(
            _sql(
                client,
                'INSERT INTO "user_usage" ("user_id", "stored_bytes") VALUES (?, 0)'
                " ON CONFLICT DO NOTHING",
            ),
            [user_id],
        )
        await client.execute_query(
            _sql(
                client,
                'UPDATE "user_usage" SET '
                + ", ".join(f'"{c}" = ?' for c in SPENT)
                + ' WHERE "user_id" = ?',
            ),
            [*(min(value, MAX_LONG) for value in held), user_id],
        )


class Migration(migrations.Migration):
    dependencies = [('runstate', '0019_session_spend')]

    initial = False

    operations = [
        ops.AddField(
            model_name='Usage',
            name='spent_calls',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Usage',
            name='spent_cost_micros',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Usage',
            name='spent_input_tokens',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.AddField(
            model_name='Usage',
            name='spent_output_tokens',
            field=fields.BigIntField(default=0, db_default=0),
        ),
        ops.RunPython(fill_user_spend),
    ]
