"""The GraphQL documents the dashboard sends (``web/static/app.js``), each a named
operation. The server registers the queries and mutations as trusted documents
(``transport.trusted``): the page loads the manifest (``/static/documents.json``)
and names them by id, and takes the subscriptions' texts from it for the WebSocket.

A field added here is drawn by the page only where ``app.js`` draws it, but for
``STEP_REPORTED``: each of those is shown under its step as "name: value"."""

from __future__ import annotations

SPEND = "spend { inputTokens outputTokens costMicros calls }"
BUDGET = "budget { maxTokens maxCostMicros }"
STEP_DRAWN = (
    f"index action status idempotent attempts error output startedAt completedAt {SPEND} models"
)
STEP_REPORTED = ""
"""Fields a step reports beyond those drawn (``app.js`` shows each under its step)."""
STEP_FIELDS = f"{STEP_DRAWN} {STEP_REPORTED}".strip()
TOOL_FIELDS = "toolName status retryCount maxRetries lastError lastResult rateLimitResetAt"
LOCK_FIELDS = "holderId fencingToken expiresAt"
TASK_FIELDS = (
    "id sessionId goal status version currentStep totalSteps eventSeq stalled interruptRequested"
    " origin { taskId seq }"
    f" steps {{ {STEP_FIELDS} }} toolStates {{ {TOOL_FIELDS} }} lock {{ {LOCK_FIELDS} }}"
    f" {BUDGET}"
)
DELTA_FIELDS = (
    "seq kind taskVersion stepIndex toolName at status stalled actor holder note epoch"
    f" steps {{ {STEP_FIELDS} }} toolState {{ {TOOL_FIELDS} }} lock {{ {LOCK_FIELDS} }}"
    f" {BUDGET} budgetCrossed"
)
PROBLEM = "... on Problem { message }"

PAGE_SIGN_IN = "query pageSignIn { sessions(first: 1) { edges { cursor } } }"
"""A token's check: any answer but 401 signs the page in."""
PAGE_SESSIONS = (
    "query pageSessions { sessions(first: 20) { edges { node { id status"
    " tasks(first: 20) { edges { node { id goal status currentStep totalSteps stalled overBudget"
    " createdAt graphThread origin { taskId seq } } } }"
    " } } } }"
)
PAGE_PROGRESS = (
    "subscription pageProgress($taskId: ID!, $afterSeq: Int, $epoch: String) {"
    " taskProgress(taskId: $taskId, afterSeq: $afterSeq, epoch: $epoch)"
    f" {{ {DELTA_FIELDS} task {{ {TASK_FIELDS} }} }} }}"
)
PAGE_LOG = (
    "query pageLog($id: ID!, $after: Int!, $first: Int!) { task(id: $id) {"
    f" ... on Task {{ events(afterSeq: $after, first: $first) {{ {DELTA_FIELDS} }} }} }} }}"
)
PAGE_TASK_AT = (
    "query pageTaskAt($id: ID!, $seq: Int!) { taskAt(id: $id, seq: $seq) {"
    f" __typename ... on Task {{ {TASK_FIELDS} }} {PROBLEM} }} }}"
)
PAGE_GOAL = "query pageGoal($id: ID!) { task(id: $id) { __typename ... on Task { goal } } }"
PAGE_LEASE = (
    "query pageLease($id: ID!) { task(id: $id) {"
    f" ... on Task {{ stalled lock {{ {LOCK_FIELDS} }} }} }} }}"
)
PAGE_SPEND = (
    "query pageSpend($id: ID!) { usage { currency } task(id: $id) { ... on Task {"
    f" version overBudget {SPEND} {BUDGET} session {{ id version {SPEND} {BUDGET} }} }} }} }}"
)
"""What a task and its session spent, against their budgets (read after each
event: a session's spend is its tasks', which no event of this task carries)."""
PAGE_BUDGET = (
    "mutation pageBudget($input: SetBudgetInput!) { setBudget(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)
PAGE_FORK = (
    "mutation pageFork($input: ForkTaskInput!) { forkTask(input: $input) {"
    f" __typename ... on Task {{ id }} {PROBLEM} }} }}"
)
PAGE_ANSWER = (
    "mutation pageAnswer($input: AnswerInterruptInput!) { answerInterrupt(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)
PAGE_DECIDE = (
    "mutation pageDecide($input: DecideStepInput!) { decideStep(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)

SUBMISSION_FIELDS = (
    "id seq status policy reason taskId displacedBy actor input scheduleId scheduledFor"
    " createdAt updatedAt task { goal }"
)
"""What the ledger draws of a submission: the task's goal stays shown once a
ROLLBACK or a cancel removed the task (``app.js`` keeps it)."""
SCHEDULE_FIELDS = "id version cron timezone goal policy misfire enabled nextFireAt lastFireAt"
PAGE_LEDGER = (
    "subscription pageLedger($sessionId: ID!) { sessionSubmissions(sessionId: $sessionId) {"
    f" kind submissions {{ {SUBMISSION_FIELDS} }} }} }}"
)
PAGE_ENTRIES = (
    "query pageEntries($id: ID!) { session(id: $id) { __typename"
    f" ... on AgentSession {{ submissions(first: 100) {{ {SUBMISSION_FIELDS} }} }} {PROBLEM} }} }}"
)
"""The session's ledger from its start, finished entries too (the subscription's
SNAPSHOT holds only the unfinished ones)."""
PAGE_SCHEDULES = (
    "query pageSchedules($id: ID!) { session(id: $id) { __typename"
    f" ... on AgentSession {{ schedules {{ {SCHEDULE_FIELDS} }} }} {PROBLEM} }} }}"
)
PAGE_SUBMIT = (
    "mutation pageSubmit($input: SubmitInput!) { submitInput(input: $input) { __typename"
    f" ... on Submission {{ seq status }} ... on SessionBusy {{ active {{ seq }} }} {PROBLEM} }} }}"
)
PAGE_CANCEL = (
    "mutation pageCancel($input: CancelSubmissionInput!) { cancelSubmission(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)
PAGE_ADD_SCHEDULE = (
    "mutation pageAddSchedule($input: CreateScheduleInput!) { createSchedule(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)
PAGE_PAUSE_SCHEDULE = (
    "mutation pagePauseSchedule($input: UpdateScheduleInput!) { updateSchedule(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)
"""Pauses (``enabled: false``) or resumes a schedule at the version the page read."""
PAGE_DELETE_SCHEDULE = (
    "mutation pageDeleteSchedule($input: DeleteScheduleInput!) { deleteSchedule(input: $input) {"
    f" __typename {PROBLEM} }} }}"
)


def operations() -> dict[str, str]:
    """The page's documents by their operation's name."""
    return {
        body.split(" ", 2)[1].split("(")[0]: body
        for name, body in sorted(globals().items())
        if name.startswith("PAGE_") and isinstance(body, str)
    }
