"""Spend and budgets over the API, on SQLite and PostgreSQL: spend added up per
step, task, session and caller at every version; budgets refusing new work in the
transaction that would start it; bad input answered as typed problems."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.test_api import create_task, start_session, uid
from tests.integration.test_claim import claim
from tests.support import PROBLEM, Api, Server, create_token, mutate

SPEND = "spend { inputTokens outputTokens costMicros calls }"
BUDGET = "budget { maxTokens maxCostMicros }"
SPENT_TASK = f"""
  ... on Task {{
    id version eventSeq status overBudget {SPEND} {BUDGET}
    steps {{ index status models {SPEND} }}
    session {{ id version {SPEND} {BUDGET} }}
  }}
  ... on BudgetExceeded {{ scope limit: {BUDGET} {SPEND} }}
  {PROBLEM}
"""
BUDGET_PROBLEM = """
  __typename
  ... on Problem { code message }
  ... on InvalidInput { field }
  ... on VersionConflict { currentVersion }
"""
BUDGET_CHANGE = "budgetChange { actor note at }"
SPENT_SESSION = (
    f"... on AgentSession {{ id version {SPEND} {BUDGET} {BUDGET_CHANGE} }} {BUDGET_PROBLEM}"
)
TOOL = f"... on ToolState {{ toolName status }} ... on BudgetExceeded {{ scope {SPEND} }} {PROBLEM}"
NOTHING = {"inputTokens": 0, "outputTokens": 0, "costMicros": 0, "calls": 0}


def spent(i: int, o: int, c: int, n: int) -> dict[str, int]:
    return {"inputTokens": i, "outputTokens": o, "costMicros": c, "calls": n}


def task(api: Api, task_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api(
        f"query($id: ID!) {{ task(id: $id) {{ {SPENT_TASK} }} }}", id=task_id
    )["task"]
    return found


def task_at(api: Api, task_id: str, seq: int) -> dict[str, Any]:
    query = f"query($id: ID!, $seq: Int!) {{ taskAt(id: $id, seq: $seq) {{ {SPENT_TASK} }} }}"
    found: dict[str, Any] = api(query, id=task_id, seq=seq)["taskAt"]
    return found


def write(api: Api, name: str, input_type: str, **input: Any) -> dict[str, Any]:
    return mutate(api, name, input_type, SPENT_TASK, **input)


def record(api: Api, task_id: str, index: int, **spend: Any) -> dict[str, Any]:
    return write(
        api, "recordSpend", "RecordSpendInput", taskId=task_id, stepIndex=index, spend=spend
    )


def tool_call(api: Api, task_id: str, outcome: str, **input: Any) -> dict[str, Any]:
    """A report of the tool "search" (``spend=`` among ``input``), as the API answers it."""
    return mutate(
        api,
        "recordToolCall",
        "RecordToolCallInput",
        TOOL,
        taskId=task_id,
        toolName="search",
        outcome=outcome,
        **input,
    )


def start(api: Api, task_id: str, index: int, version: int) -> dict[str, Any]:
    return write(
        api, "startStep", "StepRefInput", taskId=task_id, stepIndex=index, expectedVersion=version
    )


def complete(api: Api, task_id: str, index: int, version: int, **input: Any) -> dict[str, Any]:
    ref = {"taskId": task_id, "stepIndex": index, "expectedVersion": version}
    return write(api, "completeStep", "CompleteStepInput", **ref, **input)


def set_budget(api: Api, version: int, budget: dict[str, Any], **target: Any) -> dict[str, Any]:
    fields = f"... on Task {{ id version overBudget {BUDGET} }} {SPENT_SESSION}"
    return mutate(
        api, "setBudget", "SetBudgetInput", fields, expectedVersion=version, budget=budget, **target
    )


def step_sum(steps: list[dict[str, Any]]) -> dict[str, int]:
    keys = ("inputTokens", "outputTokens", "costMicros", "calls")
    return {k: sum(s["spend"][k] for s in steps) for k in keys}


def assert_sums_at_every_seq(api: Api, task_id: str) -> None:
    """The task's spend, as it stood after each of its events, is the sum of its
    steps' spend as they stood then."""
    head = task(api, task_id)
    for seq in range(1, head["eventSeq"] + 1):
        past = task_at(api, task_id, seq)
        assert past["spend"] == step_sum(past["steps"]), f"at seq {seq}"
    assert head["spend"] == step_sum(head["steps"])


