"""The lean path: trusted write documents run without Strawberry's and
graphql-core's per-request machinery, answered exactly as the standard path
answers them.

A trusted document (``transport.trusted``) that is one write mutation made by
``answers.write`` (``mutation name($input: XInput!) { field(input: $input) {
... } }``) is compiled once, when the app starts: parsed, validated, and its
answer's selection turned into a plan, per type the answer may be, of which
attribute each key reads and how its value is serialized. A document that is
anything else (a query, a selection reading a field through a resolver, a
fragment spread, a directive) stays on the standard path.

What the schema's extensions do on the standard path, the lean path does from
the same list (``Schema.duties``, declared in ``resolvers.build``): each row
names an extension and its counterpart here. At compile time, a document is
parsed within the token limit (``WithinTokens``) and validated with every rule
the schema runs (``WithRules``: depth, aliases, nodes, literals, introspection
when it is off); per request, the operation is bounded and charged
(``Bounded``: ``Bounds.bound``), an unexpected error masked (``Masked``:
``masked``) and the operation counted (``Counted``: ``counted``); the caches
have nothing to do (``NotNeeded``, with the reason). An extension of the schema
that no row declares, or a counterpart this module does not know, stops the app
from starting (``TypeError`` from ``Lean``, naming it): never skipped.

Per request, the lean path does what must be done per request and no more: it
coerces the variables (graphql-core's ``get_variable_values``, so a bad input is
the same request error), runs the per-request counterparts above around the
resolver, converts the input as Strawberry's ``convert_arguments`` does (each
input type's fields, names and defaults looked up once, not per value), calls
the resolver (which charges the write, applies idempotency, writes, publishes),
answers a refusal as its Problem member (``to_problem``), serializes the answer
through the plan with the schema's own scalars and enums, and logs an unexpected
error (``Schema.process_errors``). What it returns is an ``ExecutionResult``
that the view turns into bytes, status and media type as it does every other:
errors, masking, media types and status codes are one implementation.
``tests/integration/test_trusted.py`` sends each write both ways and compares
the bytes; ``tests/unit/test_lean_extensions.py`` holds the two lists one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass
from typing import Any, assert_never

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    GraphQLAbstractType,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    VariableNode,
    is_leaf_type,
    located_error,
    parse,
    specified_rules,
    validate,
)
from graphql.execution.values import get_argument_values, get_variable_values
from graphql.pyutils import Undefined
from strawberry.relay.types import GlobalID
from strawberry.scalars import is_scalar
from strawberry.types import ExecutionResult
from strawberry.types.arguments import convert_argument
from strawberry.types.base import (
    StrawberryList,
    StrawberryMaybe,
    StrawberryObjectDefinition,
    StrawberryOptional,
)
from strawberry.types.enum import StrawberryEnumDefinition
from strawberry.types.field import StrawberryField
from strawberry.types.lazy_type import LazyType
from strawberry.types.unset import UNSET

from runstate.resolvers.answers import WRITES
from runstate.schema.bounds import Bounds
from runstate.schema.context import Context
from runstate.schema.extensions import (
    Bounded,
    Counted,
    Counterpart,
    Duty,
    Masked,
    NotNeeded,
    Schema,
    WithinTokens,
    WithRules,
    counted,
    extension_name,
    masked,
)
from runstate.schema.problems import AnswerProblems, to_problem
from runstate.services.domain.errors import DomainError

Complete = Callable[[Any], Any]
"""A value of the resolver's answer as the answer's JSON holds it."""


class NotLean(Exception):  # noqa: N818 - a signal, not an error
    """The document stays on the standard path (why, in its message)."""


class Unanswerable(Exception):  # noqa: N818 - an answer the plan cannot give
    """A value the plan cannot serialize (a null where the schema says never)."""


@dataclass(frozen=True)
class LeanInfo:
    """What a resolver made by ``answers.write`` reads of its ``info``."""

    context: Context
    field_name: str


@dataclass(frozen=True)
class LeanWrite:
    """One compiled write document."""

    name: str
    """The operation's name."""
    body: str
    """The document's text: the key ``Bounds`` keeps its verdicts under."""
    document: DocumentNode
    operation: OperationDefinitionNode
    node: FieldNode
    definition: GraphQLField
    """The mutation field's definition in graphql-core's schema."""
    key: str
    """The answer's key (the field's alias or name)."""
    resolver: Callable[..., Any]
    convert: Callable[[dict[str, Any]], dict[str, Any]]
    """The field's coerced arguments as the resolver takes them."""
    complete: Complete


