"""runstate against the servers LangGraph users run instead, on one graph.

``RunstateSaver`` runs a graph in the agent's process and sends each super-step to
``runstate serve`` over HTTP; LangGraph's Agent Server, ``langgraph dev`` and
Aegra run the graph on the server. The same 20-node chain
(``bench/peers_graph/graph.py``: each node adds one to ``count`` and stamps
``ended`` with ``time.time()`` at its end, ``n0`` stamps ``first`` at its start)
runs on each system alone in turn, on loopback, checkpoints stored before the next
super-step runs (``durability="sync"``), a new thread per run:

1. runstate on SQLite and 2. on PostgreSQL (a fresh database): the graph runs in
   this process on ``RunstateSaver``;
3. LangGraph's Agent Server on its PostgreSQL and Redis runtime
   (``langgraph-runtime-pg``, served by ``langhost serve``);
4. ``langgraph dev``, in memory (its queue polls every 0.5 s: a run waits for it
   before it starts, so its wall is mostly that wait; its span is the graph's own);
5. Aegra on PostgreSQL (its in-process executor; no Redis).

The peers are driven over their REST API with httpx (``POST
/threads/{id}/runs/wait``); each lives in a virtual environment of its own under
``build/peers/`` (their pins conflict), made with Python 3.12 on first use.

Per super-step, in ms, the median of REPEATS rounds of ROUNDS runs (after a
warm-up round):

- wall: a run's time over NODES;
- span: the graph's own, ``ended`` of the last node less ``first`` over NODES - 1
  (the mean time from one node's end to the next's: one checkpoint and one node);
- server CPU: the server's process tree (its workers too), from /proc;
- database CPU: PostgreSQL's server-wide processes and its backends on the
  system's database, and redis-server's for the Agent Server's runtime (it uses
  Redis); none on SQLite (in the server's process) or in memory;
- client CPU: this process (for runstate that includes running the graph);
- total CPU: client + server + database.

Then the same with a watcher in another process following each run: for runstate
the graph reports its nodes' starts (``saver.watch``: a chain's go with the
checkpoint before them, ``nextNodes``) and the watcher subscribes to the thread's
task (``Runstate.watch``, a node's ``ended`` read from its step's output); for the
peers the runner creates the run (streaming its updates and values) and waits on
``/join`` while the watcher joins its stream (``GET
/threads/{id}/runs/{run_id}/stream``), and a joined stream misses what came before
it joined: only what the watcher saw is counted. The latency is from a node's
``ended`` to the watcher's receipt; runstate's watcher sees a node's output once
its checkpoint is committed, the peers stream an update before or while its
checkpoint is written.

PostgreSQL and Redis are shared with whatever else runs on the machine, and the
machine may be busy: the figures are noisy. Run with ``make bench``
(``BENCH_PEERS_ROUNDS``, ``BENCH_PEERS_REPEATS`` shorten it); never part of
``make test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.fanout import cpu_seconds, free_port, serving
from bench.peers_graph.graph import NODES, chain
from bench.wrk import tree_cpu
from runstate.client import Runstate
from runstate.client.exceptions import NotFound
from runstate.integrations.langgraph import RunstateSaver
from tests.support import postgres_database

ROUNDS = int(os.environ.get("BENCH_PEERS_ROUNDS", "10"))
REPEATS = int(os.environ.get("BENCH_PEERS_REPEATS", "3"))
REDIS_URI = os.environ.get("BENCH_PEERS_REDIS_URL", "redis://127.0.0.1:6379/11")
"""The Redis database the Agent Server's runtime uses."""

GRAPH_DIR = Path(__file__).parent / "peers_graph"
VENVS = Path(__file__).parent.parent / "build" / "peers"
STARTUP_SECONDS = 90.0
WATCH_SECONDS = 30.0

QUIET = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "OTEL_SDK_DISABLED": "true",
    "OTEL_TARGETS": "",
}
"""No telemetry, tracing or analytics from the peers (none needs a key offline)."""


@dataclass(frozen=True)
class Peer:
    """A server LangGraph users run, installed in ``build/peers/<venv>``."""

    name: str
    venv: str
    spec: tuple[str, ...]
    shown: tuple[str, ...]
    """The distributions whose installed versions are printed."""
    health: str
    """The path that answers 200 once it serves."""
    postgres: bool
    redis: bool


