"""``Runstate``: the async SDK client.

Queries and mutations are POSTs of their JSON through the SDK's own HTTP client
(``runstate.client.http``: gql's session on httpx cost ten times its CPU per
request); ``watch`` follows a task over graphql-transport-ws on the SDK's own
WebSocket client (``runstate.client.watching``) and reconnects by itself, resuming
after the last seq it saw. A ``Problem`` answer becomes the matching exception of
``runstate.client.exceptions``, and so does every other error, over HTTP or a
WebSocket: a caller catches ``RunstateError``, never the HTTP client's or
websockets' exceptions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Self
from urllib.parse import quote

from websockets.exceptions import WebSocketException

from runstate.basics.enums import AdmissionPolicy, SubmissionStatus
from runstate.client import documents as doc
from runstate.client.exceptions import (
    PROBLEMS,
    NotFound,
    RateLimited,
    RunstateError,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)
from runstate.client.http import (
    BrokenAnswerError,
    ClosedError,
    ConnectionFailedError,
    Connections,
    Endpoint,
    Response,
)
from runstate.client.ids import checked_id
from runstate.client.records import (
    Event,
    Lock,
    ResumePlan,
    Session,
    SpendReport,
    Submission,
    Task,
    ToolState,
    camel,
)
from runstate.client.watching import BrokenProtocolError, QueryError, Subscriptions

log = logging.getLogger(__name__)

RETRIES = 8
RATE_LIMIT_WAIT = 60.0
"""The longest a call waits, in all, for the caller's rate limit before it raises."""
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 3.0
_TRANSIENT = (ConnectionFailedError, BrokenAnswerError, TimeoutError)
"""The failures after which a request is sent again: no answer, a broken one (a 5xx
without a GraphQL body among them: ``_answer``), none within the client's
``timeout`` (TimeoutError)."""

StepPlan = str | Mapping[str, Any]
"""A step to plan: its action, or ``{"action", "input", "idempotent"}``."""


TRUSTED = {body: doc.document_id(body) for body in doc.operations().values()}
"""The documents servers register (``web/static/documents.json``), sent by id."""


def _body(document: str, variables: dict[str, Any]) -> bytes:
    """The JSON body that asks ``document``: by its id if servers register it (its
    text not sent), else its text."""
    document_id = TRUSTED.get(document)
    payload = (
        {"query": document, "variables": variables}
        if document_id is None
        else {"documentId": document_id, "variables": variables}
    )
    return json.dumps(payload, separators=(",", ":")).encode()


def _answer(response: Response, url: str) -> dict[str, Any]:
    """The GraphQL answer (``data``, maybe ``errors``) that ``response`` carries,
    whatever its status (the server answers GraphQL errors with a 200 or a 4xx, as
    gql took them). Without one: ``_RefusedError`` for a status below 500 that is not a
    success, ``BrokenAnswerError`` (sent again) for a 5xx or a success."""
    try:
        answer = json.loads(response.body)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and (answer.get("errors") or answer.get("data") is not None):
        return answer
    status = f"'{response.status} {response.reason}' for url '{url}'"
    if response.status >= 500:
        raise BrokenAnswerError(f"Server error {status}")
    if response.status >= 300:
        kind = "Client error" if response.status >= 400 else "Redirect response"
        raise _RefusedError(f"{kind} {status}")
    raise BrokenAnswerError(f"not a GraphQL answer: {response.body[:200]!r}")


class _RefusedError(Exception):
    """An answer outside 2xx and 5xx with no GraphQL body (a proxy's 404, say): its
    status line, a ``ServerError`` not sent again."""


def _plan(step: StepPlan) -> dict[str, Any]:
    return {"action": step} if isinstance(step, str) else dict(step)


