"""Conditions on the fields of a value, for :meth:`memlane.Memory.select`.

A ``where`` is a mapping from a field path to what the field must be, the
shape LangGraph's ``filter`` has::

    {"kind": "note", "stats.score": {"$gte": 3}, "owner": {"team": "core"}}

- A path is dotted: ``stats.score`` is ``value["stats"]["score"]``.
- A plain value means equality. A mapping without ``$`` keys is a nested path
  (``{"owner": {"team": "core"}}`` is ``{"owner.team": "core"}``).
- ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte`` compare. Equality is
  JSON equality, type-aware: ``1 == 1.0``, ``"1" != 1``, ``true != 1``; lists
  and objects compare whole. ``None`` equals a missing field or ``null``.
  ``$ne`` is exactly "not ``$eq``" (a missing field is not equal to ``3``).
  Order operators take a number or a string and match only a field of the same
  kind: numbers numerically, strings by code point.

:func:`conditions` validates a ``where`` into flat :data:`Condition` tuples, which
each store renders as bound SQL (:mod:`memlane.store.where_sql`); :func:`matches` is
the same rule in Python (the model the stores are tested against, and the check the
LangGraph adapter applies to ranked results).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from .errors import ValidationError
from .validate import MAX_DEPTH

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
ORDERING = ("$gt", "$gte", "$lt", "$lte")
MAX_CONDITIONS = 64
MAX_PATH = 16
# JSON values in all the operands of one ``where`` together (a list or object counts once, and so does each
# value inside it): what an equality on SQLite compiles to grows with it, one flat test per value
MAX_VALUES = 1000

Condition = tuple[tuple[str, ...], str, Any]
"""``(path, operator, operand)``: one validated condition; the operand is a JSON value."""

_MISSING = object()


def conditions(raw: Any, field: str = "where") -> list[Condition]:
    """Validate a ``where`` mapping into conditions, all of which must hold.

    Operands are held to the budget of stored values: nested at most
    :data:`~memlane.values.validate.MAX_DEPTH` levels, so a value at that depth can be
    matched, and at most :data:`MAX_VALUES` values in all, which every backend
    compiles into one statement it can parse.

    Raises:
        ValidationError: naming ``field``, for an unknown operator, an empty path
            segment, an operand that is not JSON (or NaN/Infinity), an ordering
            operand that is neither a number nor a string, an operand nested more
            than 100 levels deep, more than 1,000 values in the operands, or more
            than 64 conditions.
    """
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise ValidationError(field, f"must be a mapping of field paths to values, not {type(raw).__name__}")
    out: list[Condition] = []
    budget = [MAX_VALUES]
    for name, want in raw.items():
        if not isinstance(name, str) or not name:
            raise ValidationError(field, f"field path {name!r} must be a non-empty string")
        _add(out, _split(name, field), want, field, budget)
    if len(out) > MAX_CONDITIONS:
        raise ValidationError(field, f"has {len(out)} conditions; at most {MAX_CONDITIONS}")
    return out


def _split(name: str, field: str) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    for part in parts:
        _check_segment(part, name, field)
    return parts


def _check_segment(part: Any, name: str, field: str) -> None:
    if not isinstance(part, str) or not part:
        raise ValidationError(field, f"field path {name!r} has an empty segment")
    if '"' in part or any(ord(ch) < 32 for ch in part):
        raise ValidationError(field, f"field path {name!r} contains a quote or a control character")
    if _SURROGATE.search(part):
        raise ValidationError(field, f"field path {name!r} contains a lone surrogate, which is not valid Unicode")


_SURROGATE = re.compile("[\ud800-\udfff]")  # no UTF-8 carries one to a database


def _add(out: list[Condition], path: tuple[str, ...], want: Any, field: str, budget: list[int]) -> None:
    if len(path) > MAX_PATH:
        raise ValidationError(field, f"field path {'.'.join(path)!r} is deeper than {MAX_PATH}")
    if isinstance(want, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in want):
        for op, operand in want.items():
            if op not in OPERATORS:
                raise ValidationError(
                    field, f"unknown operator {op!r} at {'.'.join(path)!r}; use {', '.join(OPERATORS)}"
                )
            operand = _json(operand, path, field, budget)
            if op in ORDERING and (isinstance(operand, bool) or not isinstance(operand, int | float | str)):
                raise ValidationError(
                    field, f"{op} at {'.'.join(path)!r} compares numbers or strings, not {type(operand).__name__}"
                )
            out.append((path, op, operand))
        return
    if isinstance(want, Mapping):
        if not want:
            raise ValidationError(
                field, f"an empty object at {'.'.join(path)!r}; to match it exactly use {{'$eq': {{}}}}"
            )
        for k, sub in want.items():
            _check_segment(k, f"{'.'.join(path)}.{k}", field)
            _add(out, (*path, k), sub, field, budget)
        return
    out.append((path, "$eq", _json(want, path, field, budget)))


def _json(value: Any, path: tuple[str, ...], field: str, budget: list[int]) -> Any:
    """The operand as plain JSON (tuples become lists), refusing what JSON cannot hold or the budget allows.

    ``budget`` holds the values the ``where`` may still use; each value here takes one.
    """
    where = ".".join(path)
    stack = [(value, 0)]  # walked without recursion: no operand's depth reaches Python's stack
    while stack:
        node, depth = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise ValidationError(
                field,
                f"has more than {MAX_VALUES:,} values in its operands (a list or object counts each value inside "
                "it); compare fewer or smaller values",
            )
        if isinstance(node, str):
            if "\x00" in node:  # PostgreSQL's jsonb cannot hold it, so no backend compares it
                raise ValidationError(field, f"value at {where!r} contains a NUL character")
            if _SURROGATE.search(node):
                raise ValidationError(field, f"value at {where!r} holds a lone surrogate, which is not valid Unicode")
        elif node is None or isinstance(node, bool):
            pass
        elif isinstance(node, int | float):
            try:
                finite = math.isfinite(node)
            except OverflowError:  # an integer no double can hold, so SQLite could not compare it
                finite = False
            if not finite:
                raise ValidationError(field, f"value at {where!r} is NaN, Infinity or beyond a double's range")
        elif isinstance(node, list | tuple | Mapping):
            if isinstance(node, Mapping):
                for k in node:
                    if not isinstance(k, str):
                        raise ValidationError(field, f"value at {where!r} has an object key {k!r} that is not a string")
                    if '"' in k or any(ord(ch) < 32 for ch in k) or _SURROGATE.search(k):  # the field path rule
                        raise ValidationError(
                            field,
                            f"value at {where!r} has an object key {k!r} with a quote, a control character or a lone "
                            "surrogate, which no field path can name",
                        )
            if depth == MAX_DEPTH:
                raise ValidationError(
                    field,
                    f"value at {where!r} is nested more than {MAX_DEPTH} levels deep (lists and objects inside one "
                    "another), deeper than any stored value",
                )
            stack.extend((x, depth + 1) for x in (node.values() if isinstance(node, Mapping) else node))
        else:
            raise ValidationError(field, f"value at {where!r} is a {type(node).__name__}, not JSON")
    return _plain(value)


def _plain(value: Any) -> Any:
    """A checked operand with its tuples made lists and its mappings dicts (at most MAX_DEPTH calls deep)."""
    if isinstance(value, list | tuple):
        return [_plain(x) for x in value]
    if isinstance(value, Mapping):
        return {k: _plain(x) for k, x in value.items()}
    return value


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, booleans apart from numbers, lists in order, objects by keys."""
    if _number(a) and _number(b):
        return bool(a == b)
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return isinstance(a, list | tuple) and isinstance(b, list | tuple) and _lists_equal(a, b)
    if isinstance(a, list | tuple):
        return _lists_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _lists_equal(a: Any, b: Any) -> bool:
    return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))


def holds(value: Any, condition: Condition) -> bool:
    """Whether one condition holds for a stored value."""
    path, op, operand = condition
    field = _at(value, path)
    if op in ("$eq", "$ne"):
        if operand is None:
            equal = field is _MISSING or field is None
        else:
            equal = field is not _MISSING and json_equal(field, operand)
        return equal if op == "$eq" else not equal
    if _number(operand):
        if not _number(field):
            return False
    elif not isinstance(field, str):
        return False
    if op == "$gt":
        return bool(field > operand)
    if op == "$gte":
        return bool(field >= operand)
    if op == "$lt":
        return bool(field < operand)
    return bool(field <= operand)


def matches(value: Any, where: list[Condition]) -> bool:
    """Whether every condition holds for a stored value (the rule the stores apply in SQL)."""
    return all(holds(value, c) for c in where)
