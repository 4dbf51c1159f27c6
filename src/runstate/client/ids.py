"""The ids a client chooses (sessions, tasks, LangGraph threads), checked before
anything is sent: a refused id is one clear ``InvalidInput`` naming the characters
allowed and the ones that are not, never a write half made. The rule is the
server's (``services.domain.validation.object_id``); a unit test keeps them equal."""

from __future__ import annotations

import re

from runstate.client.exceptions import InvalidInput

ID_LENGTH = 64
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]*")
ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@-")
"""The characters an id may hold (``ID``'s second class)."""
RULE = (
    f"1 to {ID_LENGTH} ASCII letters, digits or _.:@-, starting with a letter or digit"
    " (a UUID is one)"
)


def is_id(value: str) -> bool:
    """Whether the server accepts ``value`` as an id."""
    return len(value) <= ID_LENGTH and ID.fullmatch(value) is not None


def checked_id(value: str, field: str) -> str:
    """``value`` when it is an id the server accepts, else ``InvalidInput`` for
    ``field`` saying why."""
    if is_id(value):
        return value
    others = "".join(dict.fromkeys(c for c in value if c not in ALLOWED))
    if others:
        why = f"it has {others!r}"
    elif len(value) > ID_LENGTH:
        why = f"it is {len(value)} characters long"
    else:
        why = "it does not start with a letter or digit" if value else "it is empty"
    message = f"{field} {value!r} is not a runstate id: {why}; an id is {RULE}"
    raise InvalidInput({"code": InvalidInput.code, "field": field, "message": message})
