"""Query-space benchmark: what the fence costs against the same SQL run raw.

Usage::

    python bench/query.py [--n 100000] [--backend sqlite|postgres|both] [--json OUT]

For each backend it stores ``n`` items through ``Memory.put_many`` (no
embedder) and then measures, warm, in one process:

* **Row throughput of a large SELECT**: ``SELECT id, namespace, key, version,
  updated_at FROM items`` returning every row (``max_rows=n``), through
  ``Memory.query`` (fence, read-only connection, views with the live and
  visibility filters, value conversion, caps) against the same text run raw
  on the base table ``items`` (``sqlite3`` / ``psycopg``, ``fetchall``).
* **Validation overhead per statement**: ``fence.check`` on distinct
  statements (the parse cache cleared: what a new statement costs) and on a
  repeated one (the parse cache hit: what a saved query costs), in
  microseconds.
* **Point query latency**: ``SELECT key, value FROM items WHERE namespace = ?
  AND key = ?`` through ``Memory.query`` against raw, p50/p99: the whole
  per-statement overhead (fence, per-statement context, authorizer or role,
  result object).

Figures and the command are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import memlane  # noqa: E402
from _util import (  # noqa: E402
    format_table,
    machine_info,
    pg_url_for,
    postgres_server,
    progress,
    summarize,
    time_calls_interleaved,
    write_json,
)
from memlane.store import fence  # noqa: E402

BIG = "SELECT id, namespace, key, version, updated_at FROM items"  # ~120 bytes a row: 100k rows fit the 16 MiB cap
POINT = "SELECT key, value FROM items WHERE namespace = ? AND key = ?"
SHAPES = [
    "SELECT namespace, count(*) AS n FROM items WHERE key LIKE 'k{i}%' GROUP BY namespace ORDER BY n DESC",
    "SELECT s.name, f.predicate, o.name FROM facts_current f JOIN entities s ON s.id = f.subject_id "
    "JOIN entities o ON o.id = f.object_id WHERE f.predicate = 'p{i}'",
    "SELECT speaker, claim_text FROM claims_live WHERE text_match(claim_text, 'word{i}') "
    "ORDER BY recorded_at DESC LIMIT 10",
    "WITH recent AS (SELECT * FROM items WHERE updated_at > '2026-01-0{d}') "
    "SELECT key, json_extract(value, '$.i') FROM recent WHERE version > {i}",
]
SHAPES_PG = [s.replace("json_extract(value, '$.i')", "value::jsonb ->> 'i'") for s in SHAPES]


def fill(mem: memlane.Memory, n: int, batch: int = 5000) -> None:
    rng = random.Random(7)
    done = 0
    while done < n:
        count = min(batch, n - done)
        mem.put_many(
            [
                {
                    "namespace": f"tenant/{rng.randrange(300)}/user/{rng.randrange(20)}",
                    "key": f"k{done + i}.note",
                    "value": {"i": done + i, "text": f"note {done + i} about orchids and billing"},
                }
                for i in range(count)
            ]
        )
        done += count
        progress(f"  stored {done:,}/{n:,}")


def best_rate(fn: Any, rows: int, repeats: int) -> tuple[float, float]:
    """(best rows/s, best seconds) over ``repeats`` runs, gc paused."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            got = fn()
            took = time.perf_counter() - start
        finally:
            gc.enable()
        assert got == rows, (got, rows)
        best = min(best, took)
    return rows / best, best


def validation(dialect: str, count: int) -> dict[str, float]:
    shapes = SHAPES if dialect == "sqlite" else SHAPES_PG
    statements = [shapes[i % len(shapes)].format(i=i, d=1 + i % 9) for i in range(count)]
    fence.prepare.cache_clear()
    fence.check(statements[0], dialect, bind=False)  # import and allow-list set-up, once
    fence.prepare.cache_clear()
    start = time.perf_counter()
    for sql in statements:
        fence.check(sql, dialect, bind=False)
    cold = (time.perf_counter() - start) / count * 1e6
    start = time.perf_counter()
    for _ in range(count):
        fence.check(statements[0], dialect, bind=False)
    warm = (time.perf_counter() - start) / count * 1e6
    return {"cold_us": round(cold, 1), "cached_us": round(warm, 2), "statements": count}


