"""Helpers shared by every SQL backend: encodings, prefix ranges, row mapping.

Namespaces are stored in their text form (``user/123``). A prefix matches on
segment boundaries with a range instead of LIKE, so ``%``/``_``/``*`` in names
stay data and the (namespace, key) index serves the scan: ``a/b`` matches
``a/b`` itself and every string in ``["a/b/", "a/b0")`` because ``0`` is the
character right after ``/``. Keys work the same way with ``.`` and ``/``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from ..values.errors import ValidationError
from ..values.model import Item, Namespace, Version, decode_json, namespace_text, namespace_tuple, parse_metadata
from .where_sql import balanced

# the columns an item and each of its history versions share
VERSION_COLUMNS = (
    "id, namespace, key, value, value_type, text, metadata, author, created_at, updated_at, expires_at, version"
)
# a live item's row: whether search indexes it (``index=False`` writes) is the item's, not its versions'
ITEM_COLUMNS = VERSION_COLUMNS + ", indexed"
HISTORY_COLUMNS = VERSION_COLUMNS.replace("id,", "item_id,", 1) + ", change, changed_at, changed_by"

_fromiso = datetime.fromisoformat
loads_json = decode_json


# -- the text column: stored only when it is not the value's own text ------------------------------
#
# An item's search text is, unless its writer gave another, its value: the string itself for a string
# value, the canonical JSON otherwise (Memory._row). Such a text is not stored a second time: the
# ``text`` column holds NULL and every read rebuilds the text from the value, in Python (row_to_item)
# and in SQL (text_sql: the full-text index, the query space's views, the indexer's reads). A string
# is rebuilt by decoding its JSON, which SQLite's json_extract and PostgreSQL's jsonb do exactly as
# Python does for every string memlane stores (canonical JSON, valid Unicode: tests/test_store.py).


def stored_text(value_json: str, value_type: str, text: str) -> str | None:
    """What the ``text`` column holds for an item: ``None`` when ``text`` is the value's own text."""
    if value_type != "string":
        return None if text == value_json else text
    if "\\" not in value_json:  # no escape: the JSON string's characters are the string's
        return None if len(value_json) == len(text) + 2 and value_json.startswith(text, 1) else text
    return None if loads_json(value_json) == text else text


def full_text(value: Any, value_type: str, value_json: str, stored: str | None) -> str:
    """The item's text from the ``text`` column (``stored``) and its value (decoded and as JSON)."""
    if stored is not None:
        return stored
    return value if value_type == "string" else value_json


def text_sql(dialect: str, alias: str = "") -> str:
    """SQL for an item row's full text (``alias``: ``"i."``, ``"old."``...), the same as :func:`full_text`."""
    a = alias
    decoded = f"json_extract({a}value, '$')" if dialect == "sqlite" else f"({a}value::jsonb #>> '{{}}')"
    return f"coalesce({a}text, CASE WHEN {a}value_type = 'string' THEN {decoded} ELSE {a}value END)"


def to_embed_sql(alias: str = "") -> str:
    """SQL true when an item row wants a vector: search indexes it and its full text is not empty.

    The text is tested without decoding the value.
    """
    return f"({alias}indexed AND coalesce({alias}text <> '', {alias}value <> '\"\"'))"


def ts(value: datetime) -> str:
    """Fixed-width ISO 8601 UTC text, so string order is time order."""
    return value.isoformat(timespec="microseconds")


ns_tuple = namespace_tuple
ns_text = namespace_text


def ns_range(prefix: Namespace) -> tuple[str, str, str]:
    """``(exact, low, high)`` bounds for a segment-boundary namespace prefix."""
    text = "/".join(prefix)
    return text, text + "/", text + "0"


def key_range(prefix: str) -> tuple[str, str, str]:
    """``(exact, low, high)`` bounds for a segment-boundary key prefix."""
    return prefix, prefix + ".", prefix + "/"


EVERYTHING: tuple[Namespace, ...] = ((),)
"""The scope of a caller who may read every namespace (the embedded owner, an admin)."""


