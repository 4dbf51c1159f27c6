"""The OpenAI Agents SDK on runstate: ``RunstateSession``, the SDK's ``Session``
protocol over runstate's GraphQL API, and tool approvals decided on the server.

Conversation: a runstate session holds the items (``addSessionItems`` and its
kin): each item's place is given by the server in the write's transaction, so
several processes adding to one session store every item once, each batch
whole, in one order every reader agrees on; every write carries an idempotency
key, so a retry after a lost answer stores nothing twice.

Approvals: ``save_run_state`` keeps a run stopped at tool approvals as a task of
the session, marked on the server as a run of this framework (``runOf:
"openai-agents"``), one step per approval waiting for a person (``IN_DOUBT``:
``decideStep`` RETRY approves, SKIP rejects, with its actor and note; the
dashboard's buttons do the same). ``load_run_state`` hands a decided run out
once (``claimTask`` of this kind of task alone: one winner, never an ordinary
task of the session, and no ordinary claim ever gets a run), with the server's
decisions applied over any the client made; ``finish_run`` records its end.

One process, one loop: every ``RunstateSession`` of a process sends through one
HTTP client on one event loop, in one thread (``_Shared``), made when the first
session sends and closed at the interpreter's exit; a session holds none of
them, so one made per request and never closed leaves nothing behind.

Spend: the run's ``Usage`` (tokens of every model request) is recorded as the
spend of its steps: what it used up to its stop on the run's step, what the
resumed run used after it on the resume step (``finish_run(usage=...)``), each
priced by the session's ``prices``.

Installed with the extra ``runstate[openai-agents]``.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from agents import Agent, RunState, Usage
from agents.items import ToolApprovalItem, TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from runstate.client import Connections, Runstate, RunstateError
from runstate.client.ids import checked_id
from runstate.client.records import SpendReport, Step, Task
from runstate.integrations.pricing import Prices, priced

RUN_OF = "openai-agents"
"""The kind of task a run is on the server (``createTask``'s and ``claimTask``'s
``runOf``): only this integration's loader claims it."""
RUN_ACTION = "openai-agents run"
"""The first step of a run's task: its input holds ``RunState.to_json()``."""
RESUME_ACTION = "resume run"
"""The last step: RUNNING once the decided run is handed out, SUCCESS at its end."""
ITEMS_PER_WRITE = 1000
"""The most items the server takes in one write; a longer list goes in parts."""
T = TypeVar("T")
log = logging.getLogger(__name__)

LEASE_TTL = 60
"""Seconds a handed-out run's lease lasts unless renewed: the session renews it
every third of that while the run goes on, so a process that dies while running
it leaves the run, once its lease lapsed, to a person (its resume step in
doubt), never to a second run."""
CLOSE_WITHIN = 5.0
"""Seconds the process's exit waits for the shared loop to close its HTTP client."""


class _Shared:
    """What every ``RunstateSession`` of the process shares: one event loop, run in
    one daemon thread, and one HTTP client on it (one pool of connections, sending
    each session's own token). Any caller's loop reaches it
    (``run_coroutine_threadsafe``): ``Runner.run_sync`` shuts down the async
    generators of the loop it runs on after each run, which an HTTP client on that
    loop would need for the next one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="runstate-sessions", daemon=True
        )
        self.thread.start()
        self._connections: Connections | None = None

    def connections(self) -> Connections:
        """The HTTP client, made on first use; call it on the loop, which owns it."""
        if self._connections is None:
            self._connections = Connections()
        return self._connections

    def close(self) -> None:
        """Stop what still runs on the loop (lease renewals), close the HTTP client,
        then the loop and its thread."""
        if not self.thread.is_alive():
            return

        async def shut() -> None:
            left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            if self._connections is not None:
                await self._connections.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(CLOSE_WITHIN)
        except Exception as error:  # the process is leaving anyway
            log.warning("runstate sessions' HTTP client not closed: %r", error)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CLOSE_WITHIN)
        if not self.thread.is_alive():
            self.loop.close()


_shared: _Shared | None = None
_sharing = threading.Lock()


def _process() -> _Shared:
    """The process's ``_Shared``, made on first use."""
    global _shared
    with _sharing:
        if _shared is None:
            _shared = _Shared()
        return _shared


def _close_shared() -> None:
    if _shared is not None:
        _shared.close()


def _forget_shared() -> None:
    """In a child forked from a process that had made it: the thread did not come
    along, so the child makes its own on first use."""
    global _shared, _sharing
    _shared, _sharing = None, threading.Lock()


atexit.register(_close_shared)
os.register_at_fork(after_in_child=_forget_shared)


