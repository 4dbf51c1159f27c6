"""What a request's operation is, read before it runs: a request past the usual
body limit runs only if it uploads checkpoints (``body_limit``); a write is never
stopped half-way by the request's time limit (``deadline``)."""

from __future__ import annotations

from graphql import (
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    get_operation_ast,
)

from runstate.schema.extensions import parse_document

UPLOADS = frozenset({"putGraphCheckpoint", "putGraphWrites"})
"""The mutations a request past the usual body limit may carry."""


def _operation(
    query: str | None, operation_name: str | None, max_tokens: int
) -> OperationDefinitionNode | None:
    """The operation the request runs (None if the document does not parse or has
    no such operation: Strawberry answers those)."""
    if query is None:
        return None
    try:
        document = parse_document(query, max_tokens)
    except GraphQLError:
        return None
    return get_operation_ast(document, operation_name)


def operation_type(
    query: str | None, operation_name: str | None, max_tokens: int
) -> OperationType | None:
    """The kind of operation the request runs (None: see ``_operation``)."""
    found = _operation(query, operation_name, max_tokens)
    return None if found is None else found.operation


def uploads_only(query: str | None, operation_name: str | None, max_tokens: int) -> bool:
    """Whether the operation is a mutation of checkpoint uploads and nothing else
    (False if the document does not parse or has no such operation)."""
    found = _operation(query, operation_name, max_tokens)
    if found is None or found.operation is not OperationType.MUTATION:
        return False
    fields = found.selection_set.selections
    return all(isinstance(f, FieldNode) and f.name.value in UPLOADS for f in fields)
