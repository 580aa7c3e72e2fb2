"""Lexical cost per query (issue #36): scoped lexical nomination and document counts against the scope's size.

Usage::

    python bench/lexical.py [--n 100000] [--queries 40] [--backend sqlite|postgres|both] [--json OUT]

Builds N items whose texts are ``"value <i> text <words>"`` (``value`` and
``text`` in every row, the rest Zipf-drawn from 2,000 words), in namespaces
``bulk/<i % 500>`` except for scopes of 50, 200, 1,000, 2,000 and 5,000 rows
(``scope/<size>``) carved out of them. For each scope size, warm, the store's
own calls (what ``Memory.search``/``recall`` run for the lexical channel and
the relevance decision):

* ``lexical ['value','text']`` (every word common) and
  ``lexical ['value', <word of the scope>, 'text']``, ``k=50``;
* ``document_counts`` of those three words, ``limit=1000`` (the relevance
  decision's bound);

and, on SQLite, the two ways to rank a small scope side by side, to place the
crossover (``SCOPE_DRIVEN_ROWS``): from the scope's rows (``_scope_bm25``, by
a seek per row and word, or by FTS5's intersection with the scope's address
words) and from the words' postings (FTS5's ``bm25()`` over a
MATCH joined to the scope, which reads every posting of each word). Reported:
p50 / p99 in ms. PostgreSQL runs ``VACUUM ANALYZE`` after the load, on
``$MEMLANE_TEST_PG_URL`` or a throwaway pgserver.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memlane  # noqa: E402
from _util import format_table, machine_info, pg_url_for, postgres_server, summarize, write_json  # noqa: E402

SCOPES = (50, 200, 1000, 2000, 5000)
VOCABULARY = [f"w{i:04d}" for i in range(2000)]


def _words(rng: random.Random, count: int) -> str:
    # Zipf-like: word r drawn with weight 1/(r+1)
    return " ".join(VOCABULARY[min(int(rng.paretovariate(1.0)) - 1, 1999)] for _ in range(count))


def build(mem: memlane.Memory, n: int) -> dict[int, list[int]]:
    """Load the items; returns each scope's item numbers."""
    rng = random.Random(36)
    step = n // max(SCOPES)  # each scope spread over the whole store, on its own residue
    if step < len(SCOPES):
        raise SystemExit(f"--n must be at least {len(SCOPES) * max(SCOPES):,}")
    carved = {size: [offset + j * step for j in range(size)] for offset, size in enumerate(SCOPES)}
    owner = {i: size for size, items in carved.items() for i in items}
    for lo in range(0, n, 5000):
        mem.put_many(
            [
                {
                    "namespace": f"scope/{owner[i]}" if i in owner else f"bulk/{i % 500}",
                    "key": f"notes.{i}",
                    "value": f"value {i} text {_words(rng, rng.randint(5, 15))}",
                }
                for i in range(lo, min(n, lo + 5000))
            ]
        )
    return carved


def timed(call: Callable[[], Any], count: int) -> dict[str, float]:
    for _ in range(3):
        call()
    samples = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    lat = summarize(samples)
    return {"p50_ms": round(lat.p50_us / 1000, 3), "p99_ms": round(lat.p99_us / 1000, 3)}


def run(n: int, url: str, backend: str, count: int) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": backend, "n": n, "queries": count, "scopes": {}}
    with memlane.open(url, embedder=None) as mem:
        carved = build(mem, n)
        if backend == "postgres":
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE items")
        store: Any = mem.store
        conn = getattr(store, "_conn", None)
        for size in SCOPES:
            within = [("scope", str(size))]
            own = f"{carved[size][size // 2]}"  # the number of one of the scope's items: a word only it holds
            subjects: dict[str, Callable[[], Any]] = {
                "lexical, every word common": lambda w=within: store.lexical(["value", "text"], w, 50),
                "lexical, with a word of the scope": lambda w=within, o=own: store.lexical(["value", o, "text"], w, 50),
                "document_counts": lambda w=within, o=own: store.document_counts(["value", o, "text"], w, 1000),
            }
            from memlane.store import sqlite as s

            if backend == "sqlite" and hasattr(s, "_scope_bm25"):  # the crossover: this change's two ways
                inside, params = s.c.within_filter(within, column="items.namespace")
                bm25 = f"bm25(items_fts, 1.0, {s.ADDRESS_WEIGHT})"
                postings = (
                    f"SELECT items.id, {bm25}, items.version FROM items_fts JOIN items ON items.rowid = "
                    f"items_fts.rowid WHERE items_fts MATCH ? AND {inside} ORDER BY {bm25}, items_fts.rowid DESC "
                    "LIMIT 50"
                )
                match = '"value" OR "' + own + '" OR "text"'
                words = ["value", own, "text"]
                subjects["rank from the scope's rows: seeks"] = lambda i=inside, p=params, w=words: s._scope_bm25(
                    conn, w, i, p, 50, None
                )
                sm = s._scope_match(within)
                subjects["rank from the scope's rows: intersection"] = lambda i=inside, p=params, w=words, m=sm: (
                    s._scope_bm25(conn, w, i, p, 50, m)
                )
                subjects["rank from the postings (FTS5 bm25)"] = lambda q=postings, p=params, m=match: conn.execute(
                    q, (m, *p)
                ).fetchall()
            out["scopes"][size] = {label: timed(call, count) for label, call in subjects.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    runs = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="memlane-lexical-") as tmp:
                res = run(args.n, str(Path(tmp) / "lexical.db"), backend, args.queries)
        else:
            import psycopg

            with postgres_server() as admin_url:
                dbname = f"memlane_lexical_{os.getpid()}"
                with psycopg.connect(admin_url, autocommit=True) as admin:
                    admin.execute(f'CREATE DATABASE "{dbname}"')
                try:
                    res = run(args.n, pg_url_for(admin_url, dbname), backend, args.queries)
                finally:
                    with psycopg.connect(admin_url, autocommit=True) as admin:
                        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        runs.append(res)
        rows = [
            [f"{backend} {args.n:,}: scope {size:,}: {label}", f"{v['p50_ms']:.2f}", f"{v['p99_ms']:.2f}"]
            for size, subjects in res["scopes"].items()
            for label, v in subjects.items()
        ]
        print(format_table(["subject", "p50 ms", "p99 ms"], rows), flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "lexical", "machine": machine_info(), "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
