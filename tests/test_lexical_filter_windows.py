"""A filtered lexical search read in windows of the index's ranking (issue #37): the joined statement's answer.

``SqliteStore.lexical`` with a ``where`` ranks ``items_fts`` alone and tests
each window's rows against the scope and the filter, instead of joining and
testing every match before the top k is cut. What it returns must be, bit for
bit, what the joined statement returns: the same ids in the same order (ties
newest first), the same scores and versions, with filters that few or many rows
meet, in scopes, with words in every row, over several windows.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.store import _common as c
from memlane.store import sqlite, where_sql
from memlane.values import where as where_rules

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WORDS = ["apple", "berry", "cherry", "date", "elder", "fig"]
BM25 = f"bm25(items_fts, 1.0, {sqlite.ADDRESS_WEIGHT})"

# a row: some words (or one word said again and again) and a metadata value the filters test
rows_st = st.lists(
    st.tuples(
        st.one_of(
            st.lists(st.sampled_from(WORDS), min_size=0, max_size=6),
            st.tuples(st.sampled_from(WORDS), st.integers(1, 4)).map(lambda wn: [wn[0]] * wn[1]),
        ),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=50,
)
# "every" is in every row; the filters meet none, few, many or all rows
queries = st.lists(st.sampled_from([*WORDS, "every", "absent"]), min_size=1, max_size=4, unique=True)
wheres = st.one_of(
    st.integers(0, 10).map(lambda t: {"metadata.m": {"$lt": t}}),
    st.integers(0, 9).map(lambda t: {"metadata.m": t}),
    st.integers(0, 9).map(lambda t: {"metadata.m": {"$gte": t}}),
)
scopes = st.sampled_from([[()], [("team",)], [("team", "a")], [("team", "a"), ("other",)]])


def _load(mem: memlane.Memory, rows: list[tuple[list[str], int]], copies: int) -> None:
    items = []
    for i, (words, m) in enumerate(rows):
        text = " ".join(["every", *words])
        namespace = ("team/a", "team/b", "other")[i % 3]
        # copies: the same text again under other keys (equal scores: ties, broken newest first)
        for j in range(1 + (copies if i % 3 == 0 else 0)):
            items.append({"namespace": namespace, "key": f"k{i}.{j}", "value": text, "metadata": {"m": m}})
    mem.put_many(items)


def _joined_as_before(
    conn: Any, match: str, inside: str, params: Sequence[Any], k: int
) -> list[tuple[str, float, int]]:
    """The statement a filtered search ran before windows (written out here, not taken from the store)."""
    return conn.execute(
        f"SELECT items.id, {BM25}, items.version FROM items_fts "
        f"JOIN items ON items.rowid = items_fts.rowid WHERE items_fts MATCH ? AND {inside} "
        f"ORDER BY {BM25}, items_fts.rowid DESC LIMIT ?",
        (match, *params, k),
    ).fetchall()


# one filtered search over a store of ``rows`` (each ``copies`` times more under other keys), with window sizes
A_SEARCH = {
    "rows": rows_st,
    "copies": st.integers(0, 3),
    "terms": queries,
    "k": st.integers(1, 8),
    "within": scopes,
    "where": wheres,
    "first": st.integers(1, 3),
    "growth": st.integers(2, 3),
}


def _windows(monkeypatch: pytest.MonkeyPatch, *, first: int, growth: int, most: float, margin: int) -> None:
    """The window sizes a test runs with (see ``sqlite.LEXICAL_WINDOW_FIRST``)."""
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_FIRST", first)
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_GROWTH", growth)
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_MAX", most)
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_MARGIN", margin)


@contextlib.contextmanager
def _loaded(path: Any, rows: list[tuple[list[str], int]], copies: int) -> Iterator[Any]:
    """A words-only memory at ``path`` holding ``rows`` (what an earlier example left there cleared first)."""
    with memlane.open(str(path), embedder=None) as mem:
        mem.clear("team")
        mem.clear("other")
        _load(mem, rows, copies)
        yield mem


def _inside(within: Any, where: Any) -> tuple[str, list[Any]]:
    inside, params = c.within_filter(within, column="items.namespace")
    test, test_params = where_sql.sqlite_sql(list(where_rules.conditions(where)))
    return (f"{inside} AND {test}" if inside else test), [*params, *test_params]


@SETTINGS
@given(
    **A_SEARCH,
    most=st.sampled_from([0, 6, float("inf")]),
    margin=st.sampled_from([0, 0, 3]),
    cap=st.sampled_from([2000, 4]),
)
def test_windows_return_the_joined_statements_answer(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[tuple[list[str], int]],
    copies: int,
    terms: list[str],
    k: int,
    within: Any,
    where: Any,
    first: int,
    growth: int,
    most: float,
    margin: int,
    cap: int,
) -> None:
    """``lexical`` with windows (tiny, so several are walked) against ``lexical`` running the joined statement.

    ``most`` 0 leaves every search to the joined statement, 6 after a window or two, infinity never; ``margin`` 0
    sizes the first window by ``first`` alone, 3 by the sampled share of rows meeting the filter too. ``cap`` small
    makes words common (left out of the query, then asked for when the filter leaves fewer than ``k``).
    """
    # every scope ranked by FTS5's statement, as a scope of thousands of rows is (not from its own rows)
    monkeypatch.setattr(sqlite, "SCOPE_DRIVEN_ROWS", 0)
    monkeypatch.setattr(sqlite, "LEXICAL_CAP", cap)
    _windows(monkeypatch, first=first, growth=growth, most=most, margin=margin)
    conditions = where_rules.conditions(where)
    with _loaded(tmp_path / f"w{abs(hash((tuple(terms), k, first)))}.db", rows, copies) as mem:
        store: Any = mem.store
        windowed = store.lexical(terms, within, k, conditions)
        with monkeypatch.context() as m:
            m.setattr(sqlite, "_lexical_windows", _joined_as_before)
            before = store.lexical(terms, within, k, conditions)
        assert windowed == before


@SETTINGS
@given(**A_SEARCH)
def test_every_window_walked_keeps_the_answer(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[tuple[list[str], int]],
    copies: int,
    terms: list[str],
    k: int,
    within: Any,
    where: Any,
    first: int,
    growth: int,
) -> None:
    """The windows alone, walked to the last match if need be (no fallback), on the store's own connection."""
    _windows(monkeypatch, first=first, growth=growth, most=float("inf"), margin=0)
    with _loaded(tmp_path / f"e{abs(hash((tuple(terms), k, first)))}.db", rows, copies) as mem:
        conn = mem.store._conn  # type: ignore[attr-defined]
        inside, params = _inside(within, where)
        match = " OR ".join(sqlite._quoted(t) for t in terms)
        assert sqlite._lexical_windows(conn, match, inside, params, k) == _joined_as_before(
            conn, match, inside, params, k
        )


