"""Lexical top k at scale (issue #36): FTS5's ``bm25()`` statement, the exact top k above it, and tantivy.

Usage::

    python bench/lexical_engine.py --db STORE.db [--queries 300] [--engine fts5|tantivy|both]
                                   [--index DIR] [--json OUT]

``STORE.db`` is a store ``bench/search.py --reuse DIR`` built (read, never
written: opened read-only); the questions are its own (``ScaleCorpus``: 2-6
Zipf words, stop words left in, half opened by a question word), the same
seed and namespaces.

``fts5``: per question, memlane's query words (``rank.terms``, then the
store's common-word cut, ``SqliteStore._bounded``), ranked at ``k`` = 50 (what
``Memory.search`` asks the lexical channel for), interleaved in rotating blocks:

* ``FTS5 bm25() statement``: the statement ``SqliteStore.lexical`` runs (every
  posting of every word scored);
* ``exact top k``: ``fts5_topk.exact_top`` (MaxScore above FTS5), falling back to
  the statement where it gives no answer (measured, not adopted by the store);
* ``raw FTS5 (all words, top 10)``: ``bench/search.py``'s raw engine.

Every answer of the exact top k is checked against the statement's (ids,
scores, order). ``tantivy`` (``pip install tantivy``, the ``bench`` extra):
the same texts and address words (read from the store's ``items_lexical``)
indexed into ``--index DIR`` (English stemming, the address field at 0.25),
build time and size; top 10 and top 50 p50/p99 on the same questions (every
word, no cut: its block-max WAND skips what cannot make the top k); then
two processes open the memory-mapped index at once and search: each one's
``Rss``, ``Pss`` and private bytes (``/proc/PID/smaps_rollup``) against the
index's size. Tantivy's BM25 is its own (per field, another IDF): its
rankings are not FTS5's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fts5_topk  # noqa: E402
from _util import (  # noqa: E402
    fmt_bytes,
    format_table,
    machine_info,
    progress,
    smaps_rollup,
    summarize,
    time_calls_interleaved,
    write_json,
)
from memlane.domain.search import rank  # noqa: E402
from memlane.store import sqlite as store_sqlite  # noqa: E402
from search import RAW_FTS, ScaleCorpus, match_expr  # noqa: E402

K = 50  # what Memory.search asks the lexical channel for (max(50, 2 * limit))


class _Shim:
    """What ``SqliteStore._bounded`` reads of a store: its connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn


def _statement(conn: sqlite3.Connection, terms: list[str], k: int) -> list[tuple[str, float, int]]:
    """``SqliteStore.lexical``'s unscoped ranking statement (scores made positive, as it returns them)."""
    bm25 = f"bm25(items_fts, 1.0, {store_sqlite.ADDRESS_WEIGHT})"
    sql = (
        f"SELECT items.id, f.score, items.version FROM (SELECT rowid, {bm25} AS score "
        f"FROM items_fts WHERE items_fts MATCH ? ORDER BY {bm25}, rowid DESC LIMIT ?) AS f "
        "JOIN items ON items.rowid = f.rowid ORDER BY f.score, f.rowid DESC"
    )
    rows = conn.execute(sql, (" OR ".join(store_sqlite._quoted(t) for t in terms), k)).fetchall()
    return [(i, -s, v) for i, s, v in rows]


def _newest(conn: sqlite3.Connection, terms: list[str], k: int) -> list[tuple[str, float, int]]:
    """Every word common: the newest ``k`` rows holding any (``lexical``'s way, the same for both subjects)."""
    sql = (
        "SELECT items.id, 0.0, items.version FROM (SELECT rowid FROM items_fts WHERE items_fts MATCH ? "
        "ORDER BY rowid DESC LIMIT ?) AS f JOIN items ON items.rowid = f.rowid"
    )
    return conn.execute(sql, (" OR ".join(store_sqlite._quoted(t) for t in terms), k)).fetchall()


