"""The container files at the repository's root: ``Dockerfile`` builds an image
that serves runstate, and ``compose.yaml`` runs it on PostgreSQL with Redis.

Where a Docker daemon answers, the stack is built and started for real under a
project name of its own (``docker compose up --build --wait``), asked through its
published port, and always taken down with its volumes and image. Without a
daemon that test skips loudly, under CI=true too: Docker is not something
runstate needs. What can be checked without one is checked always: that every
``RUNSTATE_*`` variable the files set is one runstate reads, and that the commands
they run are ones its command line accepts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from runstate.cli import _parser
from runstate.settings import Settings
from tests.support import SESSION, Api, free_port, mutate

ROOT = Path(__file__).parent.parent.parent
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"


def skip_loudly(reason: str) -> NoReturn:
    """Skip with a reason no one reading the summary can miss."""
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def docker_answers() -> bool:
    """Whether a Docker daemon answers ``docker info`` within a few seconds."""
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@dataclass
class Stack:
    """One compose project of ``compose.yaml``, its runstate published on ``url``."""

    project: str
    url: str
    env: dict[str, str]

    def compose(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``docker compose ARGS`` on this project; fails the test on an error."""
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, f"docker compose {' '.join(args)}:\n{done.stderr}"
        return done

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE), "-p", self.project, *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def exec(self, service: str, *command: str) -> str:
        """What ``command`` prints on stdout inside ``service`` (no TTY)."""
        return self.compose("exec", "-T", service, *command).stdout


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """``compose.yaml`` built and up (healthy, as ``--wait`` waits for), published
    on a free port; taken down with its volumes and built image whatever happens."""
    if shutil.which("docker") is None:
        skip_loudly("no docker command: the container files are not tested here")
    if not docker_answers():
        skip_loudly(
            "no Docker daemon answers (docker info failed): the container files are not tested here"
        )
    port = free_port()
    env = {**os.environ, "PORT": str(port)}
    stack = Stack(f"runstate-test-{uuid.uuid4().hex[:10]}", f"http://127.0.0.1:{port}", env)
    if stack.run("version").returncode != 0:
        skip_loudly("docker compose (the Compose plugin) is missing: compose.yaml is not tested")
    try:
        up = stack.run("up", "--detach", "--build", "--wait", timeout=1800)
        if up.returncode != 0:
            logs = stack.run("logs", "--no-color").stdout
            pytest.fail(f"docker compose up failed:\n{up.stderr}\n{logs}")
        yield stack
    finally:
        stack.run("down", "--volumes", "--rmi", "local", "--timeout", "30", timeout=300)


def test_the_compose_stack_serves_runstate_on_postgres_and_redis(stack: Stack) -> None:
    """Guards ``Dockerfile`` and ``compose.yaml`` together: the image builds from the
    repository, its server migrates PostgreSQL by itself and answers on the published
    port, the CLI in the container makes a token, a write goes to PostgreSQL (read
    back with psql) and the user's rate budget to Redis (the settings reached the
    server, which else would use SQLite and its own memory), and the server runs as
    the image's own user, not root."""
    token = stack.exec("runstate", "runstate", "token", "create", "demo").splitlines()[-1]
    assert re.fullmatch(r"rs_\S+", token), token
    ready = httpx.get(f"{stack.url}/readyz", timeout=10)
    assert (ready.status_code, ready.json()) == (200, {"database": "ok", "broker": "ok"})
    with Api(stack.url, token) as api:
        session = mutate(api, "startSession", "StartSessionInput", SESSION, id="container")
        assert (session["id"], session["userId"], session["status"], session["version"]) == (
            "container",
            "demo",
            "ACTIVE",
            1,
        )
    stored = stack.exec(
        "postgres",
        *("psql", "-U", "runstate", "-d", "runstate", "-tA", "-c"),
        "SELECT user_id, status FROM sessions WHERE public_id = 'container'",
    )
    assert stored == "demo|ACTIVE\n"
    buckets = stack.exec("redis", "redis-cli", "--scan", "--pattern", "runstate:*:rate:demo")
    assert len(buckets.splitlines()) == 1, buckets
    assert stack.exec("runstate", "id", "-u") == "10001\n"