class Lean:
    """The compiled write documents of a schema, by their text."""

    def __init__(self, schema: Schema, bodies: Iterable[str]) -> None:
        self.schema = schema
        self.duties = _duties(schema)
        """The schema's extensions, each with what this path does in its place."""
        self.max_tokens: int | None = None
        """The fewest tokens a document may have (``WithinTokens``; None: no limit)."""
        self.rules: list[type[ASTValidationRule]] = [*specified_rules]
        """The rules a document is validated with: graphql-core's and ``WithRules``'."""
        self.bounds: list[Bounds] = []
        """What bounds and charges a request of a caller (``Bounded``)."""
        self.masks: list[Callable[[list[GraphQLError]], list[GraphQLError]]] = []
        """What an answer's errors go through (``Masked``)."""
        self.counts: list[Counted] = []
        """Where an operation is counted (``Counted``)."""
        for duty in self.duties:
            self._take(duty)
        self.writes: dict[str, LeanWrite] = {}
        self.skipped: dict[str, str] = {}
        """Documents left to the standard path, and why."""
        for body in bodies:
            try:
                self.writes[body] = self._compile(body)
            except NotLean as why:
                self.skipped[body] = str(why)

    def _take(self, duty: Duty) -> None:
        """This path's step in place of ``duty``'s extension."""
        match duty.lean:
            case WithinTokens(max_tokens=limit):
                self.max_tokens = limit if self.max_tokens is None else min(self.max_tokens, limit)
            case WithRules(rules=rules):
                self.rules.extend(rules)
            case Bounded(bounds=bounds):
                self.bounds.append(bounds)
            case Masked():
                self.masks.append(masked)
            case Counted() as count:
                self.counts.append(count)
            case NotNeeded():
                pass
            case _:
                assert_never(duty.lean)

    def get(self, query: str | None, operation_name: str | None) -> LeanWrite | None:
        """The compiled write of a request's document, if it has one and the request
        runs its operation."""
        found = self.writes.get(query) if query is not None else None
        if found is None or operation_name not in (None, found.name):
            return None
        return found

    async def execute(
        self, write: LeanWrite, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult:
        """The write's answer to this request, as the standard path gives it."""
        began = time.perf_counter()
        gschema = self.schema._schema
        coerced = get_variable_values(
            gschema, write.operation.variable_definitions or (), variables or {}
        )
        if isinstance(coerced, list):
            result = ExecutionResult(data=None, errors=coerced)
        else:
            result = await self._run(write, context, variables, coerced)
        if result.errors:
            self.schema.process_errors(result.errors)
            for mask in self.masks:
                result.errors = mask(result.errors)
        for count in self.counts:
            counted(
                count.metrics,
                count.known,
                OperationType.MUTATION.value,
                write.document,
                bool(result.errors),
                began,
            )
        return result

    async def _run(
        self,
        write: LeanWrite,
        context: Context,
        variables: dict[str, Any] | None,
        coerced: Any,
    ) -> ExecutionResult:
        gschema = self.schema._schema
        try:
            if context.principal is not None:
                for bounds in self.bounds:
                    await bounds.bound(
                        gschema, write.document, write.name, variables, context, write.body
                    )
        except GraphQLError as error:
            return ExecutionResult(data=None, errors=[error])
        except Exception as error:  # as Strawberry answers an extension's error
            return ExecutionResult(
                data=None, errors=[GraphQLError(str(error), original_error=error)]
            )
        try:
            raw = get_argument_values(write.definition, write.node, coerced)
            arguments = write.convert(raw)
            try:
                value = await write.resolver(
                    None, LeanInfo(context, write.node.name.value), **arguments
                )
            except DomainError as refused:
                value = to_problem(refused)
            return ExecutionResult(data={write.key: write.complete(value)}, errors=None)
        except Exception as error:  # a field's error, located as graphql-core locates it
            return ExecutionResult(
                data=None, errors=[located_error(error, [write.node], [write.key])]
            )

    def _compile(self, body: str) -> LeanWrite:
        gschema = self.schema._schema
        try:
            document = parse(body, max_tokens=self.max_tokens)
        except GraphQLError as error:
            raise NotLean(f"does not parse: {error.message}") from None
        if validate(gschema, document, self.rules):
            raise NotLean("is not valid against the schema and its limits")
        operation = document.definitions[0]
        if (
            len(document.definitions) != 1
            or not isinstance(operation, OperationDefinitionNode)
            or operation.name is None
        ):
            raise NotLean("is not one named operation")
        if operation.operation is not OperationType.MUTATION:
            raise NotLean(f"is a {operation.operation.value}")
        (node,) = _fields(operation.selection_set)
        arguments = node.arguments or ()
        if (
            len(operation.variable_definitions or ()) != 1
            or len(arguments) != 1
            or arguments[0].name.value != "input"
            or not isinstance(arguments[0].value, VariableNode)
        ):
            raise NotLean("does not take one $input")
        field = _strawberry_field(self.schema, "Mutation", node.name.value)
        resolver = field.base_resolver.wrapped_func if field.base_resolver else None
        if resolver not in WRITES or [type(e) for e in field.extensions] != [AnswerProblems]:
            raise NotLean("is not a write made by answers.write")
        mutation = gschema.mutation_type
        assert mutation is not None
        definition = mutation.fields[node.name.value]
        complete = self._completer(definition.type, [node])
        key = node.alias.value if node.alias else node.name.value
        convert = self._arguments(field)
        return LeanWrite(
            operation.name.value,
            body,
            document,
            operation,
            node,
            definition,
            key,
            resolver,
            convert,
            complete,
        )

    def _arguments(self, field: StrawberryField) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The field's arguments converted as Strawberry's ``convert_arguments`` does,
        each argument's converter built once (``_converter``)."""
        names = self.schema.config.name_converter
        spec = [
            (names.from_argument(a), a.python_name, self._converter(a.type))
            for a in field.arguments
        ]

        def convert(raw: dict[str, Any]) -> dict[str, Any]:
            return {python: conv(raw[name]) for name, python, conv in spec if name in raw}

        return convert

    def _converter(self, kind: Any) -> Callable[[Any], Any]:
        """A converter of a coerced input value of Strawberry type ``kind``, doing
        what ``convert_argument`` does for it with each type's fields, names and
        defaults looked up once; any kind it does not know is left to
        ``convert_argument`` itself."""
        registry = self.schema.schema_converter.scalar_registry
        config = self.schema.config

        def generic(value: Any) -> Any:
            return convert_argument(value, kind, registry, config)

        if isinstance(kind, StrawberryMaybe) or kind is GlobalID:
            return generic
        if isinstance(kind, StrawberryOptional):
            return self._converter(kind.of_type)
        if isinstance(kind, StrawberryList):
            item_kind = kind.of_type
            if isinstance(item_kind, StrawberryOptional):
                item_kind = item_kind.of_type
            if _leaf(item_kind, registry, skip=(GlobalID,)):
                return lambda value: value if value is None or value is UNSET else list(value)
            item = self._converter(kind.of_type)
            return lambda value: (
                value if value is None or value is UNSET else [item(v) for v in value]
            )
        if _leaf(kind, registry):
            return lambda value: value
        definition = getattr(kind, "__strawberry_definition__", None)
        if not isinstance(definition, StrawberryObjectDefinition) or definition.from_input:
            return generic
        names = config.name_converter
        fields = [
            (
                names.from_field(f),
                f.python_name,
                self._converter(f.resolve_type(type_definition=definition)),
            )
            for f in definition.fields
        ]
        unset = {
            f.python_name: None
            for f in definition.fields
            if definition.is_input and f.default_value is MISSING and f.default_factory is MISSING
        }

        def build(value: Any) -> Any:
            if value is None or value is UNSET:
                return value
            given = dict(unset)
            for name, python, conv in fields:
                if name in value:
                    given[python] = conv(value[name])
            return kind(**given)

        return build

    def _completer(self, kind: GraphQLOutputType, nodes: list[FieldNode]) -> Complete:
        """How a value of ``kind``, selected by ``nodes``, is serialized: as
        graphql-core's ``complete_value`` does for the selections runstate sends."""
        if isinstance(kind, GraphQLNonNull):
            inner = self._completer(kind.of_type, nodes)

            def never_null(value: Any) -> Any:
                if value is None:
                    raise Unanswerable("a null where the schema says never")
                return inner(value)

            return never_null
        inner = self._nullable(kind, nodes)
        return lambda value: None if value is None else inner(value)

    def _nullable(self, kind: GraphQLOutputType, nodes: list[FieldNode]) -> Complete:
        if isinstance(kind, GraphQLList):
            item = self._completer(kind.of_type, nodes)
            return lambda value: [item(v) for v in value]
        if is_leaf_type(kind):
            serialize = kind.serialize

            def leaf(value: Any) -> Any:
                serialized = serialize(value)
                if serialized is Undefined or serialized is None:
                    raise Unanswerable(f"{kind} cannot serialize {value!r}")
                return serialized

            return leaf
        if isinstance(kind, GraphQLObjectType):
            return self._object(kind, nodes)
        assert isinstance(kind, GraphQLAbstractType)
        plans = {
            t.name: self._object(t, nodes) for t in self.schema._schema.get_possible_types(kind)
        }

        def abstract(value: Any) -> Any:
            definition = getattr(value, "__strawberry_definition__", None)
            if not isinstance(definition, StrawberryObjectDefinition):
                raise Unanswerable(f"{value!r} is no type of {kind}")
            return plans[definition.name](value)

        return abstract

    def _object(self, kind: GraphQLObjectType, nodes: list[FieldNode]) -> Complete:
        """The plan of one object type: its keys in the document's order, each read
        from the attribute its field names and serialized by its own completer."""
        plan: list[tuple[str, str | None, Complete]] = []
        for key, selected in self._collect(kind, nodes).items():
            name = selected[0].name.value
            if name == "__typename":
                plan.append((key, None, _constant(kind.name)))
                continue
            if any(n.arguments for n in selected):
                raise NotLean(f"selects {kind.name}.{name} with arguments")
            field = _strawberry_field(self.schema, kind.name, name)
            if field.base_resolver is not None or field.extensions:
                raise NotLean(f"reads {kind.name}.{name} through a resolver")
            plan.append((key, field.python_name, self._completer(kind.fields[name].type, selected)))

        def complete(value: Any) -> dict[str, Any]:
            return {
                key: (
                    complete_key(value)
                    if attribute is None
                    else complete_key(getattr(value, attribute))
                )
                for key, attribute, complete_key in plan
            }

        return complete

    def _collect(
        self, kind: GraphQLObjectType, nodes: list[FieldNode]
    ) -> dict[str, list[FieldNode]]:
        """The sub-fields of ``nodes`` that apply to ``kind``, by key, in the
        document's order (graphql-core's ``collect_fields`` for these documents)."""
        found: dict[str, list[FieldNode]] = {}

        def visit(selections: SelectionSetNode) -> None:
            for selection in selections.selections:
                if selection.directives:
                    raise NotLean("uses a directive")
                if isinstance(selection, FieldNode):
                    key = selection.alias.value if selection.alias else selection.name.value
                    found.setdefault(key, []).append(selection)
                elif isinstance(selection, InlineFragmentNode):
                    condition = selection.type_condition
                    if condition is None or self._applies(condition.name.value, kind):
                        visit(selection.selection_set)
                else:
                    raise NotLean("spreads a fragment")

        for node in nodes:
            if node.selection_set is not None:
                visit(node.selection_set)
        return found

    def _applies(self, condition: str, kind: GraphQLObjectType) -> bool:
        named = self.schema._schema.get_type(condition)
        if named is kind:
            return True
        return isinstance(named, GraphQLAbstractType) and self.schema._schema.is_sub_type(
            named, kind
        )


def _duties(schema: Schema) -> tuple[Duty, ...]:
    """The schema's duties, once it is sure that each extension the schema runs is
    the extension of one, and that this path knows each one's counterpart; a
    ``TypeError`` naming the extension otherwise, so the app does not start."""
    declared = [duty.extension for duty in schema.duties]
    undeclared = [extension_name(e) for e in schema.extensions if not any(e is d for d in declared)]
    if undeclared:
        raise TypeError(
            f"the schema runs {', '.join(undeclared)} on every request, with no counterpart"
            " on the lean path (resolvers.lean) declared: add it to the schema's list of"
            " extensions (a Duty in resolvers.build) with what the lean path does in its"
            " place, or NotNeeded and why"
        )
    unrun = [d.name for d in schema.duties if not any(e is d.extension for e in schema.extensions)]
    if unrun:
        raise TypeError(f"the schema does not run {', '.join(unrun)}, which its duties list")
    unknown = [duty.name for duty in schema.duties if not isinstance(duty.lean, Counterpart)]
    if unknown:
        raise TypeError(
            f"the lean path (resolvers.lean) knows no counterpart of {', '.join(unknown)}:"
            " declare one it knows (schema.extensions.Counterpart)"
        )
    return schema.duties


def _leaf(kind: Any, registry: Mapping[object, Any], skip: tuple[type, ...] = ()) -> bool:
    """Whether ``convert_argument`` takes a value of Strawberry type ``kind`` as it
    is: a scalar of ``registry`` (the schema's) or an enum, not one of ``skip``.
    The test of Strawberry's ``convert_argument`` (its private ``_is_leaf_type``),
    made here of public parts."""
    if kind in skip:
        return False
    if is_scalar(kind, registry) or isinstance(kind, StrawberryEnumDefinition):
        return True
    if isinstance(kind, LazyType):
        return _leaf(kind.resolve_type(), registry)
    return False


def _constant(value: str) -> Complete:
    return lambda _: value


def _fields(selections: SelectionSetNode) -> list[FieldNode]:
    fields = [s for s in selections.selections if isinstance(s, FieldNode)]
    if len(fields) != len(selections.selections) or len(fields) != 1:
        raise NotLean("does not run one field")
    return fields


def _strawberry_field(schema: Schema, type_name: str, field_name: str) -> StrawberryField:
    """The Strawberry field behind ``type_name.field_name`` (a GraphQL name)."""
    definition = schema.get_type_by_name(type_name)
    if not isinstance(definition, StrawberryObjectDefinition):
        raise NotLean(f"{type_name} is not an object type of the schema")
    for field in definition.fields:
        if schema.config.name_converter.get_graphql_name(field) == field_name:
            return field
    raise NotLean(f"{type_name} has no field {field_name}")