def fts5(db: str, questions: list[str], warm: int, rounds: int) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    shim: Any = _Shim(conn)
    cut = []
    for q in questions:
        terms, common = store_sqlite.SqliteStore._bounded(shim, rank.terms(q), max(store_sqlite.LEXICAL_CAP, K))
        cut.append((terms, common))

    def before(terms: list[str], common: bool) -> Any:
        if not terms:
            return []
        return _newest(conn, terms, K) if common else _statement(conn, terms, K)

    def now(terms: list[str], common: bool) -> Any:
        if not terms:
            return []
        if common:
            return _newest(conn, terms, K)
        found = fts5_topk.exact_top(conn, terms, "", [], K)
        return found if found is not None else _statement(conn, terms, K)

    def raw(match: str) -> Any:
        return conn.execute(RAW_FTS, (match,)).fetchall()

    progress(f"fts5: checking the exact top k against the statement on {len(questions)} questions")
    answered = same = 0
    pairs: list[tuple[float, float]] = []  # on the questions it answered: (statement ms, exact top k ms)
    for terms, common in cut:
        if terms and not common:
            t0 = time.perf_counter()
            found = fts5_topk.exact_top(conn, terms, "", [], K)
            t1 = time.perf_counter()
            if found is not None:
                answered += 1
                same += found == _statement(conn, terms, K)
                pairs.append(((time.perf_counter() - t1) * 1000, (t1 - t0) * 1000))
    progress(f"fts5: timing {len(questions) - warm} questions x 3 subjects (+{warm} warm-up)")
    samples = time_calls_interleaved(
        {
            "FTS5 bm25() statement (k=50)": (before, cut),
            "exact top k, else the statement (k=50)": (now, cut),
            "raw FTS5, all words (top 10)": (raw, [(match_expr(q),) for q in questions]),
        },
        rounds=rounds,
        warmup=warm,
    )
    conn.close()
    return {
        "questions": len(questions) - warm,
        "exact_answered": answered,
        "exact_same_as_statement": same,
        "answered_ms": [(round(a, 2), round(b, 2)) for a, b in pairs],
        "latency_us": {name: summarize(s).to_dict() for name, s in samples.items()},
    }


# -- tantivy -----------------------------------------------------------------------------------------


def _schema() -> Any:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("ref", stored=True, indexed=True, fast=True)
    sb.add_text_field("text", tokenizer_name="en_stem")
    sb.add_text_field("address", tokenizer_name="en_stem")
    return sb.build()


def tantivy_build(db: str, index_dir: str) -> dict[str, Any]:
    import tantivy

    if os.path.isdir(index_dir):
        shutil.rmtree(index_dir)
    os.makedirs(index_dir)
    index = tantivy.Index(_schema(), path=index_dir)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    t0 = time.perf_counter()
    writer = index.writer(heap_size=512 * 1024 * 1024, num_threads=2)
    count = 0
    for ref, text, address in conn.execute("SELECT ref, text, address FROM items_lexical"):
        writer.add_document(tantivy.Document(ref=ref, text=text or "", address=address))
        count += 1
        if count % 200_000 == 0:
            progress(f"tantivy: {count:,} added, {time.perf_counter() - t0:.0f} s")
    writer.commit()
    writer.wait_merging_threads()
    seconds = time.perf_counter() - t0
    conn.close()
    size = sum(p.stat().st_size for p in Path(index_dir).rglob("*") if p.is_file())
    return {
        "documents": count,
        "build_seconds": round(seconds, 1),
        "items_per_s": round(count / seconds),
        "index_bytes": size,
    }


def _tantivy_query(index: Any, terms: list[str]) -> Any:
    return index.parse_query(" ".join(f'"{t}"' for t in terms), ["text", "address"], field_boosts={"address": 0.25})


def tantivy_search(index_dir: str, questions: list[str], warm: int, rounds: int) -> dict[str, Any]:
    import tantivy

    index = tantivy.Index.open(index_dir)
    searcher = index.searcher()
    queries = [_tantivy_query(index, rank.terms(q)) for q in questions]

    def top(query: Any, k: int) -> Any:
        return searcher.search(query, k).hits

    samples = time_calls_interleaved(
        {
            "tantivy top 10": (top, [(q, 10) for q in queries]),
            "tantivy top 50": (top, [(q, K) for q in queries]),
        },
        rounds=rounds,
        warmup=warm,
    )
    return {"latency_us": {name: summarize(s).to_dict() for name, s in samples.items()}}


