"""The command line: tokens (printed alone on the last line, stored hashed), migrations, SDL."""

from __future__ import annotations

import asyncio
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import (
    Api,
    Server,
    create_token,
    free_port,
    mutate,
    require_service,
    runstate,
    wait_until,
)


def test_token_create_prints_the_token_last_and_stores_only_its_hash(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'cli.db'}"
    runstate("migrate", database_url=url)
    result = runstate("token", "create", "carol", database_url=url)
    assert result.stderr.splitlines()[0] == f"runstate: database {url}"
    token = result.stdout.splitlines()[-1]
    assert token.startswith("rs_")
    assert len(token) > 40
    assert token not in result.stderr
    with sqlite3.connect(tmp_path / "cli.db") as db:
        rows = db.execute("SELECT user_id, token_hash FROM api_tokens").fetchall()
    assert len(rows) == 1
    assert rows[0][0] == "carol"
    assert token not in rows[0][1]


def test_token_create_refuses_a_bad_user_name(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'x.db'}"
    runstate("migrate", database_url=url)
    result = runstate("token", "create", "a b", database_url=url, check=False)
    assert result.returncode != 0
    assert "user" in result.stderr


def test_revoked_token_is_refused(tmp_path: Path) -> None:
    """A revoked token is refused once the server's trust in its lookup lapses
    (RUNSTATE_AUTH_CHECK_SECONDS, 1 s here; tests/integration/test_tokens.py).

    The 60 s wait is a deadline, not the promise: a server that trusted a token
    for good would never refuse it; when the refusal comes is not timed."""
    url = f"sqlite://{tmp_path / 'rev.db'}"
    token = create_token(url, "dave")
    server = Server(url, tmp_path / "server.log", RUNSTATE_AUTH_CHECK_SECONDS="1").start()
    try:
        query = {"query": "{ sessions { edges { cursor } } }"}
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{server.url}/graphql", json=query, headers=headers).status_code == 200
        assert runstate("token", "revoke", token, database_url=url).stdout.strip() == "revoked"
        wait_until(
            lambda: (
                httpx.post(f"{server.url}/graphql", json=query, headers=headers).status_code == 401
            ),
            60,
            "the revoked token to be refused",
        )
    finally:
        server.stop()


