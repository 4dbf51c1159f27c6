"""The ``runstate`` command: serve, demo, token create/link/revoke, migrate,
restore-mark, sweep, export-schema, export-writes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import importlib.util
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from graphql import GraphQLInterfaceType, GraphQLSchema, GraphQLUnionType, build_schema
from starlette.types import ASGIApp, Receive, Scope, Send
from tortoise.exceptions import DBConnectionError

from runstate.services.actions import tokens
from runstate.services.domain.errors import DomainError
from runstate.services.lifecycle.sweep import sweep
from runstate.settings import DEFAULT_DATABASE_URL, Settings, SettingsError
from runstate.storage.database import made, new_epoch, open_database, shown
from runstate.transport.callers import announce_revoked


def possible_types(schema: GraphQLSchema) -> dict[str, list[str]]:
    """Each union and interface with the object types it may be, as Apollo Client's
    ``possibleTypes`` takes them: without them its cache drops every ``... on
    Problem`` field, and with introspection off (production) a client cannot ask
    the server for them."""
    return {
        name: sorted(t.name for t in schema.get_possible_types(kind))
        for name, kind in sorted(schema.type_map.items())
        if isinstance(kind, GraphQLUnionType | GraphQLInterfaceType) and not name.startswith("__")
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runstate", description=__doc__)
    parser.add_argument("--database-url", help="overrides RUNSTATE_DATABASE_URL")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the API and the web page")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--redis-url", help="overrides RUNSTATE_REDIS_URL")
    serve.add_argument("--session-ttl", type=int, help="overrides RUNSTATE_SESSION_TTL")
    serve.add_argument("--retention", type=int, help="overrides RUNSTATE_RETENTION")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (more than 1 needs Redis: RUNSTATE_REDIS_URL)",
    )

    token = commands.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser("create", help="create a token and print it")
    create.add_argument("user")
    link = token_commands.add_parser(
        "link", help="create a token and print a link to the dashboard, signed in with it"
    )
    link.add_argument("user")
    link.add_argument("--url", default=LINK_URL, help="the server's address, as its users see it")
    revoke = token_commands.add_parser("revoke", help="stop accepting a token")
    revoke.add_argument("token")

    demo = commands.add_parser("demo", help="serve, and run a simulated agent to watch")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.add_argument(
        "--langgraph",
        action="store_true",
        help="run a LangGraph graph on RunstateSaver instead (needs runstate[langgraph])",
    )

    commands.add_parser("migrate", help="apply pending database migrations")
    commands.add_parser(
        "restore-mark",
        help="after restoring a backup: start a new epoch, so clients resync (restart servers)",
    )
    sweep = commands.add_parser("sweep", help="expire idle sessions, delete old expired ones")
    sweep.add_argument("--retention", type=int, help="overrides RUNSTATE_RETENTION")
    export = commands.add_parser("export-schema", help="print the GraphQL schema (SDL)")
    export.add_argument(
        "--possible-types",
        action="store_true",
        help="print each union's and interface's types as JSON (Apollo's possibleTypes)",
    )
    commands.add_parser(
        "export-writes",
        help="print each mutation's service and what feeds its parameters (docs/writes.md)",
    )
    return parser


DEMO_SESSIONS = ("demo-", "langgraph-demo-")
"""How the ids of the sessions a demo run makes begin (``serve_with_demo``)."""
DEMO_ENDED = "the demo run that started it ended"
"""Why an earlier demo run's unfinished task was cancelled, as its log says."""


