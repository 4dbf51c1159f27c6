"""The ids a client chooses: the SDK's check is the server's rule, and the demo's
LangGraph thread ids pass it."""

from __future__ import annotations

from runstate.client import ids
from runstate.demo.graph import CITIES, ascii_slug
from runstate.models import ID_LENGTH
from runstate.services.domain import validation


def test_the_sdks_id_rule_is_the_servers() -> None:
    """Guards ``client.ids`` against drifting from ``validation.object_id``: an id
    the SDK let through and the server refused would be refused after a write
    began; one the SDK refused and the server took would be refused for nothing."""
    assert ids.ID.pattern == validation._ID.pattern
    assert all(ids.ID.fullmatch("a" + c) for c in ids.ALLOWED)
    assert not any(
        ids.ID.fullmatch("a" + chr(c)) for c in range(0x250) if chr(c) not in ids.ALLOWED
    )
    assert ids.ID_LENGTH == ID_LENGTH


def test_every_demo_thread_id_is_an_id() -> None:
    """Guards ``demo.graph.ascii_slug``: "Valparaíso" made the third trip's thread
    id "trip-valparaíso-...", which the server refused, and the demo died there."""
    slugs = [ascii_slug(city) for city in CITIES]
    assert slugs == ["lisbon", "kyoto", "valparaiso", "tallinn", "oaxaca"]
    assert all(ids.is_id(f"trip-{slug}-0a1b2c") for slug in slugs)
