"""Configuration from RUNSTATE_* variables."""

from __future__ import annotations

import pytest

from runstate.settings import CEILINGS, MAX_INT, Settings, SettingsError
from runstate.storage.database import tortoise_config


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
    """Guards ``db.SQLITE_PRAGMAS``: added unless the URL sets them itself; and a
    PostgreSQL URL goes to runstate's engine (``runstate.storage.postgres``)."""
    url = tortoise_config("sqlite://x.db")["connections"]["default"]
    assert url == "sqlite://x.db?busy_timeout=30000&cache_size=-65536"
    url = tortoise_config("sqlite://x.db?cache_size=-2000")["connections"]["default"]
    assert url == "sqlite://x.db?cache_size=-2000&busy_timeout=30000"
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
