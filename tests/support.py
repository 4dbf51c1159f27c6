"""Helpers shared by the tests: real servers in subprocesses, real databases, a client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.typing import Subprotocol

from runstate.services.domain.validation import ContentLimits
from runstate.services.write.house import House

POSTGRES_URL = os.environ.get(
    "RUNSTATE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"
)
IN_CI = os.environ.get("CI", "").lower() == "true"


def require_service(name: str, host: str, port: int) -> None:
    """Skip loudly when a service is missing on a laptop; fail under CI=true."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return
    except OSError as e:
        reason = f"{name} is not reachable at {host}:{port} ({e}); this test needs a real {name}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until it is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def settled(predicate: Any, what: str, within: float = 30) -> None:
    """``wait_until`` for a test on the event loop: poll ``predicate`` between the
    loop's turns until it is true, failing after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.01)


@contextmanager
def postgres_database(options: str = "") -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test module, dropped afterwards;
    ``options`` go to its ``CREATE DATABASE`` (a template, a collation)."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    import asyncpg  # type: ignore[import-untyped]

    name = f"runstate_test_{uuid.uuid4().hex[:12]}"
    admin_url = POSTGRES_URL.replace("postgres://", "postgresql://", 1)

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run(f'CREATE DATABASE "{name}" {options}'))
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL of ``kind`` ("sqlite" or "postgres")."""
    if kind == "sqlite":
        yield f"sqlite://{tmp_path / 'runstate.db'}"
    else:
        with postgres_database() as url:
            yield url


def query_value(database_url: str, sql: str) -> Any:
    """The first column of the first row of ``sql``, read straight from the database."""
    if database_url.startswith("sqlite://"):
        with sqlite3.connect(database_url.removeprefix("sqlite://")) as db:
            return db.execute(sql).fetchone()[0]
    import asyncpg

    async def fetch() -> Any:
        conn = await asyncpg.connect(database_url.replace("postgres://", "postgresql://", 1))
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(fetch())