def within_filter(
    within: Sequence[Namespace], p: str = "?", column: str = "namespace", dialect: str | None = None
) -> tuple[str, list[Any]]:
    """``WHERE`` text and parameters for rows whose namespace lies under any prefix of ``within``.

    ``within`` is a list of namespace prefixes (segment boundaries); ``()`` among
    them means everything and gives ``""`` (no condition), an empty list gives a
    condition no row meets. One prefix is a range the (namespace, key) index
    serves; several travel as array parameters (see :func:`under_any`), so the
    statement's cost per row and its parameter count stay flat whatever the
    number of rooms and grants. ``dialect`` is needed only when ``p`` does not
    tell it (portable ``?`` SQL run on PostgreSQL).
    """
    if not all(within):  # the root prefix () among them (checked in C: a scope may hold 50,000 prefixes)
        return "", []
    if not within:
        return "1 = 0", []
    if len(within) == 1:
        return _ranges(within, p, column)
    dialect = dialect or ("sqlite" if p == "?" else "postgres")
    lengths, arrays = under_any_params(within, dialect)
    return under_any(column, lengths, dialect, lambda _: p), arrays


# a scope of up to this many prefixes is counted through the (namespace, key) index, one range a prefix
SMALL_SCOPE = 16


def scope_ranges(
    within: Sequence[Namespace], p: str = "?", column: str = "namespace", dialect: str | None = None
) -> tuple[str, list[Any]]:
    """:func:`within_filter`, with a small scope as one index range per prefix, OR-ed.

    For statements that visit every row of the scope (counting it): each range
    reads just its own rows from the index, where the prefix sets of
    :func:`within_filter` are tested on every row of the table (an agent with
    its namespace and one room: 3,900 rows read to count 556). A large scope
    keeps the sets: a list of thousands of ranges costs more than the sets.
    """
    if not within or not all(within) or len(within) > SMALL_SCOPE:
        return within_filter(within, p, column, dialect)
    return _ranges(within, p, column)


def _ranges(within: Sequence[Namespace], p: str, column: str) -> tuple[str, list[Any]]:
    """Each prefix as its namespace or the index range under it, OR-ed."""
    tests = " OR ".join(f"{column} = {p} OR ({column} >= {p} AND {column} < {p})" for _ in within)
    return f"({tests})", [bound for prefix in within for bound in ns_range(prefix)]


def under_any_params(within: Sequence[Namespace], dialect: str) -> tuple[tuple[int, ...], list[Any]]:
    """The prefix lengths and array parameters :func:`under_any` takes for ``within``."""
    lengths, arrays, _ = _under_any_params(tuple(within), dialect)
    return lengths, list(arrays)


def prefix_lines(within: Sequence[Namespace]) -> str:
    """``within``'s prefixes as text, one a line, sorted and each once (PostgreSQL's ``string_to_array`` input)."""
    return _under_any_params(tuple(within), "postgres")[2]


@lru_cache(maxsize=16)
def _under_any_params(within: tuple[Namespace, ...], dialect: str) -> tuple[tuple[int, ...], tuple[Any, ...], str]:
    # remembered: one read runs several statements over the same scope, and an agent reads with the same
    # scope request after request (an agent in 10,000 rooms: 25 ms to build, under 1 ms to look up)
    texts = sorted({"/".join(prefix) for prefix in within})
    by_length: dict[int, list[str]] = {}
    for text in texts:
        by_length.setdefault(len(text), []).append(text + "/")
    lengths = tuple(sorted(by_length))
    # one text parameter per set, which the engine splits (a JSON array; lines on PostgreSQL, where a
    # namespace never holds a newline): no driver adapts ten thousand list elements one by one
    arrays = tuple(json.dumps(by_length[n]) if dialect == "sqlite" else "\n".join(by_length[n]) for n in lengths)
    return lengths, arrays, "\n".join(texts)