def test_spend_adds_up_per_step_task_session_and_caller(alice: Api, bob: Api) -> None:
    """Guards spend as step state: each kind of write that reports spend (recordSpend,
    completeStep, failStep, a checkpoint's patch, a tool report) adds to its step,
    the models are kept in first-reported order, the task's, session's and caller's
    totals are exact sums, and so is the task at every seq (taskAt). recordSpend
    and tool reports leave the task's version alone."""
    before = alice("{ usage { spend { inputTokens outputTokens costMicros calls } currency } }")
    session = start_session(alice)
    other = create_task(alice, session["id"], steps=1)
    made = create_task(alice, session["id"], steps=4)
    task_id = made["id"]
    version = start(alice, task_id, 0, 1)["version"]
    first = record(alice, task_id, 0, inputTokens=100, outputTokens=20, costMicros=300, model="m-a")
    assert first["version"] == version  # spend never conflicts with the step's writes
    record(alice, task_id, 0, inputTokens=50, model="m-b")
    done = complete(
        alice,
        task_id,
        0,
        version,
        output="ok",
        spend={"outputTokens": 7, "costMicros": 11, "model": "m-a"},
    )
    assert done["steps"][0]["spend"] == spent(150, 27, 311, 3)
    assert done["steps"][0]["models"] == ["m-a", "m-b"]
    version = start(alice, task_id, 1, done["version"])["version"]
    tool = tool_call(alice, task_id, "SUCCESS", spend={"inputTokens": 9, "costMicros": 1})
    assert tool["__typename"] == "ToolState"
    version = write(
        alice,
        "checkpointTask",
        "CheckpointTaskInput",
        taskId=task_id,
        expectedVersion=version,
        steps=[
            {"index": 1, "status": "SUCCESS", "spend": {"inputTokens": 1}},
            {"index": 2, "status": "RUNNING", "spend": {"outputTokens": 2, "model": "m-c"}},
        ],
    )["version"]
    failed = write(
        alice,
        "failStep",
        "FailStepInput",
        taskId=task_id,
        stepIndex=2,
        expectedVersion=version,
        error="no seats",
        spend={"inputTokens": 1000, "costMicros": 2000},
    )
    steps = failed["steps"]
    assert [s["spend"] for s in steps] == [
        spent(150, 27, 311, 3),
        spent(10, 0, 1, 2),
        spent(1000, 2, 2000, 2),
        NOTHING,
    ]
    assert steps[2]["models"] == ["m-c"]
    assert failed["spend"] == spent(1160, 29, 2312, 7)
    assert failed["session"]["spend"] == failed["spend"]  # the other task spent nothing
    assert other["id"] != task_id
    after = alice("{ usage { spend { inputTokens outputTokens costMicros calls } currency } }")
    grown = {k: after["usage"]["spend"][k] - before["usage"]["spend"][k] for k in NOTHING}
    assert grown == failed["spend"]
    assert after["usage"]["currency"] == "USD"
    assert bob("{ usage { spend { calls } } }")["usage"]["spend"]["calls"] == 0
    assert_sums_at_every_seq(alice, task_id)
    kinds = alice(
        "query($id: ID!) { task(id: $id) { ... on Task { events { kind taskVersion } } } }",
        id=task_id,
    )["task"]["events"]
    assert [e["kind"] for e in kinds].count("SPEND_RECORDED") == 2


def test_usage_that_arrives_after_the_step_ended_is_recorded(alice: Api) -> None:
    """Guards recordSpend's rule (``tasks.record_spend``): spend is recorded on a
    step that has started, running or ended, since a model's usage often arrives
    after the step's end was reported; a step never started is refused, nothing
    written. With the old rule (RUNNING only) the late report was InvalidInput and
    the usage could not be recorded at all."""
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=2)["id"]
    version = start(alice, task_id, 0, 1)["version"]
    done = complete(alice, task_id, 0, version, output="ok")
    late = record(alice, task_id, 0, inputTokens=40, costMicros=9, model="m-a")
    assert late["version"] == done["version"]
    assert late["steps"][0]["status"] == "SUCCESS"
    assert late["steps"][0]["spend"] == spent(40, 0, 9, 1)
    assert late["spend"] == late["session"]["spend"] == spent(40, 0, 9, 1)
    never = record(alice, task_id, 1, inputTokens=1)
    assert (never["code"], never["message"]) == (
        "INVALID_INPUT",
        "stepIndex: step 1 has not started; spend is recorded on a step that has",
    )
    assert task(alice, task_id)["eventSeq"] == late["eventSeq"]
    assert_sums_at_every_seq(alice, task_id)


