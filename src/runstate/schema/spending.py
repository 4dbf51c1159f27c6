"""Spend and budgets in the API: the ``Long`` scalar, the ``Spend`` and ``Budget``
types, and the inputs that report spend and set budgets
(``services.domain.spend``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NewType

import strawberry
from graphql import GraphQLError, IntValueNode, ValueNode, print_ast

from runstate.services.domain import spend
from runstate.services.domain.validation import Report
from runstate.services.domain.views import BudgetChangeView, BudgetView, SpendView


def _long(value: object) -> int:
    """A ``Long`` from a variable: an integer (or a float with no fraction, as some
    JSON encoders send one). Its range is the services' to check, so that a count
    past 2^53 - 1 is refused as InvalidInput naming its field. Anything else is a
    GraphQLError: a client's mistake, answered as a validation error (another
    exception was masked as "Unexpected error." and logged with its traceback)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise GraphQLError(f"Long cannot represent {value!r}: an integer is needed")


def _long_literal(node: ValueNode, variables: dict[str, Any] | None = None) -> int:
    """A ``Long`` written in the document: an integer literal alone (as ``Int``
    takes one); a string, a float, a boolean, an object, a list or an enum value is
    a validation error naming what was written."""
    if isinstance(node, IntValueNode):
        return int(node.value)
    raise GraphQLError(
        f"Long cannot represent {print_ast(node)}: an integer literal is needed", node
    )


Long = NewType("Long", int)
"""Token counts and costs: an integer as a JSON number (``LONG`` is its scalar)."""

LONG = strawberry.scalar(
    name="Long",
    description=(
        "An integer up to 2^53 - 1, serialised as a JSON number (token counts and costs "
        "outgrow the 32-bit Int)."
    ),
    serialize=int,
    parse_value=_long,
    parse_literal=_long_literal,
)


def _long_or_none(value: int | None) -> Long | None:
    return None if value is None else Long(value)


@strawberry.type(description="Tokens and money spent, as agents reported them.")
class Spend:
    """A step's spend, or a sum of steps'."""

    input_tokens: Long
    output_tokens: Long
    cost_micros: Long = strawberry.field(
        description="Millionths of RUNSTATE_CURRENCY (default USD)."
    )
    calls: int = strawberry.field(description="Reports counted.")

    @classmethod
    def of(cls, view: SpendView) -> Spend:
        """The GraphQL object for a spend."""
        return cls(
            input_tokens=Long(view.input_tokens),
            output_tokens=Long(view.output_tokens),
            cost_micros=Long(view.cost_micros),
            calls=view.calls,
        )


@strawberry.type(description="Limits on spend; null means no limit.")
class Budget:
    """A task's or a session's budget."""

    max_tokens: Long | None = strawberry.field(description="Input and output tokens together.")
    max_cost_micros: Long | None

    @classmethod
    def of(cls, view: BudgetView | None) -> Budget | None:
        """The GraphQL object for a budget (None: none)."""
        if view is None:
            return None
        return cls(
            max_tokens=_long_or_none(view.max_tokens),
            max_cost_micros=_long_or_none(view.max_cost_micros),
        )


@strawberry.type(
    description=(
        "Who last set or changed a session's budget (setBudget, or startSession with one), "
        "when, and the reason they gave: what a task's BUDGET_CHANGED event keeps."
    )
)
class BudgetChange:
    """The last change of a session's budget."""

    actor: str = strawberry.field(description="The user id of the token that made it.")
    note: str | None = strawberry.field(description="setBudget's note, as given.")
    at: datetime

    @classmethod
    def of(cls, view: BudgetChangeView | None) -> BudgetChange | None:
        """The GraphQL object for a change (None: none)."""
        if view is None:
            return None
        return cls(actor=view.actor, note=view.note, at=view.at)


@strawberry.input(description="What a step spent: one report (one model call, or several summed).")
class SpendInput:
    """One report of spend."""

    input_tokens: Long | None = Long(0)
    output_tokens: Long | None = Long(0)
    cost_micros: Long | None = Long(0)
    model: str | None = None

    def report(self) -> Report:
        """The service's value for this input (a null count is 0)."""
        return Report(
            input_tokens=self.input_tokens or 0,
            output_tokens=self.output_tokens or 0,
            cost_micros=self.cost_micros or 0,
            model=self.model,
        )


def report_of(given: SpendInput | None) -> Report | None:
    """The service's value of an optional ``spend`` input."""
    return None if given is None else given.report()


@strawberry.input(description="Limits on spend; a limit left null is no limit.")
class BudgetInput:
    """A budget as given."""

    max_tokens: Long | None = None
    max_cost_micros: Long | None = None

    def budget(self, field: str = "budget") -> BudgetView | None:
        """The service's value for this input, checked (None: no limit at all)."""
        return spend.budget(self.max_tokens, self.max_cost_micros, field)


def budget_of(given: BudgetInput | None) -> BudgetView | None:
    """The service's value of an optional ``budget`` input."""
    return None if given is None else given.budget()