def under_any(column: str, lengths: Sequence[int], dialect: str, placeholder: Callable[[int], str]) -> str:
    """SQL true when ``column`` is one of the prefixes or lies under one.

    A namespace lies under prefix ``P`` (or is ``P``) when the first
    ``len(P) + 1`` characters of the namespace followed by ``/`` are ``P/``: so
    the test is set membership of that head, at each prefix length in the
    scope. Each set is one text parameter (a JSON array on SQLite, lines on
    PostgreSQL) the engine reads once per statement, not once per row, and a
    set lookup does not grow with the number of prefixes the way a list of
    ranges does.
    """
    if dialect == "sqlite":
        parts = [
            f"substr({column} || '/', 1, {n + 1}) IN (SELECT value FROM json_each({placeholder(i)}))"
            for i, n in enumerate(lengths)
        ]
    else:
        # IN (SELECT unnest(..)): a hashed SubPlan, built once per statement, also in a generic plan;
        # PostgreSQL 16 hashes at most one ``= ANY(array)`` of an expression, and none of a generic plan.
        # IS TRUE keeps a lone IN a filter: pulled up into a semi-join, it was a nested loop over every
        # prefix for every row (a list of 100 rooms took 160 ms)
        parts = [
            f"(left({column} || '/', {n + 1}) IN (SELECT unnest(string_to_array({placeholder(i)}, E'\\n')))) IS TRUE"
            for i, n in enumerate(lengths)
        ]
    return f"({balanced(parts, 'OR')})" if len(parts) == 1 else balanced(parts, "OR")  # a thousand lengths, nested


def live_filter(within: Sequence[Namespace], key_prefix: str, now: datetime, p: str = "?") -> tuple[str, list[Any]]:
    """``WHERE`` text and parameters for live rows inside ``within`` under a key prefix.

    ``p`` is the driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg);
    only fixed SQL fragments are joined, every value is a parameter.
    """
    where = [f"(expires_at IS NULL OR expires_at > {p})"]
    params: list[Any] = [ts(now)]
    inside, inside_params = within_filter(within, p)
    if inside:
        where.append(inside)
        params.extend(inside_params)
    if key_prefix:
        where.append(f"(key = {p} OR (key >= {p} AND key < {p}))")
        params.extend(key_range(key_prefix))
    return " AND ".join(where), params


def list_statement(
    within: Sequence[Namespace],
    key_prefix: str,
    after: tuple[Namespace, str] | None,
    limit: int,
    now: datetime,
    p: str = "?",
) -> tuple[str, list[Any]]:
    """One ``SELECT`` of live items inside ``within`` in address order after ``after``, at most ``limit``.

    Under one prefix ``X`` the namespace test is the single range ``[X, X0)``
    less the names that only share ``X``'s characters (``X-old``, ``X.v2``:
    a character below ``/`` follows ``X``). One range comes out of the
    ``(namespace, key)`` index already in address order, so the scan stops
    after ``limit`` rows and a first page costs the same in a namespace of ten
    items or of a million; the ``OR`` of ranges that :func:`live_filter`
    writes makes both engines read the whole prefix and sort it. Rows of such
    look-alike names are stepped over, not returned. Other scopes keep
    :func:`live_filter`. A key prefix is written the same way.
    """
    if len(within) != 1 or not within[0]:
        where, params = live_filter(within, key_prefix, now, p)
        if after is not None:
            where += f" AND (namespace, key) > ({p}, {p})"
            params += ["/".join(after[0]), after[1]]
        params.append(limit)
        return f"SELECT {ITEM_COLUMNS} FROM items WHERE {where} ORDER BY namespace, key LIMIT {p}", params
    exact, low, high = ns_range(within[0])
    params = [exact, high, exact, low, now.isoformat(timespec="microseconds")]
    if key_prefix:
        k_exact, k_low, k_high = key_range(key_prefix)
        params += [k_exact, k_high, k_exact, k_low]
    if after is not None:
        params += ["/".join(after[0]), after[1]]
    params.append(limit)
    return _one_prefix_list(bool(key_prefix), after is not None, p), params


@lru_cache(maxsize=16)
def _one_prefix_list(key_prefix: bool, after: bool, p: str) -> str:
    """The text of :func:`list_statement` under one prefix (made once per shape)."""
    where = f"namespace >= {p} AND namespace < {p} AND (namespace = {p} OR namespace >= {p}) AND "
    where += f"(expires_at IS NULL OR expires_at > {p})"
    if key_prefix:
        where += f" AND key >= {p} AND key < {p} AND (key = {p} OR key >= {p})"
    if after:
        where += f" AND (namespace, key) > ({p}, {p})"
    return f"SELECT {ITEM_COLUMNS} FROM items WHERE {where} ORDER BY namespace, key LIMIT {p}"