def test_a_selective_filter_walks_several_windows_and_finds_k(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One row in ten meets the filter, the first window holds two rows: the windows go on until k are found."""
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_FIRST", 1)
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_MAX", float("inf"))
    monkeypatch.setattr(sqlite, "LEXICAL_WINDOW_MARGIN", 0)
    statements: list[str] = []
    with memlane.open(str(tmp_path / "s.db"), embedder=None) as mem:
        mem.put_many(
            [
                {"namespace": "n", "key": f"k{i}", "value": "apple " * (1 + i % 5), "metadata": {"m": i % 10}}
                for i in range(300)
            ]
        )
        conn = mem.store._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        try:
            hits = mem.store.lexical(["apple"], [()], 2, where_rules.conditions({"metadata.m": 0}))
        finally:
            conn.set_trace_callback(None)
        inside, params = _inside([()], {"metadata.m": 0})
        assert hits == [(i, -s, v) for i, s, v in _joined_as_before(conn, '"apple"', inside, params, 2)]
        assert len(hits) == 2
        assert sum("LEFT JOIN items ON items.rowid = f.rowid" in s for s in statements) >= 3


# -- the windows' sizes: the cost plan the defaults were tuned for (bench/filter.py; docs/benchmarks.md) ----------

_WINDOW = re.compile(r"LEFT JOIN items ON items\.rowid = f\.rowid")
_LIMIT = re.compile(r"LIMIT (\d+) OFFSET (\d+)\) AS f")


def _plan(mem: memlane.Memory, where: Any, k: int) -> tuple[list[Any], list[tuple[str, ...]]]:
    """The hits of a filtered search for ``apple`` over the whole store, and the statements it ran in order:
    ``("window", limit, offset)`` for each window read, ``("joined",)`` for the joined statement."""
    statements: list[str] = []
    conn = mem.store._conn  # type: ignore[attr-defined]
    conn.set_trace_callback(statements.append)  # bound values expanded: the LIMIT and OFFSET of each window
    try:
        hits = mem.store.lexical(["apple"], [()], k, where_rules.conditions(where))
    finally:
        conn.set_trace_callback(None)
    plan: list[tuple[str, ...]] = []
    for sql in statements:
        if _WINDOW.search(sql):
            found = _LIMIT.search(sql)
            assert found is not None, sql
            plan.append(("window", found.group(1), found.group(2)))
        elif "JOIN items ON items.rowid = items_fts.rowid WHERE items_fts MATCH" in sql:
            plan.append(("joined",))
    inside, params = _inside([()], where)
    assert hits == [(i, -s, v) for i, s, v in _joined_as_before(conn, '"apple"', inside, params, k)]
    return hits, plan


def _apples(mem: memlane.Memory, meets: Any, n: int) -> None:
    """``n`` rows of the same text (equal scores: ranked newest first), rowids 1..n; row ``r`` has ``m`` 0 when
    ``meets(r)``, else 1."""
    mem.put_many(
        [
            {"namespace": "n", "key": f"k{r}", "value": "apple", "metadata": {"m": 0 if meets(r) else 1}}
            for r in range(1, n + 1)
        ]
    )
    rowids = mem.store._conn.execute("SELECT min(rowid), max(rowid), count(*) FROM items").fetchone()  # type: ignore[attr-defined]
    assert tuple(rowids) == (1, n, n)


def test_the_first_window_is_four_rows_a_hit_when_every_row_meets_the_filter(tmp_path: Any) -> None:
    """A filter every sampled row meets: one window of ``LEXICAL_WINDOW_FIRST`` (4) rows per hit, then done."""
    with memlane.open(str(tmp_path / "all.db"), embedder=None) as mem:
        _apples(mem, lambda r: True, 300)
        hits, plan = _plan(mem, {"metadata.m": 0}, 3)
        assert len(hits) == 3 and plan == [("window", "12", "0")]


def test_windows_follow_the_sampled_share_then_grow_fourfold_then_give_way_to_the_joined_statement(
    tmp_path: Any,
) -> None:
    """Rowids 1-128 of 1024 meet the filter: the 128 sampled rows (every 8th, from 5) say 1/8, so the first window
    is 2 (``LEXICAL_WINDOW_MARGIN``) x 3 hits x 8 = 48 rows; the matching rows rank last (newest first), so the
    windows grow 4x (48, 192, 768) until the next would end past 2048 rows, and the joined statement answers."""
    with memlane.open(str(tmp_path / "eighth.db"), embedder=None) as mem:
        _apples(mem, lambda r: r <= 128, 1024)
        hits, plan = _plan(mem, {"metadata.m": 0}, 3)
        assert len(hits) == 3
        assert plan == [("window", "48", "0"), ("window", "144", "48"), ("window", "576", "192"), ("joined",)]


@pytest.mark.parametrize(
    ("n", "meets", "windows"),
    [
        (100, lambda r: r % 2 == 1, True),  # under 128 rows every row is sampled: half of them meet
        (100, lambda r: r == 100, True),  # the last row is sampled too
        (100, lambda r: False, False),  # none meets: the joined statement at once
        (1, lambda r: False, False),  # one row that does not meet
    ],
)
def test_a_small_store_is_sampled_whole(tmp_path: Any, n: int, meets: Any, windows: bool) -> None:
    """Below ``LEXICAL_WINDOW_SAMPLE`` rows the sample is every row: a filter any row meets is read in windows,
    one no row meets goes to the joined statement without reading a window."""
    with memlane.open(str(tmp_path / "small.db"), embedder=None) as mem:
        _apples(mem, meets, n)
        _, plan = _plan(mem, {"metadata.m": 0}, 2)
        assert plan[0][0] == ("window" if windows else "joined"), plan


def test_a_sample_of_deleted_rows_says_nothing_and_windows_are_read(tmp_path: Any) -> None:
    """Every sampled rowid deleted: no share is known, so the filter is taken as met by all (windows, not the
    joined statement at once)."""
    with memlane.open(str(tmp_path / "gaps.db"), embedder=None) as mem:
        _apples(mem, lambda r: r % 8 != 5, 1024)
        for r in range(5, 1025, 8):
            assert mem.delete("n", f"k{r}")
        _, plan = _plan(mem, {"metadata.m": 0}, 2)
        assert plan == [("window", "8", "0")]


def test_the_windows_stop_as_soon_as_k_rows_meet_the_filter(tmp_path: Any) -> None:
    """Every 4th row meets (the sample says half: every 2nd row is sampled): the first window, 12 rows for 3 hits,
    holds exactly 3 rows that meet, and no further window is read."""
    with memlane.open(str(tmp_path / "exact.db"), embedder=None) as mem:
        _apples(mem, lambda r: r % 4 == 0, 300)
        hits, plan = _plan(mem, {"metadata.m": 0}, 3)
        assert len(hits) == 3 and plan == [("window", "12", "0")]


def test_a_window_ending_at_the_largest_size_is_still_read(tmp_path: Any) -> None:
    """The windows for 2 hits are 8, 32, 128, 512 and 2048 rows long (ending there): the last ends at
    ``LEXICAL_WINDOW_MAX`` and is read. The rows meeting the filter (the even ones: every sampled row) rank below
    the 900 odd ones, so only that last window finds them."""
    with memlane.open(str(tmp_path / "max.db"), embedder=None) as mem:
        mem.put_many(
            [
                {
                    "namespace": "n",
                    "key": f"k{r}",
                    "metadata": {"m": 0 if r % 2 == 0 else 1},
                    "value": "apple and a much longer text ranked below" if r % 2 == 0 else "apple",
                }
                for r in range(1, 1801)
            ]
        )
        hits, plan = _plan(mem, {"metadata.m": 0}, 2)
        assert len(hits) == 2
        assert [int(w[1]) + int(w[2]) for w in plan if w[0] == "window"] == [8, 32, 128, 512, 2048]
        assert ("joined",) not in plan


def test_a_filtered_search_whose_words_are_in_every_row_is_newest_first_with_score_zero(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words in every row (common: BM25 cannot tell the rows apart) are not ranked in windows: the rows meeting the
    filter come newest first, each with score 0, whatever their lengths."""
    monkeypatch.setattr(sqlite, "LEXICAL_CAP", 4)
    with memlane.open(str(tmp_path / "common.db"), embedder=None) as mem:
        written = mem.put_many(
            [
                {"namespace": "n", "key": f"k{r}", "value": "apple " + "pear " * (r % 5), "metadata": {"m": r % 2}}
                for r in range(1, 21)
            ]
        )
        hits = mem.store.lexical(["apple"], [()], 3, where_rules.conditions({"metadata.m": 0}))
        newest = [i.id for i in reversed(written) if i.metadata["m"] == 0][:3]
        assert [(h[0], h[1]) for h in hits] == [(i, 0.0) for i in newest]
