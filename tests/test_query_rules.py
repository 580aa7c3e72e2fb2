"""The query space's rules, one behaviour class at a time (fence and runner, SQLite, no server needed).

Guards:

* the fence's verdicts: statements it must accept (with what runs, the views and the functions) and must
  refuse, with the exact ``reason`` and ``part``: qualified and quoted names, schema-qualified functions,
  table-valued functions, CTEs named like views, subqueries in every clause, writes, placeholders;
* the statement length limit at and past 100,000 characters, and every other early refusal;
* parameter binding: positional count, named missing and extra, values SQL cannot bind;
* the runner's caps: ``max_rows`` exactly reached vs one row more, the size cap, the bounds of
  ``max_rows`` and ``timeout_ms``, and what the result says it cut;
* ``explain_query``'s fields, saved query names, descriptions, replacement and deletion rules;
* the PostgreSQL runner's settings, error mapping and plans, against a stand-in connection.

Every test starts with the fence's caches empty, so each statement is checked, not remembered.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import threading
from typing import Any

import pytest

import memlane
from memlane import QueryRefused, ValidationError
from memlane.core.access import Access
from memlane.domain.query import run
from memlane.store import fence
from memlane.store import query_space as space
from memlane.store import runner as qrunner
from memlane.values.errors import ForbiddenError, NotFoundError, StoreError

pytestmark = pytest.mark.embedded


@pytest.fixture(autouse=True)
def _fresh_fence() -> None:
    fence.prepare.cache_clear()
    fence._NAMES.clear()


@pytest.fixture
def db(tmp_path, clock):  # type: ignore[no-untyped-def]
    m = memlane.open(str(tmp_path / "q.db"), clock=clock, embedder="fake")
    yield m
    m.close()


class FrozenClock:
    """Stands in for ``run.time``: the monotonic clock stands still, so no time cap fires."""

    perf_counter = staticmethod(__import__("time").perf_counter)

    def monotonic(self) -> float:
        return 0.0


def refused(sql: Any, dialect: str = "sqlite", params: Any = None, bind: bool = False) -> QueryRefused:
    with pytest.raises(QueryRefused) as e:
        fence.check(sql, dialect, params, bind=bind)
    return e.value


# -- the fence's verdicts ---------------------------------------------------------------------

# (statement, sqlite verdict, pg verdict): ("ok", what runs) or (reason, part)
VERDICTS: list[tuple[str, tuple[str, Any], tuple[str, Any]]] = [
    # view names, qualified and quoted
    ("SELECT * FROM memory_v1.items", ("ok", "SELECT * FROM items"), ("ok", "SELECT * FROM memory_v1.items")),
    ('SELECT * FROM "memory_v1"."items"', ("ok", 'SELECT * FROM "items"'), ("ok", "SELECT * FROM memory_v1.items")),
    ('SELECT * FROM "items"', ("ok", 'SELECT * FROM "items"'), ("ok", "SELECT * FROM memory_v1.items")),
    ("SELECT * FROM MEMORY_V1.Items", ("ok", "SELECT * FROM Items"), ("ok", "SELECT * FROM memory_v1.items")),
    ('SELECT * FROM "ITEMS"', ("ok", 'SELECT * FROM "ITEMS"'), ("unknown_view", "ITEMS")),
    (
        "SELECT memory_v1.items.key FROM memory_v1.items",
        ("ok", "SELECT items.key FROM items"),
        ("ok", "SELECT memory_v1.items.key FROM memory_v1.items"),
    ),
    ("SELECT * FROM main.items", ("outside_query_space", "main.items"), ("outside_query_space", "main.items")),
    ("SELECT * FROM temp.items", ("outside_query_space", "temp.items"), ("outside_query_space", "temp.items")),
    ('SELECT * FROM "main"."items"', ("outside_query_space", "main.items"), ("outside_query_space", "main.items")),
    ("SELECT * FROM public.items", ("outside_query_space", "public.items"), ("outside_query_space", "public.items")),
    (
        "SELECT * FROM x.memory_v1.items",
        ("outside_query_space", "x.memory_v1.items"),
        ("outside_query_space", "x.memory_v1.items"),
    ),
    ("SELECT * FROM memory_v1.meta", ("unknown_view", "memory_v1.meta"), ("unknown_view", "memory_v1.meta")),
    ("SELECT * FROM memlane_scope", ("unknown_view", "memlane_scope"), ("unknown_view", "memlane_scope")),
    (
        "SELECT * FROM memlane_match_claims",
        ("unknown_view", "memlane_match_claims"),
        ("unknown_view", "memlane_match_claims"),
    ),
    ("SELECT * FROM items_fts", ("unknown_view", "items_fts"), ("unknown_view", "items_fts")),
    ("SELECT * FROM іtems", ("unknown_view", "іtems"), ("unknown_view", "іtems")),  # Cyrillic і
    # functions qualified with a schema, table-valued functions
    (
        "SELECT main.lower(key) FROM items",
        ("function_not_allowed", "main.lower(key)"),
        ("function_not_allowed", "main.lower(key)"),
    ),
    (
        'SELECT "main"."lower"(key) FROM items',
        ("function_not_allowed", '"main"."lower"(key)'),
        ("function_not_allowed", '"main"."lower"(key)'),
    ),
    (
        "SELECT memory_v1.text_match(claim_text, 'x') FROM claims",
        ("function_not_allowed", "memory_v1.text_match(claim_text, 'x')"),
        ("function_not_allowed", "memory_v1.text_match(claim_text, 'x')"),
    ),
    ("SELECT * FROM json_each('[1]')", ("table_function", "JSON_EACH('[1]')"), ("table_function", "JSON_EACH('[1]')")),
    (
        "SELECT * FROM items, json_tree(items.value)",
        ("table_function", "JSON_TREE(items.value)"),
        ("table_function", "JSON_TREE(items.value)"),
    ),
    (
        "SELECT * FROM generate_series(1, 3)",
        ("table_function", "GENERATE_SERIES(1, 3)"),
        ("table_function", "GENERATE_SERIES(1, 3)"),
    ),
    # CTE names
    ("WITH items AS (SELECT 1) SELECT * FROM items", ("cte_shadows_view", "items"), ("cte_shadows_view", "items")),
    (
        "WITH Claims_Live AS (SELECT 1) SELECT 1",
        ("cte_shadows_view", "claims_live"),
        ("cte_shadows_view", "claims_live"),
    ),
    ('WITH "facts" AS (SELECT 1) SELECT 1', ("cte_shadows_view", "facts"), ("cte_shadows_view", "facts")),
    (
        "WITH memlane_ctx AS (SELECT 1) SELECT 1",
        ("cte_shadows_view", "memlane_ctx"),
        ("cte_shadows_view", "memlane_ctx"),
    ),
    (
        "WITH memlane_scope AS (SELECT 1) SELECT 1",
        ("cte_shadows_view", "memlane_scope"),
        ("cte_shadows_view", "memlane_scope"),
    ),
    (
        "WITH memlane_match_items AS (SELECT 1) SELECT 1",
        ("cte_shadows_view", "memlane_match_items"),
        ("cte_shadows_view", "memlane_match_items"),
    ),
    (
        "SELECT * FROM (WITH entities AS (SELECT 1) SELECT * FROM entities)",
        ("cte_shadows_view", "entities"),
        ("cte_shadows_view", "entities"),
    ),
    (
        "WITH c AS (SELECT 1 AS n) SELECT n FROM memory_v1.c",
        ("unknown_view", "memory_v1.c"),
        ("unknown_view", "memory_v1.c"),
    ),
    (
        "WITH c AS (SELECT 1 AS n) SELECT n FROM C",
        ("ok", "WITH c AS (SELECT 1 AS n) SELECT n FROM C"),
        ("ok", "WITH c AS (SELECT 1 AS n) SELECT n FROM C"),
    ),
    # a table outside the space in every clause
    ("SELECT (SELECT 1 FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT * FROM (SELECT * FROM meta) m", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT * FROM items JOIN meta ON 1 = 1", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT * FROM items WHERE key IN (SELECT key FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT * FROM items WHERE EXISTS (SELECT 1 FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT key FROM items GROUP BY (SELECT 1 FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    (
        "SELECT key FROM items GROUP BY key HAVING count(*) > (SELECT 1 FROM meta)",
        ("unknown_view", "meta"),
        ("unknown_view", "meta"),
    ),
    ("SELECT key FROM items ORDER BY (SELECT 1 FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT key FROM items LIMIT (SELECT 1 FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT key FROM items LIMIT 1 OFFSET (SELECT 1 FROM meta)", ("unknown_view", "meta"), ("unknown_view", "meta")),
    (
        "SELECT row_number() OVER (ORDER BY (SELECT 1 FROM meta)) FROM items",
        ("unknown_view", "meta"),
        ("unknown_view", "meta"),
    ),
    ("SELECT CASE WHEN (SELECT 1 FROM meta) THEN 1 END", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT lower((SELECT name FROM meta))", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("SELECT key FROM items UNION SELECT name FROM meta", ("unknown_view", "meta"), ("unknown_view", "meta")),
    ("WITH x AS (SELECT * FROM meta) SELECT * FROM x", ("unknown_view", "meta"), ("unknown_view", "meta")),
    (
        "SELECT key FROM items EXCEPT SELECT name FROM sqlite_master",
        ("unknown_view", "sqlite_master"),
        ("unknown_view", "sqlite_master"),
    ),
    # casts and functions
    ("SELECT CAST(key AS blob) FROM items", ("cast_not_allowed", "BLOB"), ("cast_not_allowed", "BYTEA")),
    ("SELECT key::regclass FROM items", ("cast_not_allowed", "REGCLASS"), ("cast_not_allowed", "REGCLASS")),
    (
        "SELECT CAST(key AS Integer) FROM items",
        ("ok", "SELECT CAST(key AS INTEGER) FROM items"),
        ("ok", "SELECT CAST(key AS INT) FROM memory_v1.items"),
    ),
    ("SELECT randomblob(8)", ("function_not_allowed", "randomblob"), ("function_not_allowed", "randomblob")),
    ("SELECT hex(key) FROM items", ("function_not_allowed", "HEX"), ("function_not_allowed", "HEX")),
    ("SELECT sqlite_version()", ("function_not_allowed", "SQLITE_VERSION"), ("function_not_allowed", "sqlite_version")),
    ("SELECT version()", ("function_not_allowed", "version"), ("function_not_allowed", "VERSION")),
    ("SELECT pg_sleep(1)", ("function_not_allowed", "pg_sleep"), ("function_not_allowed", "pg_sleep")),
    (
        "SELECT lower(key) FROM items",
        ("ok", "SELECT lower(key) FROM items"),
        ("ok", "SELECT lower(key) FROM memory_v1.items"),
    ),
    (
        'SELECT "LOWER"(key) FROM items',
        ("ok", "SELECT lower(key) FROM items"),
        ("ok", "SELECT lower(key) FROM memory_v1.items"),
    ),
    # text_match
    (
        "SELECT text_match(claim_text) FROM claims",
        ("text_match", "TEXT_MATCH(claim_text)"),
        ("text_match", "TEXT_MATCH(claim_text)"),
    ),
    (
        "SELECT text_match('x', 'y') FROM claims",
        ("text_match", "TEXT_MATCH('x', 'y')"),
        ("text_match", "TEXT_MATCH('x', 'y')"),
    ),
    ("SELECT key FROM items WHERE text_match(key, 'x')", ("text_match", "key"), ("text_match", "key")),
    ("SELECT 1 FROM entities WHERE text_match(name, 'x')", ("text_match", "name"), ("text_match", "name")),
    ("SELECT text_match(claim_text, 'x')", ("text_match", "claim_text"), ("text_match", "claim_text")),
    (
        "SELECT 1 FROM claims c WHERE text_match(z.claim_text, 'x')",
        ("text_match", "z.claim_text"),
        ("text_match", "z.claim_text"),
    ),
    (
        "SELECT 1 FROM claims a JOIN claims_live b ON a.id = b.id WHERE text_match(claim_text, 'x')",
        ("text_match", "claim_text"),
        ("text_match", "claim_text"),
    ),
    (
        "SELECT 1 FROM claims a JOIN claims_live b ON a.id = b.id WHERE text_match(b.claim_text, 'x')",
        (
            "ok",
            "SELECT 1 FROM claims AS a JOIN claims_live AS b ON a.id = b.id WHERE b.id IN "
            "(SELECT id FROM memlane_match_claims WHERE text MATCH memlane_fts_query('x'))",
        ),
        (
            "ok",
            "SELECT 1 FROM memory_v1.claims AS a JOIN memory_v1.claims_live AS b ON a.id = b.id WHERE "
            "to_tsvector('memlane', left(b.claim_text, 200000)) @@ plainto_tsquery('memlane', 'x')",
        ),
    ),
    (
        "SELECT 1 FROM items, claims c WHERE text_match(claim_text, 'x')",
        (
            "ok",
            "SELECT 1 FROM items CROSS JOIN claims AS c WHERE c.id IN "
            "(SELECT id FROM memlane_match_claims WHERE text MATCH memlane_fts_query('x'))",
        ),
        (
            "ok",
            "SELECT 1 FROM memory_v1.items, memory_v1.claims AS c WHERE "
            "to_tsvector('memlane', left(c.claim_text, 200000)) @@ plainto_tsquery('memlane', 'x')",
        ),
    ),
    (
        "SELECT 1 FROM claims c WHERE EXISTS (SELECT 1 FROM entities e WHERE text_match(c.claim_text, 'x'))",
        (
            "ok",
            "SELECT 1 FROM claims AS c WHERE EXISTS(SELECT 1 FROM entities AS e WHERE c.id IN "
            "(SELECT id FROM memlane_match_claims WHERE text MATCH memlane_fts_query('x')))",
        ),
        (
            "ok",
            "SELECT 1 FROM memory_v1.claims AS c WHERE EXISTS(SELECT 1 FROM memory_v1.entities AS e WHERE "
            "to_tsvector('memlane', left(c.claim_text, 200000)) @@ plainto_tsquery('memlane', 'x'))",
        ),
    ),
    (
        "WITH w AS (SELECT 1 AS a) SELECT 1 FROM w, claims c WHERE text_match(claim_text, 'x')",
        (
            "ok",
            "WITH w AS (SELECT 1 AS a) SELECT 1 FROM w CROSS JOIN claims AS c WHERE c.id IN "
            "(SELECT id FROM memlane_match_claims WHERE text MATCH memlane_fts_query('x'))",
        ),
        (
            "ok",
            "WITH w AS (SELECT 1 AS a) SELECT 1 FROM w, memory_v1.claims AS c WHERE "
            "to_tsvector('memlane', left(c.claim_text, 200000)) @@ plainto_tsquery('memlane', 'x')",
        ),
    ),
    (
        "SELECT 1 FROM claims_live i, claims c WHERE text_match(c.claim_text, 'x')",
        (
            "ok",
            "SELECT 1 FROM claims_live AS i CROSS JOIN claims AS c WHERE c.id IN "
            "(SELECT id FROM memlane_match_claims WHERE text MATCH memlane_fts_query('x'))",
        ),
        (
            "ok",
            "SELECT 1 FROM memory_v1.claims_live AS i, memory_v1.claims AS c WHERE "
            "to_tsvector('memlane', left(c.claim_text, 200000)) @@ plainto_tsquery('memlane', 'x')",
        ),
    ),
    # writes and locks
    (
        "SELECT * FROM items FOR UPDATE",
        ("not_read_only", "FOR UPDATE / FOR SHARE"),
        ("not_read_only", "FOR UPDATE / FOR SHARE"),
    ),
    (
        "SELECT * FROM items FOR SHARE",
        ("not_read_only", "FOR UPDATE / FOR SHARE"),
        ("not_read_only", "FOR UPDATE / FOR SHARE"),
    ),
    ("SELECT * INTO t FROM items", ("not_read_only", "SELECT ... INTO"), ("not_read_only", "SELECT ... INTO")),
    (
        "WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d",
        ("not_read_only", "DELETE"),
        ("not_read_only", "DELETE"),
    ),
    ("INSERT INTO items VALUES (1)", ("not_select", "INSERT"), ("not_select", "INSERT")),
    ("PRAGMA query_only", ("not_select", "PRAGMA"), ("not_select", "PRAGMA")),
    ("VALUES (1)", ("not_select", "VALUES"), ("not_select", "VALUES")),
    ("EXPLAIN SELECT 1", ("not_select", "EXPLAIN"), ("not_select", "EXPLAIN")),
    ("SELECT 1; SELECT 2", ("multiple_statements", "SELECT, SELECT"), ("multiple_statements", "SELECT, SELECT")),
    ("SELECT 1; DROP TABLE items", ("multiple_statements", "SELECT, DROP"), ("multiple_statements", "SELECT, DROP")),
    ("SELECT 1;", ("ok", "SELECT 1"), ("ok", "SELECT 1")),
    ("(SELECT 1) UNION ALL SELECT 2", ("ok", "(SELECT 1) UNION ALL SELECT 2"), ("ok", "(SELECT 1) UNION ALL SELECT 2")),
    # placeholders
    ("SELECT @a", ("placeholder", "@a"), ("placeholder", "$a")),
    ("SELECT :__x", ("placeholder", ":__x"), ("placeholder", ":__x")),
    ("SELECT ?, :a", ("placeholder", ":a"), ("placeholder", ":a")),
    ("SELECT :a, ?", ("placeholder", ":a"), ("placeholder", ":a")),
    ("SELECT :b, :a, :b", ("ok", "SELECT ?1, ?2, ?1"), ("ok", "SELECT $1, $2, $1")),
    ("SELECT ?, '?', ? -- ?", ("ok", "SELECT ?1, '?', ?2"), ("ok", "SELECT $1, '?', $2")),
    # the text itself
    ("", ("empty", None), ("empty", None)),
    ("  \n\t ", ("empty", None), ("empty", None)),
    ("SEL\u200bECT 1", ("invisible_character", "U+200B"), ("invisible_character", "U+200B")),
    ("SELECT 1\x00", ("invisible_character", "U+0000"), ("invisible_character", "U+0000")),
    ("SELECT\t1\r\n", ("ok", "SELECT 1"), ("ok", "SELECT 1")),
    ("ＳＥＬＥＣＴ 1", ("parse_error", "ＳＥＬＥＣＴ 1"), ("parse_error", "ＳＥＬＥＣＴ 1")),
    ("SELECT (", ("parse_error", "SELECT ("), ("parse_error", "SELECT (")),
]


def _vid(text: str) -> str:
    import hashlib
    import re

    words = re.sub(r"[^A-Za-z0-9_]+", "_", text.encode("ascii", "replace").decode())[:40].strip("_")
    return f"{words}-{hashlib.sha1(text.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"


@pytest.mark.parametrize("dialect", ["sqlite", "pg"])
@pytest.mark.parametrize("case", VERDICTS, ids=[_vid(c[0]) for c in VERDICTS])
def test_fence_verdict_names_the_exact_reason_and_part(case, dialect):
    sql, lite, pg = case
    glot = "sqlite" if dialect == "sqlite" else "postgres"
    kind, detail = lite if dialect == "sqlite" else pg
    if kind == "ok":
        assert fence.check(sql, glot, bind=False).sql == detail
        return
    e = refused(sql, glot)
    assert (e.reason, e.part) == (kind, detail), str(e)
    assert str(e)


def test_accepted_statement_lists_its_views_functions_and_parameters():
    c = fence.check(
        "SELECT lower(i.key), count(*) FROM memory_v1.items i JOIN claims c ON c.author = i.author "
        "WHERE i.key = :k AND text_match(c.claim_text, :w) GROUP BY 1",
        "sqlite",
        {"k": "a", "w": "b"},
    )
    assert c.views == ["claims", "items"]
    assert c.functions == ["count", "lower", "text_match"]
    assert c.parameters == [":k", ":w"] and c.params == ["a", "b"]
    assert c.uses_match is True
    assert fence.check("SELECT key FROM items", "sqlite").uses_match is False
    pg = fence.check("SELECT 1 FROM claims WHERE text_match(claim_text, 'x')", "postgres")
    assert pg.uses_match is False and pg.functions == ["text_match"]
    assert fence.check("SELECT CAST(key AS text) FROM items", "sqlite").functions == ["cast"]
    assert fence.check("SELECT CURRENT_TIMESTAMP", "sqlite").functions == ["current_timestamp"]
    assert fence.check("SELECT value ->> '$.a' FROM items", "sqlite").functions == ["->>"]
    # operators compute on values: they are not listed
    assert fence.check("SELECT 1 FROM items WHERE key = 'a' AND version > 1", "sqlite").functions == []


def test_text_match_words_quote_every_word_and_match_nothing_when_empty(db):
    assert qrunner.fts_query("Billing  MIGRATION billing") == '"billing" "migration"'
    assert qrunner.fts_query("") == '""' and qrunner.fts_query(None) == '""' and qrunner.fts_query("?!") == '""'
    assert qrunner.fts_query('a"b') == '"a" "b"'
    db.add_claim("team/a", "the billing migration slips", speaker="Dana")
    db.add_claim("team/a", "billing is fine", speaker="Ravi")
    got = db.query("SELECT speaker FROM claims WHERE text_match(claim_text, ?) ORDER BY 1", ["migration BILLING"])
    assert got.rows == [["Dana"]]
    assert db.query("SELECT count(*) FROM claims WHERE text_match(claim_text, '')").rows == [[0]]


def test_unsupported_placeholder_message_says_what_to_write():
    e = refused("SELECT @a")
    assert str(e) == "parameter '@a' is not supported; write ? (bound from a list) or :name (bound from a dict)"
    assert str(refused("SELECT :__x")) == "parameter names may not start with __"
    assert str(refused("SELECT ?, :a")) == (
        "the statement mixes ? and :a; use one style: ? with a list, or :name with a dict"
    )


def test_text_match_ambiguous_column_is_refused():
    e = refused("SELECT 1 FROM claims a, claims b WHERE text_match(claim_text, 'x')")
    assert e.reason == "text_match" and e.part == "claim_text" and "ambiguous" in str(e)
    assert "qualify the column (c.claim_text)" in str(e)


# -- early refusals: the text, its length, its type ----------------------------------------------


def test_statement_length_limit_at_and_past_100000_characters():
    at = "SELECT '" + "x" * (fence.MAX_SQL_CHARS - 9) + "'"
    assert len(at) == fence.MAX_SQL_CHARS
    assert fence.check(at, "sqlite").sql.startswith("SELECT 'xxx")
    past = at + " "
    e = refused(past)
    assert e.reason == "too_long" and e.part is None
    assert str(e).startswith("the statement is 100,001 characters; at most 100,000: keep the SQL short")
    with pytest.raises(QueryRefused) as inner:
        fence.prepare(past, "sqlite")
    assert inner.value.reason == "too_long"
    assert str(inner.value) == "the statement is 100,001 characters; at most 100,000"


def test_non_string_statement_is_a_validation_error():
    with pytest.raises(ValidationError) as e:
        fence.check(42, "sqlite")
    assert e.value.field == "sql" and str(e.value) == "sql: must be a string, not int"


def test_early_refusal_messages_say_what_to_do():
    assert str(refused("")) == "the statement is empty; write one SELECT over the memory_v1 views"
    e = refused("SELECT 1 \u200b")
    assert "U+200B at position 9" in str(e) and "retype it" in str(e)
    e = refused("ＳＥＬＥＣＴ 1")
    assert "could not be parsed as sqlite SQL" in str(e)
    assert "(it contains U+FF33 FULLWIDTH LATIN CAPITAL LETTER S; type names and keywords in plain ASCII)" in str(e)
    e = refused("SELECT * FROM іtems")
    assert "U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I" in str(e)
    e = refused("SELECT 1; DROP TABLE items")
    assert "exactly one statement is allowed, found 2 (SELECT, DROP)" in str(e)
    e = refused("DELETE FROM items")
    assert str(e) == "only SELECT statements (WITH allowed) are allowed; this is DELETE. The query space is read-only"
    long = "SELECT (" + "1 + " * 40
    e = refused(long)
    assert e.reason == "parse_error" and len(e.part) == 80 and e.part.endswith("…")
    e = refused("SELECT randomblob(1)")
    assert "the function randomblob() is not allowed in the query space" in str(e)
    e = refused("SELECT hex('a')")
    assert "the function HEX is not allowed in the query space" in str(e)
    e = refused("SELECT CAST(1 AS blob)")
    assert str(e) == "casting to BLOB is not allowed; cast to one of: text, integer, real, numeric"
    e = refused("SELECT * FROM main.items")
    assert str(e).startswith("main.items is outside the query space; read the memory_v1 views: items, item_history")
    e = refused("SELECT * FROM nope")
    assert str(e).startswith("'nope' is not a view of the query space; views: items, item_history")
    e = refused("WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d")
    assert "DELETE is not allowed anywhere in a query" in str(e)
    e = refused("SELECT * FROM items FOR UPDATE")
    assert str(e) == "FOR UPDATE / FOR SHARE is not allowed; the query space is read-only"
    e = refused("SELECT * INTO t FROM items")
    assert str(e) == "SELECT ... INTO is not allowed; the query space is read-only"
    e = refused("SELECT * FROM json_each('[1]')")
    assert str(e) == "table functions are not allowed in FROM (JSON_EACH('[1]')); read the memory_v1 views"
    e = refused("WITH Items AS (SELECT 1) SELECT 1")
    assert str(e) == "the CTE 'items' has the name of a view of the query space; rename the CTE"


def test_text_match_with_the_wrong_arguments_says_how_to_call_it():
    e = refused("SELECT text_match(1)")
    assert e.reason == "text_match" and e.part == "TEXT_MATCH(1)"
    assert str(e) == (
        "text_match takes a text column of a view and the words to find, e.g. "
        "text_match(claim_text, 'billing migration')"
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_operators_are_listed_by_their_symbol(dialect):
    assert fence.check("SELECT value ->> 'a' FROM items", dialect, bind=False).functions == ["->>"]


def test_sqlglots_command_fallback_warning_is_silenced(caplog):
    with caplog.at_level("WARNING", logger="sqlglot"):
        assert refused("SHOW TABLES").reason == "not_select"  # sqlglot reads it as a raw Command
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]


def test_named_parameters_are_listed_in_the_order_written():
    assert fence.parameters("SELECT :b AS a, :c", "sqlite") == [":b", ":c"]  # :b is deeper in the tree
    assert fence.check("SELECT :b AS a, :c", "sqlite", {"b": 1, "c": 2}).params == [1, 2]


def test_a_view_over_a_table_the_schema_lacks_says_to_migrate():
    import sqlite3

    e = qrunner._SqliteConnection._error(None, sqlite3.OperationalError("no such table: main.claims"), 5)  # type: ignore[arg-type]
    assert e.reason == "database_error"
    assert str(e) == (
        "this memory's schema predates a view's tables (no such table: main.claims); run `memlane migrate` "
        "(Python: Memory.migrate())"
    )


def test_elapsed_time_is_kept_to_the_microsecond(db):
    assert isinstance(db.query("SELECT 1").elapsed_ms, float)


def test_a_statement_the_database_refuses_at_run_time_is_a_database_error(db):
    with pytest.raises(QueryRefused) as e:
        db.query("SELECT json_extract('not json', '$.a')")
    assert (e.value.reason, e.value.part) == ("database_error", "malformed JSON")
    assert str(e.value) == "the database refused the statement: malformed JSON; check names with describe_query_space()"


def test_explain_leaves_no_deadline_behind_for_the_next_statement(db):
    db.put("agent/a", "k", 1)
    assert run.explain(db, "SELECT key FROM items").valid
    wide = [("agent", f"p{i}") for i in range(600)] + [("agent", "a")]  # setting it runs thousands of steps
    assert run.query(db, "SELECT key FROM items", scope=wide).rows == [["k"]]


def test_nesting_too_deep_is_too_complex():
    e = refused("SELECT " + "(" * 3000 + "1" + ")" * 3000)
    assert e.reason in ("too_complex", "parse_error")


# -- parameters ------------------------------------------------------------------------------


def test_positional_parameters_bind_in_the_order_written():
    c = fence.check("SELECT ? AS a, ? AS b", "sqlite", ["x", 2])
    assert c.sql == "SELECT ?1 AS a, ?2 AS b" and c.params == ["x", 2] and c.parameters == ["?1", "?2"]
    assert fence.check("SELECT ?", "sqlite", ("t",)).params == ["t"]
    assert fence.check("SELECT ?", "postgres", [None]).sql == "SELECT $1"
    assert fence.check("SELECT :a, :b", "sqlite", bind=False).params == [None, None]


@pytest.mark.parametrize(
    ("sql", "params", "message"),
    [
        ("SELECT ?", None, "the statement has 1 ? parameter(s) but 0 value(s) were given"),
        ("SELECT ?", [], "the statement has 1 ? parameter(s) but 0 value(s) were given"),
        ("SELECT ?, ?", [1], "the statement has 2 ? parameter(s) but 1 value(s) were given"),
        ("SELECT ?", [1, 2], "the statement has 1 ? parameter(s) but 2 value(s) were given"),
        ("SELECT ?", "a", "the statement has 1 ? parameter(s): pass a list of values"),
        ("SELECT ?", {"a": 1}, "the statement has 1 ? parameter(s): pass a list of values"),
        ("SELECT :a, :b", [1, 2], "the statement has named parameters (:a, :b): pass a dict of values"),
        ("SELECT :a, :b", {"a": 1}, "no value for :b; pass it in params"),
        ("SELECT :a", None, "no value for :a; pass it in params"),
        ("SELECT :a", {"a": 1, "z": 2, "c": 3}, "'c' is not a parameter of the statement (:a)"),
        ("SELECT 1", [1], "the statement has no parameters; leave params out"),
        ("SELECT 1", {"a": 1}, "the statement has no parameters; leave params out"),
        ("SELECT ?", [float("nan")], "NaN and Infinity cannot be bound"),
        ("SELECT ?", [float("inf")], "NaN and Infinity cannot be bound"),
        ("SELECT ?", [float("-inf")], "NaN and Infinity cannot be bound"),
        ("SELECT ?", [b"x"], "a bytes cannot be bound; use strings, numbers, booleans"),
        ("SELECT :a", {"a": [1]}, "a list cannot be bound; use strings, numbers, booleans"),
    ],
    ids=lambda v: _vid(repr(v)),
)
def test_parameters_that_do_not_fit_are_a_validation_error_on_params(sql, params, message):
    with pytest.raises(ValidationError) as e:
        fence.check(sql, "sqlite", params)
    assert e.value.field == "params" and str(e.value) == f"params: {message}"


def test_parameters_that_fit_bind_their_values():
    assert fence.check("SELECT 1", "sqlite", None).params == []
    assert fence.check("SELECT 1", "sqlite", []).params == []
    assert fence.check("SELECT 1", "sqlite", {}).params == []
    assert fence.check("SELECT 1", "sqlite", ()).params == []
    assert fence.check("SELECT ?", "sqlite", [1.5]).params == [1.5]
    assert fence.check("SELECT :b, :a", "sqlite", {"a": True, "b": None}).params == [None, True]


def test_parameter_count_limit():
    sql = "SELECT " + ", ".join(f":p{i}" for i in range(fence.MAX_PARAMS))
    assert len(fence.check(sql, "sqlite", bind=False).parameters) == fence.MAX_PARAMS
    e = refused(sql + ", :extra")
    assert e.reason == "placeholder" and str(e) == "the statement has 1001 parameters; at most 1000"


def test_parameters_of_a_statement_as_written():
    assert fence.parameters("SELECT ?, ?", "sqlite") == ["?1", "?2"]
    assert fence.parameters("SELECT :who, :who, :n", "postgres") == [":who", ":n"]
    assert fence.parameters("SELECT 1", "sqlite") == []


POSITIONAL_SHAPES = [
    "SELECT ? AS a, ?",
    "SELECT ? a, ? b, ?",
    "WITH x AS (SELECT ? AS v) SELECT v, ? FROM x",
    "WITH x AS (SELECT ? AS v), y AS (SELECT ? AS w) SELECT v, w, ? FROM x, y",
    "SELECT ?, (SELECT ?), ? IN (SELECT ?)",
    "SELECT * FROM (SELECT ? AS v UNION ALL SELECT ?) WHERE v <> ? ORDER BY v LIMIT ?",
    "SELECT CASE WHEN ? THEN ? ELSE ? END, coalesce(NULL, ?)",
]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize("sql", POSITIONAL_SHAPES)
def test_each_question_mark_binds_the_value_at_its_place_in_the_text(sql, dialect):
    values = [f"v{i}" for i in range(sql.count("?"))]
    checked = fence.check(sql, dialect, values)
    mark = "?" if dialect == "sqlite" else "$"
    # where each value lands in what runs, in textual order, is where its ? was written
    placed = [checked.params[int(n) - 1] for n in re.findall(rf"\{mark}(\d+)", checked.sql)]
    assert placed == values
    assert checked.parameters == [f"?{i + 1}" for i in range(len(values))]


def test_question_marks_at_different_depths_bind_in_written_order(db):
    assert db.query("SELECT ? AS a, ?", ["first", "second"]).rows == [["first", "second"]]
    got = db.query("WITH x AS (SELECT ? AS v) SELECT v, ? FROM x", ["cte", "outer"]).rows
    assert got == [["cte", "outer"]]
    assert db.query("SELECT v FROM (SELECT 1 AS v UNION ALL SELECT 2) WHERE v > ? LIMIT ?", [1, 5]).rows == [[2]]


def test_numbered_placeholders_are_refused_or_bound_by_number(db):
    try:
        got = db.query("SELECT ?2, ?1", ["a", "b"]).rows
    except QueryRefused as e:
        assert e.reason == "placeholder"
        return
    assert got == [["b", "a"]]


@pytest.mark.parametrize(("sql", "part"), [("SELECT $1", "$1"), ("SELECT $name", "$name"), ("SELECT 1 + $x_2", "$x_2")])
def test_dollar_placeholders_are_refused_by_the_fence_on_sqlite(sql, part):
    e = refused(sql)
    assert e.reason == "placeholder" and e.part == part
    assert str(e) == f"parameter {part!r} is not supported; write ? (bound from a list) or :name (bound from a dict)"


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize(("sql", "part"), [("SELECT ?2, ?1", "?2"), ("SELECT ?1", "?1"), ("SELECT ?abc", "?abc")])
def test_numbered_and_named_question_marks_are_refused(sql, part, dialect):
    e = refused(sql, dialect)
    assert e.reason == "placeholder" and e.part == part
    assert str(e) == f"parameter {part!r} is not supported; write ? (bound from a list) or :name (bound from a dict)"


def test_a_question_mark_apart_from_a_word_is_a_placeholder_and_dollars_in_strings_are_text():
    assert fence.check("SELECT ? x, ?", "sqlite", bind=False).parameters == ["?1", "?2"]  # x is an alias
    assert fence.check("SELECT '$1', '?2' AS \"$x\"", "sqlite", bind=False).parameters == []


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    ("sql", "part"),
    [
        ("SELECT :__p1", ":__p1"),
        ("SELECT :__x", ":__x"),
        ("SELECT : __x", ":__x"),
        ('SELECT :"__x"', ":__x"),
        ("SELECT ?, :__p1", ":__p1"),  # the name the rewrite gives the first ?
        ("SELECT ?, ?, :__p2", ":__p2"),
    ],
)
def test_reserved_parameter_names_are_refused(sql, part, dialect):
    e = refused(sql, dialect)
    assert e.reason == "placeholder" and e.part == part
    assert str(e) == "parameter names may not start with __"


# -- the runner's caps ------------------------------------------------------------------------

ROWS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < :k) SELECT n FROM r"


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qrunner, "time", FrozenClock())


def test_max_rows_exactly_reached_is_not_truncated(db, frozen):
    got = db.query(ROWS, {"k": 7}, max_rows=7)
    assert got.rows == [[n] for n in range(1, 8)]
    assert got.truncated is False and got.truncated_by is None and got.notes == []
    assert got.columns == ["n"] and got.views == []
    assert got.limits == {"max_rows": 7, "timeout_ms": 2000, "max_bytes": run.MAX_BYTES}


def test_one_row_past_max_rows_is_cut_and_says_so(db, frozen):
    got = db.query(ROWS, {"k": 8}, max_rows=7)
    assert got.rows == [[n] for n in range(1, 8)]
    assert got.truncated is True and got.truncated_by == "max_rows"
    assert got.notes == ["more rows exist: only the first 7 are returned (max_rows)"]


def test_row_cap_across_many_batches(db, frozen):
    got = db.query(ROWS, {"k": 5000}, max_rows=4321)
    assert len(got.rows) == 4321 and got.rows[-1] == [4321] and got.truncated_by == "max_rows"
    assert got.notes == ["more rows exist: only the first 4,321 are returned (max_rows)"]
    whole = db.query(ROWS, {"k": 4321}, max_rows=4321)
    assert len(whole.rows) == 4321 and whole.truncated is False


@pytest.mark.parametrize("max_rows", [1, run.MAX_ROWS])
def test_max_rows_bounds_are_accepted(db, frozen, max_rows):
    got = db.query(ROWS, {"k": 2}, max_rows=max_rows)
    assert got.limits["max_rows"] == max_rows
    assert got.truncated is (max_rows == 1) and len(got.rows) == min(2, max_rows)


@pytest.mark.parametrize("timeout_ms", [1, run.MAX_TIMEOUT_MS])
def test_timeout_ms_bounds_are_accepted(db, frozen, timeout_ms):
    got = db.query("SELECT 1 AS one", timeout_ms=timeout_ms)
    assert got.rows == [[1]] and got.limits["timeout_ms"] == timeout_ms and not got.truncated


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_rows", 0, "must be between 1 and 100,000, got 0"),
        ("max_rows", 100_001, "must be between 1 and 100,000, got 100001"),
        ("max_rows", True, "must be an integer, not bool"),
        ("max_rows", 5.0, "must be an integer, not float"),
        ("max_rows", "5", "must be an integer, not str"),
        ("timeout_ms", 0, "must be between 1 and 60,000, got 0"),
        ("timeout_ms", 60_001, "must be between 1 and 60,000, got 60001"),
        ("timeout_ms", False, "must be an integer, not bool"),
    ],
)
def test_cap_values_out_of_bounds_are_refused_by_field(db, field, value, message):
    with pytest.raises(ValidationError) as e:
        db.query("SELECT 1", **{field: value})
    assert e.value.field == field and str(e.value) == f"{field}: {message}"


def test_size_cap_keeps_the_rows_that_fit_and_says_so(db, frozen):
    # rows of 1 MiB each: sixteen and a bit pass the 16 MiB cap
    sql = (
        "WITH RECURSIVE s(t, n) AS (SELECT 'x', 0 UNION ALL SELECT t || t, n + 1 FROM s WHERE n < 20), "
        "r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 40) "
        "SELECT i, (SELECT t FROM s WHERE n = 20) FROM r"
    )
    got = db.query(sql, timeout_ms=20_000)
    assert got.truncated is True and got.truncated_by == "max_bytes"
    assert 10 <= len(got.rows) < 16 and [r[0] for r in got.rows] == list(range(1, len(got.rows) + 1))
    assert got.notes == [f"the result passed the size cap ({run.MAX_BYTES:,} bytes); select fewer or shorter columns"]


def test_fetch_caps_row_by_row():
    far = float("inf")
    f = qrunner._Fetch(3, far)
    assert f.batch() == 50
    assert f.take([[1], [2]]) is True and f.cut is None and f.rows == [[1], [2]]
    assert f.size == len(repr([[1], [2]]))
    assert f.batch() == 2  # one more than the cap allows, to see whether more rows exist
    assert f.take([[3], [4]]) is False and f.cut == "max_rows" and f.rows == [[1], [2], [3]]
    exact = qrunner._Fetch(2, far)
    assert exact.take([[1], [2]]) is True and exact.cut is None
    big = qrunner._Fetch(10, far)
    row = ["y" * (run.MAX_BYTES // 3)]
    assert big.take([row, row, row, row]) is False and big.cut == "max_bytes"
    assert len(big.rows) == 2 and big.size == 2 * len(repr(row)) and all(isinstance(r, list) for r in big.rows)
    late = qrunner._Fetch(10, -1.0)
    assert late.take([(1,), (2,)]) is False and late.cut == "timeout" and late.rows == [[1], [2]]
    sized = qrunner._Fetch(qrunner._FETCH * 10, far)
    sized.take([["z" * 1000]])
    assert sized.batch() == qrunner._FETCH
    near = qrunner._Fetch(10**6, far)
    near.take([["z" * (run.MAX_BYTES // 4)]])
    assert near.batch() == 2 and type(near.batch()) is int  # two more rows of that size fit under the cap
    assert type(f.batch()) is int and type(sized.batch()) is int
    values = qrunner._Fetch(5, far)
    values.take([[decimal.Decimal("2"), b"\x01"]])
    assert values.rows == [[2, "01"]]


def test_database_values_become_json_ready():
    assert qrunner._value(decimal.Decimal("3")) == 3 and qrunner._value(decimal.Decimal("2.5")) == 2.5
    assert qrunner._value(decimal.Decimal(2**64)) == float(2**64)
    assert qrunner._value(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05"
    assert qrunner._value(dt.date(2026, 1, 2)) == "2026-01-02" and qrunner._value(dt.time(1, 2)) == "01:02:00"
    assert qrunner._value(dt.timedelta(minutes=1)) == 60.0
    assert qrunner._value(memoryview(b"\xff")) == "ff" and qrunner._value(bytearray(b"\x00")) == "00"
    assert qrunner._value({"b": 1, "a": dt.date(2026, 1, 1)}) == '{"a": "2026-01-01", "b": 1}'
    assert qrunner._value(["é"]) == '["é"]'
    assert qrunner._value(None) is None and qrunner._value("s") == "s" and qrunner._value(True) is True

    class Odd:
        def __str__(self) -> str:
            return "odd"

    assert qrunner._value({1, 2}) == "{1, 2}" or qrunner._value({1, 2}) == '"{1, 2}"'
    assert qrunner._value(Odd()) == '"odd"'


def test_time_cap_before_any_row_is_refused_naming_the_cap(db, monkeypatch):
    class Jumping:
        perf_counter = staticmethod(__import__("time").perf_counter)
        calls = 0

        def monotonic(self) -> float:
            self.calls += 1
            return 0.0 if self.calls == 1 else 10_000.0

    monkeypatch.setattr(qrunner, "time", Jumping())
    with pytest.raises(QueryRefused) as e:
        db.query(ROWS.replace("SELECT n FROM r", "SELECT count(*) FROM r"), {"k": 100_000}, timeout_ms=7)
    assert e.value.reason == "time_cap" and e.value.part is None
    assert str(e.value).startswith("the statement was stopped by the time cap after 7 ms before it returned a row")
    assert "raise timeout_ms (at most 60,000)" in str(e.value)


def test_runner_refusals_name_guard_and_database_errors(db):
    r = run.runner(db)
    now = "2026-01-01T12:00:00.000000+00:00"
    with pytest.raises(QueryRefused) as e:
        r.run(fence.Checked("SELECT * FROM main.meta", [], [], []), now, None, 10, 2000)
    assert e.value.reason == "guard" and "only the memory_v1 views and the allowed functions can be read" in str(
        e.value
    )
    with pytest.raises(QueryRefused) as e:
        r.run(fence.Checked("SELECT nope FROM items", [], [], []), now, None, 10, 2000)
    assert e.value.reason == "database_error" and e.value.part == "no such column: nope"
    assert str(e.value) == (
        "the database refused the statement: no such column: nope; check names with describe_query_space()"
    )
    with pytest.raises(QueryRefused) as e:
        r.explain(fence.Checked("SELECT nope FROM items", [], [], []), now, None, 2000)
    assert e.value.reason == "database_error"
    with pytest.raises(QueryRefused) as e:
        r.explain(fence.Checked("SELECT * FROM main.meta", [], [], []), now, None, 2000)
    assert e.value.reason == "guard"
    # the connection is usable at once
    assert db.query("SELECT count(*) FROM items").rows == [[0]]


def test_scope_changes_between_statements_are_applied(db):
    db.put("a/x", "k", 1)
    db.put("b/y", "k", 2)
    r = run.runner(db)
    now = "2026-12-01T00:00:00.000000+00:00"
    sql = fence.check("SELECT namespace FROM items ORDER BY 1", "sqlite")

    def seen(scope: Any) -> list[Any]:
        return r.run(sql, now, scope, 10, 2000)[1].rows

    assert seen([("a",)]) == [["a/x"]]
    assert seen([("b",)]) == [["b/y"]]
    assert seen([("a",), ("b",)]) == [["a/x"], ["b/y"]]
    assert seen(None) == [["a/x"], ["b/y"]]
    assert seen([]) == []
    assert seen([("b",)]) == [["b/y"]]


def test_an_agent_sees_only_its_scope_through_query_and_explain(db):
    acc = Access(db)
    acc.create_agent("ann")
    db.put("agent/ann", "k", "mine")
    db.put("agent/bob", "k", "theirs")
    ann = acc.view(acc.agent("ann"))
    assert ann.query("SELECT namespace FROM items").rows == [["agent/ann"]]
    assert db.query("SELECT count(*) FROM items").rows == [[2]]
    plan = ann.explain_query("SELECT namespace FROM items WHERE key = ?", ["k"])
    assert plan.valid and plan.plan


def test_a_match_query_runs_on_the_index(db):
    db.put("a", "k1", "orchid launch friday")
    db.put("a", "k2", "nothing here")
    got = db.query("SELECT key FROM items WHERE text_match(text, 'orchid')")
    assert got.rows == [["k1"]] and got.views == ["items"]


def test_connections_are_bounded_and_reused(db):
    r = run.runner(db)
    assert isinstance(r, qrunner.SqliteRunner)
    held = [r._borrow() for _ in range(qrunner.SQLITE_CONNECTIONS)]
    assert len({id(c) for c in held}) == qrunner.SQLITE_CONNECTIONS
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(r._borrow()), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and got == []  # all in use: the next statement waits for one
    r._give_back(held[0])
    waiter.join(10)
    assert got == [held[0]]
    for c in held[1:] + got:
        r._give_back(c)
    assert db.query("SELECT 1").rows == [[1]]


def test_a_closed_runner_refuses_new_statements(tmp_path, clock):
    m = memlane.open(str(tmp_path / "c.db"), clock=clock, embedder="fake")
    r = run.runner(m)
    held = [r._borrow() for _ in range(qrunner.SQLITE_CONNECTIONS)]
    r.close()
    with pytest.raises(StoreError, match="closed"):
        r._borrow()
    for c in held:
        r._give_back(c)  # closed as they come back
    m.close()


# -- explain ---------------------------------------------------------------------------------


def test_explain_fields_of_a_valid_statement(db):
    plan = db.explain_query("SELECT lower(key) FROM memory_v1.items WHERE key = ? ORDER BY 1", ["a"])
    assert plan.valid is True
    assert plan.sql == "SELECT lower(key) FROM memory_v1.items WHERE key = ? ORDER BY 1"
    assert plan.runs == "SELECT lower(key) FROM items WHERE key = ?1 ORDER BY 1"
    assert plan.views == ["items"] and plan.functions == ["lower"] and plan.parameters == ["?1"]
    assert plan.plan and all(isinstance(line, str) for line in plan.plan)
    assert plan.reason is None and plan.message is None and plan.part is None
    unbound = db.explain_query("SELECT key FROM items WHERE key = :k")
    assert unbound.valid and unbound.parameters == [":k"]


def test_explain_plan_lines_are_indented_by_depth(db):
    plan = db.explain_query("SELECT key FROM items WHERE key IN (SELECT key FROM item_history) ORDER BY 1")
    assert plan.valid
    depths = [(len(line) - len(line.lstrip(" "))) // 2 for line in plan.plan]
    assert depths[0] == 0 and max(depths) >= 1
    assert all(b <= a + 1 for a, b in zip(depths, depths[1:], strict=False))


def test_explain_fields_of_a_refused_statement(db):
    plan = db.explain_query("SELECT * FROM main.items")
    assert plan.valid is False and plan.sql == "SELECT * FROM main.items"
    assert plan.reason == "outside_query_space" and plan.part == "main.items"
    assert plan.message and plan.message.startswith("main.items is outside the query space")
    assert plan.runs is None and plan.views == [] and plan.plan == []
    with pytest.raises(ValidationError) as e:
        db.explain_query(42)  # type: ignore[arg-type]
    assert e.value.field == "sql"
    with pytest.raises(ValidationError, match="params"):
        db.explain_query("SELECT ?", [1, 2])


# -- saved queries ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A9", "0", "a.b-c_d", "x" * 64, "Z" + "_" * 63])
def test_saved_query_names_that_are_allowed(db, name):
    saved = db.save_query(name, "SELECT 1")
    assert saved.name == name and run.get_saved(db, name).name == name
    assert [q.name for q in db.saved_queries()] == [name]


@pytest.mark.parametrize("name", ["", "_a", ".a", "-a", "x" * 65, "a b", "a/b", "é", "a\nb", 5, None])
def test_saved_query_names_that_are_refused(db, name):
    with pytest.raises(ValidationError) as e:
        db.save_query(name, "SELECT 1")
    assert e.value.field == "name"
    assert f"{name!r} is not a saved query name: 1-64 letters, digits, '_', '.', '-', starting alphanumeric" in str(
        e.value
    )
    assert db.saved_queries() == []


def test_saved_query_name_with_a_trailing_newline_is_refused(db):
    with pytest.raises(ValidationError):
        db.save_query("a\n", "SELECT 1")


def test_saved_query_description_limit(db):
    assert db.save_query("d", "SELECT 1", "x" * 2000).description == "x" * 2000
    for bad in ("x" * 2001, 5):
        with pytest.raises(ValidationError) as e:
            db.save_query("d", "SELECT 1", bad)  # type: ignore[arg-type]
        assert e.value.field == "description" and "at most 2,000 characters" in str(e.value)
    assert db.saved_queries()[0].description == "x" * 2000


def test_saving_checks_the_statement_without_values(db):
    saved = db.save_query("p", "SELECT key FROM items WHERE key = ? AND namespace = ?", "two")
    assert saved.parameters == ["?1", "?2"] and saved.sql.endswith("namespace = ?")
    with pytest.raises(QueryRefused) as e:
        db.save_query("bad", "SELECT * FROM main.items")
    assert e.value.reason == "outside_query_space"
    assert [q.name for q in db.saved_queries()] == ["p"]


def test_replacing_a_saved_query_keeps_its_creation_time(db, clock):
    first = db.save_query("q", "SELECT 1", "one")
    assert first.created_at == first.updated_at and first.author == db.author
    clock.advance(30)
    second = db.save_query("q", "SELECT :n", "two")
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert second.parameters == [":n"]
    listed = db.saved_queries()
    assert len(listed) == 1
    got = listed[0]
    assert (got.name, got.sql, got.description, got.parameters) == ("q", "SELECT :n", "two", [":n"])
    assert (got.author, got.created_at, got.updated_at) == (second.author, first.created_at, second.updated_at)
    assert db.run_saved_query("q", {"n": 4}).rows == [[4]]


def test_only_the_author_or_an_admin_replaces_or_deletes_a_saved_query(db):
    acc = Access(db)
    acc.create_agent("ann")
    acc.create_agent("bob")
    ann = acc.view(acc.agent("ann"))
    bob = acc.view(acc.agent("bob"))
    mine = ann.save_query("mine", "SELECT 1", "ann's")
    assert mine.author == ann.author
    with pytest.raises(ForbiddenError) as e:
        bob.save_query("mine", "SELECT 2")
    assert str(e.value) == f"the saved query 'mine' belongs to {ann.author!r}; save yours under another name"
    with pytest.raises(ForbiddenError) as e:
        bob.delete_saved_query("mine")
    assert str(e.value) == f"the saved query 'mine' belongs to {ann.author!r}; only its author may delete it"
    assert ann.saved_queries()[0].sql == "SELECT 1"
    assert ann.save_query("mine", "SELECT 3").sql == "SELECT 3"
    assert bob.run_saved_query("mine").rows == [[3]]
    assert bob.delete_saved_query("nothing") is False
    assert ann.delete_saved_query("mine") is True and ann.saved_queries() == []


def test_missing_and_odd_saved_query_names(db):
    with pytest.raises(NotFoundError) as e:
        run.get_saved(db, "nope")
    assert "no saved query named 'nope'; saved_queries() lists them" in str(e.value)
    for call in (lambda: run.get_saved(db, 5), lambda: run.delete_saved(db, 5, may_replace=lambda _: True)):
        with pytest.raises(ValidationError) as v:
            call()
        assert v.value.field == "name" and "must be a string, not int" in str(v.value)
    db.save_query("a", "SELECT 1")
    db.save_query("b", "SELECT ?")
    got = run.get_saved(db, "b")
    assert (got.name, got.sql, got.parameters, got.description) == ("b", "SELECT ?", ["?1"], "")
    assert run.delete_saved(db, "a", may_replace=lambda _: True) is True
    assert [q.name for q in db.saved_queries()] == ["b"]


def test_a_stored_query_that_no_longer_passes_lists_with_no_parameters(db):
    db.save_query("ok", "SELECT :x")
    with db.store.session(write=True) as s:
        s.run("UPDATE saved_queries SET sql = ? WHERE name = ?", ("DROP TABLE items", "ok"))
    (got,) = db.saved_queries()
    assert got.sql == "DROP TABLE items" and got.parameters == []
    with pytest.raises(QueryRefused):
        db.run_saved_query("ok")


# -- the PostgreSQL runner, against a stand-in connection ------------------------------------


def _fold(sql: str) -> str:
    return "'".join(part if i % 2 else part.lower() for i, part in enumerate(sql.split("'")))


class FakeSession:
    def __init__(self, answers: dict[str, Any], log: list[Any], conn: Any = None) -> None:
        self.answers, self.log, self.conn = answers, log, conn

    def __enter__(self) -> FakeSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def rows(self, sql: str, params: Any = ()) -> list[Any]:
        self.log.append((sql, params))
        for key, value in self.answers.items():
            if _fold(key) == _fold(sql):  # keywords and names read the same in any case; 'literals' do not
                return value
        raise AssertionError(f"unexpected statement {sql}")


class FakeStore:
    location = "pg://fake"

    def __init__(self, answers: dict[str, Any], conn: Any = None) -> None:
        self.answers, self.conn, self.log = answers, conn, []

    def session(self, write: bool = False) -> FakeSession:
        return FakeSession(self.answers, self.log, self.conn)


TS_CONFIG = (
    "SELECT n.nspname FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace "
    "WHERE c.cfgname = 'memlane' ORDER BY n.nspname = current_schema() DESC LIMIT 1"
)
HAS_ROLE = "SELECT pg_has_role(current_user, ?, 'MEMBER')"
VERSION = "SELECT current_setting('server_version_num')::int"
SUPER = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
SCHEMA = "SELECT to_regnamespace(?)::text"
ROLE_EXISTS = "SELECT 1 FROM pg_roles WHERE rolname = ?"


def pg_answers(**over: Any) -> dict[str, Any]:
    answers: dict[str, Any] = {
        "SELECT to_regnamespace(?)::text": [["memory_v1"]],
        "SELECT 1 FROM pg_roles WHERE rolname = ?": [[1]],
        "SELECT pg_has_role(current_user, ?, 'MEMBER')": [[True]],
        "SELECT n.nspname FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace "
        "WHERE c.cfgname = 'memlane' ORDER BY n.nspname = current_schema() DESC LIMIT 1": [["public"]],
        "SELECT current_setting('server_version_num')::int": [[160002]],
        "SELECT secret FROM memlane_query_secret": [["s3cret"]],
        "SELECT rolsuper FROM pg_roles WHERE rolname = current_user": [[True]],
    }
    answers.update(over)
    return answers


class FakeConn:
    class info:  # noqa: N801
        backend_pid = 4242

    def __init__(self) -> None:
        self.executed: list[Any] = []

    def execute(self, sql: str, params: Any = None) -> None:
        self.executed.append((sql, params))


def test_pg_runner_reads_its_role_config_and_version():
    store = FakeStore(pg_answers())
    r = qrunner.PostgresRunner(store)
    assert r.role is True and r.notes == [] and r.tsconfig == "public.memlane"
    assert r._generic is True and r._secret == "s3cret" and r._temp_cap is True
    assert store.log[0] == ("SELECT to_regnamespace(?)::text", ("memory_v1",))
    assert ("SELECT 1 FROM pg_roles WHERE rolname = ?", (space.QUERY_ROLE,)) in store.log
    assert (HAS_ROLE, (space.QUERY_ROLE,)) in store.log
    old = qrunner.PostgresRunner(FakeStore(pg_answers(**{TS_CONFIG: [], VERSION: [[150004]], SUPER: [[False]]})))
    assert old.tsconfig == "english" and old._generic is False and old._temp_cap is False
    r.close()


def test_pg_runner_without_the_role_says_so():
    r = qrunner.PostgresRunner(FakeStore(pg_answers(**{HAS_ROLE: [[False]]})))
    assert r.role is False and len(r.notes) == 1 and space.QUERY_ROLE in r.notes[0]
    assert "the read-only transaction and the fence still apply" in r.notes[0]
    missing = qrunner.PostgresRunner(FakeStore(pg_answers(**{ROLE_EXISTS: []})))
    assert missing.role is False


def test_pg_runner_without_the_schema_asks_for_a_migration():
    with pytest.raises(StoreError) as e:
        qrunner.PostgresRunner(FakeStore(pg_answers(**{SCHEMA: [[None]]})))
    assert str(e.value) == "pg://fake has no memory_v1 schema; run `memlane migrate` (migration m004_query_space)"


def test_pg_runner_sets_signed_scope_clock_caps_and_role():
    r = qrunner.PostgresRunner(FakeStore(pg_answers()))
    conn = FakeConn()
    r._begin(conn, "2026-01-01", [("user", "1"), ("room",)], 1234)
    ((sql, params),) = conn.executed
    pairs = {k.lower(): v for k, v in zip(params[::2], params[1::2], strict=True)}  # names: any case
    assert sql.startswith("SELECT set_config(%s, %s, true), ") and sql.count("set_config") == len(pairs)
    assert pairs["memlane.now"] == "2026-01-01" and pairs["memlane.scope"] == "user/1\nroom"
    assert pairs["memlane.sig"] == r._sign("user/1\nroom", "2026-01-01", 4242)
    assert pairs["statement_timeout"] == "1234" and pairs["lock_timeout"] == "1234"
    assert pairs["search_path"] == "memory_v1" and pairs["temp_file_limit"] == qrunner.TEMP_FILE_LIMIT
    assert pairs["role"] == space.QUERY_ROLE
    import hashlib

    inner = hashlib.sha256(b"s3cret" + space.scope_message("user/1\nroom", "2026-01-01", 4242).encode()).hexdigest()
    assert pairs["memlane.sig"] == hashlib.sha256(("s3cret" + inner).encode()).hexdigest()
    plain = qrunner.PostgresRunner(FakeStore(pg_answers(**{HAS_ROLE: [[False]], SUPER: [[False]]})))
    conn = FakeConn()
    plain._begin(conn, "now", None, 5)
    pairs = {k.lower(): v for k, v in zip(conn.executed[0][1][::2], conn.executed[0][1][1::2], strict=True)}
    assert "role" not in pairs and "temp_file_limit" not in pairs and pairs["memlane.scope"] == space.EVERYTHING


def test_pg_runner_maps_database_errors():
    psycopg = pytest.importorskip("psycopg")
    r = qrunner.PostgresRunner(FakeStore(pg_answers()))
    cap = r._error(psycopg.errors.QueryCanceled("canceling"), 250)
    assert cap.reason == "time_cap" and "after 250 ms" in str(cap)
    for err in (
        psycopg.errors.InsufficientPrivilege("denied  for\ntable x"),
        psycopg.errors.ReadOnlySqlTransaction("ro"),
    ):
        guard = r._error(err, 1)
        assert guard.reason == "guard" and "only the memory_v1 views can be read" in str(guard)
    assert "(denied for table x)" in str(r._error(psycopg.errors.InsufficientPrivilege("denied  for\ntable x"), 1))
    other = r._error(psycopg.errors.UndefinedColumn("column nope does not exist"), 1)
    assert other.reason == "database_error" and other.part == "column nope does not exist"

    class Diag:
        message_primary = "the primary message"

    class WithDiag(Exception):
        diag = Diag()

    assert r._error(WithDiag("the whole text\nwith context"), 1).part == "the primary message"
    assert r._error(Exception("no  diag"), 1).part == "no diag"


class FakeCursor:
    def __init__(self, conn: Any, name: str | None = None) -> None:
        self.conn, self.name = conn, name
        self.description = [type("D", (), {"name": "n"})()]
        self._rows: list[Any] = []

    def execute(self, sql: str, params: Any = None) -> FakeCursor:
        self.conn.executed.append((sql, params))
        self._rows = [[i] for i in range(1, 6)] if not sql.startswith("EXPLAIN") else [["Seq Scan"], ["  Filter"]]
        return self

    def fetchmany(self, n: int) -> list[Any]:
        out, self._rows = self._rows[:n], self._rows[n:]
        return out

    def fetchall(self) -> list[Any]:
        return self.fetchmany(len(self._rows))


def test_pg_runner_runs_and_explains_through_cursors(monkeypatch):
    psycopg = pytest.importorskip("psycopg")
    monkeypatch.setattr(psycopg, "RawServerCursor", FakeCursor)
    monkeypatch.setattr(psycopg, "RawCursor", FakeCursor)
    monkeypatch.setattr(qrunner, "time", FrozenClock())
    conn = FakeConn()
    r = qrunner.PostgresRunner(FakeStore(pg_answers(), conn))
    checked = fence.check("SELECT n FROM items WHERE key = ?", "postgres", ["k"])
    columns, fetched = r.run(checked, "now", None, 3, 900)
    assert columns == ["n"] and fetched.rows == [[1], [2], [3]] and fetched.cut == "max_rows"
    assert conn.executed[-1] == ("SELECT n FROM memory_v1.items WHERE key = $1", ["k"])
    assert "statement_timeout" in conn.executed[0][1] and "900" in conn.executed[0][1]
    assert r.explain(checked, "now", None, 900) == ["Seq Scan", "  Filter"]
    assert conn.executed[-1] == ("EXPLAIN (GENERIC_PLAN) SELECT n FROM memory_v1.items WHERE key = $1", None)
    plain = fence.check("SELECT 1", "postgres")
    r.explain(plain, "now", None, 900)
    assert conn.executed[-1] == ("EXPLAIN SELECT 1", [])
    r._generic = False
    r.explain(checked, "now", None, 900)
    assert conn.executed[-1] == ("EXPLAIN SELECT n FROM memory_v1.items WHERE key = $1", ["k"])


@pytest.mark.parametrize(("available", "fetches"), [(0, 1), (5, 1), (49, 1), (50, 2), (51, 2), (120, 2)])
def test_pg_runner_fetches_until_a_short_batch(monkeypatch, available, fetches):
    """A batch shorter than asked for is the last: one more round trip only when the batch came back full."""
    psycopg = pytest.importorskip("psycopg")
    asked: list[int] = []

    class Counting(FakeCursor):
        def execute(self, sql: str, params: Any = None) -> FakeCursor:
            self._rows = [[i] for i in range(available)]
            return self

        def fetchmany(self, n: int) -> list[Any]:
            asked.append(n)
            return super().fetchmany(n)

    monkeypatch.setattr(psycopg, "RawServerCursor", Counting)
    monkeypatch.setattr(qrunner, "time", FrozenClock())
    r = qrunner.PostgresRunner(FakeStore(pg_answers(), FakeConn()))
    columns, fetched = r.run(fence.check("SELECT 1", "postgres"), "now", None, 1000, 900)
    assert fetched.rows == [[i] for i in range(available)] and fetched.cut is None and columns == ["n"]
    assert len(asked) == fetches and asked[0] == 50


def test_pg_runner_keeps_the_rows_fetched_before_a_cancel(monkeypatch):
    psycopg = pytest.importorskip("psycopg")

    class SlowSecondBatch(FakeCursor):
        def execute(self, sql: str, params: Any = None) -> FakeCursor:
            self._rows = [[i] for i in range(80)]
            return self

        def fetchmany(self, n: int) -> list[Any]:
            if len(self._rows) < 80:
                raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
            return super().fetchmany(n)

    monkeypatch.setattr(psycopg, "RawServerCursor", SlowSecondBatch)
    monkeypatch.setattr(qrunner, "time", FrozenClock())
    r = qrunner.PostgresRunner(FakeStore(pg_answers(), FakeConn()))
    columns, fetched = r.run(fence.check("SELECT 1", "postgres"), "now", None, 1000, 900)
    assert fetched.rows == [[i] for i in range(50)] and fetched.cut == "timeout" and columns == ["n"]


def test_pg_runner_turns_a_cancel_into_the_time_cap(monkeypatch):
    psycopg = pytest.importorskip("psycopg")

    class Cancelling(FakeCursor):
        def execute(self, sql: str, params: Any = None) -> FakeCursor:
            raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")

    monkeypatch.setattr(psycopg, "RawServerCursor", Cancelling)
    monkeypatch.setattr(psycopg, "RawCursor", Cancelling)
    r = qrunner.PostgresRunner(FakeStore(pg_answers(), FakeConn()))
    with pytest.raises(QueryRefused) as e:
        r.run(fence.check("SELECT 1", "postgres"), "now", None, 3, 77)
    assert e.value.reason == "time_cap" and "77 ms" in str(e.value)
    with pytest.raises(QueryRefused) as e:
        r.explain(fence.check("SELECT 1", "postgres"), "now", None, 78)
    assert e.value.reason == "time_cap" and "78 ms" in str(e.value)


def test_query_checks_with_the_runners_dialect_and_text_search_config(monkeypatch):
    seen: list[Any] = []
    explained: list[Any] = []

    class Runner:
        dialect = "postgres"
        tsconfig = "ts.memlane"
        notes = ["a note from the runner"]

        def run(self, checked: Any, now: str, scope: Any, max_rows: int, timeout_ms: int) -> Any:
            seen.append((checked.sql, checked.params, scope, max_rows, timeout_ms))
            fetched = qrunner._Fetch(max_rows, float("inf"))
            fetched.take([["x"]])
            return ["c"], fetched

        def explain(self, checked: Any, now: str, scope: Any, timeout_ms: int) -> list[str]:
            explained.append((checked.sql, checked.params, now, scope, timeout_ms))
            return ["a plan line"]

    class Store:
        backend = "postgres"

        def query_runner(self) -> Runner:
            return Runner()

    class Mem:
        store = Store()

        def _now(self) -> dt.datetime:
            return dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    mem: Any = Mem()
    got = run.query(
        mem, "SELECT 1 FROM claims WHERE text_match(claim_text, ?)", ["w"], scope=[("a",)], max_rows=9, timeout_ms=99
    )
    ((sql, params, scope, max_rows, timeout_ms),) = seen
    assert "to_tsvector('ts.memlane'" in sql and "plainto_tsquery('ts.memlane', $1)" in sql
    assert params == ["w"] and scope == [("a",)] and (max_rows, timeout_ms) == (9, 99)
    assert got.rows == [["x"]] and got.columns == ["c"] and got.notes == ["a note from the runner"]
    assert got.views == ["claims"] and got.limits == {"max_rows": 9, "timeout_ms": 99, "max_bytes": run.MAX_BYTES}
    run.query(mem, "SELECT 1", scope=[("a",), ()])
    assert seen[-1][2] is None  # a readable root prefix is everything
    plan = run.explain(mem, "SELECT 1 FROM claims WHERE text_match(claim_text, ?)", ["w"], scope=[("b",)])
    assert plan.valid and plan.runs is not None and plan.plan == ["a plan line"]
    # the runner's text search configuration in what is planned; text_match as written in what the caller sees
    assert plan.runs == "SELECT 1 FROM memory_v1.claims WHERE text_match(claim_text, $1)"
    ((planned, *rest),) = explained
    assert "plainto_tsquery('ts.memlane', $1)" in planned
    assert rest == [["w"], "2026-01-01T00:00:00.000000+00:00", [("b",)], run.DEFAULT_TIMEOUT_MS]
    with pytest.raises(memlane.values.errors.BackendUnavailableError):

        class Bare:
            store = type("S", (), {"backend": "memory"})()

        run.runner(Bare())  # type: ignore[arg-type]
