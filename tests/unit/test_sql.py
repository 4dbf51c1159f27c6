"""Placeholders as each database writes them (``storage/sql.py``)."""

from __future__ import annotations

from runstate.storage.sql import in_dialect


def test_placeholders_are_numbered_outside_literals_only() -> None:
    """Guards ``sql.in_dialect``: a ``?`` inside a quoted string or name is text. With
    every ``?`` rewritten (as before), the literal and the name would change too."""
    text = """SELECT '?', 'it''s ?', "odd?name" FROM t WHERE a = ? AND b IN (?, ?)"""
    assert in_dialect("postgres", text) == (
        """SELECT '?', 'it''s ?', "odd?name" FROM t WHERE a = $1 AND b IN ($2, $3)"""
    )
    assert in_dialect("sqlite", text) == text