RUNTIME_PG = Peer(
    "Agent Server runtime-pg (PG + Redis)",
    "pg",
    ("langgraph-runtime-pg==0.11.1.post1", "langhost==0.11.1.post1"),
    ("langgraph-runtime-pg", "langhost", "langgraph-api", "langgraph"),
    "/ok",
    postgres=True,
    redis=True,
)
DEV = Peer(
    "langgraph dev (in memory)",
    "dev",
    ("langgraph-cli[inmem]==0.4.40", "langgraph-api==0.16.7"),
    ("langgraph-cli", "langgraph-api", "langgraph-runtime-inmem", "langgraph"),
    "/ok",
    postgres=False,
    redis=False,
)
AEGRA = Peer(
    "Aegra (PG)",
    "ag",
    ("aegra-cli==0.11.0",),
    ("aegra-cli", "aegra-api", "langgraph"),
    "/health",
    postgres=True,
    redis=False,
)
PEERS = (RUNTIME_PG, DEV, AEGRA)
DURABLE = (RUNTIME_PG.name, AEGRA.name)


# -- the peers' virtual environments


def python312() -> str | None:
    """A working Python 3.12: on PATH, else pyenv's."""
    found = [
        shutil.which("python3.12"),
        *sorted(glob.glob("/root/.pyenv/versions/3.12*/bin/python")),
    ]
    for candidate in filter(None, found):
        answer = subprocess.run(
            [candidate, "--version"], capture_output=True, text=True, check=False
        )
        if answer.returncode == 0 and answer.stdout.startswith("Python 3.12"):
            return candidate
    return None


def installed(peer: Peer, python: str) -> Path:
    """The peer's virtual environment, made and pinned on first use (a stamp file
    holds the spec it was made with); its versions printed."""
    venv = VENVS / peer.venv
    stamp = venv / "pinned.txt"
    spec = " ".join(peer.spec)
    if not stamp.is_file() or stamp.read_text() != spec:
        print(f"  installing {spec} into {venv} (once; about a minute)", flush=True)
        subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", *peer.spec]
        done = subprocess.run(pip, capture_output=True, text=True, check=False)
        if done.returncode != 0:  # its output (the mirror's warnings on every line) only then
            print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
            done.check_returncode()
        stamp.write_text(spec)
    versions = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, sys;"
            "print(', '.join(f'{d} {m.version(d)}' for d in sys.argv[1:]))",
            *peer.shown,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    print(f"  {peer.name}: {versions.stdout.strip()}", flush=True)
    return venv


# -- CPU read from /proc


def processes(name: str) -> Iterator[tuple[int, str]]:
    """The pids and command lines of the processes called ``name``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == name:
                yield int(entry.name), (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue


def database_cpu(database: str | None, redis: bool) -> float:
    """CPU seconds so far of PostgreSQL's server-wide processes and its backends on
    ``database`` (others' backends are other users'), and of redis-server's."""
    total = 0.0
    if database is not None:
        for pid, command in processes("postgres"):
            backend = command.startswith("postgres: ") and " 127.0.0.1(" in command
            if backend and f" {database} " not in command:
                continue
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
    if redis:
        for pid, _ in processes("redis-server"):
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
    return total


# -- the systems and their servers


@dataclass(frozen=True)
class System:
    """A system being measured: where it answers, its server's pid, the database
    whose CPU counts (a PostgreSQL database's name), and a token for runstate's."""

    name: str
    url: str
    pid: int
    database: str | None = None
    redis: bool = False
    token: str | None = None


def command(
    peer: Peer, venv: Path, port: int, database: str | None
) -> tuple[list[str], dict[str, str]]:
    """The peer's server command and the environment it needs."""
    program = venv / "bin"
    if peer is RUNTIME_PG:
        serve = [str(program / "langhost"), "serve", "-c", "langgraph.json"]
        env = {"DATABASE_URI": str(database), "REDIS_URI": REDIS_URI}
        return [*serve, "--port", str(port), "--no-browser"], env
    if peer is DEV:
        dev = [str(program / "langgraph"), "dev", "--no-browser", "--no-reload"]
        return [*dev, "--config", "langgraph.json", "--port", str(port)], {}
    serve = [str(program / "aegra"), "serve", "-c", "aegra.json"]
    return [*serve, "--host", "127.0.0.1", "--port", str(port)], {"DATABASE_URL": str(database)}