def test_concurrent_reports_add_up_exactly(alice: Api) -> None:
    """Guards the totals under concurrency: 8 writers reporting spend on two running
    steps at once lose nothing (each report's sum is kept in the row the write
    locks), and the task's spend at every seq is its steps' sum."""
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=2)["id"]
    version = start(alice, task_id, 0, 1)["version"]
    start(alice, task_id, 1, version)

    def report(n: int) -> None:
        for _ in range(10):
            assert (
                record(alice, task_id, n % 2, inputTokens=n + 1, costMicros=1)["__typename"]
                == "Task"
            )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(report, range(8)))
    now = task(alice, task_id)
    assert now["spend"] == spent(10 * sum(range(1, 9)), 0, 80, 80)
    assert [s["spend"]["calls"] for s in now["steps"]] == [40, 40]
    assert_sums_at_every_seq(alice, task_id)


def test_a_task_budget_stops_new_work_until_raised(alice: Api) -> None:
    """Guards the task's budget: the report that reaches it is recorded and its
    event says so (budgetCrossed TASK); then startStep and a CALLING tool report
    answer BudgetExceeded with the budget and the spend, writing nothing, while
    reports and the end of the running step still go through; raising the budget
    (a person's decision, with the actor and the note on its event) lets work go on."""
    session = start_session(alice)
    made = create_task(alice, session["id"], steps=3, budget={"maxTokens": 100})
    task_id = made["id"]
    version = start(alice, task_id, 0, 1)["version"]
    crossing = record(alice, task_id, 0, inputTokens=80, outputTokens=30)
    assert crossing["overBudget"] is True
    log = alice(
        "query($id: ID!) { task(id: $id) { ... on Task { events { seq kind budgetCrossed"
        " budget { maxTokens } } } } }",
        id=task_id,
    )["task"]["events"]
    assert log[0]["budget"] == {"maxTokens": 100}
    assert [(e["kind"], e["budgetCrossed"]) for e in log[-1:]] == [("SPEND_RECORDED", "TASK")]
    done = complete(
        alice,
        task_id,
        0,
        version,
        spend={"inputTokens": 5},
    )
    assert done["__typename"] == "Task"  # finishing a running step is never refused
    seq = done["eventSeq"]
    refused = start(alice, task_id, 1, done["version"])
    assert refused == {
        "__typename": "BudgetExceeded",
        "code": "BUDGET_EXCEEDED",
        "message": refused["message"],
        "scope": "TASK",
        "limit": {"maxTokens": 100, "maxCostMicros": None},
        "spend": spent(85, 30, 0, 2),
    }
    calling = tool_call(alice, task_id, "CALLING")
    assert calling["__typename"] == "BudgetExceeded"
    assert task(alice, task_id)["eventSeq"] == seq  # nothing written
    stale = set_budget(alice, done["version"] - 1, {"maxTokens": 1000}, taskId=task_id)
    assert stale["__typename"] == "VersionConflict"
    raised = mutate(
        alice,
        "setBudget",
        "SetBudgetInput",
        f"... on Task {{ version overBudget events(afterSeq: {seq}) {{ kind actor note budget"
        " { maxTokens } taskVersion } }",
        taskId=task_id,
        expectedVersion=done["version"],
        budget={"maxTokens": 1000},
        note="the customer approved more",
    )
    assert raised["overBudget"] is False
    assert raised["version"] == done["version"] + 1
    (event,) = raised["events"]
    assert event["kind"] == "BUDGET_CHANGED"
    assert event["actor"] == "alice"
    assert event["note"] == "the customer approved more"
    assert event["budget"] == {"maxTokens": 1000}
    assert start(alice, task_id, 1, raised["version"])["__typename"] == "Task"
    # taskAt shows the budget as it stood: reached before the raise, not after it.
    assert task_at(alice, task_id, seq)["overBudget"] is True
    assert task_at(alice, task_id, seq)["budget"]["maxTokens"] == 100
    assert task_at(alice, task_id, seq + 1)["budget"]["maxTokens"] == 1000
    removed = set_budget(alice, raised["version"] + 1, {}, taskId=task_id)
    assert removed["budget"] is None


