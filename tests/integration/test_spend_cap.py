"""Spend totals capped at 2^53 - 1 (``Long``'s range), on SQLite and PostgreSQL: a
report that would take the caller's spend past it, across tasks and sessions, is
refused typed with nothing written, and every read answers exact numbers."""

from __future__ import annotations

from typing import Any

from tests.integration.test_api import create_task, start_session, uid
from tests.integration.test_spend import SPEND, record, spent, start
from tests.support import PROBLEM, Api, Server, create_token, mutate

MAX = 2**53 - 1

USAGE = f"{{ usage {{ {SPEND} }} }}"
SESSION = f"query($id: ID!) {{ session(id: $id) {{ ... on AgentSession {{ {SPEND} }} }} }}"
SESSIONS = f"{{ sessions(first: 10) {{ edges {{ node {{ id {SPEND} }} }} }} }}"


def reads(api: Api, session_ids: list[str]) -> tuple[Any, ...]:
    """The caller's spend as every read answers it: usage, each session's (by id) and
    the sessions list's (by id)."""
    one = [api(SESSION, id=s)["session"]["spend"] for s in session_ids]
    listed = {e["node"]["id"]: e["node"]["spend"] for e in api(SESSIONS)["sessions"]["edges"]}
    return api(USAGE)["usage"]["spend"], one, [listed[s] for s in session_ids]


def test_a_report_past_the_callers_cap_is_refused_and_reads_stay_exact(server: Server) -> None:
    """Guards the cap on sums of many rows: each task's spend was capped but a
    session's and a user's were not, so 1,030 tasks at the per-task maximum took the
    sums past 2^63 (SQLite's SUM raised "integer overflow" on every ``usage`` read,
    for good) or past 2^53 - 1 (a JavaScript client read another number). Totals
    driven to the cap over two tasks in two sessions: each report that would take
    the caller's input, output or cost total past 2^53 - 1 is InvalidInput on its
    spend field and writes nothing (the task's eventSeq stays), one reaching it
    exactly passes, and usage, session { spend }, the sessions list and a budgeted
    createTask's BudgetExceeded answer the exact sums. Deleting a session gives its
    spend back. Seen failing on both backends before the cap (the report past it
    answered Task)."""
    api = Api(server.url, create_token(server.database_url, uid("cap")))
    first, second = start_session(api)["id"], start_session(api, budget={"maxTokens": 5})["id"]
    big = create_task(api, first, steps=1)["id"]
    small = create_task(api, second, steps=1)["id"]
    start(api, big, 0, 1)
    start(api, small, 0, 1)
    record(api, big, 0, inputTokens=MAX - 5, outputTokens=MAX, costMicros=MAX - 1)
    record(api, small, 0, inputTokens=5)
    for over in ({"inputTokens": 1}, {"outputTokens": 1}, {"costMicros": 2}):
        refused = record(api, small, 0, **over)
        assert (refused["__typename"], refused["field"], refused["message"]) == (
            "InvalidInput",
            "spend",
            f"spend: your sessions' spend would pass {MAX}",
        )
    reached = record(api, small, 0, costMicros=1)
    assert (reached["__typename"], reached["eventSeq"]) == ("Task", 4)  # the refusals wrote nothing
    assert reached["spend"] == spent(5, 0, 1, 2)
    total = spent(MAX, MAX, MAX, 3)
    assert reads(api, [first, second]) == (
        total,
        [spent(MAX - 5, MAX, MAX - 1, 1), spent(5, 0, 1, 2)],
        [spent(MAX - 5, MAX, MAX - 1, 1), spent(5, 0, 1, 2)],
    )
    over_budget = mutate(
        api,
        "createTask",
        "CreateTaskInput",
        f"... on BudgetExceeded {{ scope {SPEND} }} {PROBLEM}",
        sessionId=second,
        goal="more",
        steps=[{"action": "a"}],
    )
    assert (over_budget["__typename"], over_budget["scope"], over_budget["spend"]) == (
        "BudgetExceeded",
        "SESSION",
        spent(5, 0, 1, 2),
    )
    gone = mutate(api, "deleteSession", "DeleteSessionInput", "__typename", id=first)
    assert gone["__typename"] == "Deleted"
    assert api(USAGE)["usage"]["spend"] == spent(5, 0, 1, 2)
    assert record(api, small, 0, inputTokens=MAX - 5)["spend"] == spent(MAX, 0, 1, 3)
    api.close()