def _some(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def wire(values: Mapping[str, Any]) -> dict[str, Any]:
    """Fields named as Python names them (``tokens_used``) as GraphQL does
    (``tokensUsed``): what an agent reports of a step, under any field name, a
    ``SpendReport`` as ``SpendInput``."""
    return {
        camel(name): value.wire() if isinstance(value, SpendReport) else value
        for name, value in values.items()
    }


def _budget(budget: Mapping[str, int | None] | None) -> dict[str, Any] | None:
    """A budget given as Python names it (``{"max_cost_micros": 4_000_000}``), as
    ``BudgetInput``."""
    return None if budget is None else wire(budget)


_BY_CODE = {cls.code: cls for cls in PROBLEMS.values()}


def _refusal(url: str, operation: str, errors: list[dict[str, Any]]) -> RunstateError:
    """The SDK's exception for GraphQL ``errors`` answered to ``operation``, by the
    first entry's ``extensions.code``: Unauthorized for a refused token (401,
    UNAUTHENTICATED); the Problem's exception for a Problem's code (a subscription's
    SessionExpired or NotFound, the 429 of a spent rate budget: RateLimited, its
    ``retryAfterSeconds`` with it); else ServerError."""
    first = errors[0] if errors else {}
    extensions = first.get("extensions") or {}
    code = str(extensions.get("code"))
    if code == "UNAUTHENTICATED":
        return Unauthorized(
            f"{url} refused the token (wrong, revoked or missing); "
            "make one with `runstate token create USER`"
        )
    problem = _BY_CODE.get(code)
    if problem is not None:
        return problem({"message": first.get("message", code), **extensions})
    return ServerError(operation, errors)


FORBIDDEN = 4403
"""The close code of a WebSocket whose token the server refused."""


def _close_code(error: BaseException) -> int | None:
    """The close code of the WebSocket close behind ``error``, if one is."""
    cause: BaseException | None = error
    while cause is not None:
        received = getattr(cause, "rcvd", None)
        if received is not None:
            return int(received.code)
        cause = cause.__cause__ or cause.__context__
    return None


async def _pause(name: str, wait: float) -> float:
    """Sleep out a rate limit's wait and up to a quarter more; the time slept."""
    pause = wait * random.uniform(1.0, 1.25)
    log.info("%s was rate limited; trying again in %.2fs", name, pause)
    await asyncio.sleep(pause)
    return pause


class Calls:
    """The GraphQL calls of a runstate client for one caller (its token); ``Runstate``
    adds the worker loops that drive a task with a ``TaskRunner``.

    Every write carries an
    idempotency key of its own, and a request whose answer never came (a dropped
    connection, a timeout, a 5xx) is sent again, up to ``retries`` times with a
    jittered, growing pause: the server answers a repeated write as it did the
    first time, so an agent never sees a network error it should have survived.
    A RateLimited answer is waited out (its retryAfterSeconds, plus up to a quarter
    more so that writers refused together do not come back together) and the call
    sent again, for up to ``RATE_LIMIT_WAIT`` seconds in all.

    With ``connections`` (a ``Connections`` pool its caller owns and closes),
    requests go through that pool, with this client's token and timeout on each:
    any number of clients, of any tokens, share its connections, and leaving one
    closes none. Without it, the client opens connections of its own on entering
    and closes them on leaving.

    A refused token raises ``Unauthorized``; a server that never answers raises
    ``ServerUnavailable`` once the retries are spent; any other error it answers
    (GraphQL ``errors``, a 4xx) raises ``ServerError``, unless its code names a
    Problem. ``timeout`` bounds each request, in seconds.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = RETRIES,
        headers: Mapping[str, str] | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.retries = retries
        self.timeout = timeout
        self._headers = {**(headers or {}), "Authorization": f"Bearer {token}"}
        self._connections = connections
        self._own: Connections | None = None
        """The connections this client opened on entering, when it borrows none."""
        self._endpoint: Endpoint | None = None

    def dashboard_link(self, task_id: str | None = None, *, signed_in: bool = False) -> str:
        """The dashboard's address, on ``task_id`` if given. ``signed_in`` puts this
        client's token in the link's fragment (never sent to a server, but keep such
        a link to yourself). Without it, as the runner's lines print it, a browser
        that signed in before opens it signed in (the page remembers the last token),
        and any other asks for a token, says how to get a signed-in link, and then
        opens the task."""
        fragment = [f"token={self.token}"] if signed_in else []
        if task_id is not None:
            fragment.append(f"task={quote(task_id, safe='')}")
        return f"{self.url}/" + (f"#{'&'.join(fragment)}" if fragment else "")

    async def __aenter__(self) -> Self:
        connections = self._connections
        if connections is None:
            connections = self._own = Connections()
        self._endpoint = connections.endpoint(f"{self.url}/graphql", self._headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._endpoint = None
        own, self._own = self._own, None
        if own is not None:
            await own.aclose()

    async def _call(self, document: str, name: str, **variables: Any) -> dict[str, Any]:
        """One operation's answer, or the exception of its Problem; a RateLimited
        answer (the Problem, or the 429 a request gets when its budget cannot pay its
        first point) is waited out and the request sent again."""
        body = _body(document, variables)
        waited = 0.0
        while True:
            try:
                data: dict[str, Any] = (await self._send(body, name))[name]
                problem = PROBLEMS.get(data["__typename"])
                if problem is not None:
                    raise problem(data)
                return data
            except RateLimited as refused:
                if waited >= RATE_LIMIT_WAIT:
                    raise
                waited += await _pause(name, refused.retry_after)

    async def _send(self, body: bytes, name: str) -> dict[str, Any]:
        """One request's ``data``; a transport failure (no answer, a broken one, a
        5xx, a timeout) is tried again after a jittered, growing pause, up to
        ``retries`` times in all, then raised as ``ServerUnavailable``. An answer
        with GraphQL ``errors`` raises what ``_refusal`` makes of them (a refused
        token is ``Unauthorized``), and a 4xx without a GraphQL body a
        ``ServerError``."""
        if self._endpoint is None:
            raise RunstateError("use Runstate as `async with Runstate(url, token) as rs:`")
        for attempt in itertools.count(1):
            endpoint = self._endpoint
            try:
                if endpoint is None:  # closed while a retry waited
                    raise ClosedError
                answer = _answer(await endpoint.post(body, self.timeout), endpoint.url)
                break
            except ClosedError:
                raise RunstateError(f"{name} was not sent: this Runstate was closed") from None
            except _RefusedError as refused:
                raise ServerError(name, [{"message": str(refused)}]) from None
            except _TRANSIENT as error:
                if attempt >= self.retries:
                    raise ServerUnavailable(
                        f"{self.url} did not answer {name} ({error}), {attempt} tries"
                    ) from error
                pause = random.uniform(0, min(MAX_BACKOFF, FIRST_BACKOFF * 2**attempt))
                log.info("%s failed (%s); trying again in %.2fs", name, error, pause)
                await asyncio.sleep(pause)
        errors = answer.get("errors")
        if errors:
            raise _refusal(self.url, name, errors)
        data: dict[str, Any] = answer["data"]
        return data

    async def _mutate(
        self, document: str, name: str, idempotency_key: str | None = None, **input: Any
    ) -> dict[str, Any]:
        """A write, sent with an idempotency key (the caller's, else one of its own):
        when a retry follows a lost answer, the server answers as it did and writes
        nothing more."""
        key = idempotency_key or uuid.uuid4().hex
        return await self._call(document, name, input={**_some(**input), "idempotencyKey": key})

    # -- sessions and tasks

    async def start_session(
        self,
        id: str | None = None,
        *,
        ttl_seconds: int | None = None,
        metadata: Any = None,
        budget: Mapping[str, int | None] | None = None,
    ) -> Session:
        """Start a session (or get the one with this client-chosen id); ``budget``
        (``max_tokens``, ``max_cost_micros``) limits what its tasks spend together."""
        if id is not None:
            checked_id(id, "session id")
        data = await self._mutate(
            doc.START_SESSION,
            "startSession",
            id=id,
            ttlSeconds=ttl_seconds,
            metadata=metadata,
            budget=_budget(budget),
        )
        return Session.of(data)

    async def create_task(
        self,
        session_id: str,
        goal: str,
        steps: Sequence[StepPlan],
        *,
        id: str | None = None,
        holder: str | None = None,
        lease_ttl: int = 30,
        budget: Mapping[str, int | None] | None = None,
        run_of: str | None = None,
    ) -> Task:
        """Create a task with its plan (or get the one with this client-chosen id).
        With ``holder`` it is created leased to that holder for ``lease_ttl`` seconds,
        so no worker's ``claim`` takes it before ``run(task.id, holder=...)`` does.
        ``budget`` (``max_tokens``, ``max_cost_micros``) limits what it may spend.
        ``run_of`` names the framework whose run the task holds: only a ``claim``
        naming it hands the task out, never a worker's ordinary one."""
        if id is not None:
            checked_id(id, "task id")
        lease = None if holder is None else {"holderId": holder, "ttlSeconds": lease_ttl}
        data = await self._mutate(
            doc.CREATE_TASK,
            "createTask",
            sessionId=session_id,
            goal=goal,
            steps=[_plan(s) for s in steps],
            id=id,
            lease=lease,
            budget=_budget(budget),
            runOf=run_of,
        )
        return Task.of(data)

    async def task(self, task_id: str) -> Task:
        """The task as it stands."""
        return Task.of(await self._call(doc.TASK_QUERY, "task", id=task_id))

    async def task_at(self, task_id: str, seq: int) -> Task:
        """The task exactly as it stood just after event ``seq``."""
        return Task.of(await self._call(doc.TASK_AT_QUERY, "taskAt", id=task_id, seq=seq))

    async def fork(
        self, task_id: str, at_seq: int, *, id: str | None = None, goal: str | None = None
    ) -> Task:
        """A new task from the source's state at ``at_seq`` (RUNNING steps PENDING)."""
        if id is not None:
            checked_id(id, "task id")
        data = await self._mutate(
            doc.FORK, "forkTask", taskId=task_id, atSeq=at_seq, id=id, goal=goal
        )
        return Task.of(data)

    async def start_step(
        self, task_id: str, index: int, version: int, *, fencing_token: int | None = None
    ) -> Task:
        """PENDING -> RUNNING."""
        data = await self._mutate(
            doc.START_STEP,
            "startStep",
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version,
            fencingToken=fencing_token,
        )
        return Task.of(data)

    async def complete_step(
        self,
        task_id: str,
        index: int,
        version: int,
        output: Any = None,
        *,
        fencing_token: int | None = None,
        **reported: Any,
    ) -> Task:
        """RUNNING -> SUCCESS with its output, and whatever else the step reports
        (``reported``: fields of ``CompleteStepInput`` by their Python names)."""
        data = await self._mutate(
            doc.COMPLETE_STEP,
            "completeStep",
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version,
            output=output,
            fencingToken=fencing_token,
            **wire(reported),
        )
        return Task.of(data)

    async def fail_step(
        self,
        task_id: str,
        index: int,
        version: int,
        error: str,
        *,
        fencing_token: int | None = None,
        **reported: Any,
    ) -> Task:
        """RUNNING -> FAILED with its error (the task fails too), and whatever else
        the step reports (``reported``: fields of ``FailStepInput``)."""
        data = await self._mutate(
            doc.FAIL_STEP,
            "failStep",
            taskId=task_id,
            stepIndex=index,
            expectedVersion=version,
            error=error,
            fencingToken=fencing_token,
            **wire(reported),
        )
        return Task.of(data)

    async def checkpoint(
        self,
        task_id: str,
        version: int,
        steps: Sequence[Mapping[str, Any]],
        *,
        status: str | None = None,
        fencing_token: int | None = None,
    ) -> Task:
        """Several step changes (``{"index", "status", "output"?, "error"?}``, and any
        other field of ``StepPatchInput`` by its Python name) as one write."""
        data = await self._mutate(
            doc.CHECKPOINT,
            "checkpointTask",
            taskId=task_id,
            expectedVersion=version,
            steps=[wire(s) for s in steps],
            status=status,
            fencingToken=fencing_token,
        )
        return Task.of(data)

    async def set_status(
        self, task_id: str, version: int, status: str, *, fencing_token: int | None = None
    ) -> Task:
        """Move the task along its state machine."""
        data = await self._mutate(
            doc.SET_STATUS,
            "setTaskStatus",
            taskId=task_id,
            expectedVersion=version,
            status=status,
            fencingToken=fencing_token,
        )
        return Task.of(data)

    # -- recovery, leases, tools

    async def resume(
        self, task_id: str, *, version: int | None = None, fencing_token: int | None = None
    ) -> ResumePlan:
        """Make a crashed task ready to go on; see ``ResumePlan``."""
        data = await self._mutate(
            doc.RESUME,
            "resumeTask",
            taskId=task_id,
            expectedVersion=version,
            fencingToken=fencing_token,
        )
        return ResumePlan.of(data)

    async def decide(
        self,
        task_id: str,
        index: int,
        decision: str,
        version: int,
        *,
        output: Any = None,
        note: str | None = None,
        fencing_token: int | None = None,
    ) -> Task:
        """RETRY, SKIP or COMPLETE (with ``output``: what the person found happened) a
        step left IN_DOUBT by a crash; ``note`` says why (the event keeps it)."""
        data = await self._mutate(
            doc.DECIDE,
            "decideStep",
            taskId=task_id,
            stepIndex=index,
            decision=decision,
            output=output,
            note=note,
            expectedVersion=version,
            fencingToken=fencing_token,
        )
        return Task.of(data)

    async def acquire_lock(self, task_id: str, holder_id: str, ttl_seconds: int) -> Lock:
        """A lease on the task, or LockHeld."""
        data = await self._mutate(
            doc.ACQUIRE,
            "acquireTaskLock",
            taskId=task_id,
            holderId=holder_id,
            ttlSeconds=ttl_seconds,
        )
        return Lock.of(data)

    async def renew_lock(self, task_id: str, holder_id: str, ttl_seconds: int) -> Lock:
        """Extend this holder's live lease, or LockNotHeld."""
        data = await self._mutate(
            doc.RENEW,
            "renewTaskLock",
            taskId=task_id,
            holderId=holder_id,
            ttlSeconds=ttl_seconds,
        )
        return Lock.of(data)

    async def release_lock(self, task_id: str, holder_id: str) -> Task:
        """Give the lease up, or LockNotHeld."""
        data = await self._mutate(
            doc.RELEASE, "releaseTaskLock", taskId=task_id, holderId=holder_id
        )
        return Task.of(data)

    async def record_tool_call(
        self,
        task_id: str,
        tool_name: str,
        outcome: str,
        *,
        result: Any = None,
        error: str | None = None,
        retry_after_seconds: int | None = None,
        max_retries: int | None = None,
        version: int | None = None,
        fencing_token: int | None = None,
    ) -> ToolState:
        """Report a tool call: CALLING, SUCCESS, FAILURE or RATE_LIMITED."""
        data = await self._mutate(
            doc.TOOL,
            "recordToolCall",
            taskId=task_id,
            toolName=tool_name,
            outcome=outcome,
            result=result,
            error=error,
            retryAfterSeconds=retry_after_seconds,
            maxRetries=max_retries,
            expectedVersion=version,
            fencingToken=fencing_token,
        )
        return ToolState.of(data)

    async def record_spend(
        self,
        task_id: str,
        index: int,
        spend: SpendReport,
        *,
        fencing_token: int | None = None,
    ) -> Task:
        """Add what a RUNNING step spent (``recordSpend``): no version needed, and
        the task's version stays as it is."""
        data = await self._mutate(
            doc.RECORD_SPEND,
            "recordSpend",
            taskId=task_id,
            stepIndex=index,
            spend=spend.wire(),
            fencingToken=fencing_token,
        )
        return Task.of(data)

    async def set_budget(
        self,
        version: int,
        *,
        task_id: str | None = None,
        session_id: str | None = None,
        max_tokens: int | None = None,
        max_cost_micros: int | None = None,
        note: str | None = None,
    ) -> Task | Session:
        """Set (or, with no limit given, remove) the budget of a task or a session at
        the ``version`` seen: a person's decision, ``note`` saying why."""
        data = await self._mutate(
            doc.SET_SESSION_BUDGET if task_id is None else doc.SET_TASK_BUDGET,
            "setBudget",
            taskId=task_id,
            sessionId=session_id,
            expectedVersion=version,
            budget={"maxTokens": max_tokens, "maxCostMicros": max_cost_micros},
            note=note,
        )
        return Task.of(data) if data["__typename"] == "Task" else Session.of(data)

    # -- a session's ledger: inputs admitted in one order, run one at a time

    async def submit(
        self,
        session_id: str,
        goal: str,
        steps: Sequence[StepPlan],
        *,
        input: Any = None,
        policy: str = AdmissionPolicy.REJECT,
        budget: Mapping[str, int | None] | None = None,
        idempotency_key: str | None = None,
    ) -> Submission:
        """Admit ``input`` into the session's ledger with the task that carries it
        out (``goal``, ``steps``), created PLANNED in the same transaction; the
        submission takes the ledger's next ``seq``. With the session's active
        submission unfinished, ``policy`` says what happens: REJECT raises
        ``SessionBusy`` (its ``active``) and writes nothing; ENQUEUE queues it
        (QUEUED: its task is claimed once those before it are finished); INTERRUPT
        asks the active task to stop at its next start of work and runs this one
        next; ROLLBACK does the same and then removes the stopped task. With none
        unfinished it is ACTIVE at once, whatever the policy.

        ``budget`` (``max_tokens``, ``max_cost_micros``) limits its task's spend; a
        session over its budget raises ``BudgetExceeded``. ``idempotency_key``
        (one per input, e.g. the id of the message a person sent) makes a second
        submit of the same input, from any process, answer the same submission:
        without it the call's retries are covered, not a retry of the call."""
        data = await self._mutate(
            doc.SUBMIT,
            "submitInput",
            idempotency_key,
            sessionId=session_id,
            input=input,
            goal=goal,
            steps=[_plan(s) for s in steps],
            policy=AdmissionPolicy(policy),
            budget=_budget(budget),
        )
        return Submission.of(data)

    async def cancel_submission(self, submission_id: str, *, note: str | None = None) -> Submission:
        """Cancel a QUEUED submission (CANCELLED, ``note`` its reason) and remove its
        task; any other status raises ``InvalidTransition``."""
        data = await self._mutate(
            doc.CANCEL_SUBMISSION, "cancelSubmission", id=submission_id, note=note
        )
        return Submission.of(data)

    async def submission(self, submission_id: str) -> Submission:
        """A submission as it stands."""
        data = await self._call(doc.SUBMISSION_QUERY, "submission", id=submission_id)
        return Submission.of(data)

    async def submissions(
        self, session_id: str, *, status: str | None = None, first: int = 50
    ) -> list[Submission]:
        """The session's ledger in order (``seq``): its first ``first`` submissions,
        of one ``status`` if given (``submissions(id, status="QUEUED")``: those
        waiting)."""
        data = await self._call(
            doc.SUBMISSIONS_QUERY,
            "session",
            sessionId=session_id,
            status=None if status is None else SubmissionStatus(status),
            first=first,
        )
        return [Submission.of(s) for s in data["submissions"]]

    async def active_submission(self, session_id: str) -> Submission | None:
        """The submission whose turn it is (ACTIVE), if any."""
        data = await self._call(doc.ACTIVE_SUBMISSION_QUERY, "session", sessionId=session_id)
        active = data["activeSubmission"]
        return None if active is None else Submission.of(active)

    # -- live progress

    def watch(
        self, task_id: str, after_seq: int | None = None, *, retry_seconds: float = 1.0
    ) -> Watch:
        """Follow a task live: ``async for event in rs.watch(task_id)``; the returned
        ``Watch`` also keeps ``.task``, the task as of the last event yielded.

        Without ``after_seq`` the first event is a SNAPSHOT. After a dropped
        connection or a server restart it subscribes again with the last seq it
        yielded, so no event is missed or repeated.
        """
        return Watch(self, task_id, after_seq, retry_seconds)

    async def claim(
        self,
        holder_id: str,
        ttl_seconds: int,
        *,
        session_id: str | None = None,
        stalled_for_seconds: int = 0,
        run_of: str | None = None,
    ) -> Lock | None:
        """Lease the oldest task that needs a worker (PLANNED, or stalled: its agent
        died, at least ``stalled_for_seconds`` ago), or None when none does: an
        ordinary task, or with ``run_of`` a run of that framework only."""
        try:
            data = await self._mutate(
                doc.CLAIM,
                "claimTask",
                holderId=holder_id,
                ttlSeconds=ttl_seconds,
                sessionId=session_id,
                stalledForSeconds=stalled_for_seconds or None,
                runOf=run_of,
            )
        except NotFound:
            return None
        return Lock.of(data)

    # -- a session's conversation items (``runstate.integrations.openai_agents``)

    async def add_session_items(self, session_id: str, items: Sequence[Any]) -> int:
        """Append ``items`` to the session's conversation as one batch, in order;
        the seq of the last. Under an idempotency key of its own: a retry after a
        lost answer stores nothing twice."""
        data = await self._mutate(
            doc.ADD_SESSION_ITEMS, "addSessionItems", sessionId=session_id, items=list(items)
        )
        return int(data["itemSeq"])

    async def pop_session_item(self, session_id: str) -> Any:
        """Remove the newest item of the conversation and return it as it was stored;
        None when there is none."""
        data = await self._mutate(doc.POP_SESSION_ITEM, "popSessionItem", sessionId=session_id)
        popped = data["popped"]
        return None if popped is None else popped["item"]

    async def clear_session_items(self, session_id: str) -> int:
        """Remove every item of the conversation; how many went."""
        data = await self._mutate(
            doc.CLEAR_SESSION_ITEMS, "clearSessionItems", sessionId=session_id
        )
        return int(data["removed"])

    async def session_items(self, session_id: str, last: int | None = None) -> list[Any]:
        """The newest ``last`` items of the conversation (all with None), oldest
        first, read a page at a time from the newest back."""
        found: list[Any] = []
        before: int | None = None
        while last is None or len(found) < last:
            want = doc.ITEM_PAGE if last is None else min(doc.ITEM_PAGE, last - len(found))
            data = await self._call(
                doc.SESSION_ITEMS_QUERY,
                "sessionItems",
                sessionId=session_id,
                last=want,
                beforeSeq=before,
            )
            page = data["items"]
            found[:0] = [entry["item"] for entry in page]
            if not data["hasMore"] or not page:
                break
            before = page[0]["seq"]
        return found

    async def task_events(self, task_id: str) -> list[dict[str, Any]]:
        """The task's whole log, oldest first, each event's seq, kind, stepIndex,
        actor and note (a page of 100 at a time)."""
        found: list[dict[str, Any]] = []
        while True:
            after = found[-1]["seq"] if found else 0
            data = await self._call(doc.TASK_EVENTS_QUERY, "task", id=task_id, afterSeq=after)
            found += data["events"]
            if len(data["events"]) < 100:
                return found

    # -- LangGraph checkpoints (``runstate.integrations.langgraph``): answers as sent

    async def put_graph_checkpoint(self, **input: Any) -> Task:
        """Store a LangGraph checkpoint in its thread's task (``putGraphCheckpoint``).
        Sent without an idempotency key: the server writes nothing for a checkpoint
        it holds already, so a retry writes once all the same (a key's statements
        cost a fifth of the write)."""
        data = await self._call(
            doc.PUT_GRAPH_CHECKPOINT, "putGraphCheckpoint", input=_some(**input)
        )
        return Task.of(data)

    async def put_graph_writes(self, **input: Any) -> Task:
        """Store a LangGraph task's pending writes (``putGraphWrites``), without an
        idempotency key: writes already stored are kept and write nothing."""
        data = await self._call(doc.PUT_GRAPH_WRITES, "putGraphWrites", input=_some(**input))
        return Task.of(data)

    async def record_graph_run(self, **input: Any) -> Task:
        """Report node runs of a thread and the end of a run (``recordGraphRun``),
        without an idempotency key: a report the thread shows already changes
        nothing."""
        data = await self._call(doc.RECORD_GRAPH_RUN, "recordGraphRun", input=_some(**input))
        return Task.of(data)

    async def clear_graph(self, task_id: str, *, fencing_token: int | None = None) -> Task:
        """Delete a thread's checkpoints (``clearGraph``)."""
        data = await self._mutate(
            doc.CLEAR_GRAPH, "clearGraph", taskId=task_id, fencingToken=fencing_token
        )
        return Task.of(data)

    async def prune_graph(
        self, task_id: str, strategy: str, *, fencing_token: int | None = None
    ) -> Task:
        """Prune a thread: KEEP_LATEST or DELETE (``pruneGraph``)."""
        data = await self._mutate(
            doc.PRUNE_GRAPH,
            "pruneGraph",
            taskId=task_id,
            strategy=strategy,
            fencingToken=fencing_token,
        )
        return Task.of(data)

    async def copy_graph(self, task_id: str, new_task_id: str) -> Task:
        """Copy a thread whole into another task (``copyGraph``)."""
        checked_id(new_task_id, "thread id")
        data = await self._mutate(
            doc.COPY_GRAPH, "copyGraph", taskId=task_id, newTaskId=new_task_id
        )
        return Task.of(data)

    async def delete_graph_runs(self, run_ids: Sequence[str]) -> int:
        """Delete the checkpoints of these runs; how many went (``deleteGraphRuns``)."""
        data = await self._mutate(doc.DELETE_GRAPH_RUNS, "deleteGraphRuns", runIds=list(run_ids))
        return int(data["checkpoints"])

    async def graph_checkpoint(
        self, thread_id: str, namespace: str, checkpoint_id: str | None
    ) -> dict[str, Any]:
        """A checkpoint of the thread, or its latest; NotFound without one."""
        return await self._call(
            doc.GRAPH_CHECKPOINT_QUERY,
            "graphCheckpoint",
            threadId=thread_id,
            namespace=namespace,
            checkpointId=checkpoint_id,
        )

    async def graph_checkpoints(self, **arguments: Any) -> dict[str, Any]:
        """A page of the caller's checkpoints, newest first (``graphCheckpoints``)."""
        return await self._call(doc.GRAPH_CHECKPOINTS_QUERY, "graphCheckpoints", **arguments)


class Watch:
    """A live view of one task: an async iterator of its events that also keeps the
    task itself current (``task``) from the snapshot and the deltas.

    Started with ``after_seq``, the first task it holds is read with ``taskAt``.
    """

    def __init__(
        self, api: Calls, task_id: str, after_seq: int | None, retry_seconds: float
    ) -> None:
        self.api = api
        self.task_id = task_id
        self.after_seq = after_seq
        self.retry_seconds = retry_seconds
        self.task: Task | None = None
        """The task as of the last event yielded (None before the first)."""

    def __aiter__(self) -> AsyncGenerator[Event, None]:
        """The events; a generator, so ``contextlib.aclosing`` closes its socket at once
        when a caller stops early."""
        return self._events()

    async def _events(self) -> AsyncGenerator[Event, None]:
        last = self.after_seq
        epoch: str | None = None  # the timeline ``last`` belongs to, once an event said
        api = self.api
        ws_url = api.url.replace("http", "ws", 1) + "/graphql"
        while True:
            try:
                async with Subscriptions(ws_url, api.token) as socket:
                    while True:
                        variables = {"taskId": self.task_id, "afterSeq": last, "epoch": epoch}
                        try:
                            async for data in socket.subscribe(doc.WATCH, variables):
                                event = Event.of(data["taskProgress"])
                                # A SNAPSHOT is taken whatever its seq: after a restore
                                # (a new epoch) the history may be shorter than the one left.
                                resync = event.kind == "SNAPSHOT"
                                if not resync and last is not None and event.seq <= last:
                                    continue
                                await self._follow(event)
                                last, epoch = event.seq, event.epoch
                                yield event
                        except QueryError as error:
                            refused = _refusal(api.url, "taskProgress", error.errors)
                            if not isinstance(refused, RateLimited):
                                raise refused from error
                            # Then subscribed again after the last seq, on the same socket:
                            # a new one would pay for its upgrade out of the points waited
                            # for, and be refused again, a point short, for ever.
                            await _pause("taskProgress", refused.retry_after)
                            continue
                        break
            except (BrokenProtocolError, OSError, WebSocketException) as error:
                if _close_code(error) == FORBIDDEN:
                    raise Unauthorized(f"{api.url} refused the token ({error})") from error
                log.info("watch of %s interrupted (%s); reconnecting", self.task_id, error)
            await asyncio.sleep(self.retry_seconds)

    async def _follow(self, event: Event) -> None:
        if self.task is None and event.task is None:
            self.task = await self.api.task_at(self.task_id, event.seq)
        elif self.task is None:
            self.task = event.task
        else:
            self.task = self.task.apply(event)