def measure(mem: memlane.Memory, raw_rows: Any, raw_point: Any, n: int, args: argparse.Namespace) -> dict[str, Any]:
    dialect = mem.store.backend
    rows = min(n, 100_000)
    mem.query(BIG, max_rows=rows)  # warm: runner, caches, pages
    raw_rows()
    via, via_s = best_rate(lambda: mem.query(BIG, max_rows=rows, timeout_ms=60_000).row_count, rows, args.repeats)
    raw, raw_s = best_rate(raw_rows, rows, args.repeats)
    progress(f"  large SELECT: memlane {via:,.0f} rows/s, raw {raw:,.0f} rows/s")
    rng = random.Random(11)
    addresses = [(a.namespace, a.key) for a in mem.list(limit=1000).items]
    picks = [rng.choice(addresses) for _ in range(args.points)]
    params = [("/".join(ns), key) for ns, key in picks]
    samples = time_calls_interleaved(
        {
            "memlane": (lambda ns, key: mem.query(POINT, [ns, key]), params),
            "raw": (raw_point, params),
        },
        rounds=4,
        warmup=50,
    )
    point = {name: summarize(s).to_dict() for name, s in samples.items()}
    progress(f"  point query p50: memlane {point['memlane']['p50_us']:.0f} us, raw {point['raw']['p50_us']:.0f} us")
    return {
        "backend": dialect,
        "n": n,
        "large_select": {
            "rows": rows,
            "memlane_rows_per_s": round(via),
            "raw_rows_per_s": round(raw),
            "memlane_s": round(via_s, 4),
            "raw_s": round(raw_s, 4),
            "raw_over_memlane": round(raw / via, 2),
        },
        "validation": validation(dialect, args.statements),
        "point_query": point,
    }


def run_sqlite(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    path = workdir / "query.db"
    progress(f"sqlite: filling {n:,} items")
    with memlane.open(str(path), embedder=None) as mem:
        fill(mem, n)
        raw = sqlite3.connect(str(path), check_same_thread=False)

        def raw_rows() -> int:
            return len(raw.execute(BIG).fetchall())

        def raw_point(ns: str, key: str) -> Any:
            return raw.execute(POINT, (ns, key)).fetchall()

        try:
            return measure(mem, raw_rows, raw_point, n, args)
        finally:
            raw.close()


def run_postgres(n: int, admin_url: str, args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    name = f"memlane_bench_query_{n}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = pg_url_for(admin_url, name)
    progress(f"postgres: filling {n:,} items")
    try:
        with memlane.open(url, embedder=None) as mem:
            fill(mem, n)
            raw = psycopg.connect(url, autocommit=True)
            point_sql = POINT.replace("?", "%s")

            def raw_rows() -> int:
                return len(raw.execute(BIG).fetchall())

            def raw_point(ns: str, key: str) -> Any:
                return raw.execute(point_sql, (ns, key)).fetchall()

            try:
                return measure(mem, raw_rows, raw_point, n, args)
            finally:
                raw.close()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        big, val, pt = r["large_select"], r["validation"], r["point_query"]
        rows.append(
            [
                r["backend"],
                f"{r['n']:,}",
                f"{big['memlane_rows_per_s']:,}",
                f"{big['raw_rows_per_s']:,}",
                f"{big['raw_over_memlane']}x",
                f"{val['cold_us']:,}",
                f"{val['cached_us']}",
                f"{pt['memlane']['p50_us']:.0f} / {pt['memlane']['p99_us']:.0f}",
                f"{pt['raw']['p50_us']:.0f} / {pt['raw']['p99_us']:.0f}",
            ]
        )
    headers = [
        "backend",
        "items",
        "SELECT rows/s memlane",
        "raw",
        "raw/memlane",
        "check us (new)",
        "check us (cached)",
        "point p50/p99 us memlane",
        "raw",
    ]
    return format_table(headers, rows, title="query space")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="items to store (default 100000; SELECTs cap at 100000)")
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="sqlite")
    ap.add_argument("--repeats", type=int, default=5, help="runs of the large SELECT per side (best is kept)")
    ap.add_argument("--points", type=int, default=2000, help="timed point queries per side")
    ap.add_argument("--statements", type=int, default=400, help="distinct statements for the validation timing")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    args = ap.parse_args(argv)
    results: list[dict[str, Any]] = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="memlane-bench-query-") as tmp:
            results.append(run_sqlite(args.n, Path(tmp), args))
    if args.backend in ("postgres", "both"):
        with postgres_server() as admin_url:
            results.append(run_postgres(args.n, admin_url, args))
    print(report(results))
    if args.json:
        write_json(args.json, {"machine": machine_info(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
