"""A ``where`` (:func:`memlane.values.where.conditions`) as one SQL condition, for SQLite and for PostgreSQL.

Every operand and path is a bound parameter; only fixed fragments are joined. The rule is
:func:`memlane.values.where.holds`, which the stores are tested against.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from ..values.where import Condition, exact

_INT64 = 2**63


@functools.cache
def _number_text() -> bool:
    """Whether SQLite has ``->``, which gives a number's digits: it reads an integer past 64 bits as a double."""
    import sqlite3  # here: the Client imports this module (through the store's shared parts) and no driver

    return sqlite3.sqlite_version_info >= (3, 38)


_SQL_OP = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<=", "$eq": "="}


def _sqlite_path(steps: tuple[str | int, ...]) -> str:
    # segments never hold '"' (refused in values.where._check_segment); SQLite reads a backslash in a quoted step as an
    # escape, so one is doubled (a field "a\\b" was never matched)
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else '."' + s.replace("\\", "\\\\") + '"' for s in steps)


def _floats_around(d: int | Decimal) -> tuple[float, float]:
    """The largest float whose JSON decimal is at most ``d`` and the smallest at least ``d`` (infinite past the ends).

    A stored float is the double SQLite parses from its ``repr``, the float Python wrote; ``exact`` orders floats
    as their doubles do, so ``x > d`` (decimals) is ``x > below`` (doubles).
    """
    inf = math.inf
    try:
        below = float(d)
    except OverflowError:  # an integer past every double
        below = math.nextafter(inf, 0.0) if d > 0 else -inf
    while exact(below) > d:
        below = math.nextafter(below, -inf)
    while exact(up := math.nextafter(below, inf)) <= d:
        below = up
    return below, (below if exact(below) == d else math.nextafter(below, inf))


def _int_bound(op: str, d: int | Decimal) -> int | None:
    """The integer ``k`` such that an integer ``m`` meets ``m op d`` exactly when it meets ``m op k``, if any."""
    if op in ("$gt", "$lte"):
        return math.floor(d)
    if op in ("$gte", "$lt"):
        return math.ceil(d)
    return int(d) if d == math.floor(d) else None


def _digits_order(negative: bool) -> str:
    """SQL giving -1, 0 or 1 as the integer whose canonical digits ``t`` holds is below, at or above ``k``.

    ``k``'s digits without a sign are ``d``, ``n`` of them; ``negative`` is its sign.
    """

    def magnitude(a: str) -> str:  # two digit strings without leading zeros: by length, then by text
        return (
            f"CASE WHEN length({a}) < n THEN -1 WHEN length({a}) > n THEN 1 "
            f"WHEN {a} < d THEN -1 WHEN {a} > d THEN 1 ELSE 0 END"
        )

    if negative:
        return f"CASE WHEN substr(t, 1, 1) = '-' THEN -({magnitude('substr(t, 2)')}) ELSE 1 END"
    return f"CASE WHEN substr(t, 1, 1) = '-' THEN -1 ELSE {magnitude('t')} END"


_ORDER_TEST = {"$gt": "> 0", "$gte": ">= 0", "$lt": "< 0", "$lte": "<= 0"}


def _sqlite_number(column: str, p: str, op: str, x: int | float, params: list[Any]) -> str:
    """A test that the JSON at path ``p`` is a number meeting ``op`` against ``x``, as decimals (``where.exact``).

    A stored float is the double of its ``repr``, compared with the double next to ``x`` on the side ``op``
    reads; an integer within 64 bits with the integer next to ``x``; an integer past them by its digits.
    """
    if abs(x) < 2**53:
        # SQLite compares an integer with a double exactly, and below 2**53 a double orders against an integer as
        # its repr does; every integer past 64 bits it reads as a double past 2**63, on the same side: one test
        params.extend((p, p, x))
        return (
            f"COALESCE(json_type({column}, ?) IN ('integer', 'real') AND json_extract({column}, ?) {_SQL_OP[op]} ?, 0)"
        )
    d = exact(x)
    below, above = _floats_around(d)
    real_params: list[Any] = []
    small_params: list[Any] = []
    big_params: list[Any] = []
    real = "0"  # a stored float: no double is ``x`` when no float's repr is its decimal
    if op != "$eq" or exact(below) == d:
        real, real_params = f"json_extract({column}, ?) {_SQL_OP[op]} ?", [p, above if op in ("$gte", "$lt") else below]
    small = big = "0"  # an integer equals no fraction
    k = _int_bound(op, d)
    if k is not None:
        if -_INT64 <= k < _INT64:
            small, small_params = f"json_extract({column}, ?) {_SQL_OP[op]} ?", [p, k]
        elif op != "$eq" and (k > 0) == (op in ("$lt", "$lte")):  # every 64-bit integer is on one side of k
            small = "1"
        if _number_text() and op == "$eq":  # the digits Python wrote: the same text for the same integer
            big, big_params = f"({column} -> ?) = ?", [p, str(k)]
        elif _number_text():
            big = (
                f"(SELECT ({_digits_order(k < 0)}) {_ORDER_TEST[op]} FROM (SELECT {column} -> ? AS t, ? AS d, ? AS n))"
            )
            big_params = [p, str(abs(k)), len(str(abs(k)))]
        else:  # before SQLite 3.38: the double of its digits, all that json_extract gives
            big, big_params = f"json_extract({column}, ?) {_SQL_OP[op]} ?", [p, float(k)]
    params.extend((p, p, *small_params, *big_params, *real_params))
    return (
        f"COALESCE(CASE json_type({column}, ?) WHEN 'integer' THEN (CASE WHEN typeof(json_extract({column}, ?)) = "
        f"'integer' THEN {small} ELSE {big} END) WHEN 'real' THEN {real} ELSE 0 END, 0)"
    )