def agreement(db: str, index_dir: str, questions: list[str], count: int = 100) -> dict[str, Any]:
    """How much of FTS5's top 10 (``lexical``'s statement, after its cut) tantivy's top 10 holds, per question."""
    import tantivy

    index = tantivy.Index.open(index_dir)
    searcher = index.searcher()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    shim: Any = _Shim(conn)
    bm25 = f"bm25(items_fts, 1.0, {store_sqlite.ADDRESS_WEIGHT})"
    shares = []
    for q in questions[:count]:
        terms, common = store_sqlite.SqliteStore._bounded(shim, rank.terms(q), max(store_sqlite.LEXICAL_CAP, K))
        if not terms or common:
            continue
        fts = {
            r[0]
            for r in conn.execute(
                f"SELECT rowid FROM items_fts WHERE items_fts MATCH ? ORDER BY {bm25}, rowid DESC LIMIT 10",
                (" OR ".join(store_sqlite._quoted(t) for t in terms),),
            )
        }
        hits = searcher.search(_tantivy_query(index, rank.terms(q)), 10).hits
        mine = {searcher.doc(address)["ref"][0] for _, address in hits}
        if fts:
            shares.append(len(fts & mine) / len(fts))
    conn.close()
    return {"questions": len(shares), "mean_share_of_fts5_top10": round(sum(shares) / max(len(shares), 1), 3)}


_SEARCHER = """
import json, os, sys, time
sys.path.insert(0, {bench!r})
import tantivy
from lexical_engine import _tantivy_query
from memlane.domain.search import rank
index = tantivy.Index.open({index!r})
searcher = index.searcher()
print("ready", flush=True)
questions = json.loads(sys.stdin.readline())
t = time.perf_counter()
for q in questions:
    searcher.search(_tantivy_query(index, rank.terms(q)), 10).hits
print(json.dumps({{"seconds": time.perf_counter() - t}}), flush=True)
sys.stdin.readline()  # held open until the parent has read its memory
"""


def _mapped(pid: int, folder: str) -> dict[str, int]:
    """A process's resident bytes of the files under ``folder`` it maps (``/proc/PID/smaps``): Rss, Pss, private."""
    out = {"rss": 0, "pss": 0, "private": 0}
    inside = False
    prefix = os.path.realpath(folder) + os.sep
    with open(f"/proc/{pid}/smaps", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                inside = len(parts) >= 6 and parts[5].startswith(prefix)
            elif inside and len(parts) == 3 and parts[2] == "kB":
                name, kb = parts[0].rstrip(":"), int(parts[1]) * 1024
                if name == "Rss":
                    out["rss"] += kb
                elif name == "Pss":
                    out["pss"] += kb
                elif name in ("Private_Clean", "Private_Dirty"):
                    out["private"] += kb
    return out


def tantivy_processes(index_dir: str, questions: list[str], count: int) -> dict[str, Any]:
    """``count`` processes open the index at once, each runs every question; their memory while still open."""
    code = _SEARCHER.format(bench=os.path.dirname(os.path.abspath(__file__)), index=index_dir)
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    for p in procs:
        assert p.stdout is not None
        p.stdout.readline()  # imported and opened: memory from here on is the searches'
    base = [smaps_rollup(p.pid) for p in procs]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(json.dumps(questions) + "\n")
        p.stdin.flush()
    runs = []
    for p in procs:
        assert p.stdout is not None
        runs.append(json.loads(p.stdout.readline()))
    after = [smaps_rollup(p.pid) for p in procs]
    mapped = [_mapped(p.pid, index_dir) for p in procs]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=60)
    out = []
    for b, a, r, f in zip(base, after, runs, mapped, strict=True):
        out.append(
            {
                "index_mapped": f,
                "seconds": round(r["seconds"], 2),
                "rss": a.get("Rss", 0),
                "pss": a.get("Pss", 0),
                "private": a.get("Private_Clean", 0) + a.get("Private_Dirty", 0),
                "shared": a.get("Shared_Clean", 0) + a.get("Shared_Dirty", 0),
                "private_growth": a.get("Private_Clean", 0)
                + a.get("Private_Dirty", 0)
                - b.get("Private_Clean", 0)
                - b.get("Private_Dirty", 0),
            }
        )
    return {"processes": count, "per_process": out}