async def serve_with_demo(
    host: str, port: int, database_url: str, *, langgraph: bool = False
) -> str | None:
    """Serve (SQLite and the in-process broker by default), end what earlier demo
    runs left (``end_open_sessions``), print a signed-in link, and book trips: with the
    SDK's agents, or with a LangGraph graph (``demo.graph``). Serves until stopped,
    or until the demo fails: then the server stops too (a dashboard where nothing
    moves any more would be unexplained) and the answer is the one line that says
    why."""
    import uvicorn

    from runstate.app import create_app, server_options
    from runstate.demo.trips import FIRST_TRIP_WAIT, trips
    from runstate.services.lifecycle.leftovers import end_open_sessions

    settings = Settings.from_env().with_overrides(database_url=database_url)
    app = create_app(settings)
    opened = asyncio.Event()
    config = uvicorn.Config(
        _noting_the_page(app, opened),
        host,
        port,
        log_level="warning",
        **server_options(settings),
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving
            return None
        await asyncio.sleep(0.05)  # uvicorn has no started event to await
    with app.state.database.current():  # the app's own database, opened as it started
        token = await tokens.create_token("demo")
        # What earlier runs left asks nothing on this run's page.
        await end_open_sessions(app.state.house, "demo", DEMO_SESSIONS, DEMO_ENDED)
    base = f"http://{host}:{port}"
    # A session of this run's own: the link follows its trips, not an earlier run's.
    session = f"{'langgraph-demo' if langgraph else 'demo'}-{time.strftime('%Y%m%d-%H%M%S')}"
    if langgraph:
        from runstate.demo.graph import graph_trips

        story = (
            "A LangGraph graph books trips. Watch its nodes run as steps, two at once,\n"
            "and stop at a question for you to answer."
        )
        work = graph_trips(base, token, session, opened)
    else:
        story = (
            "An agent books trips. Watch it work, crash at 'book flight', and wait for\n"
            "you to decide."
        )
        work = trips(base, token, session, opened)
    folder = os.getcwd()
    own = next_step(database_url, host, port, folder, this_program(folder))
    print(
        "\nrunstate is running. Open the dashboard (you are signed in as 'demo'):\n\n"
        f"    {base}/#token={token}&session={session}\n\n"
        f"As yourself instead, {own}.\n\n"
        f"{story} The first trip starts when the page opens (in {FIRST_TRIP_WAIT / 60:g}"
        " minutes if none does). Ctrl-C stops everything.\n",
        flush=True,
    )
    demo = asyncio.create_task(work)
    demo.add_done_callback(lambda _: setattr(server, "should_exit", True))
    try:
        await serving
    finally:
        demo.cancel()
        await asyncio.wait([demo])  # its end, never its error: that is told below
    return _why_it_stopped(demo)


def _noting_the_page(app: ASGIApp, opened: asyncio.Event) -> ASGIApp:
    """``app``, setting ``opened`` once a browser loads the dashboard (``GET /``):
    the demo's first trip waits for it, so that a person sees it from its start."""

    async def noting(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/":
            opened.set()
        await app(scope, receive, send)

    return noting


def _why_it_stopped(demo: asyncio.Task[None]) -> str | None:
    """The line that says why the demo's trips stopped on an error; None when it was
    stopped (Ctrl-C)."""
    if demo.cancelled() or (error := demo.exception()) is None:
        return None
    return f"runstate: the demo stopped: {type(error).__name__}: {error}"


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``runstate`` console script."""
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env().with_overrides(
            database_url=args.database_url,
            redis_url=getattr(args, "redis_url", None),
            session_ttl=getattr(args, "session_ttl", None),
            retention=getattr(args, "retention", None),
        )
    except SettingsError as e:
        sys.exit(f"runstate: {e}")
    if args.command == "serve":
        if args.workers < 1:
            sys.exit("runstate: --workers must be 1 or more")
        if args.workers > 1 and not settings.redis_url:
            sys.exit(
                f"runstate: --workers {args.workers} needs Redis (RUNSTATE_REDIS_URL or"
                " --redis-url): without it each process sees only its own events live"
                " and keeps its own rate limits"
            )
        _require_free_port(args.host, args.port)
        _serve(settings, args.host, args.port, args.workers)
    elif args.command == "demo":
        if args.langgraph and importlib.util.find_spec("langgraph") is None:
            sys.exit(
                "runstate: demo --langgraph needs LangGraph: `make run-langgraph` in runstate's"
                " repository installs it; in a venv of your own,"
                " pip install '/path/to/runstate[langgraph]' (your clone: runstate is not on PyPI)"
            )
        _require_free_port(args.host, args.port)
        # uvicorn raises the signal it stopped on again once it has shut down. SIGTERM's
        # own action (kill, docker stop) would then end the process before the demo
        # stops its agents; as KeyboardInterrupt it unwinds as Ctrl-C does.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        failed = None
        with contextlib.suppress(KeyboardInterrupt):
            failed = asyncio.run(
                serve_with_demo(
                    args.host, args.port, settings.database_url, langgraph=args.langgraph
                )
            )
        if failed is not None:
            sys.exit(failed)
        print("runstate: stopped", flush=True)
    elif args.command == "export-schema":
        from runstate.resolvers import build

        schema = build.build_schema()

        if args.possible_types:
            print(json.dumps(possible_types(build_schema(schema.as_str())), indent=2))
        else:
            print(schema.as_str())
    elif args.command == "export-writes":
        from runstate.resolvers import build, listing

        print(listing.writes(build.build_schema()), end="")
    elif args.command == "migrate":
        _with_database(settings, _noop, making=True)
        print("migrations applied")
    elif args.command == "restore-mark":

        async def mark(_installation: str) -> None:
            print(f"new epoch {await new_epoch()}: restart the servers; clients will resync")

        _with_database(settings, mark, "restore-mark")
    elif args.command == "sweep":

        async def run_sweep(_installation: str) -> None:
            result = await sweep(settings.retention)
            print(
                f"{result.expired} sessions expired, {result.deleted} deleted,"
                f" {result.keys} idempotency keys deleted"
            )

        _with_database(settings, run_sweep, "sweep")
    elif args.token_command == "create":
        user = args.user

        async def create(_installation: str) -> None:
            print(f"token for {user} (shown once, stored hashed):", file=sys.stderr)
            print(await tokens.create_token(user))

        _with_database(settings, create, "token create")
    elif args.token_command == "link":
        user, base = args.user, args.url.rstrip("/")

        async def signed_in_link(_installation: str) -> None:
            token = await tokens.create_token(user)
            print(
                f"the dashboard, signed in as {user} (keep this link to yourself):", file=sys.stderr
            )
            print(f"{base}/#token={token}")

        _with_database(settings, signed_in_link, "token link")
    else:
        token = args.token

        async def revoke(installation: str) -> None:
            if not await tokens.revoke_token(token):
                sys.exit("runstate: no such live token")
            if settings.redis_url:  # servers drop it now, not within their cache time
                await announce_revoked(settings.redis_url, installation, tokens.digest(token))
            print("revoked")

        _with_database(settings, revoke, "token revoke")


RUN_BY_MAKE = "RUNSTATE_RUN_BY_MAKE"
"""Set by the Makefile's ``run`` target, so that advice names its PORT variable."""


def _require_free_port(host: str, port: int) -> None:
    """Exit with one line suggesting another port when ``host:port`` cannot be bound
    (uvicorn would log the error, then a traceback). Bound as uvicorn binds it, with
    SO_REUSEADDR, and let go at once."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            reason = (
                "is in use" if e.errno == errno.EADDRINUSE else f"cannot be used ({e.strerror})"
            )
            # `make run` passes the port as PORT=..., and rejects --port.
            way = "make run PORT=" if os.environ.get(RUN_BY_MAKE) else "--port "
            sys.exit(
                f"runstate: port {port} on {host} {reason}; choose another with {way}{port + 1}"
            )


def _serve(settings: Settings, host: str, port: int, workers: int) -> None:
    """Serve until stopped; with ``workers`` > 1, that many processes (uvicorn's
    supervisor starts them, each building the app from the environment, which
    carries the command line's overrides)."""
    import uvicorn

    from runstate.app import configure_logging, create_app, server_options
    from runstate.transport.admission import raise_open_file_limit

    configure_logging(settings)
    raise_open_file_limit()
    _announce_when_listening(settings, host, port)
    if workers > 1:
        os.environ.update(settings.environment())
    uvicorn.run(
        create_app(settings) if workers == 1 else "runstate.app:from_environment",
        factory=workers > 1,
        workers=workers,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),  # uvicorn sets its loggers' own levels
        log_config=None,  # the handler logs.configure set up, for uvicorn's lines too
        access_log=False,  # it prints query strings; RequestLog writes the line instead
        **server_options(settings),
    )


async def _noop(_installation: str) -> None:
    return None


def _with_database(
    settings: Settings,
    work: Callable[[str], Awaitable[None]],
    command: str = "",
    *,
    making: bool = False,
) -> None:
    """Run ``work`` with the database open, given the database's installation id,
    after saying on stderr which database it is. Unless ``making`` (``migrate``),
    a database runstate has not set up is refused (``_missing``): opening it would
    make one, and what ``command`` did there no server would see."""

    async def run() -> None:
        if not making:
            await _require_made(settings.database_url, command)
        database = await open_database(settings.database_url)
        print(f"runstate: database {shown(settings.database_url)}", file=sys.stderr)
        try:
            await work(database.installation)
        finally:
            await database.close()

    try:
        asyncio.run(run())
    except DomainError as e:
        sys.exit(f"runstate: {e.message}")


async def _require_made(database_url: str, command: str) -> None:
    """Exit with what to do unless the database exists and runstate has set it up."""
    try:
        found = await made(database_url)
    except (OSError, DBConnectionError) as e:
        sys.exit(f"runstate: cannot open the database {shown(database_url)}: {e}")
    if not found:
        sys.exit(_missing(database_url, command))


def _missing(database_url: str, command: str) -> str:
    """Why ``command`` refuses a database runstate has not set up, and how to name
    the server's instead."""
    where = shown(database_url)
    if database_url == DEFAULT_DATABASE_URL:
        where += " (RUNSTATE_DATABASE_URL is not set: runstate.db in this folder)"
    return (
        f"runstate: no runstate database at {where}. `runstate {command}` works on the"
        " database of the server it is for, and makes no new one.\n"
        "runstate: run it in the folder the server runs in, or name the server's database"
        " with RUNSTATE_DATABASE_URL or --database-url (`runstate serve`, `runstate demo`"
        " and `make run` print the command as they start); `runstate migrate` makes a new"
        " database."
    )


LINK_URL = "http://127.0.0.1:8000"
"""The server ``runstate token link`` links to unless told another (``--url``)."""

log = logging.getLogger("runstate.serve")


def _reachable(host: str) -> str:
    """The address a client on this machine reaches a server bound to ``host`` at."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def runnable(
    argv0: str, executable: str, on_path: str | None, folder: str, *, anywhere: bool = False
) -> str:
    """How a person in ``folder`` runs this program (started there as ``argv0`` by
    the Python ``executable``; ``on_path``: what ``runstate`` on PATH is): ``runstate``
    when PATH finds this one, else its script's path, relative to ``folder`` when
    inside it (``.venv/bin/runstate`` in a clone, where ``runstate`` is not on
    PATH) unless the command is for ``anywhere`` (then whole), else its Python with
    ``-m runstate``."""
    script = Path(argv0)
    if script.name != "runstate":  # python -m runstate: the script installed beside it
        script = Path(executable).parent / "runstate"
        if not script.is_file():
            return f"{shlex.quote(executable)} -m runstate"
    script = Path(os.path.normpath(Path(folder, script)))  # folder: the working directory
    if on_path is not None and os.path.realpath(on_path) == os.path.realpath(script):
        return "runstate"
    if not anywhere and script.is_relative_to(folder):
        inside = str(script.relative_to(folder))
        return shlex.quote(inside if os.sep in inside else f".{os.sep}{inside}")
    return shlex.quote(str(script))


def this_program(folder: str) -> Callable[[bool], str]:
    """``runnable`` for this process, started in ``folder``: given whether the
    command is for any folder (``anywhere``)."""

    def program(anywhere: bool) -> str:
        return runnable(
            sys.argv[0], sys.executable, shutil.which("runstate"), folder, anywhere=anywhere
        )

    return program


def next_step(
    database_url: str, host: str, port: int, folder: str, program: Callable[[bool], str]
) -> str:
    """What to run for a signed-in link to the dashboard of a server on ``host:port``
    and ``database_url``, started in ``folder``, and for a token alone, with
    ``program`` (``this_program``: whole when the command works from any folder):
    the database named as the command line takes it, unless it is the default
    (then the folder to run in, where a path relative to it works) or holds a
    password (then the variable, masked)."""
    address = _reachable(host)
    base = f"http://{f'[{address}]' if ':' in address else address}:{port}"
    link = "token link me" + ("" if base == LINK_URL else f" --url {base}")
    where = ""
    if database_url == DEFAULT_DATABASE_URL:
        where = f" (run in {folder})"
        command = f"{program(False)} {link}"
    elif urlsplit(database_url).password is not None:
        where = f" (with this server's RUNSTATE_DATABASE_URL, {shown(database_url)})"
        command = f"{program(True)} {link}"
    else:
        command = f"{program(True)} --database-url {shlex.quote(shown(database_url))} {link}"
    return (
        f"a signed-in link to its dashboard: {command}{where};"
        " `token create me` instead of `token link me` prints a token for the API"
    )


def _announce_when_listening(settings: Settings, host: str, port: int) -> None:
    """Log the next step (``next_step``) once ``host:port`` takes connections, from a
    thread of its own: uvicorn has no hook for the moment it starts listening."""
    folder = os.getcwd()
    step = next_step(settings.database_url, host, port, folder, this_program(folder))

    def announce() -> None:
        while True:
            try:
                socket.create_connection((_reachable(host), port), timeout=1).close()
            except OSError:
                time.sleep(0.05)  # not listening yet
                continue
            log.info("serving on %s; %s", shown(settings.database_url), step)
            return

    threading.Thread(target=announce, name="runstate-next-step", daemon=True).start()
