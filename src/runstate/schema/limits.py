"""Validation rules that bound what one document may ask for, checked before any
resolver runs.

Every rule class here is built once per schema (``limit_rules``): graphql-core's
validation cache is keyed on the rule classes, so rules built per request (as
Strawberry's limiter extensions do) would make every lookup miss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    FloatValueNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLField,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    StringValueNode,
    ValidationContext,
    ValidationRule,
    Visitor,
    get_named_type,
    get_nullable_type,
    is_composite_type,
    visit,
)
from strawberry.extensions.max_aliases import create_validator as aliases_rule
from strawberry.extensions.query_depth_limiter import create_validator as depth_rule

from runstate.services.domain.validation import MAX_PAGE, storable_text

UNPAGED_LIST = 100
"""What a list without ``first`` (a task's steps or tool states) counts for in the
estimate: about the most a task has in practice."""
PARTS = frozenset({"Spend", "Budget", "BudgetChange"})
"""Objects that are columns of the row around them, read with it: no node of their
own (a step's spend is four numbers of the step's row)."""


def limit_rules(
    *, max_depth: int, max_aliases: int, max_nodes: int
) -> list[type[ASTValidationRule]]:
    """The rule classes for these limits, to build once and reuse for every request."""
    return [
        FilledSelections,
        _depth_rule(max_depth),
        aliases_rule(max_aliases),
        node_rule(max_nodes),
        CleanLiterals,
    ]


def _depth_rule(max_depth: int) -> type[ASTValidationRule]:
    """Strawberry's depth limit, skipped for a document that spreads a fragment it
    does not define: Strawberry's rule then fails with a KeyError (the raw text
    ``'o'`` reached the client), and graphql-core's KnownFragmentNames already
    refuses such a document with a proper validation error. Skipped too for an
    empty selection set (``{ }``), which graphql-core 3.3 parses and its rule fails
    on (``max()`` of nothing, a 500): ``FilledSelections`` refuses it."""
    limit = depth_rule(max_depth, None)

    class DepthLimit(limit):  # type: ignore[misc, valid-type]
        def __init__(self, context: ValidationContext) -> None:
            if _spreads_unknown_fragments(context.document) or _empty_selections(context.document):
                ASTValidationRule.__init__(self, context)
                return
            super().__init__(context)

    return DepthLimit


def _spreads_unknown_fragments(document: DocumentNode) -> bool:
    defined = {d.name.value for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    spread: set[str] = set()

    class Spreads(Visitor):
        def enter_fragment_spread(self, node: FragmentSpreadNode, *_: Any) -> None:
            spread.add(node.name.value)

    visit(document, Spreads())
    return not spread <= defined


def _empty_selections(document: DocumentNode) -> bool:
    found = False

    class Empty(Visitor):
        def enter_selection_set(self, node: SelectionSetNode, *_: Any) -> None:
            nonlocal found
            found = found or not node.selections

    visit(document, Empty())
    return found


class FilledSelections(ValidationRule):
    """Refuses an empty selection set (``{ }``, ``task(id: "x") { }``): graphql-core
    3.3 parses one and validates it, and an operation selecting nothing is a client's
    mistake, to be told as such."""

    def enter_selection_set(self, node: SelectionSetNode, *_: Any) -> None:
        if not node.selections:
            self.report_error(GraphQLError("A selection set must select at least one field", node))


def node_rule(max_nodes: int) -> type[ValidationRule]:
    """A rule refusing an operation whose estimated node count exceeds ``max_nodes``."""

    class NodeLimit(ValidationRule):
        def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
            root = self.context.schema.get_root_type(node.operation)
            if root is None:
                return
            nodes = estimate_nodes(self.context, root, node.selection_set)
            if nodes > max_nodes:
                self.report_error(
                    GraphQLError(
                        f"This query could return about {nodes} objects, more than the"
                        f" limit of {max_nodes}: ask for fewer items (first) or nest"
                        " less (events { task { events } } multiplies)",
                        node,
                    )
                )

    return NodeLimit


def estimate_nodes(
    context: ValidationContext,
    parent: GraphQLNamedType,
    selection_set: SelectionSetNode,
    seen: frozenset[str] = frozenset(),
) -> int:
    """How many objects a selection may return at most, GitHub-style: each object
    field counts once, times the ``first`` (or list size) of every list around it.

    ``first`` given as a variable counts as its largest allowed value, so the
    estimate depends on the document alone and is cached with its validation.
    """
    total = 0
    spread = selected_fields(context.schema, context.get_fragment, parent, selection_set, seen)
    for field, parent_type in spread:
        definition = field_definition(parent_type, field.name.value)
        if definition is None or field.selection_set is None:
            continue
        child = get_named_type(definition.type)
        if not is_composite_type(child) or child.name in PARTS:
            continue
        size = _list_size(field, definition, parent_type)
        inner = estimate_nodes(context, child, field.selection_set, seen)
        total += size + size * inner
        if total > 1 << 40:  # far past any limit: stop counting
            return total
    return total


def selected_fields(
    schema: GraphQLSchema,
    fragment_named: Callable[[str], FragmentDefinitionNode | None],
    parent: GraphQLNamedType,
    selection_set: SelectionSetNode,
    seen: frozenset[str] = frozenset(),
) -> Iterable[tuple[FieldNode, GraphQLNamedType]]:
    """The fields of a selection with the type each is selected on, fragments spread
    (``fragment_named`` finds a document's fragment by name)."""
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            yield selection, parent
        elif isinstance(selection, InlineFragmentNode):
            on = parent
            if selection.type_condition is not None:
                on = schema.get_type(selection.type_condition.name.value) or parent
            yield from selected_fields(schema, fragment_named, on, selection.selection_set, seen)
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            fragment = fragment_named(name)
            if fragment is None or name in seen:  # unknown or cyclic: other rules report it
                continue
            on = schema.get_type(fragment.type_condition.name.value) or parent
            yield from selected_fields(
                schema, fragment_named, on, fragment.selection_set, seen | {name}
            )


def field_definition(parent: GraphQLNamedType, name: str) -> GraphQLField | None:
    """A field of an object or interface type; None on a union (only __typename,
    selected without fragments)."""
    if isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
        field: GraphQLField | None = parent.fields.get(name)
        return field
    return None


def _list_size(field: FieldNode, definition: GraphQLField, parent: GraphQLNamedType) -> int:
    """How many items a field may return: its ``first``, or 1 for a single object."""
    if "first" in definition.args:
        for argument in field.arguments or ():
            if argument.name.value == "first":
                value = argument.value
                if isinstance(value, IntValueNode):
                    return max(0, min(int(value.value), MAX_PAGE))
                return MAX_PAGE  # a variable: the most it may be
        default = definition.args["first"].default_value
        return default if isinstance(default, int) else MAX_PAGE
    if isinstance(get_nullable_type(definition.type), GraphQLList):
        # A connection's edges (a page's items) are sized by its own first.
        return 1 if parent.name.endswith(("Connection", "Page")) else UNPAGED_LIST
    return 1


class CleanLiterals(ValidationRule):
    """Refuses string literals with NUL or unpaired surrogates and floats that are
    not finite (``1e999``), as ``transport.strict_json`` refuses them in variables:
    neither database stores them alike."""

    def enter_string_value(self, node: StringValueNode, *_: Any) -> None:
        if not storable_text(node.value):
            self.report_error(
                GraphQLError("Strings must not contain NUL characters or unpaired surrogates", node)
            )

    def enter_float_value(self, node: FloatValueNode, *_: Any) -> None:
        if not math.isfinite(float(node.value)):
            self.report_error(GraphQLError(f"{node.value} is not a finite number", node))
