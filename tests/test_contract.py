"""The exported schema contains every name of the public contract (tests/contract.graphql).

Every type, field, argument (with its type and default), enum value, union member
and input field of the contract must be in the SDL that `runstate export-schema`
prints.
"""

from __future__ import annotations

from pathlib import Path

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    build_schema,
)
from graphql.pyutils import Undefined

from runstate.resolvers import build

runstate_schema = build.build_schema()

CONTRACT = Path(__file__).with_name("contract.graphql")


def contract_gaps(contract: GraphQLSchema, ours: GraphQLSchema) -> list[str]:
    """Every contract name missing from or different in ``ours``, as readable lines."""
    gaps: list[str] = []
    for name, expected in contract.type_map.items():
        if name.startswith("__"):
            continue
        actual = ours.type_map.get(name)
        if actual is None:
            gaps.append(name)
        elif type(actual) is not type(expected):
            gaps.append(f"{name}: is a {type(actual).__name__}")
        else:
            gaps += _member_gaps(name, expected, actual)
    return gaps


def _member_gaps(name: str, expected: GraphQLNamedType, actual: GraphQLNamedType) -> list[str]:
    gaps: list[str] = []
    if isinstance(expected, GraphQLObjectType | GraphQLInterfaceType):
        assert isinstance(actual, GraphQLObjectType | GraphQLInterfaceType)
        have = {i.name for i in actual.interfaces}
        gaps += [f"{name}: implements {i.name}" for i in expected.interfaces if i.name not in have]
        for field_name, field in expected.fields.items():
            mine = actual.fields.get(field_name)
            if mine is None:
                gaps.append(f"{name}.{field_name}")
                continue
            if str(mine.type) != str(field.type):
                gaps.append(f"{name}.{field_name}: {mine.type} instead of {field.type}")
            for arg_name, arg in field.args.items():
                my_arg = mine.args.get(arg_name)
                where = f"{name}.{field_name}({arg_name})"
                if my_arg is None:
                    gaps.append(where)
                elif str(my_arg.type) != str(arg.type):
                    gaps.append(f"{where}: {my_arg.type} instead of {arg.type}")
                elif (
                    arg.default_value is not Undefined and my_arg.default_value != arg.default_value
                ):
                    gaps.append(f"{where}: default {my_arg.default_value!r}")
    elif isinstance(expected, GraphQLInputObjectType):
        assert isinstance(actual, GraphQLInputObjectType)
        for field_name, field in expected.fields.items():
            mine = actual.fields.get(field_name)
            where = f"{name}.{field_name}"
            if mine is None:
                gaps.append(where)
            elif str(mine.type) != str(field.type):
                gaps.append(f"{where}: {mine.type} instead of {field.type}")
            elif field.default_value is not Undefined and mine.default_value != field.default_value:
                gaps.append(f"{where}: default {mine.default_value!r}")
    elif isinstance(expected, GraphQLEnumType):
        assert isinstance(actual, GraphQLEnumType)
        gaps += [f"{name}.{v}" for v in expected.values if v not in actual.values]
    elif isinstance(expected, GraphQLUnionType):
        assert isinstance(actual, GraphQLUnionType)
        have = {t.name for t in actual.types}
        gaps += [f"{name} | {t.name}" for t in expected.types if t.name not in have]
    return gaps


def exported() -> GraphQLSchema:
    return build_schema(runstate_schema.as_str())


def test_exported_schema_contains_the_contract() -> None:
    assert contract_gaps(build_schema(CONTRACT.read_text()), exported()) == []


def test_the_check_finds_a_renamed_field() -> None:
    """Control: the same comparison notices a contract name that changed."""
    renamed = CONTRACT.read_text().replace("  currentStep: Int!", "  currentStepIndex: Int!")
    gaps = contract_gaps(build_schema(CONTRACT.read_text()), build_schema(renamed))
    assert gaps == ["Task.currentStep"]


def test_export_schema_command_prints_the_same_sdl(capsys: object) -> None:
    from runstate.cli import main

    main(["export-schema"])
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out.strip() == runstate_schema.as_str().strip()
