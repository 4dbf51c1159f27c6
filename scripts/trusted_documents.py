"""Write ``src/runstate/web/documents.json``: the documents the SDK and the
LangGraph saver send, which the server registers as trusted (sent by id).

    .venv/bin/python scripts/trusted_documents.py

Run it after changing ``runstate.client.documents``; ``make test`` fails while
the file and the documents differ (``tests/unit/test_trusted.py``). The format is
Apollo's persisted query manifest, which Apollo and Relay tooling read.
"""

from __future__ import annotations

import json
from pathlib import Path

from runstate.client.documents import document_id, operations

MANIFEST = Path(__file__).parent.parent / "src" / "runstate" / "web" / "documents.json"


def manifest() -> str:
    """The manifest's text for the SDK's documents as they are now."""
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