def _sqlite_equal(
    column: str, steps: tuple[str | int, ...], x: Any, params: list[Any], out: list[str], top: bool = True
) -> None:
    """Append to ``out`` the flat tests that all hold when the JSON at ``steps`` equals ``x``.

    One test per value of ``x``, none inside another: the statement nests no
    deeper for a value nested 100 levels than for a number. ``None`` at the top
    is a field missing or null; inside a list or an object, a member that is null.
    """
    p = _sqlite_path(steps)
    if x is None:
        params.append(p)
        # at the top a field missing or null; a member of a list or an object must be there and null
        null = f"COALESCE(json_type({column}, ?), 'null') = 'null'"
        out.append(null if top else f"COALESCE(json_type({column}, ?) = 'null', 0)")
    elif isinstance(x, bool):
        params.extend((p, "true" if x else "false"))
        out.append(f"COALESCE(json_type({column}, ?) = ?, 0)")
    elif isinstance(x, int | float):
        out.append(_sqlite_number(column, p, "$eq", x, params))
    elif isinstance(x, str):
        params.extend((p, p, x))
        out.append(f"COALESCE(json_type({column}, ?) = 'text' AND json_extract({column}, ?) = ?, 0)")
    elif isinstance(x, list):
        params.extend((p, p, len(x)))
        out.append(f"COALESCE(json_type({column}, ?) = 'array' AND json_array_length({column}, ?) = ?, 0)")
        for i, e in enumerate(x):
            _sqlite_equal(column, (*steps, i), e, params, out, top=False)
    else:
        params.extend((p, p, len(x)))
        out.append(
            f"COALESCE(json_type({column}, ?) = 'object' AND (SELECT count(*) FROM json_each({column}, ?)) = ?, 0)"
        )
        for k, e in x.items():
            _sqlite_equal(column, (*steps, k), e, params, out, top=False)


def balanced(tests: Sequence[str], op: str = "AND") -> str:
    """``tests`` joined by ``op`` as a balanced tree, in order: parsers and expression trees nest log2(n) deep.

    A chain of n ANDs (or ORs) is an expression tree n deep, which SQLite refuses past 1,000.
    """
    if len(tests) == 1:
        return tests[0]
    half = len(tests) // 2
    return f"({balanced(tests[:half], op)} {op} {balanced(tests[half:], op)})"


def _sqlite_column(where: Condition, table: str) -> tuple[str, tuple[str, ...]]:
    """The column a condition reads (JSON text for the value and the metadata) and the path inside it."""
    path = where[0]
    return f"{table}.{path[0]}", path[1:]


def sqlite_sql(where: list[Condition], table: str = "items") -> tuple[str, list[Any]]:
    """``where`` as one SQLite condition over the row of ``table`` (``1`` when empty), with its parameters."""
    params: list[Any] = []
    tests: list[str] = []
    for condition in where:
        (head, *_), op, operand = condition
        column, path = _sqlite_column(condition, table)
        if head not in ("value", "metadata"):  # a text column: author (may be NULL) or a time
            if op in ("$eq", "$ne"):
                test = f"{column} IS NULL" if operand is None else f"COALESCE({column} = ?, 0)"
                tests.append(test if op == "$eq" else f"NOT ({test})")
            else:
                tests.append(f"COALESCE({column} {_SQL_OP[op]} ?, 0)")
            if operand is not None:
                params.append(operand)
            continue
        if op == "$eq":
            _sqlite_equal(column, path, operand, params, tests)
            continue
        if op == "$ne":
            inner: list[str] = []
            _sqlite_equal(column, path, operand, params, inner)
            tests.append(f"NOT {balanced(inner)}")
            continue
        p = _sqlite_path(path)
        if isinstance(operand, str):
            params.extend((p, p, operand))
            tests.append(f"COALESCE(json_type({column}, ?) = 'text' AND json_extract({column}, ?) {_SQL_OP[op]} ?, 0)")
        else:
            tests.append(_sqlite_number(column, p, op, operand, params))
    return (balanced(tests) if tests else "1"), params