class RunstateSession:
    """The SDK's ``Session`` on a runstate server: ``RunstateSession(session_id,
    url=..., token=...)``, then ``Runner.run(agent, input, session=session)``.

    ``session_id`` is the runstate session's id (1 to 64 ASCII letters, digits or
    ``_.:@-``), started on first use when missing; ``ttl_seconds`` its inactivity
    timeout then. It sends through the process's one HTTP client, on the process's
    one loop in a thread of its own (``_Shared``), so that any loop may call it and
    a session costs no thread or connection of its own: it needs no closing.
    ``close`` (or ``async with``) stops renewing its run's lease and refuses
    further calls; what the process shares stays open for the other sessions.
    """

    def __init__(
        self,
        session_id: str,
        *,
        url: str,
        token: str,
        session_settings: SessionSettings | None = None,
        ttl_seconds: int | None = None,
        lease_ttl: int = LEASE_TTL,
        prices: Prices | None = None,
    ) -> None:
        self.session_id = checked_id(session_id, "session id")
        self.prices: Prices = dict(prices or {})
        """Model prices per million tokens, input and output: the cost of a run's usage."""
        self._used: dict[str, Any] = {}
        """The usage the run handed out had used before (its saved state's): what
        its task's run step holds already, taken off what it reports at its end."""
        self.lease_ttl = lease_ttl
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()
        self.url = url
        self.ttl_seconds = ttl_seconds
        self._token = token
        self._opening: asyncio.Future[Runstate] | None = None
        """The session's client, on the shared HTTP client, opened and the session
        started, once, on the shared loop."""
        self._closed = False
        self._holder = f"openai-agents-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._running: _Running | None = None
        self._unheld: weakref.finalize[Any, Any] | None = None
        """Stops renewing the handed-out run's lease once this session is gone
        (nobody can finish the run then)."""

    async def _on_loop(self, work: Callable[[Runstate], Awaitable[T]]) -> T:
        """``work(client)`` on the shared loop, awaited from the caller's."""
        if self._closed:
            raise RuntimeError("the session is closed")
        process = _process()

        async def there() -> T:
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._open(process.connections()))
            return await work(await self._opening)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(there(), process.loop))

    async def _open(self, connections: Connections) -> Runstate:
        client = Runstate(self.url, self._token, connections=connections)
        await client.__aenter__()
        await client.start_session(self.session_id, ttl_seconds=self.ttl_seconds)
        return client

    async def close(self) -> None:
        """Stop renewing the lease of a run handed out here and refuse further
        calls; idempotent. The process's loop and HTTP client stay open for its
        other sessions (they close at its exit). A run handed out and not finished
        keeps its lease until it lapses."""
        if self._closed:
            return
        self._closed = True
        if self._unheld is not None:
            self._unheld()
        opening, self._opening = self._opening, None
        if opening is None or _shared is None or _shared.loop.is_closed():
            return

        async def shut() -> None:
            try:
                client = await opening
            except Exception:  # never opened: nothing to close
                return
            await client.__aexit__(None, None, None)

        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(shut(), _shared.loop))

    async def __aenter__(self) -> RunstateSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the Session protocol

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items, oldest first (an explicit limit wins over
        ``session_settings.limit``; 0 gives none, a negative limit or None all)."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted < 0:
            wanted = None
        if wanted == 0:
            return []
        session_id = self.session_id
        items = await self._on_loop(lambda client: client.session_items(session_id, wanted))
        return list(items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, as one batch (in parts of 1,000 for more)."""
        for start in range(0, len(items), ITEMS_PER_WRITE):
            part = items[start : start + ITEMS_PER_WRITE]
            await self._on_loop(partial(_add, session_id=self.session_id, items=part))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item by the server's order and return it as stored."""
        popped: TResponseInputItem | None = await self._on_loop(
            lambda client: client.pop_session_item(self.session_id)
        )
        return popped

    async def clear_session(self) -> None:
        """Remove every item of the conversation."""
        await self._on_loop(lambda client: client.clear_session_items(self.session_id))

    # -- approvals decided on the server

    async def save_run_state(self, state: RunState[Any, Any]) -> str:
        """Keep a run stopped at tool approvals with a task of the session, one step
        per approval waiting for a person; the task's id. A run handed out by
        ``load_run_state`` and stopped again is finished first (it goes on in the
        new task)."""
        interruptions = state.get_interruptions()
        if not interruptions:
            raise ValueError("the run waits for no approval: nothing to decide")
        before = self._used  # a run handed out here: what its saved state had used
        await self.finish_run(output={"stopped": "waits for approvals again"})
        saved = state.to_json()
        plan: list[dict[str, Any]] = [{"action": RUN_ACTION, "input": {"runState": saved}}]
        plan += [_approval_step(item) for item in interruptions]
        plan.append({"action": RESUME_ACTION, "idempotent": False})
        goal = f"{_agent_name(interruptions[0])}: {len(interruptions)} tool call(s) to approve"
        used = self._spent(saved["context"]["usage"], _model_name(interruptions[0]), before)
        return await self._on_loop(lambda client: self._keep(client, goal, plan, used))

    def _spent(
        self, usage: dict[str, Any], model: str | None, before: dict[str, Any]
    ) -> SpendReport | None:
        """What a run used (``usage``: serialized ``Usage``, as a state keeps it) past
        what it had used when handed out (``before``), priced; None when it made no
        model request since."""
        requests = int(usage.get("requests") or 0) - int(before.get("requests") or 0)
        if requests <= 0:
            return None
        tokens_in = int(usage.get("input_tokens") or 0) - int(before.get("input_tokens") or 0)
        tokens_out = int(usage.get("output_tokens") or 0) - int(before.get("output_tokens") or 0)
        return priced(tokens_in, tokens_out, model, self.prices)

    async def _keep(
        self,
        client: Runstate,
        goal: str,
        plan: list[dict[str, Any]],
        used: SpendReport | None,
    ) -> str:
        """The run's task, its approval steps in doubt: created under a lease and
        released only once they are, so that no loader sees it before."""
        task = await client.create_task(
            self.session_id,
            goal,
            plan,
            holder=self._holder,
            lease_ttl=self.lease_ttl,
            run_of=RUN_OF,
        )
        token = _token(task)
        approvals = range(1, len(plan) - 1)
        ran: dict[str, Any] = {
            "index": 0,
            "status": "SUCCESS",
            "output": {"waitsFor": len(approvals)},
        }
        waiting = [ran if used is None else ran | {"spend": used}]
        waiting += [{"index": i, "status": "RUNNING"} for i in approvals]
        task = await client.checkpoint(task.id, task.version, waiting, fencing_token=token)
        await client.resume(task.id, fencing_token=token)  # RUNNING, not idempotent: in doubt
        await client.release_lock(task.id, self._holder)
        return task.id

    async def load_run_state(self, agent: Agent[Any]) -> RunState[Any, Any] | None:
        """The session's decided run with the server's decisions applied, ready for
        ``Runner.run(agent, state, session=session)``; None when no run is decided
        (or another process took it: each run is handed out once). Call
        ``finish_run`` when it ends."""
        decided = await self._on_loop(self._claim_decided)
        if decided is None:
            return None
        saved = decided.steps[0].input["runState"]
        state = await RunState.from_json(agent, saved)
        self._used = saved.get("context", {}).get("usage") or {}
        by_call = {step.input["callId"]: step for step in decided.approvals}
        for item in state.get_interruptions():
            step = by_call.get(_call_id(item))
            if step is not None and step.status == "PENDING":  # RETRY: approved
                state.approve(item)
            else:  # SKIP, a step marked done by a person, or a call the server never saw
                state.reject(item, rejection_message=_rejection(step, decided.notes))
        hand_out = partial(decided.hand_out, holder=self._holder, ttl=self.lease_ttl)
        self._running = running = await self._on_loop(hand_out)
        self._unheld = weakref.finalize(self, running.stop_soon)
        return state

    async def _claim_decided(self, client: Runstate) -> _Decided | None:
        """Lease the session's decided run (``claimTask`` of runs of this framework
        alone: one winner, and never an ordinary task of the session), its steps
        and the notes of its decisions; None when there is none."""
        while True:
            lock = await client.claim(
                self._holder, self.lease_ttl, session_id=self.session_id, run_of=RUN_OF
            )
            if lock is None:
                return None
            task = await client.task(lock.task_id)
            steps = list(task.steps or ())
            if not steps or steps[0].action != RUN_ACTION:
                # Marked as a run of this framework by another client, not made here.
                await client.release_lock(task.id, self._holder)
                return None
            if steps[-1].status == "PENDING":
                notes = await _decision_notes(client, task.id)
                return _Decided(task, steps, lock.fencing_token, notes)
            # Handed out before, and its process died while running it: whether the
            # approved tools ran is for a person to say (the resume step in doubt).
            await client.resume(task.id, fencing_token=lock.fencing_token)
            await client.release_lock(task.id, self._holder)

    async def finish_run(
        self, output: Any = None, *, usage: Usage | None = None, model: str | None = None
    ) -> None:
        """Record the end of the run ``load_run_state`` handed out (its resume step
        SUCCESS with ``output``, the task COMPLETED) and give up its lease. With
        ``usage`` (``result.context_wrapper.usage``), what the resumed run used
        after its saved state is that step's spend, of ``model`` if named."""
        running, self._running = self._running, None
        if running is None:
            return
        if self._unheld is not None:
            self._unheld.detach()
            self._unheld = None
        spent = None
        if usage is not None:
            counted = {
                "requests": usage.requests,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            }
            spent = self._spent(counted, model, self._used)
        self._used = {}
        await self._on_loop(lambda client: running.finish(client, self._holder, output, spent))


class _Decided:
    """A decided run, leased to this session: its steps (the run, the approvals,
    the resume step) and the note of each decision, by step."""

    def __init__(self, task: Task, steps: list[Step], token: int, notes: dict[int, str]) -> None:
        self.task = task
        self.steps = steps
        self.approvals = steps[1:-1]
        self.token = token
        self.notes = notes

    async def hand_out(self, client: Runstate, *, holder: str, ttl: int) -> _Running:
        """Mark the run handed out: the approved steps SUCCESS, the resume step
        RUNNING (a second loader passes over it from then on); its lease renewed
        from now until it finishes."""
        marks = [
            {"index": s.index, "status": "SUCCESS", "output": {"approved": True}}
            for s in self.approvals
            if s.status == "PENDING"
        ]
        resume = self.steps[-1].index
        marks.append({"index": resume, "status": "RUNNING"})
        await client.checkpoint(self.task.id, self.task.version, marks, fencing_token=self.token)
        running = _Running(self.task.id, resume, self.token)
        running.renewing = asyncio.ensure_future(running.renew(client, holder, ttl))
        return running


class _Running:
    """The run this session handed out: its task, resume step and lease token."""

    def __init__(self, task_id: str, resume_index: int, token: int) -> None:
        self.task_id = task_id
        self.resume_index = resume_index
        self.token = token
        self.renewing: asyncio.Future[None] | None = None
        """Renewing the lease, on the shared loop, until the run finishes."""
        self.loop = asyncio.get_running_loop()

    async def renew(self, client: Runstate, holder: str, ttl: int) -> None:
        """Renew the run's lease every third of ``ttl``; stop once it is lost."""
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                await client.renew_lock(self.task_id, holder, ttl)
            except RunstateError as error:  # taken over, or the server gone for good
                log.warning("the lease of run %s was not renewed: %s", self.task_id, error)
                return

    def stop_renewing(self) -> None:
        if self.renewing is not None:
            self.renewing.cancel()

    def stop_soon(self) -> None:
        """``stop_renewing`` from any thread (on the loop, when it still runs)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.stop_renewing)

    async def finish(
        self, client: Runstate, holder: str, output: Any, spent: SpendReport | None
    ) -> None:
        """The resume step SUCCESS with ``output`` (and what the run ``spent``), the
        task COMPLETED, the lease given up."""
        self.stop_renewing()
        task = await client.task(self.task_id)
        step: dict[str, Any] = {"index": self.resume_index, "status": "SUCCESS", "output": output}
        done = [step if spent is None else step | {"spend": spent}]
        await client.checkpoint(
            task.id, task.version, done, status="COMPLETED", fencing_token=self.token
        )
        await client.release_lock(task.id, holder)


async def _add(client: Runstate, *, session_id: str, items: list[TResponseInputItem]) -> int:
    return await client.add_session_items(session_id, items)


def _approval_step(item: ToolApprovalItem) -> dict[str, Any]:
    """A step waiting for a person's approval of one call, named by the call itself
    (``approve send_mail({"to":"bob"})``, cut to the server's 200 characters) so
    that the dashboard asks about what would happen."""
    call = f"approve {item.tool_name or 'tool'}({item.arguments or ''})"
    return {
        "action": call if len(call) <= 200 else call[:199] + "…",
        "input": {"callId": _call_id(item), "tool": item.tool_name, "arguments": item.arguments},
        "idempotent": False,
    }


def _call_id(item: ToolApprovalItem) -> str:
    call_id = item.call_id
    if call_id is None:
        raise ValueError(f"an approval of {item.tool_name} carries no call id")
    return str(call_id)


def _model_name(item: ToolApprovalItem) -> str | None:
    """The model the stopped run's agent names, when it names one by name."""
    model = getattr(item.agent, "model", None)
    return model if isinstance(model, str) else None


def _agent_name(item: ToolApprovalItem) -> str:
    return str(getattr(item.agent, "name", "agent"))


def _token(task: Task) -> int:
    if task.lock is None:
        raise RuntimeError(f"task {task.id} was created without its lease")
    return task.lock.fencing_token


def _rejection(step: Step | None, notes: dict[int, str]) -> str:
    """The message a rejected tool call answers the model with: the person's note."""
    if step is None:
        return "Not approved: runstate holds no decision on this call."
    note = notes.get(step.index)
    if step.status == "SUCCESS":
        return f"Done by a person, not by the tool: {note or step.output}"
    return note or "Rejected by a person."


async def _decision_notes(client: Runstate, task_id: str) -> dict[int, str]:
    """The note of the last decision on each step (its event's ``note``)."""
    notes: dict[int, str] = {}
    for event in await client.task_events(task_id):
        if event["note"] is not None and event["stepIndex"] is not None:
            notes[int(event["stepIndex"])] = str(event["note"])
    return notes