class ReadNames(dict[str, str]):
    """An empty environment that records every name read from it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.names.add(key)
        return default

    def __getitem__(self, key: str) -> str:
        self.names.add(key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.names.add(key)
        return False


def settings_read() -> set[str]:
    """Every ``RUNSTATE_*`` name ``Settings.from_env`` reads."""
    environment = ReadNames()
    Settings.from_env(environment)
    return environment.names


def variables_set(text: str) -> set[str]:
    """The ``RUNSTATE_*`` names ``text`` sets (``NAME: value`` or ``NAME=value``)."""
    return set(re.findall(r"\b(RUNSTATE_[A-Z_]+)\s*[:=]", text))


def test_the_container_files_set_only_settings_runstate_reads() -> None:
    """Guards the files against a misspelt setting, which runstate would ignore
    without a word: ``RUNSTATE_DATABSE_URL`` in ``compose.yaml`` would leave the
    server on SQLite inside the container. Checked without Docker."""
    known = settings_read()
    assert {"RUNSTATE_DATABASE_URL", "RUNSTATE_REDIS_URL"} <= known
    compose, dockerfile = variables_set(COMPOSE.read_text()), variables_set(DOCKERFILE.read_text())
    assert {"RUNSTATE_DATABASE_URL", "RUNSTATE_REDIS_URL"} <= compose
    assert "RUNSTATE_DATABASE_URL" in dockerfile
    assert (compose | dockerfile) - known == set()


def exec_forms(line: str, text: str) -> list[list[str]]:
    """Each JSON array after ``line`` (``CMD``, ``command:``) in ``text``."""
    found = re.findall(rf"^\s*{re.escape(line)}\s*(\[.*\])\s*$", text, flags=re.MULTILINE)
    return [json.loads(command) for command in found]


def test_the_container_commands_are_ones_the_command_line_accepts() -> None:
    """Guards the image's entry point and the commands ``Dockerfile`` and
    ``compose.yaml`` give it: ``runstate serve`` on every address at port 8000 (the
    port both files publish and check), with two workers in compose, whose Redis
    ``--workers`` needs. Checked without Docker, by the CLI's own parser."""
    dockerfile, compose = DOCKERFILE.read_text(), COMPOSE.read_text()
    assert exec_forms("ENTRYPOINT", dockerfile) == [["runstate"]]
    (cmd,) = exec_forms("CMD", dockerfile)
    (command,) = [c for c in exec_forms("command:", compose) if c[0] != "redis-server"]
    alone, served = _parser().parse_args(cmd), _parser().parse_args(command)
    for args in (alone, served):
        assert (args.command, args.host, args.port) == ("serve", "0.0.0.0", 8000)
    assert (alone.workers, served.workers) == (1, 2)
    assert "EXPOSE 8000\n" in dockerfile
    assert '"127.0.0.1:${PORT:-8000}:8000"' in compose
    assert "http://127.0.0.1:8000/healthz" in compose


def test_docker_compose_accepts_the_compose_file(tmp_path: Path) -> None:
    """Guards ``compose.yaml``'s syntax and schema as Docker Compose reads them
    (``docker compose config`` needs no daemon): the published port follows
    ``PORT``, and the server waits for healthy PostgreSQL and Redis."""
    if shutil.which("docker") is None:
        skip_loudly("no docker command: compose.yaml is not checked by Docker Compose here")
    env: Mapping[str, str] = {**os.environ, "PORT": "8123"}
    base = ["docker", "compose", "-f", str(COMPOSE), "-p", "runstate-config"]
    if subprocess.run([*base, "version"], capture_output=True, env=env).returncode != 0:
        skip_loudly(
            "docker compose (the Compose plugin) is missing: compose.yaml is not checked"
            " by Docker Compose here"
        )
    done = subprocess.run(
        [*base, "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    assert sorted(services) == ["postgres", "redis", "runstate"]
    server = services["runstate"]
    assert [(p["host_ip"], str(p["published"]), p["target"]) for p in server["ports"]] == [
        ("127.0.0.1", "8123", 8000)
    ]
    assert {name: dep["condition"] for name, dep in server["depends_on"].items()} == {
        "postgres": "service_healthy",
        "redis": "service_healthy",
    }
    assert all("healthcheck" in service for service in services.values())
