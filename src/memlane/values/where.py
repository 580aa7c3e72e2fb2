"""Conditions on an item's value, metadata, author and times, for ``select``, ``search`` and ``recall``.

A ``where`` is a mapping from a field path to what the field must be, the
shape LangGraph's ``filter`` has::

    {"kind": "note", "stats.score": {"$gte": 3}, "owner": {"team": "core"}}

- A path is dotted: ``stats.score`` is ``value["stats"]["score"]``.
- A path's first segment may name another part of the item: ``metadata.<path>``
  (the item's metadata), ``author`` (text or ``None``), ``created_at`` and
  ``updated_at`` (times: an ISO 8601 text, or relative to the memory's clock as
  ``-7d``, ``-12h``, ``-30m``, ``-45s``, ``-2w``; a time without an offset is
  UTC). ``value.<path>`` names the value explicitly: it is how a value field
  named ``metadata``, ``author``, ``created_at``, ``updated_at`` or ``value``
  is reached (``value.author``).
- A plain value means equality. A mapping without ``$`` keys is a nested path
  (``{"owner": {"team": "core"}}`` is ``{"owner.team": "core"}``).
- ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte`` compare. Equality is
  JSON equality, type-aware: ``1 == 1.0``, ``"1" != 1``, ``true != 1``; lists
  and objects compare whole. ``None`` equals a missing field or ``null``.
  ``$ne`` is exactly "not ``$eq``" (a missing field is not equal to ``3``).
  ``None`` inside a list or an object operand is a member that is ``null``.
  Order operators take a number or a string and match only a field of the same
  kind: numbers numerically, strings by code point.
- A number is the decimal its JSON writes, exactly, at any size: an int's
  digits, a float's shortest ``repr`` (:func:`exact`).

:func:`conditions` validates a ``where`` into flat :data:`Condition` tuples, which
each store renders as bound SQL (:mod:`memlane.store.where_sql`); :func:`matches` is
the same rule in Python (the model the stores are tested against, and the check the
LangGraph adapter applies to ranked results).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
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

FIELDS = ("value", "metadata", "author", "created_at", "updated_at")
"""What a condition's path starts with, once validated: the part of the item it reads."""
TIMES = ("created_at", "updated_at")
_RELATIVE = re.compile(r"([+-])(\d{1,9})([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

Condition = tuple[tuple[str, ...], str, Any]
"""``(path, operator, operand)``: one validated condition. ``path[0]`` is one of :data:`FIELDS`; the rest is
the path inside the value or the metadata. The operand is a JSON value; for a time, the fixed-width UTC text
the stores hold (so text order is time order)."""

_MISSING = object()


LOGICAL = frozenset({"$and", "$or", "$not", "$nor"})  # other systems' logical operators, refused by name


def conditions(raw: Any, field: str = "where", now: datetime | None = None) -> list[Condition]:
    """Validate a ``where`` mapping into conditions, all of which must hold.

    ``now`` is the clock that relative times (``"-7d"``) count back from (default: the system's).

    Operands are held to the budget of stored values: nested at most
    :data:`~memlane.values.validate.MAX_DEPTH` levels, so a value at that depth can be
    matched, and at most :data:`MAX_VALUES` values in all, which every backend
    compiles into one statement it can parse.

    Raises:
        ValidationError: naming ``field``, for an unknown operator, an empty path
            segment, an operand that is not JSON (NaN, Infinity, an integer of more than 4,300 digits), an ordering
            operand that is neither a number nor a string, an operand nested more
            than 100 levels deep, more than 1,000 values in the operands, or more
            than 64 conditions, a condition on ``author`` that is not text or ``None``, a time
            that does not parse, a path below ``author`` or a time, or a logical operator
            (``$and``, ``$or``, ``$not``, ``$nor``) where a field path goes.
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
        if name in LOGICAL:  # read as a value field it would match nothing, silently
            raise ValidationError(
                field,
                f"{name!r} is not supported: every condition of where must hold (no $and/$or/$not/$nor); "
                f"a value field of that name is value.{name}",
            )
        _add(out, _split(name, field), want, field, budget)
    if len(out) > MAX_CONDITIONS:
        raise ValidationError(field, f"has {len(out)} conditions; at most {MAX_CONDITIONS}")
    return [_placed(c, field, now) for c in out]


def _placed(condition: Condition, field: str, now: datetime | None) -> Condition:
    """A condition with its path led by the part of the item it reads, its operand checked for that part."""
    path, op, operand = condition
    name = ".".join(path)
    head = path[0]
    if head not in FIELDS:
        return ("value", *path), op, operand
    if head in ("value", "metadata"):
        return path, op, operand
    if len(path) > 1:
        raise ValidationError(field, f"{head!r} has no fields ({name!r}); to reach a value field use 'value.{name}'")
    if head == "author":
        if operand is not None and not isinstance(operand, str):
            raise ValidationError(field, f"{op} on 'author' compares text or None, not {type(operand).__name__}")
        if operand is None and op in ORDERING:
            raise ValidationError(field, f"{op} on 'author' compares text, not None")
        return path, op, operand
    return path, op, _time(operand, head, op, field, now)


def _time(raw: Any, name: str, op: str, field: str, now: datetime | None) -> str:
    """A time operand as the stores' UTC text: ISO 8601, or ``[+-]N[smhdw]`` from ``now``."""
    how = "give an ISO 8601 time ('2026-01-31T12:00:00Z') or a relative one ('-7d', '-12h', '-30m', '-45s', '-2w')"
    if not isinstance(raw, str):
        raise ValidationError(field, f"{op} on {name!r} compares a time, not {type(raw).__name__}; {how}")
    rel = _RELATIVE.fullmatch(raw.strip())
    if rel is not None:
        sign, n, unit = rel.groups()
        base = now if now is not None else datetime.now(UTC)
        try:
            at = base + (-1 if sign == "-" else 1) * timedelta(seconds=int(n) * _UNIT[unit])
        except OverflowError:
            raise ValidationError(field, f"time {raw!r} on {name!r} is out of range; {how}") from None
    else:
        try:
            at = datetime.fromisoformat(raw.strip())
        except ValueError:
            raise ValidationError(field, f"time {raw!r} on {name!r} does not parse; {how}") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    try:
        return at.astimezone(UTC).isoformat(timespec="microseconds")
    except OverflowError:
        raise ValidationError(field, f"time {raw!r} on {name!r} is out of range; {how}") from None


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
    if len(path) > MAX_PATH + (path[0] in ("value", "metadata")):
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
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise ValidationError(field, f"value at {where!r} is NaN or Infinity, which JSON cannot write")
        elif isinstance(node, int):
            try:
                repr(node)
            except ValueError:  # past sys.get_int_max_str_digits(): no stored value holds one either
                raise ValidationError(
                    field, f"value at {where!r} is an integer of more than {sys.get_int_max_str_digits():,} digits"
                ) from None
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


def exact(x: int | float) -> int | Decimal:
    """A number as the exact decimal its JSON text writes: an int as it is, a float as its ``repr``.

    ``2.0**60`` is written ``1.152921504606847e+18``: the stores read that decimal (PostgreSQL's
    ``numeric``), not the binary fraction Python compares, so ``2**60 != 2.0**60`` here. Two
    floats, or two ints, compare alike either way.
    """
    return Decimal(repr(x)) if isinstance(x, float) else x


def _compare(a: Any, b: Any) -> int | None:
    """-1, 0 or 1 as number ``a`` is below, equal to or above number ``b``, by the decimals of their JSON.

    ``None`` for NaN, which is in no order (the LangGraph adapter checks such operands here).
    """
    if a != a or b != b:
        return None
    if type(a) is not type(b):  # an int and a float (infinite ones too: Decimal has them)
        a, b = exact(a), exact(b)
    return -1 if a < b else int(a > b)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by their decimal value, booleans apart from numbers, lists in order, objects by keys."""
    if _number(a) and _number(b):
        return _compare(a, b) == 0
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return isinstance(a, list | tuple) and isinstance(b, list | tuple) and _lists_equal(a, b)
    if isinstance(a, list | tuple):
        return _lists_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _lists_equal(a: Any, b: Any) -> bool:
    return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))


def _part(value: Any, item: Any, head: str) -> Any:
    """The part of an item a condition reads: the value given, else the item's attribute (``_MISSING`` without)."""
    if head == "value":
        return value
    if item is None:
        return _MISSING
    got = getattr(item, head)
    if head in TIMES:
        return got.astimezone(UTC).isoformat(timespec="microseconds")
    return got


def holds(value: Any, condition: Condition, item: Any = None) -> bool:
    """Whether one condition holds for a stored value (and ``item``'s metadata, author and times)."""
    path, op, operand = condition
    field = _at(_part(value, item, path[0]), path[1:])
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
    order = _compare(field, operand) if _number(operand) else -1 if field < operand else int(field > operand)
    if order is None:
        return False
    if op == "$gt":
        return order > 0
    if op == "$gte":
        return order >= 0
    if op == "$lt":
        return order < 0
    return order <= 0


def matches(value: Any, where: list[Condition], item: Any = None) -> bool:
    """Whether every condition holds for a stored value (the rule the stores apply in SQL).

    Conditions on the metadata, author or times read them from ``item`` (an :class:`~memlane.Item`);
    without one they do not hold (``$ne``: they do).
    """
    return all(holds(value, c, item) for c in where)
