"""What a request's operation is, read before it runs: a request past the usual
body limit runs only if it uploads checkpoints (``body_limit``)."""

from __future__ import annotations

from graphql import FieldNode, GraphQLError, OperationType, get_operation_ast

from runstate.schema.extensions import parse_document

UPLOADS = frozenset({"putGraphCheckpoint", "putGraphWrites"})
"""The mutations a request past the usual body limit may carry."""


def uploads_only(query: str | None, operation_name: str | None, max_tokens: int) -> bool:
    """Whether the operation is a mutation of checkpoint uploads and nothing else
    (False if the document does not parse or has no such operation)."""
    if query is None:
        return False
    try:
        document = parse_document(query, max_tokens)
    except GraphQLError:
        return False
    found = get_operation_ast(document, operation_name)
    if found is None or found.operation is not OperationType.MUTATION:
        return False
    fields = found.selection_set.selections
    return all(isinstance(f, FieldNode) and f.name.value in UPLOADS for f in fields)
