"""The first layer of the fence: parse, check and rewrite one statement before it runs.

A statement is parsed with sqlglot in the backend's dialect and must be exactly
one ``SELECT`` (``WITH`` allowed, ``WITH RECURSIVE`` too) that reads only the
``memory_v1`` views (and its own CTEs), calls only the functions of the
allow-list in :mod:`memlane.store.query_space`, casts only to plain types and writes
nothing anywhere in its tree (no ``INSERT`` hidden in a CTE, no ``SELECT INTO``,
no ``FOR UPDATE``). Anything else raises :class:`~memlane.values.errors.QueryRefused`
naming the reason and the offending part.

What runs is never the caller's text: it is sqlglot's rendering of the checked
tree (comments dropped), with view names pointed at the query space and
parameters numbered (``?1`` on SQLite, ``$1`` on PostgreSQL), so what was
checked is what the database sees. The other layers (a read-only connection
that can only read the views, the time and size caps, the visibility filter
inside the views) do not trust this one: see :mod:`memlane.domain.query.run`.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ..values.errors import QueryRefused, ValidationError
from . import query_space as space

MAX_SQL_CHARS = 100_000
MAX_PARAMS = 1000
_GLOT = {"sqlite": "sqlite", "postgres": "postgres"}


class _QuietFallback(logging.Filter):
    """sqlglot warns when it parses a statement it does not know as a raw Command; memlane refuses those anyway."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_QuietFallback())

# Statement kinds that change something; refused wherever they appear in the tree.
_WRITES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, name)
    for name in (
        "DML",
        "DDL",
        "Insert",
        "Update",
        "Delete",
        "Merge",
        "Create",
        "Drop",
        "Alter",
        "TruncateTable",
        "Command",
        "Pragma",
        "Attach",
        "Detach",
        "Copy",
        "Set",
        "Transaction",
        "Commit",
        "Rollback",
        "Use",
        "Show",
        "Describe",
        "Into",
        "Lock",
        "Grant",
        "Revoke",
        "Analyze",
        "Cache",
        "Uncache",
        "Refresh",
        "LoadData",
        "Declare",
        "Kill",
        "Comment",
        "Summarize",
        "Export",
        "Execute",
    )
    if hasattr(exp, name)
)


@dataclass(slots=True)
class Checked:
    """A statement that passed the fence, ready for one backend."""

    sql: str  # what runs: sqlglot's rendering, views pointed at the query space, parameters numbered
    params: list[Any]  # bound by number: params[0] is ?1 / $1
    views: list[str]  # the memory_v1 views it reads, sorted
    functions: list[str]  # the functions it calls, sorted (as written, lowercase)
    uses_match: bool = False  # text_match() was rewritten into the full-text index (SQLite: index helpers)
    parameters: list[str] = field(default_factory=list)  # ["?1", "?2"] or [":name", ...] as the caller wrote them
    shown: str = ""  # what runs as the caller may see it: the same, with text_match() as written


def refuse(reason: str, message: str, part: str | None = None) -> QueryRefused:
    """A :class:`QueryRefused`, its message ending with what to do next."""
    return QueryRefused(message, reason=reason, part=part)


