"""A ``where`` (:func:`memlane.values.where.conditions`) as one SQL condition, for SQLite and for PostgreSQL.

Every operand and path is a bound parameter; only fixed fragments are joined. The rule is
:func:`memlane.values.where.holds`, which the stores are tested against.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..values.where import Condition

_INT64 = 2**63


def _sqlite_path(steps: tuple[str | int, ...]) -> str:
    # segments never hold '"' (refused in values.where._check_segment); SQLite reads a backslash in a quoted step as an
    # escape, so one is doubled (a field "a\\b" was never matched)
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else '."' + s.replace("\\", "\\\\") + '"' for s in steps)


def _sqlite_number(x: Any) -> Any:
    return x if isinstance(x, float) or -_INT64 <= x < _INT64 else float(x)


def _sqlite_equal(column: str, steps: tuple[str | int, ...], x: Any, params: list[Any], out: list[str]) -> None:
    """Append to ``out`` the flat tests that all hold when the JSON at ``steps`` equals ``x``.

    One test per value of ``x``, none inside another: the statement nests no
    deeper for a value nested 100 levels than for a number.
    """
    p = _sqlite_path(steps)
    if x is None:
        params.append(p)
        out.append(f"COALESCE(json_type({column}, ?), 'null') = 'null'")
    elif isinstance(x, bool):
        params.extend((p, "true" if x else "false"))
        out.append(f"COALESCE(json_type({column}, ?) = ?, 0)")
    elif isinstance(x, int | float):
        params.extend((p, p, _sqlite_number(x)))
        out.append(f"COALESCE(json_type({column}, ?) IN ('integer', 'real') AND json_extract({column}, ?) = ?, 0)")
    elif isinstance(x, str):
        params.extend((p, p, x))
        out.append(f"COALESCE(json_type({column}, ?) = 'text' AND json_extract({column}, ?) = ?, 0)")
    elif isinstance(x, list):
        params.extend((p, p, len(x)))
        out.append(f"COALESCE(json_type({column}, ?) = 'array' AND json_array_length({column}, ?) = ?, 0)")
        for i, e in enumerate(x):
            _sqlite_equal(column, (*steps, i), e, params, out)
    else:
        params.extend((p, p, len(x)))
        out.append(
            f"COALESCE(json_type({column}, ?) = 'object' AND (SELECT count(*) FROM json_each({column}, ?)) = ?, 0)"
        )
        for k, e in x.items():
            _sqlite_equal(column, (*steps, k), e, params, out)


def balanced(tests: Sequence[str], op: str = "AND") -> str:
    """``tests`` joined by ``op`` as a balanced tree, in order: parsers and expression trees nest log2(n) deep.

    A chain of n ANDs (or ORs) is an expression tree n deep, which SQLite refuses past 1,000.
    """
    if len(tests) == 1:
        return tests[0]
    half = len(tests) // 2
    return f"({balanced(tests[:half], op)} {op} {balanced(tests[half:], op)})"


_SQL_OP = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


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
        kinds = "'text'" if isinstance(operand, str) else "'integer', 'real'"
        params.extend((p, p, operand if isinstance(operand, str) else _sqlite_number(operand)))
        tests.append(f"COALESCE(json_type({column}, ?) IN ({kinds}) AND json_extract({column}, ?) {_SQL_OP[op]} ?, 0)")
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
