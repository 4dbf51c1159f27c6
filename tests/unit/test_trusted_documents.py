"""The trusted documents' registry and the SDK's side of it: the manifest the
server loads is the SDK's and the dashboard's documents as they are, and the SDK
names each of them by id, sending no text."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from runstate.client import calls
from runstate.client import documents as doc
from runstate.resolvers.build import build_schema
from runstate.resolvers.lean import Lean
from runstate.transport.trusted import Trusted
from runstate.web import dashboard as page

ROOT = Path(__file__).parent.parent.parent
PAGE_WRITES = (
    "pageSubmit",
    "pageCancel",
    "pageAddSchedule",
    "pagePauseSchedule",
    "pageDeleteSchedule",
)
"""The dashboard's writes to a session's ledger and schedules."""


def test_the_manifest_is_the_sdks_and_the_pages_documents_as_they_are() -> None:
    """Guards ``web/static/documents.json`` against a changed SDK or dashboard
    document: a document the server does not register would be refused by id. Run
    ``scripts/trusted_documents.py`` when this fails."""
    script = runpy.run_path(str(ROOT / "scripts" / "trusted_documents.py"))
    written = (ROOT / "src" / "runstate" / "web" / "static" / "documents.json").read_text()
    assert written == script["manifest"](), "run scripts/trusted_documents.py"
    registered = Trusted.packaged().bodies
    bodies = [*doc.operations().values(), *page.operations().values()]
    assert registered == {doc.document_id(b): b for b in bodies}
    assert {"checkpointTask", "putGraphCheckpoint", "graphCheckpoint"} <= set(doc.operations())
    assert set(page.operations()) == {
        "pageSignIn",
        "pageSessions",
        "pageProgress",
        "pageLog",
        "pageTaskAt",
        "pageGoal",
        "pageLease",
        "pageFork",
        "pageDecide",
        "pageAnswer",
        "pageSpend",
        "pageBudget",
        "pageLedger",
        "pageEntries",
        "pageSchedules",
        "pageSubmit",
        "pageCancel",
        "pageAddSchedule",
        "pagePauseSchedule",
        "pageDeleteSchedule",
    }


def test_the_sdk_sends_its_documents_by_id_and_others_as_text() -> None:
    """Guards ``calls._body``: a registered document goes as ``documentId`` and its
    variables alone; a document servers do not register, as its text."""
    for body in doc.operations().values():
        payload = json.loads(calls._body(body, {"input": {}}))
        assert payload == {"documentId": doc.document_id(body), "variables": {"input": {}}}
    other = json.loads(calls._body("query { __typename }", {}))
    assert other == {"query": "query { __typename }", "variables": {}}


def test_an_id_that_is_not_its_documents_hash_is_refused() -> None:
    """Guards the registry's check: an entry whose id is not its text's hash stops
    the server from starting, rather than answering one document for another."""
    with pytest.raises(ValueError, match="not the hash"):
        Trusted({doc.document_id("query a { x }"): "query b { y }"})


def test_the_sdks_writes_take_the_lean_path_and_the_rest_say_why_not() -> None:
    """Guards which trusted documents the lean path runs (``resolvers.lean``): every
    write of the SDK, the saver and the dashboard but the three whose answer reads
    ``Task.steps`` through a resolver and a task's ``setBudget`` (``overBudget``,
    which may sum its session's spend), and no query or subscription. A selection or
    mutation changed so that a write falls back to the standard path fails here,
    with the reason."""
    lean = Lean(build_schema(), Trusted.packaged().bodies.values())
    every = {**doc.operations(), **page.operations()}
    names = {body: name for name, body in every.items()}
    assert sorted(names[b] for b in lean.writes) == sorted(
        {*doc.operations(), "pageFork", "pageDecide", "pageAnswer", "pageBudget", *PAGE_WRITES}
        - {
            "createTask",
            "forkTask",
            "resumeTask",
            "setTaskBudget",
            "task",
            "taskAt",
            "graphCheckpoint",
            "graphCheckpoints",
            "sessionItems",
            "taskEvents",
            "submission",
            "submissions",
            "activeSubmission",
        }
    )
    assert {names[b]: why for b, why in lean.skipped.items()} == {
        "createTask": "reads Task.steps through a resolver",
        "forkTask": "reads Task.steps through a resolver",
        "resumeTask": "reads Task.steps through a resolver",
        "setTaskBudget": "reads Task.overBudget through a resolver",
        "task": "is a query",
        "taskAt": "is a query",
        "graphCheckpoint": "is a query",
        "graphCheckpoints": "is a query",
        "sessionItems": "is a query",
        "taskEvents": "is a query",
        **{name: "is a query" for name in ("submission", "submissions", "activeSubmission")},
        **{name: "is a query" for name in ("pageSignIn", "pageSessions", "pageLog")},
        **{name: "is a query" for name in ("pageTaskAt", "pageGoal", "pageLease", "pageSpend")},
        **{name: "is a query" for name in ("pageEntries", "pageSchedules")},
        "pageProgress": "is a subscription",
        "pageLedger": "is a subscription",
    }
