"""Trusted documents: the GraphQL documents runstate's own SDK, LangGraph saver and
dashboard send, registered by the hash of their text, so that a request names one by id
instead of sending it (``{"documentId": "sha256:<hex>", "variables": ...}``),
as Apollo's and Relay's persisted queries do.

The registry is ``web/static/documents.json`` (Apollo's persisted query manifest,
written by ``scripts/trusted_documents.py`` from ``runstate.client.documents`` and
``runstate.web.dashboard``).
An id the registry does not hold is refused with 400; any other document is
still served when sent as ``query``, by the same path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from cross_web import HTTPException

PREFIX = "sha256:"
NAMED = "runstateDocumentId"
"""The request extension that says a request named its document by id: such a
request may take the lean path (``resolvers.lean``); one sending text never does."""


class Trusted:
    """The registered documents by id (``sha256:<hex>``)."""

    def __init__(self, bodies: Mapping[str, str]) -> None:
        for document_id, body in bodies.items():
            if document_id != PREFIX + hashlib.sha256(body.encode()).hexdigest():
                raise ValueError(f"{document_id} is not the hash of its document")
        self.bodies = dict(bodies)

    @classmethod
    def packaged(cls) -> Trusted:
        """The documents of this version's SDK, saver and dashboard
        (``web/static/documents.json``)."""
        text = (resources.files("runstate") / "web" / "static" / "documents.json").read_text()
        manifest = json.loads(text)
        return cls({PREFIX + entry["id"]: entry["body"] for entry in manifest["operations"]})

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request body naming a document by ``documentId`` with its document as
        ``query`` and the id as the extension ``NAMED``; any other body as it is
        (an ``extensions`` of its own that says ``NAMED`` included: 400). 400 for
        an id it does not hold, one that is not text, or a body that sends both."""
        extensions = body.get("extensions")
        if isinstance(extensions, dict) and NAMED in extensions:
            raise HTTPException(400, f"the extension {NAMED} is the server's own")
        if "documentId" not in body:
            return body
        document_id = body["documentId"]
        if "query" in body:
            raise HTTPException(400, "send either query or documentId, not both")
        found = self.bodies.get(document_id) if isinstance(document_id, str) else None
        if found is None:
            raise HTTPException(
                400,
                "unknown documentId: this server registers the documents of its own SDK,"
                " LangGraph saver and dashboard (/static/documents.json); send any other"
                " document as query",
            )
        named = {k: v for k, v in body.items() if k != "documentId"}
        given = extensions if isinstance(extensions, dict) else {}
        return {**named, "query": found, "extensions": {**given, NAMED: document_id}}