def unique_spans(addresses: Sequence[tuple[str, str]]) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` runs of a batch that repeat no address, in order, so a later write replaces an earlier one.

    One statement cannot write a row twice; each run is written whole before the next.
    """
    seen: set[tuple[str, str]] = set()
    start = 0
    for i, address in enumerate(addresses):
        if address in seen:
            yield start, i
            seen.clear()
            start = i
        seen.add(address)
    yield start, len(addresses)


def id_taken(item_id: str, namespace: str, key: str) -> str:
    """The message for an imported item whose id already names another address."""
    return (
        f"item id {item_id!r} (for {namespace}/{key}) already names another item in this store; "
        "nothing was imported: import into an empty store, or drop the id from the record"
    )


row_to_item = Item.stored
"""Map a row selected with ``ITEM_COLUMNS`` to an :class:`Item` that decodes its fields on first access."""


def row_to_version(r: Any) -> Version:
    """Map a row selected with ``HISTORY_COLUMNS`` to a :class:`Version`."""
    value = loads_json(r[3])
    return Version(
        item_id=r[0],
        namespace=ns_tuple(r[1]),
        key=r[2],
        value=value,
        value_type=r[4],
        text=full_text(value, r[4], r[3], r[5]),
        metadata=parse_metadata(r[6]),
        author=r[7],
        created_at=_fromiso(r[8]),
        updated_at=_fromiso(r[9]),
        expires_at=None if r[10] is None else _fromiso(r[10]),
        version=r[11],
        change=r[12],
        changed_at=_fromiso(r[13]),
        changed_by=r[14],
    )


def item_record(r: Any) -> dict[str, Any]:
    """An exported item row: its text kept verbatim (rebuilt when not stored) for an exact round trip.

    An item search does not index (``index=False``) says ``"indexed": false``; the field is absent otherwise.
    """
    out = _version_fields(r)
    if len(r) > 12 and not r[12]:
        out["indexed"] = False
    return out


def _version_fields(r: Any) -> dict[str, Any]:
    value = loads_json(r[3])
    return {
        "record": "item",
        "id": r[0],
        "namespace": ns_tuple(r[1]),
        "key": r[2],
        "value": value,
        "value_type": r[4],
        "text": full_text(value, r[4], r[3], r[5]),
        "metadata": parse_metadata(r[6]),
        "author": r[7],
        "created_at": r[8],
        "updated_at": r[9],
        "expires_at": r[10],
        "version": r[11],
    }


def version_record(r: Any) -> dict[str, Any]:
    """An exported history row."""
    out = _version_fields(r)
    out["record"] = "version"
    out["item_id"] = out.pop("id")
    out.update(change=r[12], changed_at=r[13], changed_by=r[14])
    return out


CHANGES = ("replace", "delete", "clear", "expire", "import")


def _time(rec: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    raw = rec.get(name) if optional else rec[name]
    if raw is None and optional:
        return None
    if not isinstance(raw, str):
        raise ValueError(f"{name} {raw!r} is not an ISO 8601 string")
    if datetime.fromisoformat(raw).tzinfo is None:
        raise ValueError(f"{name} {raw!r} has no timezone")
    from ..values import validate

    return ts(validate.time(raw, name))


def import_rows(
    records: Iterable[dict[str, Any]], numbers: Iterable[int] | None = None
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Validate exported records into ``("item", ITEM_COLUMNS row)`` / ``("version", HISTORY_COLUMNS row)``.

    The rows hold the text as stored (``None`` where it is the value's own text, see :func:`stored_text`);
    an item's ``indexed`` is its record's (``True`` when absent: records from before ``index=False``).

    Raises:
        ValidationError: naming the record number; callers run this inside
            their transaction so a bad record imports nothing.
    """
    from ..values import validate as v

    for n, rec in zip(itertools.count(1) if numbers is None else numbers, records, strict=False):
        try:
            kind = rec["record"]
            if kind not in ("item", "version"):
                raise ValidationError("record", f"unknown record kind {kind!r}")
            value_json, value_type = v.value(rec["value"])
            version = rec["version"]
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise ValueError(f"version {version!r} is not a positive integer")
            item_id = rec["id" if kind == "item" else "item_id"]
            if not isinstance(item_id, str) or not v.ID.fullmatch(item_id):
                raise ValueError(f"id {item_id!r:.60} is not 1 to 100 letters, digits, '_' or '-'")
            author = rec.get("author")
            if author is not None and not isinstance(author, str):
                raise ValueError("author is not a string")
            row: tuple[Any, ...] = (
                item_id,
                "/".join(v.namespace(rec["namespace"])),
                v.key(rec["key"]),
                value_json,
                value_type,
                stored_text(value_json, value_type, v.text(rec["text"])),
                v.metadata(rec.get("metadata")),
                author,
                _time(rec, "created_at"),
                _time(rec, "updated_at"),
                _time(rec, "expires_at", optional=True),
                version,
            )
            if kind == "item":
                indexed = rec.get("indexed", True)
                if not isinstance(indexed, bool):
                    raise ValueError(f"indexed {indexed!r} is not true or false")
                row += (indexed,)
            if kind == "version":
                if rec["change"] not in CHANGES:
                    raise ValueError(f"change {rec['change']!r} is not one of {', '.join(CHANGES)}")
                row += (rec["change"], _time(rec, "changed_at"), rec.get("changed_by"))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, KeyError):  # a required field left out: named, not a Python repr
                what = f"has no {e.args[0]!r} field (an exported record has namespace, key, value, ...)"
            else:
                what = str(e)
            raise ValidationError("record", f"record {n}: {what}; nothing was imported", record=n) from e
        yield kind, row


@lru_cache(maxsize=512)
def _pyformat(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class SqlSession:
    """One connection (or transaction) handed to layers that write portable SQL.

    Statements use ``?`` placeholders; on PostgreSQL they are rewritten to
    psycopg's ``%s`` (memlane's own SQL never has a literal ``?``).
    """

    __slots__ = ("conn", "dialect")

    def __init__(self, conn: Any, dialect: str) -> None:
        self.conn = conn
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return _pyformat(sql) if self.dialect == "postgres" else sql

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of one statement."""
        return list(self.conn.execute(self._sql(sql), tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Execute one statement."""
        self.conn.execute(self._sql(sql), tuple(params))

    def changed(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute one write statement; returns the rows it changed."""
        return max(int(self.conn.execute(self._sql(sql), tuple(params)).rowcount), 0)

    def many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        """Execute one statement for each parameter row."""
        batch = [tuple(p) for p in params]
        if not batch:
            return
        if self.dialect == "postgres":
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(sql), batch)
        else:
            self.conn.executemany(sql, batch)


def skip_scan(within: Sequence[Namespace], now: datetime, p: str = "?") -> tuple[str, list[Any]]:
    """SQL and parameters for the distinct live namespaces inside ``within``, one index seek per namespace.

    ``SELECT DISTINCT`` reads every matching row; this recursive query (a loose
    index scan, the same text on SQLite and PostgreSQL) asks the (namespace, key)
    index for the first live row inside ``within``, then over and over for the
    first one past the namespace just found, so its cost follows the number of
    namespaces, not of rows. The full scope and expiry filter is checked on every
    step, so nothing it excludes can come out; rows it excludes are stepped over,
    each at most once. The span from the lowest to the highest prefix bounds each
    seek as one index range, so no engine turns the scope's ``OR`` into a
    read-everything-then-sort plan.
    """
    where, params = live_filter(within, "", now, p)
    if within and not any(not prefix for prefix in within):
        ranges = [ns_range(prefix) for prefix in within]
        where = f"namespace >= {p} AND namespace < {p} AND {where}"
        params = [min(r[0] for r in ranges), max(r[2] for r in ranges), *params]
    first = f"SELECT namespace FROM items WHERE {where} ORDER BY namespace LIMIT 1"
    after = f"SELECT namespace FROM items WHERE namespace > found.name AND {where} ORDER BY namespace LIMIT 1"
    sql = (
        f"WITH RECURSIVE found (name) AS (SELECT ({first}) UNION ALL "
        f"SELECT ({after}) FROM found WHERE found.name IS NOT NULL) "
        "SELECT name FROM found WHERE name IS NOT NULL"
    )
    return sql, [*params, *params]
