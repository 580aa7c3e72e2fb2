"""An exact top k above FTS5 (issue #36, part 3): MaxScore, measured and not adopted.

``exact_top`` returns what ``SqliteStore.lexical``'s ranking statement
returns (FTS5's ``bm25()`` over the OR of the words, ties newest first), bit
for bit, without scoring every posting where the rarest words settle it
(``tests/test_lexical_topk.py`` proves the equality on random corpora).
``bench/lexical_engine.py`` times it against the statement on
``bench/search.py``'s stores: it answers too few natural questions and costs
too much where it tries and gives up to pay at 1M (``docs/benchmarks.md``,
"Lexical top k at 1M (#36)"), so the store keeps the statement.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Collection, Sequence
from typing import Any

from memlane.store.sqlite import _B, _K1, _MARK, _SEEK, ADDRESS_WEIGHT, _quoted, _sizes, varints

# tried while the words it must score (the rarest) hold at most this share
# of all the query's postings, else FTS5's own statement scores them all at about the same cost (at 1M rows, "of
# to": 45 % and no faster; "a about", 19 %: twice as fast; bench/lexical_engine.py)
EXACT_TOP_SHARE = 0.3
# ... and where the rarest word's IDF outweighs the others' bound, judged on their first this many rows
EXACT_TOP_PROBE = 2000
# ... and the rarest word's IDF (about its usual score) is at least this many times the others' bound
EXACT_TOP_ODDS = 1.0
# the essential words' rows, each scored in full (a seek per word), all read when at most this many, else their best
# k only, and only where the other words can add at most EXACT_TOP_FLOOR_REACH (words at FTS5's floor IDF)
EXACT_TOP_CANDIDATES = 256
EXACT_TOP_FLOOR_REACH = 1e-3
# a candidate's full score must beat what a row it did not see could reach by this relative margin (rounding)
_BOUND_MARGIN = 1e-9
# a word's rows walked (to keep the candidates') cost about this many times less than a seek per candidate
_WALK_PER_SEEK = 150


_varints = varints  # the store's own reader of FTS5 records


def _fts_totals(conn: sqlite3.Connection) -> tuple[int, float] | None:
    """FTS5's row count and mean row length in tokens, from the averages record its ``bm25()`` reads."""
    row = conn.execute("SELECT block FROM items_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return None
    values = _varints(row[0])
    if not values or values[0] <= 0:
        return None
    return values[0], float(sum(values[1:])) / float(values[0])


def _idf(rows: int, hits: int) -> float:
    """FTS5's IDF of a phrase in ``hits`` of ``rows`` rows, its floor included."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else 1e-6


def _term_score(idf: float, freq: float, length: int, mean: float) -> float:
    """One phrase's part of FTS5's ``bm25()`` for a row, computed as its C code does it, operation by operation."""
    return idf * ((freq * (_K1 + 1.0)) / (freq + _K1 * (1 - _B + _B * float(length) / mean)))


def _frequencies(conn: sqlite3.Connection, rowids: Collection[int], term: str, hits: int) -> dict[int, float]:
    """The weighted occurrences of ``term`` (text 1, address ``ADDRESS_WEIGHT``) in each of ``rowids`` holding it.

    By a seek per row, or, for a word in few rows, by walking its rows once
    and keeping ours (a seek costs about ``_WALK_PER_SEEK`` rows walked).
    """
    word = _quoted(term)
    listed = json.dumps(list(rowids))
    if hits < _WALK_PER_SEEK * len(rowids):
        marked = conn.execute(
            f"SELECT rowid, highlight(items_fts, 0, '{_MARK}', ''), highlight(items_fts, 1, '{_MARK}', '') "
            "FROM items_fts WHERE items_fts MATCH ? AND +rowid IN (SELECT value FROM json_each(?))",
            (word, listed),
        ).fetchall()
    else:
        marked = conn.execute(_SEEK, (listed, word)).fetchall()
    return {r: (t or "").count(_MARK) + ADDRESS_WEIGHT * (a or "").count(_MARK) for r, t, a in marked}


def exact_top(
    conn: sqlite3.Connection, terms: Sequence[str], inside: str, params: Sequence[Any], k: int
) -> list[tuple[str, float, int]] | None:
    """The top ``k`` of FTS5's ``bm25()`` over the OR of ``terms`` among the rows meeting ``inside`` (none: all),
    the same rows, scores and order (ties newest first) as its ranking statement, without scoring every posting;
    ``None`` where that statement is the cheaper way.

    MaxScore above FTS5: a word adds at most ``idf * (k1 + 1)`` to a row's
    score. The rarest words (the essential ones) are ranked by FTS5 alone,
    their top ``m`` rows are scored in full (the others' occurrences counted
    with ``highlight()``, lengths from FTS5's docsize records, IDF from each
    word's row count and the store's row count and mean length, as
    ``bm25()`` computes them, in the query's order), and the answer stands
    when the ``k``-th full score beats what any row left out could reach:
    the other words' bounds, plus the last essential score read where not
    all the essential rows were. Else one more essential word, or ``None``
    (the statement ranks): where the essential words hold more than
    ``EXACT_TOP_SHARE`` of the postings, or more than
    ``EXACT_TOP_CANDIDATES`` rows beside words above FTS5's floor IDF, or the
    rarest word's IDF is below ``EXACT_TOP_ODDS`` times the others' bound
    (judged first on counts probed up to ``EXACT_TOP_PROBE`` rows). Only for
    plain one-token words (a phrase's occurrences are then ``highlight()``'s
    marks).
    """
    if k <= 0 or len(terms) < 2 or len(set(terms)) != len(terms):
        return None
    if not all(t.isascii() and t.isalnum() for t in terms):
        return None
    totals = _fts_totals(conn)
    if totals is None:
        return None
    rows, mean = totals
    # first each word's rows counted up to EXACT_TOP_PROBE (its count below that, else one estimated from the
    # rowids reached, which are dense): where the rarest word's usual score (about its IDF) cannot beat the others'
    # bound, no candidates can settle it and the statement is left to rank, for little more than these counts
    probe = [
        conn.execute(
            "SELECT count(*), max(rowid) FROM (SELECT rowid FROM items_fts WHERE items_fts MATCH ? LIMIT ?)",
            (_quoted(t), EXACT_TOP_PROBE),
        ).fetchone()
        for t in terms
    ]
    guess = [n if n < EXACT_TOP_PROBE else min(rows, n * rows // max(last, 1)) for n, last in probe]
    # a word no row holds adds nothing to any row's score (in bm25() too): left out
    present = [i for i in range(len(terms)) if guess[i]]
    if len(present) < 2:
        return None
    first = min(present, key=lambda i: guess[i])
    others = math.fsum(_idf(rows, guess[i]) * (_K1 + 1.0) for i in present if i != first)
    if _idf(rows, guess[first]) < EXACT_TOP_ODDS * others:
        return None
    if guess[first] > max(EXACT_TOP_CANDIDATES, k) and others > EXACT_TOP_FLOOR_REACH:
        return None  # too many rows to read them all, and the others' bound too wide to stop at the best k
    hits = [
        n
        if n < EXACT_TOP_PROBE
        else int(conn.execute("SELECT count(*) FROM items_fts WHERE items_fts MATCH ?", (_quoted(t),)).fetchone()[0])
        for t, (n, _) in zip(terms, probe, strict=True)
    ]
    idf = [_idf(rows, h) for h in hits]
    rarest = sorted(present, key=lambda i: (hits[i], i))
    bm25 = f"bm25(items_fts, 1.0, {ADDRESS_WEIGHT})"
    if inside:
        ranked = (
            f"SELECT items_fts.rowid, -{bm25} FROM items_fts JOIN items ON items.rowid = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND {inside} ORDER BY {bm25}, items_fts.rowid DESC LIMIT ?"
        )
    else:
        ranked = f"SELECT rowid, -{bm25} FROM items_fts WHERE items_fts MATCH ? ORDER BY {bm25}, rowid DESC LIMIT ?"

    def match_of(chosen: Sequence[int]) -> str:
        return " OR ".join(_quoted(terms[i]) for i in chosen)

    essential = 1
    while essential < len(rarest):
        chosen = sorted(rarest[:essential])
        held = sum(hits[i] for i in chosen)
        if held > EXACT_TOP_SHARE * sum(hits):
            return None
        rest = rarest[essential:]
        reach = math.fsum(idf[i] * (_K1 + 1.0) for i in rest)
        # every row of the essential words where they are few; else their best k, which can settle it only where
        # the other words add next to nothing (at FTS5's floor IDF): the scores of rows holding a word once lie
        # too close together for a bound of idf * (k1 + 1) to part the k-th from the rows below it
        if held <= max(EXACT_TOP_CANDIDATES, k):
            m = held
        elif reach <= EXACT_TOP_FLOOR_REACH:
            m = k
        else:
            return None
        found = conn.execute(ranked, (match_of(chosen), *params, m)).fetchall()
        if not found:
            essential += 1
            continue
        partial = {r: s for r, s in found}
        length = {
            r: _sizes(sz)
            for r, sz in conn.execute(
                "SELECT id, sz FROM items_fts_docsize WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(partial)),),
            )
        }
        # the full score, phrase by phrase in the query's order, as bm25() sums it; with one essential word its
        # part is the statement's own score
        alone = chosen[0] if essential == 1 else None
        freq = {i: _frequencies(conn, partial.keys(), terms[i], hits[i]) for i in rarest if i != alone}
        score: dict[int, float] = {}
        for r in partial:
            total = 0.0
            for i in range(len(terms)):
                if i == alone:
                    total += partial[r]
                elif i in freq and r in freq[i]:
                    total += _term_score(idf[i], freq[i][r], length[r], mean)
            score[r] = total
        top = sorted(score.items(), key=lambda kv: (-kv[1], -kv[0]))
        # a row left out holds none of the essential words or, where not all their rows were read, one they rank
        # at most as high as the last read
        complete = m >= held
        unseen = (0.0 if complete else found[-1][1]) + reach
        if len(top) >= k and top[k - 1][1] > unseen * (1.0 + _BOUND_MARGIN):
            best = top[:k]
            about = {
                r: (item_id, version)
                for r, item_id, version in conn.execute(
                    "SELECT rowid, id, version FROM items WHERE rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps([r for r, _ in best]),),
                )
            }
            return [(about[r][0], s, about[r][1]) for r, s in best if r in about]
        if not complete:
            return None
        essential += 1  # rows holding only the other words may beat the k-th: one more essential word
    return None