def test_a_session_budget_holds_across_its_tasks(alice: Api) -> None:
    """Guards the session's budget: its tasks' spend together reaches it, and then
    startStep on any of them and createTask in it answer BudgetExceeded (scope
    SESSION), claimTask passes its tasks over (NotFound with nothing else to claim),
    and raising it lets work go on."""
    session = start_session(alice, budget={"maxCostMicros": 1000})
    assert session["__typename"] == "AgentSession"
    one = create_task(alice, session["id"], steps=2)
    two = create_task(alice, session["id"], steps=2)
    version = start(alice, one["id"], 0, 1)["version"]
    record(alice, one["id"], 0, costMicros=600)
    crossing = complete(
        alice,
        one["id"],
        0,
        version,
        spend={"costMicros": 400},
    )
    assert crossing["overBudget"] is True
    assert crossing["session"]["spend"]["costMicros"] == 1000
    refused = start(alice, two["id"], 0, 1)
    assert (refused["__typename"], refused["scope"]) == ("BudgetExceeded", "SESSION")
    assert refused["limit"] == {"maxTokens": None, "maxCostMicros": 1000}
    assert task(alice, two["id"])["overBudget"] is True
    another = create_task(alice, session["id"], steps=1)
    assert (another["__typename"], another["code"]) == ("BudgetExceeded", "BUDGET_EXCEEDED")
    assert claim(alice, "w", session["id"], ttl=30)["__typename"] == "NotFound"
    raised = set_budget(alice, session["version"], {"maxCostMicros": 5000}, sessionId=session["id"])
    assert raised["__typename"] == "AgentSession"
    assert raised["budget"] == {"maxTokens": None, "maxCostMicros": 5000}
    assert raised["version"] == session["version"] + 1
    assert start(alice, two["id"], 0, 1)["__typename"] == "Task"


def test_claim_passes_over_a_task_over_its_budget(alice: Api) -> None:
    """Guards claimTask's budget condition: of two PLANNED tasks in one session the
    older, over its own budget, is passed over for the newer."""
    session = start_session(alice)
    spent_task = create_task(alice, session["id"], steps=2, budget={"maxTokens": 10})
    version = start(alice, spent_task["id"], 0, 1)["version"]
    write(
        alice,
        "checkpointTask",
        "CheckpointTaskInput",
        taskId=spent_task["id"],
        expectedVersion=version,
        status="PLANNED",
        steps=[{"index": 0, "status": "PENDING", "spend": {"inputTokens": 10}}],
    )
    fresh = create_task(alice, session["id"], steps=1)
    claimed = claim(alice, "w", session["id"], ttl=30)
    assert (claimed["__typename"], claimed["taskId"]) == ("TaskLock", fresh["id"])


@pytest.mark.parametrize(
    ("spend", "field"),
    [
        ({"inputTokens": -1}, "spend.inputTokens"),
        ({"outputTokens": 2**53}, "spend.outputTokens"),
        ({"costMicros": -5}, "spend.costMicros"),
        ({"model": "x" * 201}, "spend.model"),
        ({"model": "  "}, "spend.model"),
    ],
)
def test_bad_spend_is_invalid_input_naming_the_field(
    alice: Api, spend: dict[str, Any], field: str
) -> None:
    """Guards spend's checks: a negative or overflowing count, or a bad model name,
    is InvalidInput naming the field, and nothing is written."""
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=1)["id"]
    version = start(alice, task_id, 0, 1)["version"]
    answer = record(alice, task_id, 0, **spend)
    assert (answer["__typename"], answer["field"]) == ("InvalidInput", field)
    done = complete(
        alice,
        task_id,
        0,
        version,
        spend=spend,
    )
    assert (done["__typename"], done["field"]) == ("InvalidInput", field)
    assert task(alice, task_id)["eventSeq"] == 2


