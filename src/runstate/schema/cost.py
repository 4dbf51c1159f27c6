"""What an operation could answer, estimated before it runs from what is stored.

The validation rule of ``schema.limits`` sees the document alone: a list without
``first`` counts 100 items there and a payload counts nothing, so 15 aliases of
``task(id: "fat") { ... on Task { steps { output } } }`` passed as 1,515 nodes and
answered 225 MB. This estimate adds what the database says: a task's steps and
tool states as counted, its payloads by ``Task.storedBytes``, a user's tasks by
what the user holds (``Query.usage``). It is a bound, not a guess:

- **Objects**: every object the answer could hold, lists at their stored sizes
  (or their ``first``), times every alias and list around them.
- **Bytes**: the encoded answer. A payload (a step's input or output, a goal, an
  error, a tool result, metadata) is part of its task's stored bytes, which count
  it as the answer encodes it (compact JSON, UTF-8, escapes included; see
  ``domain.quota``). Payloads read together from one task (``steps { input
  output } toolStates { lastResult }``) share those bytes; a payload selected twice
  (``o0: output o1: output``, two aliases of ``steps``) counts twice. Every other
  leaf counts its longest encoding, and every key its name.

Content is shared down the tree (a task's steps are parts of the task, a user's
tasks parts of what the user holds) and repeated up it: ``tasks { node { session {
tasks } } }`` lists a session's tasks once per task of the outer page, and counts
so. ``Task.events`` reads the history, which the stored bytes count apart from the
current state. ``TaskEvent.task`` is the whole task on a SNAPSHOT, which carries no
delta: it shares its event's content.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLEnumType,
    GraphQLField,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    VariableNode,
    get_named_type,
    is_composite_type,
    value_from_ast_untyped,
)

from runstate.models import GRAPH_NAMESPACE_LENGTH
from runstate.schema.limits import field_definition, selected_fields
from runstate.services.domain import columns, validation
from runstate.services.domain.quota import ROW_BYTES
from runstate.services.domain.validation import ContentLimits
from runstate.services.read.lookups import TaskSize

SHORT_TEXT = 2 + 6 * 255
"""A name (tool, holder, user) or a message encoded at its longest: 255 characters,
each escaped as ``\\u00XX``."""
LEAF_BYTES = {"Int": 11, "Long": 17, "Float": 24, "Boolean": 5, "DateTime": 34, "ID": 270}
"""The longest encoding of a scalar (an ID is up to 255 characters of a plain
alphabet; a step's is its task's and an index)."""
KEY_BYTES = 4
"""What a key costs beyond its name: quotes, colon, comma."""
STEP_BYTES = 8
"""The least a step added by a write takes of its request (``{action:"a"}``)."""
ENVELOPE_BYTES = 64
"""The answer around the data: ``{"data":...}``."""


@dataclass(frozen=True)
class Estimate:
    """What an operation could answer at most."""

    objects: int
    bytes: int


@dataclass(frozen=True)
class Sizes:
    """What the database says, read for the request (``schema.bounds``), or, with
    ``tasks`` None, the most the limits allow: an estimate that needs no read."""

    tasks: Mapping[str, TaskSize] | None
    """The caller's tasks named by the operation, by id (missing: no such task);
    None: any named task as large as ``RUNSTATE_MAX_TASK_BYTES`` allows."""
    user_bytes: int
    """What the caller holds (``Query.usage``): the bound on any list of tasks."""
    input_bytes: int
    """The request's own size: what a write may add to what it answers."""


def unknown_sizes(limits: ContentLimits, max_body_bytes: int) -> Sizes:
    """Sizes at the most ``limits`` allow, for a request of at most ``max_body_bytes``."""
    return Sizes(tasks=None, user_bytes=limits.user_bytes, input_bytes=max_body_bytes)


TASK_TYPES = frozenset(
    {"Task", "ResumePlan", "ToolState", "TaskEvent", "GraphCheckpoint", "GraphCheckpointPage"}
)
"""A root field answering one of these answers the task its arguments name (or,
for a write naming none, the task it creates)."""


TEXT = 6
"""Bytes a character may take encoded (``\\u00XX``)."""


def encoded_cap(limits: ContentLimits, limit: str) -> int:
    """The most a value held to the content limit named ``limit`` may take encoded:
    a ``..._chars`` limit's characters at ``TEXT`` bytes each, a ``..._bytes``
    limit's bytes of compact JSON."""
    most: int = getattr(limits, limit)
    return most * TEXT if limit.endswith("_chars") else most


