"""The container files at the repository's root: ``Dockerfile`` builds an image
that serves runstate, and ``compose.yaml`` runs it on PostgreSQL with Redis.

Where a Docker daemon answers, the stack is built and started for real under a
project name of its own (``docker compose up --build --wait``), asked through its
published port, and always taken down with its volumes and image. Without a
daemon that test skips loudly, under CI=true too: Docker is not something
runstate needs. What can be checked without one is checked always: that every
``RUNSTATE_*`` variable the files set is one runstate reads, that the commands
they run are ones its command line accepts, and, on this machine in place of a
container (``image``), that the Dockerfile's install gives exactly what
``constraints.txt`` pins, and that the server started as the image and as
compose start it, with their environment, serves and hands out a signed-in link
as ``docker exec`` would ask it for one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import httpx
import pytest

from runstate.cli import _parser
from runstate.settings import Settings
from tests.support import (
    POSTGRES_URL,
    SESSION,
    Api,
    ended,
    free_port,
    mutate,
    postgres_database,
    require_service,
    wait_until,
)

ROOT = Path(__file__).parent.parent.parent
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
CONSTRAINTS = ROOT / "constraints.txt"


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
    port, the CLI in the container makes a signed-in link (``docker compose exec
    runstate runstate token link``, as the files say), a write goes to PostgreSQL (read
    back with psql) and the user's rate budget to Redis (the settings reached the
    server, which else would use SQLite and its own memory), and the server runs as
    the image's own user, not root."""
    token = token_of(stack.exec("runstate", "runstate", "token", "link", "demo"))
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


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions in order, each its keyword and its arguments,
    continued lines joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", re.sub(r"^\s*#.*\n", "", dockerfile, flags=re.MULTILINE))
    found = [line.split(None, 1) for line in joined.splitlines() if line.strip()]
    return [(keyword, rest) for keyword, rest in found]


def image_env(dockerfile: str) -> dict[str, str]:
    """What the Dockerfile's ENV lines set (``NAME=value`` pairs)."""
    env: dict[str, str] = {}
    for keyword, rest in instructions(dockerfile):
        if keyword == "ENV":
            for pair in rest.split():
                name, _, value = pair.partition("=")
                env[name] = value
    return env