def test_spend_that_would_overflow_a_step_or_lands_nowhere_is_refused(
    server: Server, bob: Api
) -> None:
    """Guards the other refusals: a step's or a task's sum past 2^53 - 1, spend on a
    step never started, a tool report's spend with no step running, and someone else's
    task, each answer a typed problem and write nothing; a budget below zero, or a Long that
    is not an integer, never reaches a write. A user of its own: its spend reaches
    2^53 - 1, past which nothing more of it is taken (``test_spend_cap``)."""
    alice = Api(server.url, create_token(server.database_url, uid("overflow")))
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=2)["id"]
    version = start(alice, task_id, 0, 1)["version"]
    record(alice, task_id, 0, inputTokens=2**53 - 1)
    over = record(alice, task_id, 0, inputTokens=1)
    assert (over["__typename"], over["field"]) == ("InvalidInput", "spend")
    other = create_task(alice, session["id"], steps=2)["id"]
    version_other = start(alice, other, 0, 1)["version"]
    record(alice, other, 0, outputTokens=2**53 - 1)
    start(alice, other, 1, version_other)
    across = record(alice, other, 1, outputTokens=1)  # a new step, the task's sum past it
    assert (across["__typename"], across["message"]) == (
        "InvalidInput",
        f"spend: the task's spend would pass {2**53 - 1}",
    )
    complete(
        alice,
        task_id,
        0,
        version,
    )
    never = record(alice, task_id, 1, inputTokens=1)
    assert (never["__typename"], never["field"]) == ("InvalidInput", "stepIndex")
    nowhere = tool_call(alice, task_id, "SUCCESS", spend={"inputTokens": 1})
    assert (nowhere["__typename"], nowhere["field"]) == ("InvalidInput", "spend")
    assert record(bob, task_id, 0, inputTokens=1)["__typename"] == "NotFound"
    assert task(alice, task_id)["eventSeq"] == 4
    negative = create_task(alice, session["id"], steps=1, budget={"maxTokens": -1})
    assert (negative["__typename"], negative["field"]) == ("InvalidInput", "budget.maxTokens")
    assert start_session(alice, budget={"maxCostMicros": 2**53})["field"] == (
        "budget.maxCostMicros"
    )
    both = set_budget(alice, 1, {}, taskId=task_id, sessionId=session["id"])
    assert (both["__typename"], both["field"]) == ("InvalidInput", "taskId")
    response = alice.post(
        {
            "query": "mutation($i: RecordSpendInput!) { recordSpend(input: $i) { __typename } }",
            "variables": {"i": {"taskId": task_id, "stepIndex": 0, "spend": {"inputTokens": 1.5}}},
        }
    )
    assert "Long cannot represent 1.5" in response.text
    alice.close()


def test_spend_counts_toward_no_byte_quota(server: Server) -> None:
    """Guards that spend is no content: a report of huge counts adds what any
    recordSpend adds to the task's stored bytes (its event and history rows), not
    more."""
    api = Api(server.url, create_token(server.database_url, uid("quota")))
    session = start_session(api)
    task_id = create_task(api, session["id"], steps=1)["id"]
    start(api, task_id, 0, 1)
    sizes = []
    for tokens in (1, 10**15):
        before = api(
            "query($id: ID!) { task(id: $id) { ... on Task { storedBytes } } }", id=task_id
        )
        record(api, task_id, 0, inputTokens=tokens)
        after = api("query($id: ID!) { task(id: $id) { ... on Task { storedBytes } } }", id=task_id)
        sizes.append(after["task"]["storedBytes"] - before["task"]["storedBytes"])
    assert sizes[0] == sizes[1]
    api.close()


def test_a_fork_has_spent_nothing(alice: Api) -> None:
    """Guards forks: the steps a fork copies keep their outputs but not their spend
    (the source paid for them), so a session's spend is not counted twice."""
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=2)["id"]
    version = start(alice, task_id, 0, 1)["version"]
    done = complete(
        alice,
        task_id,
        0,
        version,
        spend={"inputTokens": 40, "model": "m"},
    )
    fork = write(alice, "forkTask", "ForkTaskInput", taskId=task_id, atSeq=done["eventSeq"])
    assert fork["spend"] == NOTHING
    assert fork["steps"][0]["status"] == "SUCCESS"
    assert fork["steps"][0]["models"] == []
    assert fork["session"]["spend"]["inputTokens"] == 40


