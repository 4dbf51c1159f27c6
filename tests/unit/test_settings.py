"""Configuration from RUNSTATE_* variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

import pytest
from graphql import validate

from runstate.resolvers.build import build_schema
from runstate.schema.extensions import parse_document
from runstate.schema.limits import limit_rules
from runstate.services.domain.validation import ContentLimits
from runstate.settings import CEILINGS, FLOORS, MAX_INT, Settings, SettingsError
from runstate.storage.database import tortoise_config
from runstate.transport.trusted import Trusted


def test_defaults() -> None:
    s = Settings.from_env({})
    assert (s.database_url, s.redis_url, s.session_ttl, s.retention) == (
        "sqlite://runstate.db",
        None,
        3600,
        86400,
    )


def test_variables_and_overrides() -> None:
    s = Settings.from_env(
        {
            "RUNSTATE_DATABASE_URL": "postgres://u@h/db",
            "RUNSTATE_REDIS_URL": "redis://127.0.0.1:6379/0",
            "RUNSTATE_SESSION_TTL": "60",
            "RUNSTATE_RETENTION": "120",
        }
    )
    assert (s.database_url, s.redis_url, s.session_ttl, s.retention) == (
        "postgres://u@h/db",
        "redis://127.0.0.1:6379/0",
        60,
        120,
    )
    assert s.with_overrides(session_ttl=5, redis_url=None).session_ttl == 5


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_bad_numbers_are_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="RUNSTATE_SESSION_TTL"):
        Settings.from_env({"RUNSTATE_SESSION_TTL": value})


def test_log_format_is_text_for_people_and_json_in_production() -> None:
    """Guards RUNSTATE_LOG_FORMAT: text by default, JSON in production unless asked
    otherwise, anything else refused by name."""
    assert Settings.from_env({}).log_format == "text"
    production = {"RUNSTATE_ENV": "production", "RUNSTATE_ALLOWED_ORIGINS": ""}
    assert Settings.from_env(production).log_format == "json"
    assert Settings.from_env({**production, "RUNSTATE_LOG_FORMAT": "text"}).log_format == "text"
    with pytest.raises(SettingsError, match="RUNSTATE_LOG_FORMAT"):
        Settings.from_env({"RUNSTATE_LOG_FORMAT": "xml"})


def test_numbers_past_the_api_int_are_refused() -> None:
    """Guards the cap on whole-number settings: quotas are answered as GraphQL Ints."""
    with pytest.raises(SettingsError, match="RUNSTATE_MAX_USER_BYTES must be at most"):
        Settings.from_env({"RUNSTATE_MAX_USER_BYTES": str(2**31)})
    assert Settings.from_env({"RUNSTATE_MAX_USER_BYTES": str(2**31 - 1)}).content.user_bytes == (
        2**31 - 1
    )


def test_sqlite_waits_for_other_writers_and_caches_64_mib() -> None:
    """Guards ``db.SQLITE_PRAGMAS``: added unless the URL sets them itself; a SQLite
    URL goes to runstate's SQLite engine (``runstate.storage.sqlite``) and a
    PostgreSQL URL to its PostgreSQL one (``runstate.storage.postgres``)."""
    sqlite = tortoise_config("sqlite://x.db")["connections"]["default"]
    assert sqlite["engine"] == "runstate.storage.sqlite"
    pragmas = {k: sqlite["credentials"][k] for k in ("file_path", "busy_timeout", "cache_size")}
    assert pragmas == {"file_path": "x.db", "busy_timeout": "30000", "cache_size": "-65536"}
    sqlite = tortoise_config("sqlite://x.db?cache_size=-2000")["connections"]["default"]
    assert (sqlite["credentials"]["cache_size"], sqlite["credentials"]["busy_timeout"]) == (
        "-2000",
        "30000",
    )
    postgres = tortoise_config("postgres://h/db")["connections"]["default"]
    assert postgres["engine"] == "runstate.storage.postgres"
    assert (postgres["credentials"]["host"], postgres["credentials"]["database"]) == ("h", "db")


@pytest.mark.parametrize("name", sorted(CEILINGS))
def test_production_refuses_a_limit_above_its_ceiling(name: str) -> None:
    """Guards ``Settings.check_production``'s ceilings: each limit one past its
    ceiling is refused in production, naming it; at the ceiling it starts, and in
    development anything up to the API's Int does (production once started with
    every limit at 2^31-1)."""
    ceiling = CEILINGS[name]
    past = str(int(ceiling) + 1)
    production = {"RUNSTATE_ENV": "production"}
    if name == "RUNSTATE_MAX_CHECKPOINT_BYTES":  # its task must hold it
        production["RUNSTATE_MAX_TASK_BYTES"] = str(int(CEILINGS["RUNSTATE_MAX_TASK_BYTES"]))
    with pytest.raises(SettingsError, match=rf"{name}={past} is above its ceiling"):
        Settings.from_env({**production, name: past})
    assert Settings.from_env({**production, name: str(int(ceiling))}).env == "production"
    assert Settings.from_env({name: str(MAX_INT)}).env == "development"


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_production_refuses_a_setting_below_its_floor(name: str) -> None:
    """Guards ``Settings.check_production``'s floors: each setting below its floor
    is refused in production, naming it; at the floor it starts, and in development
    a tiny value does (production once started with the sweep and the token check
    every microsecond, 97-99% of a core idle, and an idempotency key of 1 s)."""
    floor = FLOORS[name]
    below = _number_below(floor)
    production = {"RUNSTATE_ENV": "production"}
    with pytest.raises(SettingsError, match=rf"{name}={below} is below its floor"):
        Settings.from_env({**production, name: below})
    at = str(int(floor)) if floor == int(floor) else str(floor)
    assert Settings.from_env({**production, name: at}).env == "production"
    assert Settings.from_env({name: below}).env == "development"


def _number_below(floor: float) -> str:
    """A value a little under ``floor`` that the setting's reader takes."""
    if floor == int(floor) and floor > 1:
        return str(int(floor) - 1)
    return str(floor / 2)