@dataclass
class Image:
    """The image, made on this machine in place of a container: the Dockerfile's
    COPY and ``pip install`` lines run in a fresh venv, with its ENV; ``/build`` and
    ``/data`` (its WORKDIR, where its database lives) folders of the test's own."""

    venv: Path
    data: Path
    env: dict[str, str]
    """The Dockerfile's ENV, its paths made the test's, on a person's environment
    with no ``RUNSTATE_*`` variable of its own."""

    def runstate(self, args: list[str]) -> list[str]:
        """The image's entry point (``ENTRYPOINT``) and ``args``."""
        (entrypoint,) = exec_forms("ENTRYPOINT", DOCKERFILE.read_text())
        return [str(self.venv / "bin" / entrypoint[0]), *entrypoint[1:], *args]

    def exec(self, *args: str, **env: str) -> str:
        """What ``docker exec CONTAINER runstate ARGS`` prints on stdout: the command in
        the image's WORKDIR with its environment and ``env`` (compose's)."""
        done = subprocess.run(
            self.runstate(list(args)),
            cwd=self.data,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The Dockerfile's install steps, run once for the module (a fresh venv and
    every package downloaded: about half a minute). Its other RUN lines make the
    image's user and /data, which the test's folders stand for."""
    tmp = tmp_path_factory.mktemp("image")
    build, data, venv = tmp / "build", tmp / "data", tmp / "venv"
    data.mkdir()
    paths = {"/build": str(build), "/data": str(data)}

    def here(text: str) -> str:
        for path, local in paths.items():
            text = text.replace(path, local)
        return text

    dockerfile = DOCKERFILE.read_text()
    env = {k: here(v) for k, v in image_env(dockerfile).items()}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    person = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    for keyword, rest in instructions(dockerfile):
        if keyword == "COPY":
            *sources, target = here(rest).split()
            for source in sources:
                into = Path(target) / source if target.endswith("/") else Path(target)
                into.parent.mkdir(parents=True, exist_ok=True)
                copy = shutil.copytree if (ROOT / source).is_dir() else shutil.copy
                copy(ROOT / source, into)
        elif keyword == "RUN" and "pip install" in rest:
            done = subprocess.run(
                ["bash", "-c", here(rest)],
                env={**person, **env, "PATH": path},
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr
    assert not build.exists(), "the install step removes its copy"
    return Image(venv, data, {**person, **env})


def pins(text: str) -> set[str]:
    """The ``name==version`` lines of a constraints file or of ``pip freeze``."""
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def test_the_image_installs_exactly_what_constraints_pin(image: Image) -> None:
    """Guards ``constraints.txt`` and the Dockerfile's use of it: the install pins
    every package it needs (an unpinned one would show in the venv at whatever
    version is newest, and fail the comparison) and pins nothing it does not need
    but what builds runstate ([build-system]); the installed set is consistent
    (``pip check``), and made by the Python minor version the image has."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    building = {re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0] for requirement in build}
    pinned = pins(CONSTRAINTS.read_text())
    python = [str(image.venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    installed = subprocess.run(
        [*python, "freeze", "--exclude", "runstate"], capture_output=True, text=True, check=True
    ).stdout
    assert pins(installed) == {pin for pin in pinned if pin.split("==")[0] not in building}
    assert {pin.split("==")[0] for pin in pinned} >= building
    assert subprocess.run([*python, "check"], capture_output=True).returncode == 0
    (made_with,) = re.findall(r"^# Python (\d+\.\d+)\.\d+$", CONSTRAINTS.read_text(), re.M)
    (base,) = re.findall(r"^FROM python:(\d+\.\d+)\.\d+-slim-\w+$", DOCKERFILE.read_text(), re.M)
    assert made_with == base == f"{sys.version_info.major}.{sys.version_info.minor}"


def serving(image: Image, command: list[str], port: int, log: Path, **env: str) -> ServedImage:
    """``command`` (the image's CMD, or compose's) started as the container starts
    it, on ``port`` for the 8000 it names."""
    args = [str(port) if arg == "8000" else arg for arg in command]
    with log.open("w") as out:
        process = subprocess.Popen(
            image.runstate(args),
            cwd=image.data,
            env={**image.env, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return ServedImage(process, f"http://127.0.0.1:{port}", log)


@dataclass
class ServedImage:
    """A server started from the image's files."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def answers(self) -> bool:
        """Whether /healthz answers 200; fails the test if the server has ended."""
        assert self.process.poll() is None, self.log.read_text()
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False


def token_of(link: str) -> str:
    """The token in a signed-in link (``.../#token=rs_...``)."""
    found = re.fullmatch(r"http://127\.0\.0\.1:8000/#token=(rs_\S+)\n", link)
    assert found, link
    return found.group(1)


def sessions_answer(url: str, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(
        f"{url}/graphql", json={"query": "{ sessions { edges { cursor } } }"}, headers=headers
    )


def test_the_image_alone_serves_and_hands_out_a_signed_in_link(
    image: Image, tmp_path: Path
) -> None:
    """Guards the image alone (``docker run``, then ``docker exec CONTAINER runstate
    token link me``): its CMD serves on the SQLite database its ENV names in
    /data, and the link command, run as exec runs it (the image's environment and
    WORKDIR), makes a token on that database, which the server answers."""
    (cmd,) = exec_forms("CMD", DOCKERFILE.read_text())
    server = serving(image, cmd, free_port(), tmp_path / "image.log")
    try:
        wait_until(server.answers, 60, "the image's server to answer")
        token = token_of(image.exec("token", "link", "me"))
        assert sessions_answer(server.url, token).json() == {"data": {"sessions": {"edges": []}}}
        assert (image.data / "runstate.db").is_file()
    finally:
        ended(server.process)


def compose_environment(service: str) -> dict[str, str]:
    """The ``environment`` of one service of ``compose.yaml`` (``NAME: value`` lines)."""
    block = re.search(
        rf"^  {service}:\n(?:    .*\n|\n)*?    environment:\n((?:      .*\n)+)",
        COMPOSE.read_text(),
        re.MULTILINE,
    )
    assert block, f"compose.yaml sets no environment for {service}"
    return dict(re.findall(r"^      (\w+): (\S+)$", block.group(1), re.MULTILINE))


def test_the_compose_server_serves_on_postgres_and_redis_and_links(
    image: Image, tmp_path: Path
) -> None:
    """Guards compose.yaml's runstate service without Docker: its URL names the
    postgres service's database, user and password, and its command and
    environment (the hosts ``postgres`` and ``redis`` made this machine's, the
    database a fresh one) start a server whose healthcheck passes, which reaches
    PostgreSQL and Redis (/readyz), and which answers the token of ``docker compose
    exec runstate runstate token link me`` (the same environment)."""
    require_service("Redis", "127.0.0.1", 6379)
    env = compose_environment("runstate")
    database = urlsplit(env["RUNSTATE_DATABASE_URL"])
    postgres = compose_environment("postgres")
    assert (database.scheme, database.hostname, database.port) == ("postgres", "postgres", 5432)
    assert (database.username, database.password, database.path) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        f"/{postgres['POSTGRES_DB']}",
    )
    redis = urlsplit(env["RUNSTATE_REDIS_URL"])
    assert (redis.hostname, redis.port) == ("redis", 6379)
    (command,) = [c for c in exec_forms("command:", COMPOSE.read_text()) if c[0] != "redis-server"]
    (healthcheck,) = re.findall(r'^\s+- "(import urllib\.request;.*)"$', COMPOSE.read_text(), re.M)
    port = free_port()
    with postgres_database() as url:
        assert url.startswith(POSTGRES_URL.rsplit("/", 1)[0])
        here = {
            "RUNSTATE_DATABASE_URL": url,
            "RUNSTATE_REDIS_URL": env["RUNSTATE_REDIS_URL"].replace("//redis:", "//127.0.0.1:"),
        }
        server = serving(image, command, port, tmp_path / "compose.log", **here)
        try:
            check = [
                str(image.venv / "bin" / "python"),
                "-c",
                healthcheck.replace("8000", str(port)),
            ]
            wait_until(
                lambda: server.answers() and subprocess.run(check).returncode == 0,
                60,
                "compose's healthcheck to pass",
            )
            ready = httpx.get(f"{server.url}/readyz")
            assert (ready.status_code, ready.json()) == (200, {"database": "ok", "broker": "ok"})
            token = token_of(image.exec("token", "link", "me", **here))
            for _ in range(4):  # each of the two processes, likely
                answer = sessions_answer(server.url, token)
                assert answer.json() == {"data": {"sessions": {"edges": []}}}
        finally:
            ended(server.process)