# jsonb refuses the escape of NUL (\u0000), which a stored string may hold: such a value is read as having no
# fields rather than failing the statement for every row in scope
def _pg_json(column: str) -> str:
    # strpos is the quick test; the pattern tells the escape of NUL from an escaped backslash followed by "u0000"
    # (the text C:\\u0000 in JSON), which jsonb holds: such a value's fields stay readable
    return f"(CASE WHEN strpos({column}, '\\u0000') = 0 OR {column} !~ '{_NUL_ESCAPE}' THEN {column}::jsonb END)"


# a backslash that escapes "u0000": preceded by an even number of backslashes (none, or escaped ones)
_NUL_ESCAPE = r"(^|[^\\])(\\\\)*\\u0000"


_PG_VALUE = _pg_json("items.value")
# what PostgreSQL's ``#>`` takes for an array index (strtol: leading blanks, a sign, digits)
_PG_INDEX = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+[ \t\n\v\f\r]*")


def postgres_sql(where: list[Condition], table: str = "items", named: str = "") -> tuple[str, list[Any]]:
    """``where`` as one PostgreSQL condition over the row of ``table`` (``TRUE`` when empty), with its parameters.

    Numbers travel as text and compare as ``numeric``: the exact decimal that
    JSON (and Python's ``repr``) wrote, so no digits are lost to ``float8``.
    With ``named``, the placeholders are ``%(<named><i>)s`` (``i`` the parameter's
    place in the list returned), for a statement with named parameters.
    """
    params: list[Any] = []
    parts = []
    count = [0]

    def ph() -> str:  # the next parameter's placeholder: made in the order the parameters are appended
        count[0] += 1
        return f"%({named}{count[0] - 1})s" if named else "%s"

    for (head, *rest), op, operand in where:
        if head not in ("value", "metadata"):  # a text column: author (may be NULL) or a time
            column = f'{table}.{head} COLLATE "C"'
            if op in ("$eq", "$ne"):
                if operand is None:
                    sql = f"{table}.{head} IS NULL"
                else:
                    sql = f"COALESCE({column} = {ph()}, FALSE)"
                    params.append(operand)
                parts.append(sql if op == "$eq" else f"NOT ({sql})")
            else:
                parts.append(f"COALESCE({column} {_SQL_OP[op]} {ph()}, FALSE)")
                params.append(operand)
            continue
        path = list(rest)
        column = _pg_json(f"{table}.{head}")

        def at(column: str = column, path: list[str] = path) -> str:
            # ``#>`` reads a segment such as "0" or "-1" as an index into an array; a field path names object
            # fields only (values.where.holds), so each such segment's parent must be an object
            guards = []  # placeholders in the order they stand in the text, for positional ones
            for i, part in enumerate(path):
                if _PG_INDEX.fullmatch(part):
                    guards.append(f"jsonb_typeof({column} #> {ph()}::text[]) = 'object'")
                    params.append(path[:i])
            found = f"({column} #> {ph()}::text[])"
            params.append(path)
            return f"(CASE WHEN {' AND '.join(guards)} THEN {found} END)" if guards else found

        if op in ("$eq", "$ne"):
            if operand is None:
                sql = f"COALESCE({at()}, 'null'::jsonb) = 'null'::jsonb"
            else:
                first = at()
                sql = f"COALESCE({first} = {ph()}::jsonb, FALSE)"
                params.append(json.dumps(operand, allow_nan=False))
            parts.append(sql if op == "$eq" else f"NOT ({sql})")
            continue
        if isinstance(operand, str):
            a, b = at(), at()
            test = f"jsonb_typeof({a}) = 'string' THEN ({b} #>> '{{}}') COLLATE \"C\" {_SQL_OP[op]} {ph()}"
            params.append(operand)
        else:
            a, b = at(), at()
            test = f"jsonb_typeof({a}) = 'number' THEN ({b})::numeric {_SQL_OP[op]} {ph()}::numeric"
            params.append(repr(operand))
        parts.append(f"COALESCE(CASE WHEN {test} END, FALSE)")
    return (" AND ".join(parts) or "TRUE"), params