def test_the_floors_admit_runstate_s_own_documents() -> None:
    """Guards ``FLOORS``' query limits: every packaged document (the SDK's, the
    saver's, the dashboard's) passes the depth, alias, node and token limits at
    their floors, so production cannot start with limits that refuse its own
    clients. Seen failing with the depth floor at 6 (the dashboard's sessions page
    nests 7 deep)."""
    schema = build_schema()._schema
    rules = limit_rules(
        max_depth=int(FLOORS["RUNSTATE_MAX_DEPTH"]),
        max_aliases=int(FLOORS["RUNSTATE_MAX_ALIASES"]),
        max_nodes=int(FLOORS["RUNSTATE_MAX_NODES"]),
    )
    bodies = Trusted.packaged().bodies.values()
    assert len(bodies) > 40
    for body in bodies:
        document = parse_document(body, int(FLOORS["RUNSTATE_MAX_TOKENS"]))
        assert validate(schema, document, rules) == [], body


def test_trusted_proxies_are_addresses_and_never_everyone_in_production() -> None:
    """Guards ``RUNSTATE_TRUSTED_PROXIES``' parsing: addresses and networks are
    read, anything else is refused naming it, and production refuses ``*``."""
    trusted = Settings.from_env({"RUNSTATE_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.5"})
    assert trusted.trusted_proxies == ("10.0.0.0/8", "192.168.1.5")
    assert Settings().trusted_proxies == ()
    with pytest.raises(SettingsError, match="RUNSTATE_TRUSTED_PROXIES must list"):
        Settings.from_env({"RUNSTATE_TRUSTED_PROXIES": "proxy.local"})
    production = {"RUNSTATE_ENV": "production", "RUNSTATE_TRUSTED_PROXIES": "*"}
    with pytest.raises(SettingsError, match=r"RUNSTATE_TRUSTED_PROXIES=\*"):
        Settings.from_env(production)