def _brief(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _char_note(text: str) -> str:
    """A note naming the first non-ASCII character of ``text`` (look-alike letters, full-width keywords)."""
    for ch in text:
        if ord(ch) > 127:
            name = unicodedata.name(ch, "unnamed character")
            return f" (it contains U+{ord(ch):04X} {name}; type names and keywords in plain ASCII)"
    return ""


# -- the allow-list, derived from the samples in space.FUNCTIONS ---------------------------


@dataclass(frozen=True, slots=True)
class _Allowed:
    classes: frozenset[type[exp.Expression]]
    anonymous: frozenset[str]
    casts: frozenset[str]
    sqlite_names: frozenset[str]  # function names the SQLite authorizer lets through


@lru_cache(maxsize=4)
def allowed(dialect: str) -> _Allowed:
    """The function kinds, anonymous names and cast types allowed in ``dialect`` (from the documented samples)."""
    glot = _GLOT[dialect]
    classes: set[Any] = set()
    anonymous: set[str] = set()
    rendered: list[str] = []
    for _, sample in space.function_samples(dialect):
        tree = sqlglot.parse_one(f"SELECT {sample} FROM t", read=glot)
        rendered.append(tree.sql(dialect=glot))
        for node in tree.walk():
            if isinstance(node, exp.Anonymous):
                anonymous.add(node.name.lower())
            elif isinstance(node, exp.Func) and not isinstance(node, exp.Cast):
                classes.add(type(node))
    casts = set()
    for t in space.CAST_TYPES[dialect]:
        cast = sqlglot.parse_one(f"SELECT CAST(x AS {t})", read=glot).find(exp.Cast)
        assert cast is not None
        casts.add(cast.to.sql(dialect=glot).lower())
    names = {m.lower() for text in rendered for m in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", text)}
    # what the views, the text_match rewrite and SQL operators call inside SQLite
    names |= {"substr", "length", "replace", "count", "sum", "memlane_fts_query", "match", "like", "glob"}
    names |= {"->", "->>", "current_timestamp", "current_date", "current_time"}
    names -= {"cast"}
    return _Allowed(frozenset(classes), frozenset(anonymous), frozenset(casts), frozenset(names))


_OPERATORS = tuple(getattr(exp, n) for n in ("Binary", "Connector", "Unary", "Predicate") if hasattr(exp, n))


def _function_name(node: exp.Func, dialect: str) -> tuple[str, str]:
    """``(kind, name)``: how a function node reads in ``dialect``, without rendering its arguments.

    ``kind`` is ``call`` (``INSTR(...)``, ``PG_SLEEP(...)``), ``keyword``
    (``CURRENT_TIMESTAMP``, ``CASE``) or ``operator`` (``AND``, ``->>``, ``@@``).
    """
    if isinstance(node, exp.Anonymous):
        return "call", str(node.name)
    shape = (
        type(node),
        dialect,
        *((k, "x" if isinstance(v, exp.Expression | list) else repr(v)) for k, v in node.args.items()),
    )
    known = _NAMES.get(shape)
    if known is None:
        known = _NAMES[shape] = _render_name(node, dialect)
    return known


_NAMES: dict[tuple[Any, ...], tuple[str, str]] = {}  # rendering a node costs ~0.3 ms; its name depends on its shape


def _render_name(node: exp.Func, dialect: str) -> tuple[str, str]:
    bare: dict[str, Any] = {}
    for key, value in node.args.items():
        if isinstance(value, exp.Expression):
            bare[key] = exp.column("x")
        elif isinstance(value, list):
            bare[key] = [exp.column("x") for _ in value]
        else:
            bare[key] = value
    try:
        text = type(node)(**bare).sql(dialect=_GLOT[dialect])
    except Exception:  # a generator that insists on real arguments: fall back to the class's name
        return "call", node.sql_name()
    call = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", text)
    if call:
        return "call", call.group(1)
    operator = re.match(r"\s*x\s+(\S+)\s+x", text)  # x ->> x, x ~ x, x @@ x, x AND x
    if operator:
        return "operator", operator.group(1)
    if isinstance(node, _OPERATORS):
        return "operator", text.replace("x", "").strip() or node.sql_name()
    word = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", text)  # CURRENT_TIMESTAMP, CASE
    return "keyword", word.group(1) if word else node.sql_name()


# -- parameters ---------------------------------------------------------------------------


def _unsupported(written: str) -> QueryRefused:
    return refuse(
        "placeholder",
        f"parameter {written!r} is not supported; write ? (bound from a list) or :name (bound from a dict)",
        written,
    )


def _number_positional(sql: str, dialect: str) -> tuple[str, int]:
    """Rewrite each positional ``?`` (outside strings and comments) into ``:__p<n>`` in textual order.

    Refuses what the database would read as a placeholder the fence does not bind: numbered ``?NNN``
    (the rewrite would glue the number onto the name) and, on SQLite, ``$name`` (a plain word to sqlglot).
    """
    if "?" not in sql and not (dialect == "sqlite" and "$" in sql):
        return sql, 0
    tokens = sqlglot.tokenize(sql, read=_GLOT[dialect])
    out: list[str] = []
    last = 0
    count = 0
    for i, tok in enumerate(tokens):
        if dialect == "sqlite" and tok.token_type == sqlglot.TokenType.VAR and _DOLLAR.match(tok.text):
            raise _unsupported(tok.text)
        if tok.token_type == sqlglot.TokenType.PLACEHOLDER and tok.text == "?":
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            if after is not None and after.start == tok.end + 1 and after.token_type in _GLUED:
                raise _unsupported(sql[tok.start : after.end + 1])
            count += 1
            out.append(sql[last : tok.start])
            out.append(f":__p{count}")
            last = tok.end + 1
    if count > MAX_PARAMS:  # before the parse, whose cost grows with every placeholder
        raise _too_many_params(count)
    out.append(sql[last:])
    return "".join(out), count


def _too_many_params(count: int) -> QueryRefused:
    return refuse("placeholder", f"the statement has {count} parameters; at most {MAX_PARAMS}")


_DOLLAR = re.compile(r"\$[A-Za-z0-9_]")  # SQLite binds $name; sqlglot reads it as a word
_GLUED = {sqlglot.TokenType.NUMBER, sqlglot.TokenType.VAR}  # ?2, ?abc: one placeholder to SQLite


def _number(tree: exp.Expression, positional: int, dialect: str) -> tuple[list[str], list[str]]:
    """Number the placeholders (``?1`` / ``$1``); returns their names by number and how the caller wrote them."""
    generated = {f"__p{n}" for n in range(1, positional + 1)}  # each written once by _number_positional
    seen: set[str] = set()
    for placeholder in tree.find_all(exp.Placeholder):
        written = placeholder.name
        if isinstance(written, str) and written.startswith("__"):
            if written not in generated or written in seen:  # the caller wrote :__x
                raise refuse("placeholder", "parameter names may not start with __", ":" + written)
            seen.add(written)
    first_seen: dict[str, None] = {}  # parameter names by number, in first-seen order
    # depth first, the order named ones are shown in; not always textual (a CTE comes after its SELECT)
    nodes: list[exp.Expression] = list(tree.find_all(exp.Placeholder, exp.Parameter, bfs=False))
    for node in nodes:
        name = node.name if isinstance(node, exp.Placeholder) else ""
        if not name or not isinstance(name, str):
            raise refuse(
                "placeholder",
                f"parameter {node.sql(dialect=_GLOT[dialect])!r} is not supported; write ? (bound from a list) "
                "or :name (bound from a dict)",
                node.sql(dialect=_GLOT[dialect]),
            )
        first_seen[name] = None
    names = list(first_seen)
    user_named = [n for n in names if n not in generated]
    if positional and user_named:
        raise refuse(
            "placeholder",
            f"the statement mixes ? and :{user_named[0]}; use one style: ? with a list, or :name with a dict",
            f":{user_named[0]}",
        )
    if len(names) > MAX_PARAMS:
        raise _too_many_params(len(names))
    if positional:  # the list binds in textual order, which the rewrite's numbers keep, whatever the tree's shape
        names.sort(key=lambda n: int(n[3:]))
    number = {name: i + 1 for i, name in enumerate(names)}
    for node in nodes:
        node.replace(exp.Var(this=f"?{number[node.name]}" if dialect == "sqlite" else f"${number[node.name]}"))
    shown = [f"?{n[3:]}" if n.startswith("__p") else f":{n}" for n in names]
    return names, shown


def bind_values(names: Sequence[str], shown: Sequence[str], params: Any) -> list[Any]:
    """The values for numbered parameters, from a list (``?``) or a dict (``:name``).

    Raises:
        ValidationError: ``params`` do not fit the placeholders, or hold a value SQL cannot bind.
    """
    positional = len(names) if names and names[0].startswith("__p") else 0
    if params is None:
        params = [] if positional or not names else {}
    if positional:
        if isinstance(params, str | bytes) or not isinstance(params, Sequence):
            raise ValidationError("params", f"the statement has {positional} ? parameter(s): pass a list of values")
        if len(params) != positional:
            raise ValidationError(
                "params", f"the statement has {positional} ? parameter(s) but {len(params)} value(s) were given"
            )
        values = list(params)
    elif names:
        if not isinstance(params, Mapping):
            raise ValidationError(
                "params", f"the statement has named parameters ({', '.join(shown)}): pass a dict of values"
            )
        missing = [n for n in names if n not in params]
        if missing:
            raise ValidationError("params", f"no value for :{missing[0]}; pass it in params")
        unknown = sorted(str(k) for k in params if k not in names)
        if unknown:
            raise ValidationError("params", f"{unknown[0]!r} is not a parameter of the statement ({', '.join(shown)})")
        values = [params[n] for n in names]
    else:
        if params not in ([], (), {}):
            raise ValidationError("params", "the statement has no parameters; leave params out")
        values = []
    for v in values:
        if isinstance(v, float) and not (v == v and abs(v) != float("inf")):
            raise ValidationError("params", "NaN and Infinity cannot be bound")
        if v is not None and not isinstance(v, str | int | float | bool):
            raise ValidationError("params", f"a {type(v).__name__} cannot be bound; use strings, numbers, booleans")
        # what every backend can bind, the same on each: no driver error reaches the caller as a 500
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
            raise ValidationError("params", f"{v} does not fit in 64 bits; pass it as a float or as text")
        if isinstance(v, str) and ("\x00" in v or _SURROGATE.search(v)):
            raise ValidationError(
                "params", "a string holding a NUL character or a lone surrogate cannot be bound (no text holds one)"
            )
    return values


_SURROGATE = re.compile("[\ud800-\udfff]")


# -- the check ----------------------------------------------------------------------------


def _view_of(table: exp.Table, dialect: str) -> str:
    name = table.name
    quoted = bool(table.this.args.get("quoted")) if isinstance(table.this, exp.Identifier) else False
    return name.lower() if dialect == "sqlite" or not quoted else name


def _sources(select: exp.Select) -> list[exp.Table]:
    found = []
    src = select.args.get("from") or select.args.get("from_")
    if src is not None and isinstance(src.this, exp.Table):
        found.append(src.this)
    for join in select.args.get("joins") or []:
        if isinstance(join.this, exp.Table):
            found.append(join.this)
    return found


def _rewrite_match(node: exp.Anonymous, dialect: str, views_of: dict[int, str], tsconfig: str) -> Any:
    """``text_match(col, q)`` on a view's text column: through the full-text index (SQLite) or ``@@`` (PostgreSQL)."""
    args = node.expressions
    if len(args) != 2 or not isinstance(args[0], exp.Column):
        raise refuse(
            "text_match",
            "text_match takes a text column of a view and the words to find, e.g. "
            "text_match(claim_text, 'billing migration')",
            _brief(node.sql(dialect=_GLOT[dialect])),
        )
    column, words = args
    supported = ", ".join(f"{v.name}.{v.match[0]}" for v in space.VIEWS if v.match)
    target: tuple[exp.Table, space.View] | None = None
    scope: exp.Expression | None = node
    while target is None and scope is not None:
        select = scope.find_ancestor(exp.Select)
        if select is None:
            break
        candidates = []
        for table in _sources(select):
            view_name = views_of.get(id(table))
            if view_name is None:
                continue
            if column.table and column.table not in (table.alias_or_name, table.name):
                continue
            if column.name in space.BY_NAME[view_name].column_names:
                candidates.append((table, space.BY_NAME[view_name]))
        if len(candidates) > 1:
            raise refuse(
                "text_match",
                f"text_match({column.name}, ...) is ambiguous; qualify the column (c.{column.name})",
                column.sql(),
            )
        if candidates:
            target = candidates[0]
        scope = select
    if target is None or target[1].match is None or target[1].match[0] != column.name:
        raise refuse(
            "text_match",
            f"text_match works on a view's text column read directly in the same query ({supported}); "
            f"{column.sql()} is not one",
            column.sql(),
        )
    table, view = target
    assert view.match is not None
    qualifier = exp.to_identifier(table.alias_or_name)
    if dialect == "sqlite":
        # SQLite's MATCH must be the operator form on the FTS5 column to use the index
        inner = exp.select("id").from_(view.match[1])
        inner = inner.where(
            exp.Match(
                this=exp.column("text"),
                expression=exp.Anonymous(this="memlane_fts_query", expressions=[words.copy()]),
            )
        )
        return exp.In(this=exp.column("id", table=qualifier), query=exp.Subquery(this=inner))
    config = exp.Literal.string(tsconfig).sql(dialect="postgres")
    cond = sqlglot.parse_one(
        f"to_tsvector({config}, left(__text__, 200000)) @@ plainto_tsquery({config}, __words__)", read="postgres"
    )
    for col in list(cond.find_all(exp.Column)):
        if col.name == "__text__":
            col.replace(exp.column(column.name, table=qualifier))
        elif col.name == "__words__":
            col.replace(words.copy())
    return cond


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked statement before its values are bound (cached: checking the same text again is free)."""

    sql: str
    names: tuple[str, ...]  # parameter names by number (positional ones are __p1, __p2...)
    parameters: tuple[str, ...]  # as the caller wrote them: ?1, ?2 or :name
    views: tuple[str, ...]
    functions: tuple[str, ...]
    uses_match: bool
    shown: str  # ``sql`` before text_match() is rewritten onto the query space's internal helpers


def check(sql: Any, dialect: str, params: Any = None, *, bind: bool = True, tsconfig: str = "memlane") -> Checked:
    """Check one statement for ``dialect`` (``sqlite`` or ``postgres``) and render what runs.

    Args:
        sql: the caller's statement.
        dialect: the backend's dialect.
        params: a list for ``?`` placeholders or a dict for ``:name`` ones.
        bind: ``False`` checks without values (explain, saved queries); every parameter binds NULL.
        tsconfig: the PostgreSQL text search configuration ``text_match`` uses (schema-qualified).

    Raises:
        QueryRefused: naming the reason (``reason``) and the offending part (``part``).
        ValidationError: ``params`` do not fit the statement's placeholders.
    """
    if not isinstance(sql, str):
        raise ValidationError("sql", f"must be a string, not {type(sql).__name__}")
    if len(sql) > MAX_SQL_CHARS:
        raise refuse(
            "too_long",
            f"the statement is {len(sql):,} characters; at most {MAX_SQL_CHARS:,}: keep the SQL short and pass "
            "values as parameters",
        )
    p = prepare(sql, dialect, tsconfig)
    values = bind_values(p.names, p.parameters, params) if bind else [None] * len(p.names)
    return Checked(p.sql, values, list(p.views), list(p.functions), p.uses_match, list(p.parameters), p.shown)


@lru_cache(maxsize=256)
def prepare(sql: str, dialect: str, tsconfig: str = "memlane") -> Prepared:
    """The checks and the rewrite of :func:`check`, without values; raises :class:`QueryRefused`."""
    if len(sql) > MAX_SQL_CHARS:
        raise refuse("too_long", f"the statement is {len(sql):,} characters; at most {MAX_SQL_CHARS:,}")
    if not sql.strip():
        raise refuse("empty", "the statement is empty; write one SELECT over the memory_v1 views")
    for i, ch in enumerate(sql):
        if ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise refuse(
                "invisible_character",
                f"the statement contains an invisible or control character U+{ord(ch):04X} at position {i}; "
                "retype it without that character",
                f"U+{ord(ch):04X}",
            )
    glot = _GLOT[dialect]
    try:
        text, positional = _number_positional(sql, dialect)
        statements = [s for s in sqlglot.parse(text, read=glot) if s is not None]
    except (ParseError, TokenError) as e:
        first = str(e).splitlines()[0] if str(e) else "syntax error"
        raise refuse(
            "parse_error",
            f"the statement could not be parsed as {dialect} SQL: {_brief(first, 160)}{_char_note(sql)}",
            _brief(sql),
        ) from None
    except RecursionError:
        raise refuse("too_complex", "the statement is nested too deeply to check; simplify it") from None
    if len(statements) != 1:
        kinds = ", ".join(s.key.upper() for s in statements)
        raise refuse(
            "multiple_statements",
            f"exactly one statement is allowed, found {len(statements)} ({kinds}); run them one at a time",
            kinds,
        )
    tree = statements[0]
    if not isinstance(tree, exp.Select | exp.SetOperation | exp.Subquery):
        kind = tree.name.upper() if isinstance(tree, exp.Command) else tree.key.upper()
        raise refuse(
            "not_select",
            f"only SELECT statements (WITH allowed) are allowed; this is {kind}. The query space is read-only",
            kind,
        )
    try:
        return _check_tree(tree, dialect, positional, tsconfig)
    except RecursionError:
        raise refuse("too_complex", "the statement is nested too deeply to check; simplify it") from None


def _check_tree(tree: exp.Expression, dialect: str, positional: int, tsconfig: str) -> Prepared:
    glot = _GLOT[dialect]
    rules = allowed(dialect)
    nodes = list(tree.walk())
    for node in nodes:
        if isinstance(node, _WRITES):
            kind = node.name.upper() if isinstance(node, exp.Command) else node.key.upper()
            raise refuse(
                "not_read_only",
                f"{kind} is not allowed anywhere in a query (not in a CTE, not in a subquery); "
                "the query space is read-only",
                kind,
            )
        if isinstance(node, exp.Select):
            for key in ("into", "locks"):
                if node.args.get(key):
                    what = "SELECT ... INTO" if key == "into" else "FOR UPDATE / FOR SHARE"
                    raise refuse("not_read_only", f"{what} is not allowed; the query space is read-only", what)
    ctes = {cte.alias_or_name.lower() for cte in nodes if isinstance(cte, exp.CTE)}
    hidden = space.NAMES | set(space.MATCH_HELPERS) | {"memlane_ctx", "memlane_scope"}
    for name in sorted(ctes):
        if name in hidden:
            what = "the name of a view of the query space" if name in space.NAMES else "a name the query space keeps"
            raise refuse("cte_shadows_view", f"the CTE {name!r} has {what}; rename the CTE", name)
    views_of: dict[int, str] = {}
    tables = [t for t in nodes if isinstance(t, exp.Table)]
    for table in tables:
        if not isinstance(table.this, exp.Identifier):
            fn = table.this.sql(dialect=glot) if table.this is not None else table.sql(dialect=glot)
            raise refuse(
                "table_function",
                f"table functions are not allowed in FROM ({_brief(fn)}); read the memory_v1 views",
                _brief(fn),
            )
        name = _view_of(table, dialect)
        qualified = ".".join(p for p in (table.catalog, table.db, table.name) if p)
        if table.catalog or (table.db and table.db.lower() != space.SCHEMA):
            raise refuse(
                "outside_query_space",
                f"{qualified} is outside the query space{_char_note(qualified)}; read the memory_v1 views: "
                + ", ".join(v.name for v in space.VIEWS),
                qualified,
            )
        if not table.db and name in ctes:
            continue
        if name not in space.NAMES:
            raise refuse(
                "unknown_view",
                f"{qualified!r} is not a view of the query space{_char_note(qualified)}; views: "
                + ", ".join(v.name for v in space.VIEWS),
                qualified,
            )
        views_of[id(table)] = name
    functions: set[str] = set()
    matches: list[exp.Anonymous] = []
    for node in nodes:
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            raise refuse(
                "function_not_allowed",
                f"schema-qualified functions are not allowed ({_brief(node.sql(dialect=glot))}); "
                "call functions by their plain name",
                _brief(node.sql(dialect=glot)),
            )
        if isinstance(node, exp.Cast):
            to = node.to.sql(dialect=glot).lower()
            if to not in rules.casts:
                raise refuse(
                    "cast_not_allowed",
                    f"casting to {to.upper()} is not allowed; cast to one of: {', '.join(space.CAST_TYPES[dialect])}",
                    to.upper(),
                )
            functions.add("cast")
            continue
        if not isinstance(node, exp.Func):
            continue
        kind, name = _function_name(node, dialect)
        name = name.lower()
        if isinstance(node, exp.Anonymous):
            if name == "text_match":
                matches.append(node)
            elif name not in rules.anonymous:
                raise refuse(
                    "function_not_allowed",
                    f"the function {name}() is not allowed in the query space{_char_note(name)}; "
                    "describe_query_space() lists the functions you may call",
                    name,
                )
        elif kind == "operator":
            # AND, =, LIKE, IN, ||, ->>, @@...: operators compute on values and reach nothing else
            if type(node) not in rules.classes:
                continue
        elif type(node) not in rules.classes:
            raise refuse(
                "function_not_allowed",
                f"the function {name.upper()} is not allowed in the query space; "
                "describe_query_space() lists the functions you may call",
                name.upper(),
            )
        functions.add(name)
    for table in tables:
        view_name = views_of.get(id(table))
        if view_name is None:
            continue
        if dialect == "postgres":
            table.set("db", exp.to_identifier(space.SCHEMA))
            table.set("this", exp.to_identifier(view_name))
        else:
            table.set("db", None)
    if dialect == "sqlite":
        # memory_v1.view.column is three parts; SQLite knows the view by its plain name
        for col in tree.find_all(exp.Column):
            if col.args.get("db") is not None and str(col.db).lower() == space.SCHEMA:
                col.set("db", None)
    names, shown = _number(tree, positional, dialect)
    # rendered for the caller before text_match() becomes a use of helpers that no statement may name
    public = tree.sql(dialect=glot, comments=False, normalize_functions="lower")
    for node in matches:
        node.replace(_rewrite_match(node, dialect, views_of, tsconfig))
    return Prepared(
        tree.sql(dialect=glot, comments=False, normalize_functions="lower", copy=False),
        tuple(names),
        tuple(shown),
        tuple(sorted(set(views_of.values()))),
        tuple(sorted(functions)),
        uses_match=bool(matches) and dialect == "sqlite",
        shown=public,
    )


def parameters(sql: str, dialect: str) -> list[str]:
    """The parameters a statement takes, as written (``?1``, ``:name``); it must pass the fence."""
    return list(prepare(sql, dialect).parameters)
