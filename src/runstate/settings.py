"""Configuration read once from ``RUNSTATE_*`` variables; CLI flags override it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

DEFAULT_DATABASE_URL = "sqlite://runstate.db"


class SettingsError(ValueError):
    """A configuration value that cannot be used."""


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from its environment, passed to ``create_app``."""

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    session_ttl: int = 3600
    retention: int = 86400
    max_body_bytes: int = 1_048_576
    graphiql: bool = True
    catch_up_seconds: float = 3.0
    subscriber_queue: int = 1000
    subscriber_queue_bytes: int = 4 * 1024 * 1024
    gap_fill: bool = True
    idempotency_ttl: int = 86400
    sweep_seconds: float = 60.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the ``RUNSTATE_*`` variables, falling back to the defaults above."""
        env = os.environ if environ is None else environ
        return cls(
            database_url=env.get("RUNSTATE_DATABASE_URL") or DEFAULT_DATABASE_URL,
            redis_url=env.get("RUNSTATE_REDIS_URL") or None,
            session_ttl=_positive_int(env, "RUNSTATE_SESSION_TTL", 3600),
            retention=_positive_int(env, "RUNSTATE_RETENTION", 86400),
            max_body_bytes=_positive_int(env, "RUNSTATE_MAX_BODY_BYTES", 1_048_576),
            graphiql=_flag(env, "RUNSTATE_GRAPHIQL", True),
            catch_up_seconds=_positive_float(env, "RUNSTATE_CATCH_UP_SECONDS", 3.0),
            subscriber_queue=_positive_int(env, "RUNSTATE_SUBSCRIBER_QUEUE", 1000),
            subscriber_queue_bytes=_positive_int(
                env, "RUNSTATE_SUBSCRIBER_QUEUE_BYTES", 4 * 1024 * 1024
            ),
            gap_fill=_flag(env, "RUNSTATE_GAP_FILL", True),
            idempotency_ttl=_positive_int(env, "RUNSTATE_IDEMPOTENCY_TTL", 86400),
            sweep_seconds=_positive_float(env, "RUNSTATE_SWEEP_SECONDS", 60.0),
        )

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the given fields replaced; ``None`` values are ignored."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


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
    return value


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false, not {raw!r}")