def test_production_refuses_a_checkpoint_its_task_could_never_hold() -> None:
    """Guards the checkpoint limit against the task quota (issue 38, item 8): a
    checkpoint counts in base64 against its task, so production refuses 16 MiB
    checkpoints under a 16 MiB task quota (the defaults once were both), naming
    both; the defaults (8 MiB, 10.7 MiB stored) start."""
    production = {"RUNSTATE_ENV": "production"}
    sixteen = {**production, "RUNSTATE_MAX_CHECKPOINT_BYTES": str(16 * 1_048_576)}
    with pytest.raises(SettingsError, match="could never be stored"):
        Settings.from_env(sixteen)
    assert Settings.from_env(production).content.checkpoint_bytes == 8 * 1_048_576


SAMPLES: dict[str, tuple[str, Any]] = {
    "database_url": ("postgres://u@h/db", "postgres://u@h/db"),
    "redis_url": ("redis://127.0.0.1:6379/1", "redis://127.0.0.1:6379/1"),
    "env": ("production", "production"),
    "trusted_proxies": ("10.0.0.0/8, 192.168.1.5", ("10.0.0.0/8", "192.168.1.5")),
    "allowed_origins": (
        "https://a.example, https://b.example",
        ("https://a.example", "https://b.example"),
    ),
    "metrics_token": ("a-token-long-enough-for-prod", "a-token-long-enough-for-prod"),
    "log_format": ("json", "json"),
    "currency": ("EUR", "EUR"),
    "request_log": ("sample:10", 10),
    "log_level": ("warning", "WARNING"),
}
"""A value to set, and the value read, for each setting whose type gives none of its
own (whole numbers, seconds and flags are sampled by ``sample``)."""

NOT_READ: frozenset[str] = frozenset()
"""Fields of ``Settings`` deliberately not read from a variable of their own: none.
(``content`` is read limit by limit, from ``RUNSTATE_MAX_`` and each limit's name.)"""

PRODUCTION: dict[str, Any] = {
    "graphiql": False,
    "introspection": False,
    "get_queries": False,
    "log_format": "json",
}
"""What production changes of the defaults."""


def sample(name: str, default: Any) -> tuple[str, Any]:
    """A value other than the default to set a setting to, and the value read."""
    if name in SAMPLES:
        return SAMPLES[name]
    if isinstance(default, bool):
        return ("false" if default else "true"), not default
    if isinstance(default, int):
        return str(default + 1), default + 1
    if isinstance(default, float):
        return str(default + 0.5), default + 0.5
    raise AssertionError(f"Settings.{name}: give SAMPLES a value to set it to")


def variables() -> dict[str, tuple[str, Any, Settings]]:
    """Each variable a setting is read from: the value to set, and the settings read."""
    found: dict[str, tuple[str, Any, Settings]] = {}
    defaults = Settings()
    for f in fields(Settings):
        if f.name in NOT_READ:
            continue
        if f.name == "content":
            for limit in fields(ContentLimits):
                raw, value = sample(limit.name, getattr(defaults.content, limit.name))
                content = replace(defaults.content, **{limit.name: value})
                found[f"RUNSTATE_MAX_{limit.name.upper()}"] = (
                    raw,
                    value,
                    replace(defaults, content=content),
                )
            continue
        raw, value = sample(f.name, getattr(defaults, f.name))
        extra = PRODUCTION if f.name == "env" else {}
        found[f"RUNSTATE_{f.name.upper()}"] = (
            raw,
            value,
            replace(defaults, **{f.name: value, **extra}),
        )
    return found


