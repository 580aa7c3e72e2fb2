"""Lexical cost per query, not per corpus (issue #36), and a scope that nothing outside it can change.

A scoped lexical search and the relevance decision's document counts must
depend on the scope's rows alone (rows in another namespace are another agent's
business: they must neither change what a search returns nor how it ranks),
and cost what the scope costs, however many rows elsewhere hold the words.
Work is counted, not timed: SQLite's virtual machine instructions (a progress
handler) and PostgreSQL's buffers (``EXPLAIN (ANALYZE, BUFFERS)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane

SLOW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WORDS = ["apple", "berry", "cherry", "date", "elder", "fig", "grape", "melon"]


def _direct(backend: str) -> None:
    if backend not in ("sqlite", "postgres"):
        pytest.skip("reads the store's own calls")


def _analyze(url: str, backend: str) -> None:
    """Fresh column statistics on PostgreSQL: whatever the table's statistics say must not leak into a scope."""
    if backend == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE items")


texts = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join), min_size=1, max_size=25)


# the scope as one prefix, or as more prefixes than the statements write out one by one (another way in)
SHAPES = {"one prefix": [("team", "s")], "many prefixes": [("team", "s", f"p{i}") for i in range(20)]}


def _seen(store: Any, terms: list[str], k: int, shape: str) -> tuple[list[str], tuple[int, dict[str, int]]]:
    within = SHAPES[shape]
    return [r[0] for r in store.lexical(terms, within, k)], store.document_counts(terms, within, 1000)


@pytest.mark.parametrize("shape", SHAPES)
@SLOW
@given(
    scope=texts,
    outside=texts,
    copies=st.integers(1, 40),
    terms=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3, unique=True),
)
def test_rows_in_another_namespace_never_change_a_scoped_search(
    backend: str,
    store_url: str,
    shape: str,
    scope: list[str],
    outside: list[str],
    copies: int,
    terms: list[str],
) -> None:
    """The result set, its order and the document counts of a scope are the same whatever lies outside it."""
    _direct(backend)
    with memlane.open(store_url, embedder=None) as mem:
        for top in ("team", "Team", "other"):
            mem.clear(top)
        mem.put_many([{"namespace": f"team/s/p{i % 20}", "key": f"k{i}", "value": t} for i, t in enumerate(scope)])
        _analyze(store_url, backend)
        store: Any = mem.store
        before = _seen(store, terms, 5, shape)
        mem.put_many(
            [
                {"namespace": f"other/{j % 7}", "key": f"o{j}.{i}", "value": t}
                for j in range(copies)
                for i, t in enumerate(outside)
            ]
        )
        # namespaces whose address words start as the scope's do (the index's view of it) but lie outside it
        for near in ("team/s-x", "Team/S", "team/sx"):
            mem.put_many([{"namespace": near, "key": f"n{i}", "value": t} for i, t in enumerate(outside)])
        _analyze(store_url, backend)
        assert _seen(store, terms, 5, shape) == before


@SLOW
@given(scope=texts, terms=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3, unique=True))
def test_sqlite_ranks_a_small_scope_by_fts5s_own_bm25(
    backend: str, store_url: str, scope: list[str], terms: list[str]
) -> None:
    """The scope's own BM25 is FTS5's ``bm25()``: where the scope is the whole store, the same hits and scores."""
    if backend != "sqlite":
        pytest.skip("SQLite's bm25()")
    with memlane.open(store_url, embedder=None) as mem:
        mem.clear("team")
        mem.put_many([{"namespace": "team/s", "key": f"k{i}", "value": t} for i, t in enumerate(scope)])
        store: Any = mem.store
        scoped = store.lexical(terms, [("team", "s")], 10)
        whole = store.lexical(terms, [()], 10)
        assert [r[0] for r in scoped] == [r[0] for r in whole]
        assert [r[1] for r in scoped] == pytest.approx([r[1] for r in whole], rel=1e-9)


@pytest.mark.parametrize("crowd", [0, 400])
def test_a_word_common_elsewhere_but_not_in_the_scope_is_still_ranked(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch, crowd: int
) -> None:
    """Whether a word is common (left out of the query) is judged by the scope's rows, not the store's."""
    _direct(backend)
    from memlane.store import postgres, sqlite

    for module in (sqlite, postgres):
        monkeypatch.setattr(module, "LEXICAL_CAP", 5)
    with memlane.open(store_url, embedder=None) as mem:
        # first: the word's first postings in the index are all outside the scope
        mem.put_many([{"namespace": "bulk", "key": f"b{i}", "value": "value"} for i in range(crowd)])
        # "value" in half the scope: it tells the scope's rows apart, so rows holding only it are candidates
        mem.put_many(
            [
                {"namespace": "team/s", "key": f"k{i}", "value": f"value {i}" if i % 2 else f"note {i}"}
                for i in range(40)
            ]
        )
        _analyze(store_url, backend)
        store: Any = mem.store
        found = {r[0] for r in store.lexical(["value", "17"], [("team", "s")], 40)}
        holding = {mem.get(("team", "s"), f"k{i}").id for i in range(1, 40, 2)}  # type: ignore[union-attr]
        # left out, only the row holding "17" would be nominated; ranked, rows holding "value" are too (PostgreSQL
        # ranks up to the cap of them)
        assert mem.get(("team", "s"), "k17").id in found  # type: ignore[union-attr]
        assert found <= holding and len(found) >= 5