def stop(server: subprocess.Popen[bytes]) -> None:
    """End a server and every process it started (its session's group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def wait_ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Poll ``url`` until it answers 200; fail with the server's log if it ends or
    takes longer than STARTUP_SECONDS."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer; its log ends:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def peer_serving(peer: Peer, venv: Path) -> Iterator[System]:
    """The peer's server on a free port, run in a temporary copy of the graph's
    folder (the peers find the graph's file from the folder they run in, and
    ``langgraph dev`` keeps its files there), on a fresh PostgreSQL database if it
    uses one; the server's processes ended and the database dropped afterwards."""
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_database()) if peer.postgres else None
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "graph"
        shutil.copytree(GRAPH_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
        port = free_port()
        argv, env = command(peer, venv, port, database)
        log = folder / "server.log"
        with log.open("wb") as output:
            server = subprocess.Popen(
                argv,
                cwd=folder,
                env={**os.environ, **QUIET, **env},
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        stack.callback(stop, server)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + peer.health, server, log)
        name = database.rsplit("/", 1)[1] if database else None
        yield System(peer.name, url, server.pid, name, peer.redis)


# -- the watcher, in a process of its own


class Watcher:
    """``python -m bench.peers --watch URL`` (with runstate's token in
    BENCH_PEERS_TOKEN): follows each run it is told of (a line ``thread_id run_id
    counted``) and, once told no more, answers with the latencies of the counted
    runs' nodes it saw."""

    def __init__(self, system: System) -> None:
        token = {"BENCH_PEERS_TOKEN": system.token} if system.token else {}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.peers", "--watch", system.url],
            env={**os.environ, **token},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.counted = False
        """Whether the runs it is now told of count (the warm-up's do not)."""
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("the watcher did not start")

    def follow(self, thread_id: str, run_id: str = "-") -> None:
        """Have it follow a run (runstate's: its thread's task, no run id)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{thread_id} {run_id} {int(self.counted)}\n")
        self.process.stdin.flush()

    def latencies(self) -> list[float]:
        """The seconds from each counted node's end to its receipt."""
        answer, _ = self.process.communicate(timeout=WATCH_SECONDS + 30)
        seen: list[float] = json.loads(answer)
        return seen

    def close(self) -> None:
        """End it, if it has not ended."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


Runner = Callable[[str], Awaitable[dict[str, Any]]]
"""One run of the chain on a new thread (its id given): the graph's final state."""

RUN = {
    "assistant_id": "chain",
    "input": {"count": 0},
    "if_not_exists": "create",
    "durability": "sync",
}


@contextlib.asynccontextmanager
async def runstate_runner(system: System, watcher: Watcher | None) -> AsyncIterator[Runner]:
    """Runs of the chain in this process on a RunstateSaver; watched, the graph
    reports its nodes to the thread's task, which the watcher follows."""
    assert system.token is not None
    async with RunstateSaver.from_url(system.url, system.token) as saver:
        graph = chain().compile(checkpointer=saver)
        if watcher is not None:
            graph = saver.watch(graph)

        async def run(thread_id: str) -> dict[str, Any]:
            if watcher is not None:
                watcher.follow(thread_id)
            config: Any = {"configurable": {"thread_id": thread_id}}
            done: dict[str, Any] = await graph.ainvoke({"count": 0}, config, durability="sync")
            return done

        yield run


@contextlib.asynccontextmanager
async def peer_runner(system: System, watcher: Watcher | None) -> AsyncIterator[Runner]:
    """Runs of the chain on a peer's server: ``runs/wait``; watched, the run is
    created streaming its updates (and its values: a run's output, which ``/join``
    answers with, is its last values), told to the watcher, then joined."""
    async with httpx.AsyncClient(base_url=system.url, timeout=60) as http:

        async def wait(thread_id: str) -> dict[str, Any]:
            answer = await http.post(f"/threads/{thread_id}/runs/wait", json=RUN)
            answer.raise_for_status()
            done: dict[str, Any] = answer.json()
            return done

        async def watched(thread_id: str) -> dict[str, Any]:
            assert watcher is not None
            created = await http.post(
                f"/threads/{thread_id}/runs", json={**RUN, "stream_mode": ["values", "updates"]}
            )
            created.raise_for_status()
            run_id = created.json()["run_id"]
            watcher.follow(thread_id, run_id)
            joined = await http.get(f"/threads/{thread_id}/runs/{run_id}/join")
            joined.raise_for_status()
            done: dict[str, Any] = joined.json()
            return done

        yield wait if watcher is None else watched


Follow = Callable[[str, str], Awaitable[list[float]]]
"""The latencies of one run's nodes (its thread's id and its run's given)."""


async def follow_runstate(rs: Runstate, thread_id: str, _run_id: str) -> list[float]:
    """The latencies of a thread's nodes as its task's events show their output
    (``ended`` in the step's output); a task not created yet is waited for."""
    latencies: list[float] = []
    seen: set[int] = set()
    while True:
        watch = rs.watch(thread_id)
        try:
            async with contextlib.aclosing(aiter(watch)) as events:
                async for event in events:
                    now = time.time()
                    for step in event.steps if event.kind != "SNAPSHOT" else ():
                        output = step.output
                        if (
                            isinstance(output, dict)
                            and "ended" in output
                            and step.index not in seen
                        ):
                            seen.add(step.index)
                            latencies.append(now - output["ended"])
                    steps = watch.task.steps if watch.task else None
                    if any(
                        isinstance(s.output, dict) and s.output.get("count") == NODES
                        for s in steps or ()
                    ):
                        return latencies
        except NotFound:
            await asyncio.sleep(0.005)


async def follow_peer(http: httpx.AsyncClient, thread_id: str, run_id: str) -> list[float]:
    """The latencies of a run's node updates on its joined stream (those streamed
    before it joined are not seen)."""
    latencies: list[float] = []
    kind = ""
    async with http.stream("GET", f"/threads/{thread_id}/runs/{run_id}/stream") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                kind = line.removeprefix("event:").strip()
            elif line.startswith("data:") and kind == "updates":
                now = time.time()
                for update in json.loads(line.removeprefix("data:")).values():
                    if isinstance(update, dict) and "ended" in update:
                        latencies.append(now - update["ended"])
    return latencies


async def watching(url: str, token: str | None) -> None:
    """The watcher's process: follow each run read from stdin; at its end, print
    the counted runs' latencies as JSON (a run it failed to follow: on stderr)."""
    loop = asyncio.get_running_loop()
    counted: list[asyncio.Task[list[float]]] = []
    others: list[asyncio.Task[list[float]]] = []
    async with contextlib.AsyncExitStack() as stack:
        follow: Follow
        if token is None:
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
            follow = functools.partial(follow_peer, http)
        else:
            rs = await stack.enter_async_context(Runstate(url, token))
            follow = functools.partial(follow_runstate, rs)
        print("ready", flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            thread_id, run_id, counts = line.split()
            task = asyncio.create_task(follow(thread_id, run_id))
            (counted if counts == "1" else others).append(task)
        done, pending = await asyncio.wait(counted + others, timeout=WATCH_SECONDS)
        for task in pending:
            task.cancel()
        latencies = []
        for task in counted:
            if task not in done or task.exception():
                print(f"watcher: a run not followed to its end: {task}", file=sys.stderr)
            else:
                latencies += task.result()
    print(json.dumps(latencies), flush=True)


# -- measuring


@dataclass(frozen=True)
class Figures:
    """Per super-step, in ms."""

    wall: float
    span: float
    server: float
    database: float | None
    client: float

    @property
    def total(self) -> float:
        return self.client + self.server + (self.database or 0.0)


async def round_(system: System, run: Runner) -> Figures:
    """ROUNDS runs, each on a new thread: its figures."""
    server, database = tree_cpu(system.pid), database_cpu(system.database, system.redis)
    client, began = time.process_time(), time.perf_counter()
    spans = []
    for _ in range(ROUNDS):
        done = await run(str(uuid.uuid4()))
        assert done.get("count") == NODES, done
        spans.append(done["ended"] - done["first"])
    wall = time.perf_counter() - began
    steps = ROUNDS * NODES / 1000
    spent = database_cpu(system.database, system.redis) - database
    return Figures(
        wall=wall / steps,
        span=1000 * statistics.mean(spans) / (NODES - 1),
        server=(tree_cpu(system.pid) - server) / steps,
        database=spent / steps if system.database or system.redis else None,
        client=(time.process_time() - client) / steps,
    )


def median(rounds: list[Figures]) -> Figures:
    """Each figure's median over the rounds."""
    databases = [r.database for r in rounds if r.database is not None]
    return Figures(
        wall=statistics.median(r.wall for r in rounds),
        span=statistics.median(r.span for r in rounds),
        server=statistics.median(r.server for r in rounds),
        database=statistics.median(databases) if databases else None,
        client=statistics.median(r.client for r in rounds),
    )


@dataclass(frozen=True)
class Watched:
    wall: float
    latencies: list[float]


async def measure(system: System) -> tuple[Figures, Watched]:
    """The system's figures, then its wall and latencies watched."""
    runner = runstate_runner if system.token else peer_runner
    async with runner(system, None) as run:
        await round_(system, run)
        plain = median([await round_(system, run) for _ in range(REPEATS)])
    watcher = Watcher(system)
    try:
        async with runner(system, watcher) as run:
            await round_(system, run)
            watcher.counted = True
            walls = [(await round_(system, run)).wall for _ in range(REPEATS)]
        latencies = await asyncio.to_thread(watcher.latencies)
    finally:
        watcher.close()
    return plain, Watched(statistics.median(walls), latencies)


# -- the report


def shown(value: float | None) -> str:
    return f"{value:8.2f}" if value is not None else f"{'-':>8s}"


def report(found: dict[str, tuple[Figures, Watched]]) -> None:
    """The tables, then runstate against the best durable peer."""
    print(
        f"\n  {'per super-step, ms':{WIDTH}s} {'wall':>8s} {'span':>8s} {'server':>8s}"
        f" {'database':>8s} {'client':>8s} {'CPU':>8s}"
    )
    for name, (f, _) in found.items():
        print(
            f"  {name:{WIDTH}s} {shown(f.wall)} {shown(f.span)} {shown(f.server)}"
            f" {shown(f.database)} {shown(f.client)} {shown(f.total)}"
        )
    expected = REPEATS * ROUNDS * NODES
    print(f"\n  {'watched: latency ms (a node end to receipt)':{WIDTH}s}", end="")
    print(f" {'wall':>8s} {'p50':>8s} {'p90':>8s}  seen")
    for name, (_, w) in found.items():
        ms = sorted(1000 * s for s in w.latencies)
        p50 = statistics.median(ms) if ms else None
        p90 = ms[int(0.9 * (len(ms) - 1))] if ms else None
        print(f"  {name:{WIDTH}s} {shown(w.wall)} {shown(p50)} {shown(p90)}  {len(ms)}/{expected}")
    print(
        "  runstate's watcher sees a node's output once its checkpoint is committed; the"
        " peers stream\n  an update before or while its checkpoint is written (a joined"
        " stream misses what came before it joined)"
    )
    durable = {name: found[name][0] for name in DURABLE if name in found}
    if durable:
        print()
    for figure, label in (("wall", "wall"), ("total", "total CPU")):
        best = min(durable, key=lambda name: getattr(durable[name], figure), default=None)
        if best is None:
            return
        against = getattr(durable[best], figure)
        for name in (SQLITE, POSTGRES):
            ratio = getattr(found[name][0], figure) / against
            print(f"  {label:9s} {name} / {best}: {ratio:.2f}x")


WIDTH = 44
SQLITE = "runstate, SQLite (graph in the bench)"
POSTGRES = "runstate, PostgreSQL (graph in the bench)"


def peers() -> list[tuple[Peer, Path]]:
    """The peers installed (each once, in its own Python 3.12 environment)."""
    python = python312()
    if python is None:
        print(
            "  !!! NO PYTHON 3.12 FOUND (python3.12 on PATH or /root/.pyenv/versions/3.12*):"
            " the peers are SKIPPED, runstate alone is measured !!!",
            flush=True,
        )
        return []
    ready = []
    for peer in PEERS:
        try:
            ready.append((peer, installed(peer, python)))
        except subprocess.CalledProcessError as error:
            print(f"  !!! {peer.name} could not be installed ({error}): SKIPPED !!!", flush=True)
    return ready


def main() -> None:
    if sys.argv[1:2] == ["--watch"]:
        asyncio.run(watching(sys.argv[2], os.environ.get("BENCH_PEERS_TOKEN")))
        return
    print(
        f"runstate and LangGraph's servers: {NODES}-node chain, {ROUNDS} runs a round,"
        f" median of {REPEATS} rounds, durability=sync, loopback"
    )
    found: dict[str, tuple[Figures, Watched]] = {}
    installed_peers = peers()
    with serving(1) as ((url,), token, (pid,)):
        print(f"  measuring {SQLITE}", flush=True)
        found[SQLITE] = asyncio.run(measure(System(SQLITE, url, pid, token=token)))
    with (
        postgres_database() as database,
        serving(1, database_url=database) as ((url,), token, (pid,)),
    ):
        print(f"  measuring {POSTGRES}", flush=True)
        name = database.rsplit("/", 1)[1]
        found[POSTGRES] = asyncio.run(measure(System(POSTGRES, url, pid, name, token=token)))
    for peer, venv in installed_peers:
        try:
            with peer_serving(peer, venv) as system:
                print(f"  measuring {peer.name}", flush=True)
                found[peer.name] = asyncio.run(measure(system))
        except (RuntimeError, httpx.HTTPError) as error:
            print(f"  !!! {peer.name} FAILED, left out: {error}", flush=True)
    report(found)


if __name__ == "__main__":
    main()