def _ms(us: float) -> str:
    return f"{us / 1000:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a store bench/search.py built (opened read-only)")
    ap.add_argument("--queries", type=int, default=300, help="timed questions")
    ap.add_argument("--warm", type=int, default=30, help="untimed questions first")
    ap.add_argument("--rounds", type=int, default=4, help="alternating blocks per measurement")
    ap.add_argument("--engine", choices=("fts5", "tantivy", "both"), default="fts5")
    ap.add_argument("--index", default=None, help="tantivy's index folder (default: <db>.tantivy)")
    ap.add_argument("--reuse-index", action="store_true", help="search an index already built in --index")
    ap.add_argument("--processes", type=int, default=2, help="tantivy processes opening the index at once")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--namespaces", type=int, default=1000)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    info = machine_info()
    print(
        f"machine: {info['cpu_model']}, {info['cpu_count']} CPUs, SQLite {info['sqlite']}; "
        f"load {info['loadavg_1_5_15']}\ncommand: python bench/lexical_engine.py {' '.join(argv or sys.argv[1:])}",
        flush=True,
    )
    questions = ScaleCorpus(args.seed, args.namespaces).questions(args.queries + args.warm)
    res: dict[str, Any] = {"db": args.db, "machine": info}
    rows = []
    if args.engine in ("fts5", "both"):
        res["fts5"] = f = fts5(args.db, questions, args.warm, args.rounds)
        print(
            f"exact top k answered {f['exact_answered']} of {f['questions'] + args.warm} questions itself, "
            f"{f['exact_same_as_statement']} of them the same as the statement; on those, statement / exact ms: "
            + ", ".join(f"{a:.1f}/{b:.1f}" for a, b in f["answered_ms"]),
            flush=True,
        )
        for name, s in f["latency_us"].items():
            rows.append([name, _ms(s["p50_us"]), _ms(s["p90_us"]), _ms(s["p99_us"])])
    if args.engine in ("tantivy", "both"):
        index_dir = args.index or args.db + ".tantivy"
        if not args.reuse_index:
            progress(f"tantivy: building {index_dir}")
            res["tantivy_build"] = b = tantivy_build(args.db, index_dir)
            print(
                f"tantivy build: {b['documents']:,} documents in {b['build_seconds']} s "
                f"({b['items_per_s']:,}/s), {fmt_bytes(b['index_bytes'])}",
                flush=True,
            )
        res["tantivy"] = t = tantivy_search(index_dir, questions, args.warm, args.rounds)
        for name, s in t["latency_us"].items():
            rows.append([name, _ms(s["p50_us"]), _ms(s["p90_us"]), _ms(s["p99_us"])])
        res["tantivy_agreement"] = ag = agreement(args.db, index_dir, questions)
        print(
            f"tantivy's top 10 holds {ag['mean_share_of_fts5_top10']:.1%} of FTS5's top 10 "
            f"(mean over {ag['questions']} questions)",
            flush=True,
        )
        res["tantivy_processes"] = tp = tantivy_processes(index_dir, questions, args.processes)
        for i, p in enumerate(tp["per_process"]):
            print(
                f"tantivy process {i + 1} of {tp['processes']}: {p['seconds']} s for {len(questions)} questions; "
                f"Rss {fmt_bytes(p['rss'])}, Pss {fmt_bytes(p['pss'])}, private {fmt_bytes(p['private'])} "
                f"(+{fmt_bytes(p['private_growth'])} while searching), shared {fmt_bytes(p['shared'])}; "
                f"the index's files: Rss {fmt_bytes(p['index_mapped']['rss'])}, "
                f"Pss {fmt_bytes(p['index_mapped']['pss'])}, private {fmt_bytes(p['index_mapped']['private'])}",
                flush=True,
            )
    print(format_table(["subject", "p50 ms", "p90 ms", "p99 ms"], rows), flush=True)
    if args.json:
        write_json(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