def test_a_fork_keeps_its_sources_budget_as_it_stood(alice: Api) -> None:
    """Guards forks and budgets: a fork spends under the budget its source had at
    the fork's seq (raised since or not), named on its TASK_CREATED event, rather
    than under none (forks once dropped it without a word)."""
    session = start_session(alice)
    made = create_task(alice, session["id"], steps=2, budget={"maxCostMicros": 20_000})
    version = start(alice, made["id"], 0, 1)["version"]
    done = complete(alice, made["id"], 0, version, spend={"costMicros": 24_000})
    raised = set_budget(alice, done["version"], {"maxCostMicros": 90_000}, taskId=made["id"])
    assert raised["budget"] == {"maxTokens": None, "maxCostMicros": 90_000}
    fork = write(alice, "forkTask", "ForkTaskInput", taskId=made["id"], atSeq=done["eventSeq"])
    assert fork["budget"] == {"maxTokens": None, "maxCostMicros": 20_000}
    assert fork["spend"] == NOTHING
    assert fork["overBudget"] is False
    created = alice(
        "query($id: ID!) { task(id: $id) { ... on Task {"
        " events(afterSeq: 0, first: 1) { kind budget { maxTokens maxCostMicros } } } } }",
        id=fork["id"],
    )["task"]["events"]
    assert created == [
        {"kind": "TASK_CREATED", "budget": {"maxTokens": None, "maxCostMicros": 20_000}}
    ]


def test_a_budgets_refusal_says_its_amounts_in_money(alice: Api) -> None:
    """Guards BudgetExceeded's message: cost in dollars with the decimals that show
    it exactly, so a spend past its limit never reads as equal to it (it said
    "24000 cost micros", and a page rounding to cents "$0.02 of its $0.02"), each
    amount with its own decimals (the budget read "$0.020", the spend's decimals)."""
    session = start_session(alice)
    made = create_task(
        alice,
        session["id"],
        steps=2,
        budget={"maxCostMicros": 20_000, "maxTokens": 5000},
    )
    version = start(alice, made["id"], 0, 1)["version"]
    done = complete(
        alice, made["id"], 0, version, spend={"costMicros": 24_000, "inputTokens": 1200}
    )
    refused = start(alice, made["id"], 1, done["version"])
    assert refused["message"] == (
        "the task spent 1,200 tokens and $0.024 of its 5,000 tokens and $0.02 budget:"
        " no new work until it is raised"
    )


def test_keyed_set_budget_answers_a_session_again(alice: Api) -> None:
    """Guards setBudget's kept answers: a session's, sent again with its key,
    answers the session as the first call did."""
    session = start_session(alice)
    key = uid("budget")
    first = set_budget(alice, 1, {"maxTokens": 5}, sessionId=session["id"], idempotencyKey=key)
    again = set_budget(alice, 1, {"maxTokens": 5}, sessionId=session["id"], idempotencyKey=key)
    assert again == first
    assert first["version"] == 2


def budget_change(api: Api, session_id: str) -> dict[str, Any] | None:
    """The session's ``budgetChange`` as a read answers it."""
    query = (
        f"query($id: ID!) {{ session(id: $id) {{ ... on AgentSession {{ {BUDGET_CHANGE} }} }} }}"
    )
    found: dict[str, Any] | None = api(query, id=session_id)["session"]["budgetChange"]
    return found


def stored(api: Api) -> int:
    value: int = api("{ usage { storedBytes } }")["usage"]["storedBytes"]
    return value