# -- work, counted -------------------------------------------------------------------------------------------


@contextmanager
def _sqlite_steps(store: Any) -> Iterator[list[int]]:
    """SQLite virtual machine instructions run on the store's connection while the block runs."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(tick, 1)
    try:
        yield steps
    finally:
        store._conn.set_progress_handler(None, 1)


def _scope_and_crowd(mem: memlane.Memory, crowd: int, start: int = 0) -> None:
    """A scope of 200 rows holding the common word; ``crowd`` rows elsewhere hold it too."""
    if start == 0:
        mem.put_many(
            [{"namespace": "team/s", "key": f"k{i}", "value": f"value {i} text word{i % 17}"} for i in range(200)]
        )
    for lo in range(start, crowd, 5000):
        mem.put_many(
            [
                {"namespace": f"bulk/{i % 50}", "key": f"b{i}", "value": f"value {i} text"}
                for i in range(lo, min(crowd, lo + 5000))
            ]
        )


CALLS: dict[str, Callable[[Any], Any]] = {
    "lexical, every word common": lambda store: store.lexical(["value", "text"], [("team", "s")], 50),
    "lexical, with a rarer word": lambda store: store.lexical(["value", "word3", "text"], [("team", "s")], 50),
    "document counts": lambda store: store.document_counts(["value", "word3", "text"], [("team", "s")], 1000),
    "document counts, two prefixes": lambda store: store.document_counts(
        ["value", "text"], [("team", "s"), ("team", "t")], 1000
    ),
}


@pytest.mark.parametrize("name", CALLS)
def test_sqlite_a_common_word_costs_a_small_scope_what_the_scope_costs(backend: str, store_url: str, name: str) -> None:
    """200 rows in scope; 2,000 then 20,000 rows elsewhere hold the same words: about the same work."""
    if backend != "sqlite":
        pytest.skip("SQLite's instruction counter")
    with memlane.open(store_url, embedder=None) as mem:
        store: Any = mem.store
        work = []
        for crowd, start in ((2000, 0), (20000, 2000)):
            _scope_and_crowd(mem, crowd, start)
            CALLS[name](store)  # warm
            with _sqlite_steps(store) as steps:
                CALLS[name](store)
            work.append(steps[0])
        assert work[1] < 1.5 * work[0], work


def test_sqlite_document_counts_over_the_whole_store_do_not_grow_with_it(backend: str, store_url: str) -> None:
    """Unscoped, each count stops at its limit: ten times the rows, about the same work."""
    if backend != "sqlite":
        pytest.skip("SQLite's instruction counter")
    with memlane.open(store_url, embedder=None) as mem:
        store: Any = mem.store
        work = []
        for crowd, start in ((2000, 0), (20000, 2000)):
            _scope_and_crowd(mem, crowd, start)
            with _sqlite_steps(store) as steps:
                store.document_counts(["value", "word3", "text"], [()], 1000)
            work.append(steps[0])
        assert work[1] < 1.5 * work[0], work


def _buffers(url: str, fn: Callable[[], Any], marks: tuple[str, ...]) -> int:
    """PostgreSQL buffers (hit and read) of the statements ``fn`` runs whose text holds one of ``marks``.

    Each is run again under ``EXPLAIN (ANALYZE, BUFFERS)`` on a second connection, with the settings the store
    gives its lexical statements.
    """
    import psycopg

    from memlane.store import postgres

    seen: list[tuple[str, Any]] = []
    real = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        if any(m in text for m in marks):
            seen.append((text, params))
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        fn()
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]
    assert seen, marks
    total = 0
    with psycopg.connect(url) as conn:
        conn.execute(postgres._LEXICAL_SETTINGS)
        for text, params in seen:
            plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {text}", params).fetchone()[0]
            top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
            total += top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return total


# what every document count statement holds, before this change and after: a term's lexemes AND-ed
_TERM_MARK = "nullif(replace(strip(to_tsvector"
PG_CALLS: dict[str, tuple[Callable[[Any], Any], tuple[str, ...]]] = {
    "document counts": (CALLS["document counts"], (_TERM_MARK,)),
    "document counts, two prefixes": (CALLS["document counts, two prefixes"], (_TERM_MARK,)),
    "document counts, whole table": (
        lambda store: store.document_counts(["value", "text"], [()], 1000),
        (_TERM_MARK,),
    ),
    "lexical, with a rarer word": (CALLS["lexical, with a rarer word"], ("WITH words AS MATERIALIZED",)),
}


@pytest.mark.parametrize("name", PG_CALLS)
def test_postgres_a_common_word_costs_what_the_query_needs(backend: str, store_url: str, name: str) -> None:
    """2,000 then 20,000 rows elsewhere hold the words: about the same buffers."""
    if backend != "postgres":
        pytest.skip("PostgreSQL's buffers")
    call, marks = PG_CALLS[name]
    with memlane.open(store_url, embedder=None) as mem:
        store: Any = mem.store
        work = []
        for crowd, start in ((2000, 0), (20000, 2000)):
            _scope_and_crowd(mem, crowd, start)
            _analyze(store_url, "postgres")
            work.append(_buffers(store_url, lambda: call(store), marks))
        assert work[1] < 1.5 * work[0] + 20, work
