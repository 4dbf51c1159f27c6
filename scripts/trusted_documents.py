"""Write ``src/runstate/web/static/documents.json``: the documents the SDK, the
LangGraph saver and the dashboard send, which the server registers as trusted
(sent by id).

    .venv/bin/python scripts/trusted_documents.py

Run it after changing ``runstate.client.documents`` or ``runstate.web.dashboard``;
``make test`` fails while the file and the documents differ
(``tests/unit/test_trusted_documents.py``). The format is Apollo's persisted query
manifest, which Apollo and Relay tooling read; servers publish it at
``/static/documents.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from runstate.client import documents
from runstate.client.documents import document_id
from runstate.web import dashboard as page

MANIFEST = Path(__file__).parent.parent / "src" / "runstate" / "web" / "static" / "documents.json"


def operations() -> dict[str, str]:
    """The SDK's and the saver's documents and the dashboard's, by name (one name
    may not stand for two documents)."""
    sdk, dashboard = documents.operations(), page.operations()
    assert not set(sdk) & set(dashboard), "an operation name used twice"
    return {**sdk, **dashboard}


def manifest() -> str:
    """The manifest's text for the documents as they are now."""
    entries = [
        {
            "id": document_id(body).removeprefix("sha256:"),
            "name": name,
            "type": body.split(" ", 1)[0],
            "body": body,
        }
        for name, body in operations().items()
    ]
    document = {"format": "apollo-persisted-query-manifest", "version": 1, "operations": entries}
    return json.dumps(document, indent=2) + "\n"


if __name__ == "__main__":
    MANIFEST.write_text(manifest())
    print(f"wrote {MANIFEST} ({len(operations())} documents)")