class ReadNames(dict[str, str]):
    """An empty environment that notes every name asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.names.add(key)
        return default


def test_every_setting_is_read_from_its_variable_and_defaults_to_its_field() -> None:
    """Guards settings declared once (issue 54, item 6f): every field of ``Settings``
    is read from ``RUNSTATE_`` and its name (each of ``content``'s limits from
    ``RUNSTATE_MAX_`` and its own), unless ``NOT_READ`` lists it, and from no other
    variable; unset, each is the dataclass's default (the dataclass is the one place
    a default is written), and production changes exactly ``PRODUCTION``. A field
    added to ``Settings`` is read by its type with no other edit, and one of a type
    with no sample fails here asking for one. Seen failing: with ``from_env`` skipping
    ``currency`` (the variables read lacked RUNSTATE_CURRENCY), with ``variable()``
    spelling ``RUNSTATE_X_`` + name, with ``session_ttl``'s dataclass default 60 and
    its variable's default still 3600 (as the two places once could disagree), and
    with a new field ``note: str = ""`` (no sample)."""
    expected = variables()
    environment = ReadNames()
    assert Settings.from_env(environment) == Settings()
    assert environment.names == set(expected)
    production = Settings.from_env({"RUNSTATE_ENV": "production"})
    assert production == replace(Settings(), env="production", **PRODUCTION)


@pytest.mark.parametrize("name", sorted(variables()))
def test_each_variable_sets_its_setting(name: str) -> None:
    """Guards each variable's reading: set to a value other than its default, it
    changes its setting to that value, and nothing else (``env`` production's
    defaults too). Seen failing with ``variable()`` spelling ``RUNSTATE_X_`` + name
    (every case but the content limits), and with ``DEVELOPMENT_ONLY`` dropped from
    ``graphiql`` (RUNSTATE_ENV=production read graphiql True)."""
    raw, _value, expected = variables()[name]
    environ: Mapping[str, str] = {name: raw}
    assert Settings.from_env(environ) == expected


@pytest.mark.parametrize(
    ("raw", "every"),
    [("", 1), ("on", 1), ("off", 0), ("OFF", 0), ("sample:1", 1), ("sample:50", 50)],
)
def test_the_request_log_is_on_off_or_one_in_n(raw: str, every: int) -> None:
    """Guards ``RUNSTATE_REQUEST_LOG``'s shapes: on (the default, every request's
    line), off (none), ``sample:N`` (one in N). Seen failing with ``off`` read as 1."""
    assert Settings.from_env({"RUNSTATE_REQUEST_LOG": raw}).request_log == every


@pytest.mark.parametrize(
    "raw",
    ["yes", "sample", "sample:", "sample:0", "sample:-2", "sample:x", "on:3", f"sample:{2**31}"],
)
def test_the_request_log_refuses_other_shapes(raw: str) -> None:
    """Guards the refusal of anything but on, off and ``sample:N`` with N from 1 to
    the API's Int, naming the variable. Seen failing with ``sample:0`` taken (as off)."""
    with pytest.raises(SettingsError, match=r"^RUNSTATE_REQUEST_LOG must be on, off or sample:N"):
        Settings.from_env({"RUNSTATE_REQUEST_LOG": raw})


@pytest.mark.parametrize(
    ("raw", "level"), [("", "INFO"), ("debug", "DEBUG"), ("Warning", "WARNING"), ("ERROR", "ERROR")]
)
def test_the_log_level_is_a_level_in_any_case(raw: str, level: str) -> None:
    """Guards ``RUNSTATE_LOG_LEVEL``'s reading: INFO by default, any of logging's
    level names in any case, kept in capitals (as ``logging`` takes them)."""
    assert Settings.from_env({"RUNSTATE_LOG_LEVEL": raw}).log_level == level


@pytest.mark.parametrize("raw", ["loud", "WARN ", "20", "TRACE"])
def test_the_log_level_refuses_other_names(raw: str) -> None:
    """Guards the refusal of anything but logging's five level names, naming the
    variable and the names it takes."""
    with pytest.raises(
        SettingsError,
        match=r"^RUNSTATE_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, not",
    ):
        Settings.from_env({"RUNSTATE_LOG_LEVEL": raw})
