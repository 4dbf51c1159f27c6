"""Configuration read once from ``RUNSTATE_*`` variables; CLI flags override it.

Each setting is a field of ``Settings``, declared there once with its default; the
field ``name`` is read from ``RUNSTATE_NAME`` (``content``'s limits from
``RUNSTATE_MAX_`` and theirs), by the reader its type calls for (``_READERS``) or
the one its metadata names (``read``). A field whose default differs in production
says so in its metadata (``production``)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

from runstate.observe.logs import FORMATS, LEVELS
from runstate.services.domain.validation import ContentLimits, stored_checkpoint

DEFAULT_DATABASE_URL = "sqlite://runstate.db"
ENVIRONMENTS = ("development", "production")


class SettingsError(ValueError):
    """A configuration value that cannot be used."""


MAX_INT = 2**31 - 1
"""GraphQL's Int: the largest setting, since some (quotas) are answered by the API."""

Reader = Callable[[Mapping[str, str], str, Any], Any]
"""How a setting is read: from the environment, its variable's name and its default."""


def variable(name: str) -> str:
    """The variable a field of ``Settings`` is read from."""
    return f"RUNSTATE_{name.upper()}"


def _environment(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(name) or default
    if raw not in ENVIRONMENTS:
        raise SettingsError(f"{name} must be development or production, not {raw!r}")
    return raw


def _currency(env: Mapping[str, str], name: str, default: str) -> str:
    """An ISO 4217 currency code: three capital letters."""
    value = env.get(name) or default
    if len(value) != 3 or not value.isascii() or not value.isalpha() or not value.isupper():
        raise SettingsError(f"{name} must be three capital letters (USD), not {value!r}")
    return value


def _text(env: Mapping[str, str], name: str, default: str | None) -> str | None:
    """The variable as it is; unset or empty, the default."""
    return env.get(name) or default


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    return _positive(env, name, default, int, "a whole number")


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    return _positive(env, name, default, float, "a number of seconds")


N = TypeVar("N", int, float)


def _positive(env: Mapping[str, str], name: str, default: N, parse: type[N], what: str) -> N:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise SettingsError(f"{name} must be {what}, not {raw!r}") from None
    if not value > 0:
        raise SettingsError(f"{name} must be positive, not {raw}")
    if value > MAX_INT:
        raise SettingsError(f"{name} must be at most {MAX_INT} (the API's Int), not {raw}")
    return value


def _names(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list; unset or empty, the default."""
    raw = env.get(name)
    if not raw:
        return default
    return tuple(e.strip() for e in raw.split(",") if e.strip())


def _networks(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list of IP addresses or networks (``10.0.0.0/8``), or ``*``."""
    entries = _names(env, name, default)
    for entry in entries:
        if entry == "*":
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise SettingsError(
                f"{name} must list IP addresses or networks, not {entry!r}"
            ) from None
    return entries


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name) or default
    if raw not in choices:
        raise SettingsError(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return raw


def _log_format(env: Mapping[str, str], name: str, default: str) -> str:
    return _choice(env, name, FORMATS, default)


def _log_level(env: Mapping[str, str], name: str, default: str) -> str:
    """One of ``LEVELS``, in any case."""
    raw = env.get(name) or default
    if raw.upper() not in LEVELS:
        raise SettingsError(f"{name} must be one of {', '.join(LEVELS)}, not {raw!r}")
    return raw.upper()


def _request_log(env: Mapping[str, str], name: str, default: int) -> int:
    """``on`` (1), ``off`` (0) or ``sample:N`` (N): a line for one request in that many."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    kind, _, every = raw.lower().partition(":")
    if (kind, every) == ("on", ""):
        return 1
    if (kind, every) == ("off", ""):
        return 0
    if kind == "sample" and every.isascii() and every.isdigit() and 1 <= int(every) <= MAX_INT:
        return int(every)
    raise SettingsError(f"{name} must be on, off or sample:N (N from 1), not {raw!r}")


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false, not {raw!r}")


def _content(env: Mapping[str, str], name: str, default: ContentLimits) -> ContentLimits:
    """Each limit from ``RUNSTATE_MAX_`` and its name (``RUNSTATE_MAX_GOAL_CHARS``);
    ``name``, the field's own variable, names none."""
    return ContentLimits(
        **{
            limit: _positive_int(env, f"RUNSTATE_MAX_{limit.upper()}", value)
            for limit, value in asdict(default).items()
        }
    )


_READERS: dict[str, Reader] = {
    "int": _positive_int,
    "float": _positive_float,
    "bool": _flag,
    "str": _text,
    "str | None": _text,
    "tuple[str, ...]": _names,
}
"""The reader of a field by its declared type, unless its metadata names another."""

DEVELOPMENT_ONLY = {"production": False}
"""The metadata of a flag that is on by default in development only."""


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from its environment, passed to ``create_app``."""

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    session_ttl: int = 3600
    retention: int = 86400
    max_body_bytes: int = 1_048_576
    graphiql: bool = field(default=True, metadata=DEVELOPMENT_ONLY)
    catch_up_seconds: float = 3.0
    subscriber_queue: int = 1000
    subscriber_queue_bytes: int = 4 * 1024 * 1024
    gap_fill: bool = True
    live_relay: bool = True
    """Caught-up taskProgress streams share one reader per task (``services.live.relay``);
    off, each stream relays its own events (for benchmarks that compare the two)."""
    lean: bool = True
    """Trusted write documents run on the lean path (``resolvers.lean``); off, on the
    standard one (for the tests and benchmarks that compare the two)."""
    idempotency_ttl: int = 86400
    sweep_seconds: float = 60.0
    env: str = field(default="development", metadata={"read": _environment})
    introspection: bool = field(default=True, metadata=DEVELOPMENT_ONLY)
    get_queries: bool = field(default=True, metadata=DEVELOPMENT_ONLY)
    """Queries in a GET request's query string (GraphiQL's history links use them)."""
    max_depth: int = 10
    max_aliases: int = 15
    max_tokens: int = 2000
    max_nodes: int = 20_000
    """The most nodes a query may ask for, estimated from its ``first`` arguments
    before it runs (see ``schema.limits``)."""
    max_response_bytes: int = 32 * 1_048_576
    """The largest answer an operation may give, estimated before it runs from what
    is stored (see ``schema.cost``)."""
    max_ws_message_bytes: int = 1_048_576
    max_subscriptions: int = 20
    """Operations one WebSocket connection may run at once."""
    max_schedules: int = 100
    """Schedules one user may hold (``createSchedule``)."""
    schedule_min_seconds: float = 1.0
    """The shortest interval between two due times a schedule may have: with
    ``max_schedules``, the most fires a second one user can cause."""
    schedule_grace_seconds: float = 60.0
    """How late a due time may fire and still count as on time; one later was missed
    (no server ran) and follows the schedule's misfire policy."""
    max_connections: int = 50
    """WebSocket connections one user may hold open: on all processes together with
    Redis (``sockets``), on each process without it."""
    socket_lease_seconds: float = 30.0
    """How long a process's claim of a place under ``max_connections`` lasts in
    Redis unless the process refreshes it (every third of the lease): a process
    that died frees its places after this; one that stalled longer re-claims them
    when it resumes, and closes the connections that find the cap full."""
    connection_init_seconds: float = 10.0
    max_connections_per_address: int = 256
    """Connections one client address may hold open before a token vouches for them
    (HTTP, and WebSockets until ``connection_init``); a trusted proxy's are not
    counted by address (``transport.admission``)."""
    header_seconds: float = 20.0
    """How long a request's headers may take to arrive, from its first byte (or the
    connection's opening)."""
    body_seconds: float = 20.0
    """How long a request's body may take to arrive, plus a second per 500 bytes."""
    trusted_proxies: tuple[str, ...] = field(default=(), metadata={"read": _networks})
    """Addresses or networks of proxies in front of the server: their
    ``X-Forwarded-For`` names the client, and their connections are not capped by
    address. None by default: no header names the client but the connection."""
    keep_alive_seconds: int = 75
    """How long an idle HTTP connection is kept open for its next request. Longer
    than clients keep theirs (httpx 5 s, aiohttp 15 s, a cloud load balancer 60 s):
    a server that closes first races a client sending on the connection just then,
    which sees it reset with its request unanswered."""
    allowed_origins: tuple[str, ...] = ()
    """Origins other than the server's own whose pages may open a WebSocket or call
    the API from a browser; ``*`` allows every origin."""
    auth_check_seconds: float = 5.0
    """How often open WebSocket connections have their tokens checked again."""
    operation_seconds: float = 30.0
    """The longest a query or mutation may run before it is stopped."""
    agui_buffer_bytes: int = 64 * 1_048_576
    """The bytes the AG-UI streams of a process may hold for their clients together:
    past it, streams stuck on a client that does not read are paused, and go on
    from the database once it reads again (``transport.agui.wire``)."""
    stream_keepalive_seconds: float = 15.0
    """How long an AG-UI event stream stays silent before a ``: keepalive`` comment,
    so that proxies and clients do not take a quiet run for a dead connection."""
    rate_limit: bool = True
    rate_per_second: float = 200.0
    """Points a user's budget regains per second (a read costs 1, a write 2, a
    subscription 5; see ``runstate.services.domain.ratelimit``)."""
    rate_burst: float = 2000.0
    """The most points a user's budget holds."""
    anon_rate_per_second: float = 20.0
    """Requests a second one client address may send without a live token (a point
    each, in a budget of its own; with the rate limit on)."""
    anon_rate_burst: float = 100.0
    """The most such requests one address may send at once."""
    content: ContentLimits = field(default_factory=ContentLimits, metadata={"read": _content})
    """How large what clients store may be (goals, actions, steps, JSON payloads)."""
    metrics_token: str | None = None
    """The bearer token ``/metrics`` answers (no user's token does); unset, /metrics
    is off."""
    log_format: str = field(default="text", metadata={"read": _log_format, "production": "json"})
    """``text`` for people, ``json`` (one object per line) for log collectors."""
    log_level: str = field(default="INFO", metadata={"read": _log_level})
    """The least severe records the log writes: DEBUG, INFO, WARNING, ERROR or
    CRITICAL (any case); WARNING drops the request log's lines and uvicorn's."""
    request_log: int = field(default=1, metadata={"read": _request_log})
    """One in how many requests and WebSocket connections the request log writes a line
    for (``transport.request_log``): 1 each (``on``), 0 none (``off``), N
    (``sample:N``)."""
    currency: str = field(default="USD", metadata={"read": _currency})
    """The ISO 4217 code of the currency spend is reported in (``costMicros``: its
    millionths); the dashboard shows costs in it."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read each field from its ``RUNSTATE_*`` variable (``variable``), falling
        back to its default above (in production, to its ``production`` default)."""
        env = os.environ if environ is None else environ
        developing = _read(env, _FIELDS["env"], True) == "development"
        settings = cls(**{f.name: _read(env, f, developing) for f in fields(cls)})
        if not developing:
            settings.check_production()
        return settings

    def check_production(self) -> None:
        """Refuse settings that are unsafe on a server others can reach, naming them."""
        unsafe = []
        if "*" in self.allowed_origins:
            unsafe.append("RUNSTATE_ALLOWED_ORIGINS=* lets any web page use a signed-in user")
        if "*" in self.trusted_proxies:
            unsafe.append("RUNSTATE_TRUSTED_PROXIES=* lets any client name its own address")
        if self.metrics_token is not None and len(self.metrics_token) < 16:
            unsafe.append("RUNSTATE_METRICS_TOKEN shorter than 16 characters can be guessed")
        if not self.rate_limit:
            unsafe.append("RUNSTATE_RATE_LIMIT=false lets one user starve the others")
        if not self.gap_fill:
            unsafe.append("RUNSTATE_GAP_FILL=false lets watchers miss events")
        largest = stored_checkpoint(self.content.checkpoint_bytes)
        if largest > self.content.task_bytes:
            unsafe.append(
                f"RUNSTATE_MAX_CHECKPOINT_BYTES={self.content.checkpoint_bytes} is {largest} bytes"
                f" stored (base64), more than RUNSTATE_MAX_TASK_BYTES={self.content.task_bytes}:"
                " such a checkpoint could never be stored"
            )
        for name, ceiling in CEILINGS.items():
            value = self._limit(name)
            if value > ceiling:
                unsafe.append(f"{name}={_number(value)} is above its ceiling of {_number(ceiling)}")
        for name, floor in FLOORS.items():
            value = self._limit(name)
            if value < floor:
                unsafe.append(f"{name}={_number(value)} is below its floor of {_number(floor)}")
        if unsafe:
            raise SettingsError("unsafe in production: " + "; ".join(unsafe))

    def _limit(self, name: str) -> float:
        """The value of the limit read from ``RUNSTATE_<NAME>``."""
        attribute = name.removeprefix("RUNSTATE_").lower()
        if hasattr(self, attribute):
            return float(getattr(self, attribute))
        return float(getattr(self.content, attribute.removeprefix("max_")))

    def environment(self) -> dict[str, str]:
        """The variables of the settings the command line may override, so that
        processes started from the environment (``serve --workers``) get them too."""
        env = {
            "RUNSTATE_DATABASE_URL": self.database_url,
            "RUNSTATE_SESSION_TTL": str(self.session_ttl),
            "RUNSTATE_RETENTION": str(self.retention),
        }
        if self.redis_url:
            env["RUNSTATE_REDIS_URL"] = self.redis_url
        return env

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the given fields replaced; ``None`` values are ignored."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


_FIELDS: dict[str, Field[Any]] = {f.name: f for f in fields(Settings)}


def _read(env: Mapping[str, str], setting: Field[Any], developing: bool) -> Any:
    """A field of ``Settings`` as its variable sets it, else its default."""
    if setting.default_factory is not MISSING:
        default = setting.default_factory()
    else:
        default = setting.default
    if not developing:
        default = setting.metadata.get("production", default)
    read: Reader = setting.metadata.get("read") or _READERS[str(setting.type)]
    return read(env, variable(setting.name), default)


MIB = 1_048_576
DAY = 86_400
CEILINGS: dict[str, float] = {
    "RUNSTATE_MAX_BODY_BYTES": 16 * MIB,
    "RUNSTATE_MAX_WS_MESSAGE_BYTES": 16 * MIB,
    "RUNSTATE_MAX_DEPTH": 32,
    "RUNSTATE_MAX_ALIASES": 100,
    "RUNSTATE_MAX_TOKENS": 100_000,
    "RUNSTATE_MAX_NODES": 1_000_000,
    "RUNSTATE_MAX_RESPONSE_BYTES": 256 * MIB,
    "RUNSTATE_MAX_SUBSCRIPTIONS": 1_000,
    # With the period's floor of 1 s, at most 1,000 fires a second from one user.
    "RUNSTATE_MAX_SCHEDULES": 1_000,
    "RUNSTATE_MAX_CONNECTIONS": 10_000,
    "RUNSTATE_SUBSCRIBER_QUEUE": 100_000,
    "RUNSTATE_SUBSCRIBER_QUEUE_BYTES": 256 * MIB,
    "RUNSTATE_AGUI_BUFFER_BYTES": 1024 * MIB,
    "RUNSTATE_OPERATION_SECONDS": 300,
    "RUNSTATE_RATE_PER_SECOND": 100_000,
    "RUNSTATE_RATE_BURST": 1_000_000,
    "RUNSTATE_ANON_RATE_PER_SECOND": 10_000,
    "RUNSTATE_ANON_RATE_BURST": 100_000,
    "RUNSTATE_MAX_GOAL_CHARS": 1_000_000,
    "RUNSTATE_MAX_ACTION_CHARS": 10_000,
    # A fork copies every step in one write: 100,000 took 7 s for about 2 points.
    "RUNSTATE_MAX_STEPS": 10_000,
    "RUNSTATE_MAX_ERROR_CHARS": 1_000_000,
    "RUNSTATE_MAX_JSON_BYTES": 16 * MIB,
    "RUNSTATE_MAX_JSON_DEPTH": 100,
    "RUNSTATE_MAX_TASK_BYTES": 1024 * MIB,
    "RUNSTATE_MAX_CHECKPOINT_BYTES": 256 * MIB,
    # Times past which a guard is as good as off: a session that never expires, a
    # revoked token streaming for years, a gap left unfilled, a connection held
    # open on a trickle of bytes.
    "RUNSTATE_SESSION_TTL": 366 * DAY,
    "RUNSTATE_RETENTION": 366 * DAY,
    "RUNSTATE_IDEMPOTENCY_TTL": 30 * DAY,
    "RUNSTATE_SWEEP_SECONDS": 3600,
    "RUNSTATE_CATCH_UP_SECONDS": 60,
    "RUNSTATE_AUTH_CHECK_SECONDS": 300,
    "RUNSTATE_SOCKET_LEASE_SECONDS": 300,
    "RUNSTATE_CONNECTION_INIT_SECONDS": 60,
    "RUNSTATE_KEEP_ALIVE_SECONDS": 600,
    "RUNSTATE_HEADER_SECONDS": 120,
    "RUNSTATE_BODY_SECONDS": 300,
    "RUNSTATE_MAX_CONNECTIONS_PER_ADDRESS": 10_000,
}
"""The most each limit may be in production: past these one user, one request or
one task can take a server's memory or time (development takes anything up to
``MAX_INT``). docs/reference.md, "Production ceilings and floors", lists them."""


FLOORS: dict[str, float] = {
    # Loops that run this often keep a core busy with no one connected (at 1e-6 s,
    # the sweep and the token check took 97-99% of a core).
    "RUNSTATE_SWEEP_SECONDS": 1,
    "RUNSTATE_AUTH_CHECK_SECONDS": 1,
    "RUNSTATE_CATCH_UP_SECONDS": 0.5,
    "RUNSTATE_STREAM_KEEPALIVE_SECONDS": 1,
    "RUNSTATE_SOCKET_LEASE_SECONDS": 3,
    # A schedule firing more often than once a second (six fields allow it).
    "RUNSTATE_SCHEDULE_MIN_SECONDS": 1,
    # Times no client could keep to: every operation, handshake or request refused.
    "RUNSTATE_OPERATION_SECONDS": 1,
    "RUNSTATE_CONNECTION_INIT_SECONDS": 1,
    "RUNSTATE_HEADER_SECONDS": 1,
    "RUNSTATE_BODY_SECONDS": 1,
    # A session that lapses, or an expired one deleted, before an agent's next step.
    "RUNSTATE_SESSION_TTL": 60,
    "RUNSTATE_RETENTION": 60,
    # A key must outlive the retries of a worker that restarts after a crash.
    "RUNSTATE_IDEMPOTENCY_TTL": 3600,
    # A budget that pays a write a second at least, and holds a subscription's and
    # a large read's points.
    "RUNSTATE_RATE_PER_SECOND": 2,
    "RUNSTATE_RATE_BURST": 100,
    "RUNSTATE_ANON_RATE_PER_SECOND": 1,
    "RUNSTATE_ANON_RATE_BURST": 10,
    # Runstate's own documents (the SDK's, the saver's, the dashboard's: each in
    # web/static/documents.json) must pass; tests/unit/test_settings.py measures them.
    "RUNSTATE_MAX_DEPTH": 8,
    "RUNSTATE_MAX_ALIASES": 2,
    "RUNSTATE_MAX_TOKENS": 200,
    "RUNSTATE_MAX_NODES": 11_000,
    # Queues so short that every subscriber is caught up from the database.
    "RUNSTATE_SUBSCRIBER_QUEUE": 10,
    "RUNSTATE_SUBSCRIBER_QUEUE_BYTES": 64 * 1024,
    # AG-UI streams write 64 KiB at a time: a budget of a few writes pauses them all.
    "RUNSTATE_AGUI_BUFFER_BYTES": MIB,
    # A browser opens six connections to a server and a WebSocket besides.
    "RUNSTATE_MAX_CONNECTIONS_PER_ADDRESS": 16,
}
"""The least each setting may be in production: below these a server burns a core
idle, or refuses what its own clients send (development takes any positive value,
which tests use). docs/reference.md, "Production ceilings and floors", lists them."""


def _number(value: float) -> str:
    """A setting's value as it would be written: 16777216, not 1.67772e+07."""
    return str(int(value)) if value == int(value) else str(value)
