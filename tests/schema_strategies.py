"""Hypothesis strategies, one per message type, for round-trip and fuzz tests.

Test code: hypothesis is a test dependency, and production (`everchat.transport.schema`)
never imports this (tests/test_boundaries.py). Each strategy is
built from the dataclass's field annotations, so a type added to `schema` gets one without
anyone writing it (and a field type the builder does not know fails loudly, naming it).
Values stay inside what the wire can carry: msgpack ints are 64-bit, NaN is left out
because NaN != NaN, dicts are JSON-like.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from hypothesis import strategies as st

from everchat.transport import schema

__all__ = ["message_strategies", "json_values", "for_annotation", "strategy_for"]

INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
TEXT = st.text(max_size=40)


def json_values() -> st.SearchStrategy[Any]:
    """JSON-like values: what dict fields (meta, view, StatsReply entries) may carry."""
    leaves = st.none() | st.booleans() | INTS | st.floats(allow_nan=False) | st.text(max_size=12)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def for_annotation(hint: Any, where: str) -> st.SearchStrategy[Any]:
    """The strategy for one field annotation (str, int, float, bool, bytes, X | None,
    list[X], tuple[X, ...], dict, dict[str, str], a Message type)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    simple = {str: TEXT, int: INTS, float: st.floats(allow_nan=False), bool: st.booleans(),
              bytes: st.binary(max_size=64)}
    if hint in simple:
        return simple[hint]
    if hint is dict or (origin is dict and args != (str, str)):
        return st.dictionaries(st.text(max_size=8), json_values(), max_size=4)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), TEXT, max_size=4)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([st.none() if arg is type(None) else for_annotation(arg, where) for arg in args])
    if origin is list:
        return st.lists(for_annotation(args[0], where), max_size=4)
    if origin is tuple:
        return st.tuples(*(for_annotation(arg, where) for arg in args))
    if isinstance(hint, type) and issubclass(hint, schema.Message):
        return strategy_for(hint)
    raise TypeError(f"{where}: no strategy for field type {hint!r}")


def strategy_for(cls: type[schema.Message]) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, localns=vars(schema))  # each module's names, then schema's
    fields = {f.name: for_annotation(hints[f.name], f"{cls.__name__}.{f.name}") for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


def message_strategies() -> dict[type[schema.Message], st.SearchStrategy[Any]]:
    """Every registered message type -> a strategy for its instances."""
    return {cls: strategy_for(cls) for cls in schema.types().values()}