def in_folder(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command line run in ``folder`` as a person runs it there: no
    ``RUNSTATE_*`` variable but ``env``, so the database is the default one
    (``runstate.db`` in the folder) unless ``env`` names another."""
    person = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    return subprocess.run(
        [sys.executable, "-m", "runstate", *args],
        cwd=folder,
        env={**person, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


GRAPHQL_SESSIONS = {"query": "{ sessions { edges { cursor } } }"}


def answers(server: str, token: str) -> int:
    """The status the server at ``server`` answers a query with ``token``."""
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{server}/graphql", json=GRAPHQL_SESSIONS, headers=headers).status_code


@pytest.mark.parametrize(
    "command",
    [
        ["token", "create", "bob"],
        ["token", "link", "bob"],
        ["token", "revoke", "rs_none"],
        ["sweep"],
        ["restore-mark"],
    ],
    ids=" ".join,
)
def test_a_command_on_a_server_database_makes_none_where_there_is_none(
    tmp_path: Path, command: list[str]
) -> None:
    """Guards ``cli._require_made``: run in a folder with no database, a command that
    works on a server's database exits 1, names the database it looked for and how
    to name the server's, and leaves the folder as it was. Before, ``token create``
    in the wrong folder made a new runstate.db there and printed a token that the
    server it was meant for answered 401."""
    done = in_folder(tmp_path, *command)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"runstate: no runstate database at sqlite://{tmp_path / 'runstate.db'}"
        " (RUNSTATE_DATABASE_URL is not set: runstate.db in this folder)."
        f" `runstate {' '.join(command[:2] if command[0] == 'token' else command)}` works on"
        " the database of the server it is for, and makes no new one.\n"
        "runstate: run it in the folder the server runs in, or name the server's database"
        " with RUNSTATE_DATABASE_URL or --database-url (`runstate serve`, `runstate demo`"
        " and `make run` print the command as they start); `runstate migrate` makes a new"
        " database.\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_database_with_no_runstate_in_it_is_refused_too(tmp_path: Path) -> None:
    """Guards ``database.made``: a file that is there but holds no runstate tables
    (another program's database, a file touched by hand) is not taken for the
    server's, and is left unchanged: no migration runs in it."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    before = other.read_bytes()
    done = in_folder(tmp_path, "token", "create", "bob", RUNSTATE_DATABASE_URL=f"sqlite://{other}")
    assert done.returncode == 1
    assert done.stderr.startswith(f"runstate: no runstate database at sqlite://{other}. ")
    assert other.read_bytes() == before


def off_path() -> tuple[Path, str]:
    """The ``runstate`` script of the venv running the tests, and a PATH that finds
    no ``runstate``: as in a clone, where only ``.venv/bin/runstate`` has it."""
    script = Path(sys.executable).parent / "runstate"
    assert script.is_file(), "the venv running the tests has runstate's script"
    path = os.pathsep.join(
        folder
        for folder in os.environ["PATH"].split(os.pathsep)
        if not (Path(folder) / "runstate").exists()
    )
    return script, path


def test_serve_says_how_to_get_a_signed_in_link_and_the_command_works(tmp_path: Path) -> None:
    """Guards ``cli.next_step``: once listening, ``runstate serve`` on the default
    database logs the command for a signed-in link and the folder to run it in,
    naming the program by its path where ``runstate`` is not on PATH; run there as
    printed, it says which database it used and its link's token opens that
    server, while the same command in another folder is refused. Seen failing
    with ``runstate token link me`` printed, which a clone's shell cannot find."""
    served, elsewhere = tmp_path / "served", tmp_path / "elsewhere"
    served.mkdir()
    elsewhere.mkdir()
    port = free_port()
    log = tmp_path / "serve.log"
    script, path = off_path()
    person = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    person["PATH"] = path
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "runstate", "serve", "--port", str(port)],
            cwd=served,
            env=person,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "runstate.serve: " in log.read_text(), 60, "serve's next step")
        (said,) = [line for line in log.read_text().splitlines() if "runstate.serve: " in line]
        database = f"sqlite://{served / 'runstate.db'}"
        assert said.split("runstate.serve: ", 1)[1] == (
            f"serving on {database}; a signed-in link to its dashboard:"
            f" {script} token link me --url http://127.0.0.1:{port} (run in {served});"
            " `token create me` instead of `token link me` prints a token for the API"
        )
        command = ["token", "link", "me", "--url", f"http://127.0.0.1:{port}"]
        assert in_folder(elsewhere, *command).returncode == 1
        assert list(elsewhere.iterdir()) == []
        done = subprocess.run(
            [str(script), *command],
            cwd=served,
            env=person,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.stderr.splitlines()[0] == f"runstate: database {database}"
        link = done.stdout.strip()
        assert link.startswith(f"http://127.0.0.1:{port}/#token=rs_")
        assert answers(f"http://127.0.0.1:{port}", link.split("#token=", 1)[1]) == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_serve_names_its_database_in_the_command_it_prints(tmp_path: Path) -> None:
    """Guards ``cli.next_step`` on a database that is not the default: the command
    serve logs names it (``--database-url``), so it works from any folder, run
    as printed (the program by its path, ``runstate`` being off PATH); a token
    made by it there opens the server."""
    url = f"sqlite://{tmp_path / 'named.db'}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script, path = off_path()
    with Server(url, tmp_path / "server.log", PATH=path) as server:
        wait_until(lambda: "runstate.serve: " in server.log(), 60, "serve's next step")
        (said,) = [line for line in server.log().splitlines() if "runstate.serve: " in line]
        command = said.split("dashboard: ", 1)[1].split(";", 1)[0]
        assert command == f"{script} --database-url {url} token link me --url {server.url}"
        made = subprocess.run(
            shlex.split(command), cwd=elsewhere, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert answers(server.url, made.split("#token=", 1)[1]) == 200


def test_the_next_step_masks_a_password_and_names_the_variable() -> None:
    """Guards ``cli.next_step`` on a URL with a password (compose.yaml's): the
    password never reaches the log; the command names the variable to set."""
    from runstate.cli import next_step  # imported here: the module's other tests run the CLI

    url = "postgres://runstate:secret@postgres:5432/runstate"
    assert next_step(url, "0.0.0.0", 8000, "/data", lambda anywhere: "runstate") == (
        "a signed-in link to its dashboard: runstate token link me (with this server's"
        " RUNSTATE_DATABASE_URL, postgres://runstate:***@postgres:5432/runstate);"
        " `token create me` instead of `token link me` prints a token for the API"
    )


def test_the_next_step_names_the_program_as_the_folder_can_run_it(tmp_path: Path) -> None:
    """Guards ``cli.runnable``: ``runstate`` when PATH finds the running script;
    else the script's path, relative to the folder it is in (a clone's
    ``.venv/bin/runstate``: ``make run`` there left ``runstate: command not
    found``), or whole outside it; under ``python -m runstate``, the script
    beside that Python, or ``python -m runstate`` itself when there is none; whole
    for a command that names its database, to be run from any folder (seen failing
    in a clone: ``.venv/bin/runstate --database-url ...`` run elsewhere)."""
    from runstate.cli import runnable

    clone = tmp_path / "clone"
    bin_ = clone / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "runstate").write_text("")
    python, script = str(bin_ / "python"), str(bin_ / "runstate")
    main = str(clone / "src" / "runstate" / "__main__.py")
    assert runnable(".venv/bin/runstate", python, None, str(clone)) == ".venv/bin/runstate"
    assert runnable(main, python, None, str(clone)) == ".venv/bin/runstate"
    assert runnable(script, python, script, str(clone)) == "runstate"
    assert runnable(script, python, "/usr/bin/runstate", str(tmp_path / "other")) == script
    assert runnable(script, python, None, str(bin_)) == "./runstate"
    assert runnable(".venv/bin/runstate", python, None, str(clone), anywhere=True) == script
    assert runnable(main, "/opt/py 3/python", None, str(clone)) == "'/opt/py 3/python' -m runstate"


def test_migrate_is_repeatable(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'm.db'}"
    assert runstate("migrate", database_url=url).stdout.strip() == "migrations applied"
    assert runstate("migrate", database_url=url).stdout.strip() == "migrations applied"


def test_production_turns_off_graphiql_introspection_and_get_queries(tmp_path: Path) -> None:
    """Guards RUNSTATE_ENV=production: no GraphiQL page (not even to a caller with a
    token), no introspection, no queries in a GET; ordinary POSTs still answer."""
    url = f"sqlite://{tmp_path / 'prod.db'}"
    token = create_token(url, "erin")
    server = Server(url, tmp_path / "server.log", RUNSTATE_ENV="production").start()
    try:
        page = httpx.get(f"{server.url}/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 401
        home = httpx.get(server.url).text
        assert '<body data-graphiql="off">' in home, "the dashboard links to no GraphiQL"
        headers = {"Authorization": f"Bearer {token}"}
        page = httpx.get(f"{server.url}/graphql", headers={**headers, "Accept": "text/html"})
        assert page.status_code == 404
        schema_query = {"query": "{ __schema { queryType { name } } }"}
        body = httpx.post(f"{server.url}/graphql", json=schema_query, headers=headers).json()
        assert "introspection" in body["errors"][0]["message"].lower()
        normal = {"query": "{ sessions { edges { cursor } } }"}
        got = httpx.get(f"{server.url}/graphql", params=normal, headers=headers)
        refused = {"errors": [{"message": "queries are not allowed when using GET"}]}
        assert (got.status_code, got.json()) == (400, refused)
        body = httpx.post(f"{server.url}/graphql", json=normal, headers=headers).json()
        assert body == {"data": {"sessions": {"edges": []}}}
    finally:
        server.stop()


def test_production_refuses_to_start_with_unsafe_settings(tmp_path: Path) -> None:
    """Guards the production check: serve exits with one line naming the setting."""
    done = subprocess.run(
        [sys.executable, "-m", "runstate", "serve", "--port", str(free_port())],
        env={
            **os.environ,
            "RUNSTATE_DATABASE_URL": f"sqlite://{tmp_path / 'unsafe.db'}",
            "RUNSTATE_ENV": "production",
            "RUNSTATE_ALLOWED_ORIGINS": "*",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "runstate: unsafe in production: RUNSTATE_ALLOWED_ORIGINS=* lets any web page"
        " use a signed-in user"
    )


class Demo:
    """``runstate demo`` on a free port and a SQLite file, up to its signed-in link,
    and (unless ``open_page`` is False) its dashboard loaded, which starts its first
    trip; ``api`` is a client with the link's token; what it says on stderr goes to
    ``stderr``, a file beside the database."""

    def __init__(self, database: Path, *options: str, open_page: bool = True, **env: str) -> None:
        self.port = free_port()
        self.database_url = f"sqlite://{database}"
        env = {**os.environ, "RUNSTATE_DATABASE_URL": self.database_url, **env}
        self.stderr = database.with_name(f"{database.name}.{self.port}.stderr")
        with self.stderr.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runstate", "demo", "--port", str(self.port), *options],
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert self.process.stdout is not None
        while "#token=" not in (line := self.process.stdout.readline()):
            assert line, "the demo exited before printing its link"
        self.base, _, fragment = line.strip().partition("/#token=")
        self.token, _, self.session = fragment.partition("&session=")
        self.api = Api(self.base, self.token)
        if open_page:
            assert httpx.get(self.base).status_code == 200  # the first trip starts

    def __enter__(self) -> Demo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.close()
        self.process.terminate()
        self.output, _ = self.process.communicate(timeout=30)

    def tasks(self, fields: str) -> list[dict[str, Any]]:
        edges = self.api("{ tasks { edges { node { " + fields + " } } } }")["tasks"]["edges"]
        return [e["node"] for e in edges]

    def wait_for_work(self) -> None:
        wait_until(
            lambda: any(t["eventSeq"] >= 4 for t in self.tasks("eventSeq")),
            30,
            "the demo agent to work",
        )


def test_demo_prints_a_signed_in_link_and_an_agent_starts_working(tmp_path: Path) -> None:
    """Also guards how the demo stops on SIGTERM (``kill``, ``docker stop``): as on
    Ctrl-C, it stops its agent processes and waits for them, then says it stopped.
    Seen failing with SIGTERM left to its own action (``cli.main``): uvicorn raises
    it again after shutting down, the demo died with status -15 before stopping its
    agents, and they ended only later, when their stdin closed."""
    with Demo(tmp_path / "demo.db") as demo:
        assert demo.base == f"http://127.0.0.1:{demo.port}"
        assert httpx.get(demo.base).status_code == 200
        demo.wait_for_work()
        assert demo.tasks("goal")[0]["goal"] == "Book a trip to Lisbon for Ana"
    assert (demo.process.returncode, demo.output.splitlines()[-1]) == (0, "runstate: stopped")
    children = subprocess.run(
        ["pgrep", "-f", f"runstate.demo.trips http://127.0.0.1:{demo.port}"], check=False
    )
    assert children.returncode == 1, "the demo's agent processes stop with it"


def test_the_first_trip_waits_for_the_page_to_open(tmp_path: Path) -> None:
    """Guards the demo's pacing (``trips.first_trip_when``, ``cli._noting_the_page``):
    the demo's session exists (it is made before the wait), and for 3 s after that
    no trip does, nor after a file of the page is fetched; the page itself (``GET
    /``) starts the first trip. Before, the first decision came 16 s after the link,
    often before the page was open. Seen failing with the wait removed (a trip
    existed within the 3 s), and with any request taken for the page's."""
    with Demo(tmp_path / "demo.db", open_page=False) as demo:
        made = "query($id: ID!) { session(id: $id) { __typename } }"
        wait_until(
            lambda: demo.api(made, id=demo.session)["session"]["__typename"] == "AgentSession",
            30,
            "the demo's session",
        )
        assert httpx.get(f"{demo.base}/static/app.js").status_code == 200
        quiet_until = time.monotonic() + 3
        while time.monotonic() < quiet_until:
            assert demo.tasks("id") == [], "a trip started before the page opened"
            time.sleep(0.1)
        assert httpx.get(demo.base).status_code == 200
        wait_until(lambda: len(demo.tasks("id")) == 1, 30, "the first trip, the page open")


def test_a_demo_that_fails_stops_with_one_line_and_its_status(tmp_path: Path) -> None:
    """Guards the demo's end on an error (``cli.serve_with_demo``, ``cli._why_it_stopped``,
    the agents' ``main``): its token revoked while it works, the demo stops serving
    and exits with status 1 and the line that says why, and nothing on stderr is a
    traceback. Before, it went on serving a dashboard where nothing moved, and
    Ctrl-C then printed the demo's error again as a traceback."""
    with Demo(tmp_path / "demo.db", RUNSTATE_AUTH_CHECK_SECONDS="1") as demo:
        demo.wait_for_work()
        assert runstate("token", "revoke", demo.token, database_url=demo.database_url).stdout
        assert demo.process.wait(timeout=60) == 1
        said = demo.stderr.read_text()
        assert "Traceback" not in said, said
        assert said.splitlines()[-1].startswith("runstate: the demo stopped: Unauthorized: ")
        assert all(line.startswith("runstate") for line in said.splitlines()), said


def test_the_demo_says_it_killed_its_agent_and_the_trip_stays_stalled_a_while(
    tmp_path: Path,
) -> None:
    """Guards the demo's crash as a person sees it (``demo.trips``): the demo says
    which agent it killed, during which step, and the pool leaves the trip stalled
    (no agent) for seconds before taking it over (``STALLED_FOR``, claimTask's
    ``stalledForSeconds``); the steps before it show what they spent, against the
    trip's budget. Before, the pool took it over within a second of the
    lease lapsing, and "no agent: lease lapsed" blinked on the page, if at all."""
    with Demo(tmp_path / "demo.db") as demo:
        assert demo.process.stdout is not None
        while " killed (SIGKILL) " not in (said := demo.process.stdout.readline()):
            assert said, "the demo exited before killing its agent"
        assert said.startswith("agent-1 killed (SIGKILL) during 'book flight' of "), said
        leases: list[str] = []

        def stalled() -> bool:
            (trip,) = demo.tasks("stalled lock { expiresAt }")
            leases.extend([trip["lock"]["expiresAt"]] if trip["lock"] else [])
            return bool(trip["stalled"])

        wait_until(stalled, 30, "the trip to stall")
        (trip,) = demo.tasks("spend { costMicros calls } budget { maxCostMicros }")
        # The steps before the crash reported their model calls (demo.trips.SPENT).
        assert trip["spend"] == {"costMicros": 3_450 + 4_350 + 9_800, "calls": 3}
        assert trip["budget"] == {"maxCostMicros": 50_000}
        fields = "status events(first: 100) { kind at lock { holderId } }"
        wait_until(
            lambda: demo.tasks(fields)[0]["status"] == "AWAITING_DECISION",
            30,
            "the pool to take the trip over",
        )
        (taken,) = [
            e["at"]
            for e in demo.tasks(fields)[0]["events"]
            if e["kind"] == "LOCK_ACQUIRED" and e["lock"]["holderId"].startswith("worker")
        ]
        lapsed = datetime.fromisoformat(leases[-1])
        assert (datetime.fromisoformat(taken) - lapsed).total_seconds() >= 5


def test_a_restarted_demo_ends_what_the_earlier_run_left(tmp_path: Path) -> None:
    """Guards ``end_open_sessions`` (services.lifecycle.leftovers) as ``runstate demo``
    starts: a demo stopped while its agent works a trip, started again on the same
    database, has ended that trip CANCELLED (the log says why) and the earlier run's
    session COMPLETED by the time it prints its link (no session but its own open),
    so its page asks nothing for a run no longer there. Seen failing: the earlier trip
    went on in the new run (its pool claimed it), and its question showed as "needs you"
    beside the new run's."""
    with Demo(tmp_path / "demo.db") as first:
        first.wait_for_work()
        (left,) = [t["id"] for t in first.tasks("id")]
    with Demo(tmp_path / "demo.db", open_page=False) as second:
        edges = second.api("{ sessions { edges { node { id status } } } }")["sessions"]["edges"]
        statuses = {e["node"]["id"]: e["node"]["status"] for e in edges}
        # The new run's own session may be made by now (it follows the link at once).
        assert set(statuses) <= {first.session, second.session}
        assert statuses[first.session] == "COMPLETED"
        (task,) = second.tasks("id status")
        assert task == {"id": left, "status": "CANCELLED"}
        events = second.api(
            "query($id: ID!) { task(id: $id) { ... on Task { events { kind note } } } }",
            id=left,
        )["task"]["events"]
        assert events[-1] == {
            "kind": "INTERRUPT_REQUESTED",
            "note": "the demo run that started it ended",
        }


def test_a_restarted_langgraph_demo_ends_the_question_the_earlier_run_asked(
    tmp_path: Path,
) -> None:
    """Guards ``end_open_sessions`` (services.lifecycle.leftovers) as ``runstate demo``
    starts, on ``--langgraph``'s sessions: a thread stopped at its question
    (AWAITING_DECISION, "needs you") by a run that then stopped is CANCELLED, with the
    note, once the next run prints its link, and that run's session is COMPLETED."""
    with Demo(tmp_path / "demo.db", "--langgraph") as first:
        wait_until(
            lambda: [t["status"] for t in first.tasks("status")] == ["AWAITING_DECISION"],
            60,
            "the graph to ask its question",
        )
        (asked,) = [t["id"] for t in first.tasks("id")]
    with Demo(tmp_path / "demo.db", "--langgraph", open_page=False) as second:
        assert second.tasks("id status") == [{"id": asked, "status": "CANCELLED"}]
        ended = second.api(
            "query($id: ID!) { session(id: $id) { ... on AgentSession { status } } }",
            id=first.session,
        )["session"]
        assert ended == {"status": "COMPLETED"}


def test_the_demo_pool_drives_a_fork_to_its_end(tmp_path: Path) -> None:
    """Guards forks people can run, in the demo: a fork of the running trip, made
    from its history as the dashboard does, is claimed by the demo's pool and run
    to COMPLETED, while the trip itself is still its first agent's (the pool does
    not take a trip before its crash)."""
    with Demo(tmp_path / "demo.db") as demo:
        demo.wait_for_work()
        (trip,) = demo.tasks("id lock { holderId }")
        assert trip["lock"]["holderId"] == "agent-1", "the trip is its first agent's"
        fork = mutate(
            demo.api,
            "forkTask",
            "ForkTaskInput",
            "... on Task { id status }",
            taskId=trip["id"],
            atSeq=3,
        )
        assert fork["status"] == "PLANNED"
        task = "query($id: ID!) { task(id: $id) { ... on Task { status lock { holderId } } } }"
        holders: set[str] = set()

        def finished() -> bool:
            now = demo.api(task, id=fork["id"])["task"]
            holders.add((now["lock"] or {}).get("holderId", ""))
            return bool(now["status"] == "COMPLETED")

        wait_until(finished, 90, "the demo's pool to finish the fork")
        assert any(h.startswith("worker-") for h in holders), holders


def test_serve_workers_runs_several_processes_with_redis(tmp_path: Path) -> None:
    """Guards ``serve --workers``: without Redis it refuses in one line; with Redis,
    two server processes start on one port, answer, and all stop on SIGTERM."""
    url = f"sqlite://{tmp_path / 'workers.db'}"
    env = {**os.environ, "RUNSTATE_DATABASE_URL": url, "RUNSTATE_REDIS_URL": ""}
    port = str(free_port())
    command = [sys.executable, "-m", "runstate", "serve", "--port", port, "--workers", "2"]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert "--workers 2 needs Redis (RUNSTATE_REDIS_URL" in refused.stderr

    require_service("Redis", "127.0.0.1", 6379)
    log = tmp_path / "workers.log"
    with log.open("w") as out:
        serving = subprocess.Popen(
            [*command, "--redis-url", "redis://127.0.0.1:6379/0"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: log.read_text().count("Application startup complete.") == 2,
            60,
            "two server processes to start",
        )
        token = create_token(url, "wes")
        headers = {"Authorization": f"Bearer {token}"}
        query = {"query": "{ sessions { edges { cursor } } }"}
        for _ in range(10):
            answer = httpx.post(f"http://127.0.0.1:{port}/graphql", json=query, headers=headers)
            assert answer.json() == {"data": {"sessions": {"edges": []}}}
        started = log.read_text().count("Started server process")
        assert started == 2
    finally:
        serving.terminate()
        serving.wait(timeout=20)
    assert log.read_text().count("Finished server process") == 2


def test_demo_langgraph_runs_a_graph_to_its_question_and_on(tmp_path: Path) -> None:
    """Guards ``runstate demo --langgraph``: its trip graph's nodes show as steps
    (the two searches in one super-step), the thread waits at ``approve`` with
    the question, and a person's answer given where it is watched
    (``answerInterrupt``) is the one the demo's graph goes on with, to COMPLETED."""
    with Demo(tmp_path / "demo.db", "--langgraph") as demo:
        fields = "id status steps { action status output }"
        wait_until(
            lambda: any(t["status"] == "AWAITING_DECISION" for t in demo.tasks(fields)),
            60,
            "the graph to ask its question",
        )
        (trip,) = demo.tasks(fields)
        assert [(s["action"], s["status"]) for s in trip["steps"]] == [
            ("plan", "SUCCESS"),
            *sorted([("search_flights", "SUCCESS"), ("search_hotels", "SUCCESS")]),
            ("compare", "SUCCESS"),
            ("approve", "PENDING"),
        ]
        (asked,) = trip["steps"][4]["output"]["interrupt"]
        assert asked["question"].startswith("Book TP 1351 to Lisbon and Casa do Rio")
        # A person answers "no" where the thread is watched; the demo's graph goes on
        # with that answer (not its own "yes", a minute later).
        version = demo.api(
            "query($id: ID!) { task(id: $id) { ... on Task { version } } }", id=trip["id"]
        )["task"]["version"]
        answered = mutate(
            demo.api,
            "answerInterrupt",
            "AnswerInterruptInput",
            "__typename",
            taskId=trip["id"],
            stepIndex=4,
            expectedVersion=version,
            value="no",
        )
        assert answered == {"__typename": "Task"}
        wait_until(
            lambda: demo.tasks(fields)[-1]["status"] == "COMPLETED",
            30,
            "the graph to finish with the answer",
        )
        done = next(t for t in demo.tasks(fields) if t["id"] == trip["id"])
        assert [s["action"] for s in done["steps"]][-3:] == ["approve", "book", "confirm"]
        assert done["steps"][-2]["output"]["booking"] == "not booked"
    # The terminal says who answered: the person on the page, not the demo.
    assert f"{trip['id']}: you answered 'no' on the page: not booked" in demo.output.splitlines()


def test_the_langgraph_demo_says_who_answered_its_question() -> None:
    """Guards the line ``runstate demo --langgraph`` prints as a trip goes on from its
    question: it tells a person's answer on the page from the demo's own "yes"
    after ``ANSWER_AFTER`` (both were "answered 'yes'", so a newcomer could not
    tell whether the click counted)."""
    from runstate.demo.graph import answered_line

    assert answered_line("trip-kyoto-1a2b3c", "yes", "PNR-9EA954", by_person=True) == (
        "trip-kyoto-1a2b3c: you answered 'yes' on the page: booked PNR-9EA954"
    )
    assert answered_line("trip-kyoto-1a2b3c", "yes", "PNR-9EA954", by_person=False) == (
        "trip-kyoto-1a2b3c: nobody answered in 60 s, so the demo answered 'yes' itself:"
        " booked PNR-9EA954"
    )


async def test_the_first_trip_that_starts_unwatched_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Guards ``trips.first_trip_when`` against trips that start in silence: with no
    page opened within ``FIRST_TRIP_WAIT``, the terminal says the first trip
    starts now and why (the banner says it waits for the page); with the page
    open, it says nothing."""
    from runstate.demo import trips

    monkeypatch.setattr(trips, "FIRST_TRIP_WAIT", 0.01)
    await trips.first_trip_when(asyncio.Event())
    assert capsys.readouterr().out == (
        "runstate: no page has opened, so the first trip starts now"
        " (open the link above to watch it)\n"
    )
    opened = asyncio.Event()
    opened.set()
    await trips.first_trip_when(opened)
    assert capsys.readouterr().out == ""