def payload_caps(
    limits: ContentLimits, bounds: Mapping[str, str] = columns.BOUNDS
) -> dict[tuple[str, str], int]:
    """The payload leaves, with the most one item's may hold when encoded. A step's
    versioned columns are derived from what each declares (``columns.BOUNDS``,
    ``bounds``), so a column added there is estimated at its own limit."""
    text = TEXT
    steps = {("Step", columns.camel(n)): encoded_cap(limits, b) for n, b in bounds.items()}
    return steps | {
        ("Task", "goal"): limits.goal_chars * text,
        ("Step", "action"): limits.action_chars * text,
        ("Step", "input"): limits.json_bytes,
        ("Step", "models"): validation.MODELS_PER_STEP * (validation.MODEL_CHARS * text + 3),
        ("ToolState", "lastResult"): limits.json_bytes,
        ("ToolState", "lastError"): limits.error_chars * text,
        ("TaskEvent", "note"): validation.NOTE_CHARS * text,
        ("AgentSession", "metadata"): limits.json_bytes,
        ("BudgetChange", "note"): validation.NOTE_CHARS * text,
        ("SessionItem", "item"): limits.json_bytes,
        # A session's ledger and schedules: inputs as submitted, plans as kept.
        ("Submission", "input"): limits.json_bytes,
        ("Submission", "reason"): validation.NOTE_CHARS * text + SHORT_TEXT,
        ("Schedule", "input"): limits.json_bytes,
        ("Schedule", "goal"): limits.goal_chars * text,
        ("StepPlan", "input"): limits.json_bytes,
        ("StepPlan", "action"): limits.action_chars * text,
        # LangGraph checkpoints: values in base64, counted so by ``threads.checkpoints``.
        ("GraphCheckpoint", "payload"): limits.checkpoint_bytes * 4 // 3 + 4,
        ("GraphCheckpoint", "metadata"): limits.json_bytes,
        ("GraphCheckpoint", "channelVersions"): limits.checkpoint_bytes,
        ("GraphCheckpoint", "namespace"): GRAPH_NAMESPACE_LENGTH * text,
        # Lists of values and writes, as JSON: bounded by what the task holds.
        ("GraphCheckpoint", "channels"): limits.task_bytes,
        ("GraphCheckpoint", "pendingWrites"): limits.task_bytes,
    }


@dataclass
class Scope:
    """Objects whose payloads share ``content`` stored bytes (a task, a page of a
    user's tasks), and what the operation selects of them."""

    content: int
    copies: int = 1
    """How many times the same stored content may appear (``Task.session``)."""
    steps: int = 0
    tool_states: int = 0
    events: int = 0
    """Per task: steps, tool states, events (exact for a named task, else bounds)."""
    selected: Counter[tuple[str, ...]] = field(default_factory=Counter)
    """How many times each payload is selected, by its path in the scope."""
    capped: int = 0
    """The most the selected payloads hold by their per-item limits."""

    @property
    def rows(self) -> int:
        """Steps, tool states or events the content can hold: each costs a row."""
        return self.content // ROW_BYTES

    def payload(self) -> int:
        """The payload bytes the scope's selections answer at most."""
        if not self.selected:
            return 0
        return min(self.content * max(self.selected.values()), self.capped)


