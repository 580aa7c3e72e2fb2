"""The exact top k above FTS5 (issue #36): the same hits, scores and order as FTS5's own ranking statement.

``bench/fts5_topk.py``'s ``exact_top`` (measured by ``bench/lexical_engine.py``,
not adopted by the store) ranks the rarest words with FTS5, scores their best
rows in full by ``bm25()``'s formula and stops when no row left out can reach
the k-th. Whatever it returns must be, bit for bit, what
``SqliteStore.lexical``'s ``bm25()`` statement returns: the same ids in the same
order (ties newest first), the same scores and versions, with a ``where``, in a
scope, with words in every row.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memlane
from benchmods import bench_module
from memlane.store import _common as c
from memlane.store import sqlite, where_sql
from memlane.values import where as where_rules

fts5_topk = bench_module("fts5_topk")

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# "every" is in every row (IDF at FTS5's floor); the others are drawn, the last ones rarely
WORDS = ["apple", "berry", "cherry", "date", "elder", "fig", "grape", "melon"]
RARE = ["kiwi", "lime", "quince"]

# a row: some words, or one word said again and again (a short row of a repeated word reaches a word's highest
# score), maybe rare words, and a metadata value for ``where``
texts = st.lists(
    st.tuples(
        st.one_of(
            st.lists(st.sampled_from(WORDS), min_size=0, max_size=8),
            st.tuples(st.sampled_from(WORDS), st.integers(1, 6)).map(lambda wn: [wn[0]] * wn[1]),
        ),
        st.one_of(st.just([]), st.just([]), st.just([]), st.lists(st.sampled_from(RARE), min_size=1, max_size=2)),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=60,
)
queries = st.lists(st.sampled_from([*WORDS, *RARE, "every"]), min_size=2, max_size=5, unique=True)
scopes = st.sampled_from([[()], [("team",)], [("team", "a")], [("team", "a"), ("other",)]])
wheres = st.sampled_from([None, {"metadata.m": 1}, {"metadata.m": {"$lt": 2}}])


def _load(mem: memlane.Memory, rows: list[tuple[list[str], list[str], int]], copies: int) -> None:
    items = []
    for i, (words, rare, m) in enumerate(rows):
        text = " ".join(["every", *words, *rare])
        namespace = ("team/a", "team/b", "other")[i % 3]
        # copies: the same text again under other keys (equal scores: ties, broken newest first)
        for j in range(1 + (copies if i % 4 == 0 else 0)):
            items.append({"namespace": namespace, "key": f"k{i}.{j}", "value": text, "metadata": {"m": m}})
    mem.put_many(items)


def _both(store: Any, terms: list[str], within: Any, k: int, where: Any) -> Any:
    """``exact_top`` on the store's connection (``None``: no answer) and ``store.lexical``, which runs the statement.

    The scope and ``where`` become the statement's ``inside`` as ``lexical`` makes them.
    """
    conditions = where_rules.conditions(where)
    inside, params = c.within_filter(within, column="items.namespace")
    if conditions:
        test, test_params = where_sql.sqlite_sql(list(conditions))
        inside = f"{inside} AND {test}" if inside else test
        params = [*params, *test_params]
    fast = fts5_topk.exact_top(store._conn, terms, inside, params, k)
    return fast, store.lexical(terms, within, k, conditions)


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The new way tried on every query a small corpus gives (its cost limits are for large stores)."""
    monkeypatch.setattr(fts5_topk, "EXACT_TOP_SHARE", 1.0)
    monkeypatch.setattr(fts5_topk, "EXACT_TOP_FLOOR_REACH", float("inf"))  # the best k alone, whatever the bound
    monkeypatch.setattr(fts5_topk, "EXACT_TOP_ODDS", 0.0)
    monkeypatch.setattr(fts5_topk, "EXACT_TOP_PROBE", 3)  # estimated counts too (words in 3 rows or more)
    # scopes ranked by FTS5's statement, not from their own rows, as a scope of thousands of rows is
    monkeypatch.setattr(sqlite, "SCOPE_DRIVEN_ROWS", 0)


@SETTINGS
# the rare word's best row alone would pass for the answer; its second row wins with the other word's help
@example(
    rows=[([], ["kiwi"], 0), (["apple", "apple"], ["kiwi"], 0), *[(["apple"], [], 0)] * 3, *[(["berry"], [], 0)] * 7],
    copies=0,
    terms=["kiwi", "apple"],
    k=1,
    within=[()],
    where=None,
    candidates=0,
)
# a row of the other word said twice scores above that word's IDF: a bound of its IDF alone would miss it
@example(
    rows=[(["apple"], [], 0), (["berry", "berry"], [], 0)],
    copies=0,
    terms=["apple", "berry"],
    k=1,
    within=[()],
    where=None,
    candidates=0,
)
@given(
    rows=texts,
    copies=st.integers(0, 3),
    terms=queries,
    k=st.integers(1, 12),
    within=scopes,
    where=wheres,
    candidates=st.sampled_from([0, 1 << 20]),
)
def test_exact_top_is_fts5s_own_ranking(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    forced: None,
    rows: list[tuple[list[str], list[str], int]],
    copies: int,
    terms: list[str],
    k: int,
    within: Any,
    where: Any,
    candidates: int,
) -> None:
    """Ids, order, scores (bit for bit) and versions: as FTS5's ``bm25()`` statement, or no answer at all.

    With every row of the rarest words read (``candidates`` large) and with their best ``k`` only.
    """
    monkeypatch.setattr(fts5_topk, "EXACT_TOP_CANDIDATES", candidates)
    with memlane.open(str(tmp_path / f"s{abs(hash((tuple(terms), k)))}.db"), embedder=None) as mem:
        mem.clear("team")
        mem.clear("other")
        _load(mem, rows, copies)
        fast, plain = _both(mem.store, terms, within, k, where)
        assert fast is None or fast == plain


def test_exact_top_answers_where_a_rare_word_settles_it(tmp_path: Any) -> None:
    """A rare word and words in most rows: the rare word's rows win, and the new way says so without the others'."""
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        mem.put_many(
            [
                {"namespace": "n", "key": f"k{i}", "value": f"apple berry cherry {'kiwi' if i % 50 == 0 else ''}"}
                for i in range(400)
            ]
            + [{"namespace": "n", "key": f"b{i}", "value": "date elder fig grape"} for i in range(400)]
        )
        fast, plain = _both(mem.store, ["kiwi", "apple"], [()], 5, None)
        assert fast == plain
        assert len(fast) == 5


def test_exact_top_leaves_a_query_of_common_words_to_fts5(tmp_path: Any) -> None:
    """Words of about the same frequency: nothing to skip, so FTS5's statement ranks them (no answer, no cost)."""
    with memlane.open(str(tmp_path / "c.db"), embedder=None) as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": ("apple", "berry")[i % 2]} for i in range(200)])
        fast, _ = _both(mem.store, ["apple", "berry"], [()], 5, None)
        assert fast is None