def test_a_session_keeps_who_changed_its_budget_and_why(alice: Api) -> None:
    """Guards a session's ``setBudget`` keeping its actor and note (issue 54, item
    6b), as a task's BUDGET_CHANGED event does: ``AgentSession.budgetChange`` is null
    on a session never given a budget, names the starter (no note, at its creation)
    of one started with one, and after each setBudget the caller, the note as given
    and its time, in the answer and on a later read alike. The note counts in the
    user's bytes at its current size (escapes included): 28 bytes, then 5 when a
    shorter note replaces it, none once a change comes without one. Seen failing with
    ``_set_session_budget`` writing only the limits (budgetChange stayed the
    start's: note null) and with the note's bytes added but the previous note's
    never given back (28 + 5 bytes held)."""
    plain = start_session(alice)
    assert budget_change(alice, plain["id"]) is None
    session = start_session(alice, budget={"maxTokens": 100})
    assert budget_change(alice, session["id"]) == {
        "actor": "alice",
        "note": None,
        "at": session["createdAt"],
    }
    before = stored(alice)
    note = 'a second "FRA" fare search'  # 26 characters, 28 bytes with its escapes
    raised = set_budget(alice, 1, {"maxTokens": 500}, sessionId=session["id"], note=note)
    assert (raised["version"], raised["budget"]) == (2, {"maxTokens": 500, "maxCostMicros": None})
    change = raised["budgetChange"]
    assert (change["actor"], change["note"]) == ("alice", note)
    assert budget_change(alice, session["id"]) == change
    assert stored(alice) == before + 28
    shorter = set_budget(alice, 2, {"maxTokens": 600}, sessionId=session["id"], note="fewer")
    assert shorter["budgetChange"]["note"] == "fewer"
    assert stored(alice) == before + 5
    removed = set_budget(alice, 3, {}, sessionId=session["id"], note="   ")
    assert (removed["budget"], removed["budgetChange"]["note"]) == (None, None)
    assert removed["budgetChange"]["actor"] == "alice"
    assert budget_change(alice, session["id"]) == removed["budgetChange"]
    assert stored(alice) == before


def test_reports_are_recorded_past_the_budget(alice: Api) -> None:
    """Guards that reports are recorded past a budget: a step keeps reporting after
    the crossing, and every report counts."""
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=1, budget={"maxCostMicros": 1})["id"]
    start(alice, task_id, 0, 1)
    for _ in range(3):
        assert record(alice, task_id, 0, costMicros=5)["__typename"] == "Task"
    assert task(alice, task_id)["spend"]["costMicros"] == 15


def test_a_checkpoint_starting_a_step_is_refused_past_the_budget(alice: Api) -> None:
    """Guards checkpointTask's budget check: past the budget a patch starting a step
    (PENDING -> RUNNING) refuses the batch, BudgetExceeded and nothing written,
    while a patch reporting a step done (PENDING -> SUCCESS) is taken."""
    session = start_session(alice)
    task_id = create_task(alice, session["id"], steps=3, budget={"maxTokens": 10})["id"]
    version = start(alice, task_id, 0, 1)["version"]
    version = complete(
        alice,
        task_id,
        0,
        version,
        spend={"inputTokens": 10},
    )["version"]
    starting = write(
        alice,
        "checkpointTask",
        "CheckpointTaskInput",
        taskId=task_id,
        expectedVersion=version,
        steps=[{"index": 1, "status": "RUNNING"}],
    )
    assert (starting["__typename"], starting["scope"]) == ("BudgetExceeded", "TASK")
    done = write(
        alice,
        "checkpointTask",
        "CheckpointTaskInput",
        taskId=task_id,
        expectedVersion=version,
        steps=[{"index": 1, "status": "SUCCESS", "spend": {"outputTokens": 3}}],
    )
    assert done["__typename"] == "Task"
    assert done["spend"]["outputTokens"] == 3


def test_creating_an_existing_task_again_answers_it_past_the_budget(alice: Api) -> None:
    """Guards createTask's retry in a session past its budget: a client-chosen id
    that exists with the same content answers the task, as a repeat always does;
    a new one is refused."""
    session = start_session(alice, budget={"maxTokens": 5})
    task_id = uid("kept")
    made = create_task(alice, session["id"], steps=1, id=task_id)
    version = start(alice, task_id, 0, 1)["version"]
    record(alice, task_id, 0, inputTokens=5)
    again = create_task(alice, session["id"], steps=1, id=task_id)
    assert (again["__typename"], again["id"]) == ("Task", made["id"])
    assert again["version"] == version
    other = create_task(alice, session["id"], steps=1, id=uid("new"))
    assert other["__typename"] == "BudgetExceeded"