def runstate(
    *args: str, database_url: str, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the ``runstate`` command line against ``database_url``, with ``env``."""
    environment = {**os.environ, "RUNSTATE_DATABASE_URL": database_url, **env}
    return subprocess.run(
        [sys.executable, "-m", "runstate", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def create_token(database_url: str, user: str) -> str:
    """A new API token for ``user``, made by the CLI (its last stdout line). A
    database no server has set up yet is set up first (``runstate migrate``), as
    a person would: the token commands refuse it rather than make one."""
    made = runstate("token", "create", user, database_url=database_url, check=False)
    if made.returncode != 0 and "runstate: no runstate database at " in made.stderr:
        runstate("migrate", database_url=database_url)
        made = runstate("token", "create", user, database_url=database_url)
    made.check_returncode()
    return made.stdout.splitlines()[-1]


class Server:
    """One ``runstate serve`` process on a free port."""

    prefix: tuple[str, ...] = ()
    """A command the server runs under (``prlimit ...``), if any."""

    def __init__(self, database_url: str, log_path: Path, **env: str) -> None:
        self.database_url = database_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "RUNSTATE_DATABASE_URL": database_url, **env}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        """Launch the process and wait until it answers."""
        self.launch()
        self.wait_healthy()
        return self

    def launch(self) -> None:
        """Start the process without waiting for it."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "runstate", "serve", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_healthy(self) -> None:
        """Poll /healthz until the server answers."""
        wait_until(self._healthy, 60, f"the server on port {self.port} to answer")

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"server exited early:\n{self.log_path.read_text()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            ended(self.process)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ended(process: subprocess.Popen[Any]) -> None:
    """``process`` ended as Ctrl-C would end it (SIGTERM), killed after 15 s if it
    will not end."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def server_on(
    kind: str, tmp_path_factory: pytest.TempPathFactory, name: str, **env: str
) -> Iterator[Server]:
    """A server on a fresh database of ``kind`` (sqlite or postgres), with ``env``."""
    tmp = tmp_path_factory.mktemp(f"{name}-{kind}")
    with database(kind, tmp) as url, Server(url, tmp / "server.log", **env) as srv:
        yield srv


@contextmanager
def two_servers(
    kind: str, tmp_path_factory: pytest.TempPathFactory, name: str, **env: str
) -> Iterator[tuple[Server, Server]]:
    """Two server processes on one fresh database of ``kind``, with ``env``: writers
    racing through both, as several processes of one deployment do."""
    tmp = tmp_path_factory.mktemp(f"{name}-{kind}")
    with (
        database(kind, tmp) as url,
        Server(url, tmp / "one.log", **env) as one,
        Server(url, tmp / "two.log", **env) as two,
    ):
        yield one, two


@contextmanager
def sqlite_server(
    tmp_path_factory: pytest.TempPathFactory, name: str, **env: str
) -> Iterator[Server]:
    """A server on a fresh SQLite file, for a module whose subject is not the database."""
    tmp = tmp_path_factory.mktemp(name)
    with Server(f"sqlite://{tmp / f'{name}.db'}", tmp / "server.log", **env) as srv:
        yield srv


class GraphQLError(AssertionError):
    """The response carried GraphQL ``errors``."""


class Api:
    """A synchronous GraphQL client for one caller."""

    def __init__(self, url: str, token: str | None) -> None:
        self.token = token or ""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def post(self, body: Any) -> httpx.Response:
        return self.http.post("/graphql", json=body)

    def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        response = self.post({"query": query, "variables": variables})
        assert response.status_code == 200, response.text
        body = response.json()
        if "errors" in body:
            raise GraphQLError(body["errors"])
        data: dict[str, Any] = body["data"]
        return data

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PROBLEM = """
  __typename
  ... on Problem { code message }
  ... on NotFound { id }
  ... on VersionConflict { expectedVersion currentVersion }
  ... on InvalidTransition { from to }
  ... on InvalidInput { field }
  ... on SessionExpired { sessionId }
  ... on IdempotencyKeyReused { idempotencyKey }
"""

LEASE_PROBLEM = """
  ... on LockHeld { holderId expiresAt }
  ... on StaleFencingToken { currentToken }
"""

SESSION = (
    "... on AgentSession { id userId status version messageCount createdAt lastActiveAt"
    " expiresAt metadata ttlSeconds }" + PROBLEM
)

TASK_FIELDS = """
  id sessionId goal status version currentStep totalSteps eventSeq createdAt updatedAt
  steps { index action input output status idempotent attempts error startedAt completedAt }
  toolStates { toolName }
  lock { holderId }
"""

TASK = "... on Task {" + TASK_FIELDS + "}" + PROBLEM + LEASE_PROBLEM


def mutate(api: Api, name: str, input_type: str, fields: str, **input: Any) -> dict[str, Any]:
    """Call mutation ``name`` with ``input`` and return its result object."""
    data = api(
        f"mutation($input: {input_type}!) {{ {name}(input: $input) {{ {fields} }} }}",
        input=input,
    )
    result: dict[str, Any] = data[name]
    return result


class SubscriptionError(AssertionError):
    """The server answered a subscription with errors, or closed the socket."""


GRAPHQL_WS = [Subprotocol("graphql-transport-ws")]


class Subscriber:
    """A graphql-transport-ws client following one subscription."""

    def __init__(
        self, url: str, token: str | None, query: str, variables: dict[str, Any] | None = None
    ) -> None:
        self.ws_url = url.replace("http://", "ws://") + "/graphql"
        self.token = token or ""
        self.query = query
        self.variables = variables or {}
        self.events: list[dict[str, Any]] = []
        self._socket: Any = None

    async def __aenter__(self) -> Subscriber:
        from websockets.asyncio.client import connect

        self._socket = await connect(self.ws_url, subprotocols=GRAPHQL_WS, max_size=None)
        payload = {"authorization": f"Bearer {self.token}"} if self.token else {}
        await self._socket.send(json.dumps({"type": "connection_init", "payload": payload}))
        ack = json.loads(await asyncio.wait_for(self._socket.recv(), 10))
        if ack["type"] != "connection_ack":
            raise SubscriptionError(ack)
        await self._socket.send(
            json.dumps(
                {
                    "id": "1",
                    "type": "subscribe",
                    "payload": {"query": self.query, "variables": self.variables},
                }
            )
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._socket.close()

    async def complete(self) -> None:
        """End the subscription as its client does, keeping the socket open."""
        await self._socket.send(json.dumps({"id": "1", "type": "complete"}))

    async def next(self, wait: float = 30) -> dict[str, Any]:
        """The next event's data; SubscriptionError on errors or a closed socket."""
        from websockets.exceptions import ConnectionClosed

        try:
            message = json.loads(await asyncio.wait_for(self._socket.recv(), wait))
        except ConnectionClosed as closed:
            raise SubscriptionError(f"closed {closed.rcvd}") from closed
        if message["type"] == "next":
            if message["payload"].get("errors"):
                raise SubscriptionError(message["payload"]["errors"])
            data: dict[str, Any] = message["payload"]["data"]
            self.events.append(data)
            return data
        if message["type"] == "ping":
            await self._socket.send(json.dumps({"type": "pong"}))
            return await self.next(wait)
        raise SubscriptionError(message)

    async def until(self, done: Any, within: float = 60) -> list[dict[str, Any]]:
        """Collect events until ``done(event)`` is true; fail after ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {within}s; got {len(self.events)} events")
            if done(await self.next(remaining)):
                return self.events


class RedisServer:
    """A private redis-server on a free port, so a test may stop and restart it."""

    def __init__(self, log_path: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            message = "redis-server is not installed; this test restarts a real Redis"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(f"SKIPPED LOUDLY: {message}")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._answers, 10, f"redis on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def command(self, line: str) -> str:
        """The raw reply to one inline command."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(line.encode() + b"\r\n")
            return s.recv(4096).decode()

    def subscribers(self, channel: str) -> int:
        """How many connections are subscribed to ``channel`` (PUBSUB NUMSUB)."""
        reply = self.command(f"PUBSUB NUMSUB {channel}")  # *2 $len channel :count
        return int(reply.rsplit(":", 1)[1].split()[0])


class AgentProcess:
    """An agent script (``tests.agents.*``) in a subprocess, its JSON lines read with
    deadlines; its stderr written to ``stderr`` if given."""

    def __init__(
        self,
        url: str,
        token: str,
        task_id: str,
        *args: str,
        module: str = "tests.agents.worker",
        stderr: Path | None = None,
    ) -> None:
        with contextlib.ExitStack() as files:
            errors = None if stderr is None else files.enter_context(stderr.open("w"))
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, url, token, task_id, *args],
                cwd=Path(__file__).parent.parent,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # the pipe closed under us: done
            for line in self.process.stdout:
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def until(self, done: Any, within: float = 30) -> dict[str, Any]:
        """The first line for which ``done(line)`` holds; fail on exit or timeout."""
        deadline = time.monotonic() + within
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"the agent exited ({self.process.wait()}) first")
            if done(line):
                return line

    def rest(self, within: float = 30) -> list[dict[str, Any]]:
        """Every line until the agent exits."""
        lines = []
        while (line := self.lines.get(timeout=within)) is not None:
            lines.append(line)
        self.process.wait(timeout=within)
        return lines

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text)
        self.process.stdin.flush()

    def kill(self) -> None:
        """SIGKILL the agent if it still runs, and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def restart(server: Server) -> None:
    """Stop the server and start it again on the same port and database."""
    server.stop()
    server.start()


@asynccontextmanager
async def opened(
    database_url: str, *, live: bool = False, limits: ContentLimits | None = None
) -> AsyncIterator[House]:
    """The database opened in this process, and a house of services for tests that
    call them directly (``limits``: the house's content limits, the defaults when
    None); with ``live``, an in-process broker and publisher in the house too, so
    that streams can be read and ``house.publish`` reaches them."""
    from tortoise.backends.base.executor import EXECUTOR_CACHE

    from runstate import pubsub
    from runstate.storage.database import open_database

    # Tortoise caches each model's INSERT per connection name, not per dialect: a
    # process that moves from SQLite to PostgreSQL must forget the SQLite ones.
    EXECUTOR_CACHE.clear()
    database = await open_database(database_url)
    house = House(limits=limits or ContentLimits())
    if live:
        broker = pubsub.MemoryBroker()
        house.hub = pubsub.Hub(broker, pubsub.Publisher(broker))
        await house.hub.publisher.start()
    try:
        yield house
    finally:
        if house.hub is not None:
            await house.hub.publisher.close()
        await database.close()