class Walk:
    """One operation's estimate: ``task_ids`` says which sizes it needs, ``estimate``
    computes it from them."""

    def __init__(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        operation: OperationDefinitionNode,
        variables: Mapping[str, object] | None,
        limits: ContentLimits,
    ) -> None:
        self.schema = schema
        self.limits = limits
        """The app's content limits: what any payload and any task may hold at most."""
        self.operation = operation
        self.variables = dict(variables or {})
        self.fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self.caps = payload_caps(limits)
        self._scopes: list[Scope] = []
        self._user = 0
        self.listed = False
        """Whether the last estimate counted a list of the caller's tasks or sessions
        (it then needs ``Sizes.user_bytes``)."""
        self.varied = False
        """Whether the estimate read a variable (a ``first``): else it holds for
        every request of the same document."""
        root = schema.get_root_type(operation.operation)
        self.root: GraphQLObjectType | None = root

    def task_ids(self) -> set[str]:
        """The ids of the tasks the operation's root fields answer."""
        if self.root is None:
            return set()
        ids: set[str] = set()
        for node, on in self._fields(self.root, self.operation.selection_set):
            definition = field_definition(on, node.name.value)
            if definition is not None and self._answers_a_task(definition):
                ids.update(self._named_tasks(node))
        return ids

    def estimate(self, sizes: Sizes) -> Estimate:
        """The most objects and bytes the operation answers, given ``sizes``."""
        if self.root is None:
            return Estimate(0, ENVELOPE_BYTES)
        self._scopes = []
        self._user = sizes.user_bytes
        self.listed = False
        objects = 0
        total = 0
        for node, on in self._fields(self.root, self.operation.selection_set):
            definition = field_definition(on, node.name.value)
            if definition is None or node.selection_set is None:
                total += _leaf_bytes(node, definition)
                continue
            scope = self._root_scope(node, definition, sizes)
            page = self._first(node, definition)
            found, encoded = self._walk(
                get_named_type(definition.type), node.selection_set, 1, scope, (), page
            )
            objects += 1 + found
            total += _key(node) + 2 + encoded
        total += sum(s.payload() for s in self._scopes)
        return Estimate(objects, total + ENVELOPE_BYTES)

    def _root_scope(self, node: FieldNode, definition: GraphQLField, sizes: Sizes) -> Scope:
        limits = self.limits
        writes = self.operation.operation is OperationType.MUTATION
        ids = self._named_tasks(node)
        if self._answers_a_task(definition) and (ids or writes):
            grows = sizes.input_bytes if writes else 0
            if sizes.tasks is None:
                content = limits.task_bytes + grows
                return self._scope(
                    content=content,
                    steps=limits.steps,
                    tool_states=content // ROW_BYTES,
                    events=content // ROW_BYTES,
                )
            named = [sizes.tasks[i] for i in ids if i in sizes.tasks]
            return self._scope(
                content=sum(s.stored_bytes for s in named) + grows,
                steps=min(limits.steps, sum(s.steps for s in named) + grows // STEP_BYTES + writes),
                tool_states=sum(s.tool_states for s in named) + writes,
                events=sum(s.events for s in named) + writes,
            )
        if self.operation.operation is OperationType.SUBSCRIPTION:
            # sessionActivity: one message carries one event of one task.
            return self._listing(min(sizes.user_bytes, limits.task_bytes))
        return self._listing(sizes.user_bytes + sizes.input_bytes)

    def _listing(self, content: int, copies: int = 1) -> Scope:
        """A scope of tasks not known in advance, holding ``content`` together."""
        self.listed = True
        limits = self.limits
        rows = content // ROW_BYTES
        return self._scope(
            content=content,
            copies=copies,
            steps=limits.steps,
            tool_states=rows,
            events=validation.MAX_PAGE,
        )

    def _scope(
        self,
        *,
        content: int,
        copies: int = 1,
        steps: int = 0,
        tool_states: int = 0,
        events: int = 0,
    ) -> Scope:
        scope = Scope(content, copies, steps, tool_states, events)
        self._scopes.append(scope)
        return scope

    def _walk(
        self,
        parent: GraphQLNamedType,
        selection_set: SelectionSetNode,
        count: int,
        scope: Scope,
        path: tuple[str, ...],
        page: int,
    ) -> tuple[int, int]:
        """Objects and bytes (payloads apart, in their scopes) of ``count`` objects
        of ``parent`` answering ``selection_set``; ``page``: the ``first`` of the
        connection being walked."""
        objects = 0
        total = 2 * count  # braces
        for node, on in self._fields(parent, selection_set):
            name = node.name.value
            definition = field_definition(on, name)
            if definition is None or node.selection_set is None:
                payload = self.caps.get((on.name, name))
                if payload is None:
                    total += count * _leaf_bytes(node, definition)
                else:
                    scope.selected[(*path, name)] += 1
                    scope.capped += count * payload
                    total += count * (_key(node) + 4)  # null, or the payload's quotes
                continue
            child = get_named_type(definition.type)
            first = self._first(node, definition)
            items, inner, inner_path = self._step(on.name, name, count, scope, path, page, first)
            objects += items
            total += count * (_key(node) + 2)  # key and brackets
            found, encoded = self._walk(child, node.selection_set, items, inner, inner_path, first)
            objects += found
            total += encoded
            if objects > 1 << 40:  # far past any limit: stop counting
                break
        return objects, total

    def _step(
        self,
        on: str,
        name: str,
        count: int,
        scope: Scope,
        path: tuple[str, ...],
        page: int,
        first: int,
    ) -> tuple[int, Scope, tuple[str, ...]]:
        """How many objects a composite field answers for ``count`` parents, and the
        scope and path they belong to; ``page``: the ``first`` of the connection
        around it, ``first``: its own."""
        here = (*path, name)
        match on, name:
            case ("Task", "steps") | ("TaskEvent", "steps"):
                return min(count * scope.steps, scope.rows), scope, here
            case ("Task", "toolStates"):
                return min(count * scope.tool_states, scope.rows), scope, here
            case ("Task", "events"):
                history = self._scope(
                    content=scope.content,
                    copies=scope.copies,
                    steps=scope.steps,
                    tool_states=scope.tool_states,
                    events=scope.events,
                )
                return min(count * min(first, scope.events), scope.rows), history, ()
            case ("Task", "session"):
                limits = self.limits
                sessions = self._scope(
                    content=count * limits.json_bytes, copies=count * scope.copies
                )
                return count, sessions, ()
            case ("AgentSession", "tasks"):
                return count, self._listing(scope.copies * self._user, scope.copies), ()
            case (_, "edges") if on.endswith("Connection"):
                return count * page, scope, here
            case ("GraphCheckpointPage", "checkpoints"):
                return min(count * page, scope.rows), scope, here
            case ("SessionItemPage", "items"):  # a page of its ``last``
                return min(count * page, scope.rows), scope, here
            case ("SessionItemsEvent", "items"):  # a page at most
                return min(count * validation.MAX_PAGE, scope.rows), scope, here
        return count, scope, here

    def _answers_a_task(self, definition: GraphQLField) -> bool:
        named = get_named_type(definition.type)
        members = named.types if isinstance(named, GraphQLUnionType) else [named]
        return any(m.name in TASK_TYPES for m in members)

    def _named_tasks(self, node: FieldNode) -> set[str]:
        """Task ids in a root field's arguments: ``id``, ``taskId``, ``threadId``,
        and the same in its ``input``."""
        found: set[str] = set()
        for argument in node.arguments or ():
            value = value_from_ast_untyped(argument.value, self.variables)
            if argument.name.value in ("id", "taskId", "threadId") and isinstance(value, str):
                found.add(value)
            elif argument.name.value == "input" and isinstance(value, dict):
                found.update(
                    v for k, v in value.items() if k in ("id", "taskId") and isinstance(v, str)
                )
        return found

    def _first(self, node: FieldNode, definition: GraphQLField) -> int:
        if "last" in definition.args:  # a conversation's page (``sessionItems``)
            return self._argument(node, "last", validation.MAX_PAGE)
        if "first" not in definition.args:
            return 1
        default = definition.args["first"].default_value
        return self._argument(node, "first", default if isinstance(default, int) else 100)

    def _argument(self, node: FieldNode, name: str, default: int) -> int:
        """An integer argument (a ``first``) as the request gives it, within the page
        limit (a bad one is refused by its resolver)."""
        for argument in node.arguments or ():
            if argument.name.value == name:
                self.varied = self.varied or isinstance(argument.value, VariableNode)
                value = value_from_ast_untyped(argument.value, self.variables)
                if isinstance(value, int):
                    return max(0, min(value, validation.MAX_PAGE))
                return default if value is None else validation.MAX_PAGE
        return default

    def _fields(
        self, parent: GraphQLNamedType, selection_set: SelectionSetNode
    ) -> Iterable[tuple[FieldNode, GraphQLNamedType]]:
        return selected_fields(self.schema, self.fragments.get, parent, selection_set)


def _key(node: FieldNode) -> int:
    return len((node.alias or node.name).value) + KEY_BYTES


def _leaf_bytes(node: FieldNode, definition: GraphQLField | None) -> int:
    """A non-payload leaf at its longest encoding, with its key."""
    if definition is None:  # __typename
        return _key(node) + 40
    named = get_named_type(definition.type)
    if isinstance(named, GraphQLEnumType):
        return _key(node) + 2 + max((len(v) for v in named.values), default=0)
    if is_composite_type(named):  # selected without a selection set: refused by validation
        return _key(node)
    return _key(node) + LEAF_BYTES.get(named.name, SHORT_TEXT)
