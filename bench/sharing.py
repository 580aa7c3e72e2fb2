"""Shared memory over loopback HTTP: what the scope in the statement and the work gate cost an agent.

Usage::

    python bench/sharing.py [--backend sqlite|postgres|both] [--json OUT]

Each backend gets three stores and real ``memlane serve --embedder fake``
processes on ``127.0.0.1`` (the service with its defaults: at most 4 searches,
recalls or query-space statements at once per agent, 16 in all; more get 429
with ``Retry-After``). Every request is timed in this process with ``httpx``
(one keep-alive connection per client), so figures include HTTP on loopback.

1. **Agent search over 50 rooms vs an admin's**: 50 rooms x 200 items of
   generated sentences, plus 10 rooms, 20 agent namespaces and a project tree
   the agent may not read (4,000 more items). Agent ``reader`` is a member of
   the 50 rooms: its search runs over 51 readable prefixes (its namespace and
   the rooms) passed into one statement. The same queries go, interleaved in
   rotating blocks, to ``POST /v1/search`` as ``reader``, as an admin (whole
   store) and as an admin under ``room/``, lexical (BM25 only) and hybrid
   (lexical + vector, RRF). Reported: p50/p99 per subject and agent/admin p50
   (goal: at most 1.3). Every hit the agent gets is checked to be readable.
2. **Point get with 20,000 rooms**: one store with 20,000 rooms, 5,000 agents
   (4 rooms each: 20,000 memberships, every change in the access log) and one
   with no rooms, the same 1,000 items in each. An ordinary agent reads its own
   items with ``POST /v1/get`` on both services, interleaved. Reported: p50/p99
   and the ratio (goal: at most 1.2), and how long an admin takes to list every
   room with ``GET /v1/admin/rooms?limit=1000`` page by page.
3. **One agent saturating the query space**: a separate process runs 40
   threads, each sending ``POST /v1/query`` with a recursive CTE counting to
   5,000,000 (``timeout_ms`` 20000) as agent ``hog``, retrying every 429 --
   "polite" sleeps the ``Retry-After`` seconds, "hostile" retries at once.
   Meanwhile agent ``victim`` does sequential ``POST /v1/get`` of its own items
   for 10 s and a thread polls ``GET /v1/health``. Reported: the victim's p50/p99
   (goal: p99 under 50 ms; the same gets without the hog first, as a baseline),
   the hog's requests by answer (200, 429, other) and the health p99.

4. **Broad reads of an agent in 1 to 50,000 rooms**: one store with ``--broad-rooms`` (50,000) rooms and
   an agent in the first 1, 100, 10,000 and 50,000 of them (bulk SQL: the set-up is seconds, reported). Every
   agent may read the same 1,100 items (room r00000's 1,000 and 100 of its own; the other rooms are empty)
   beside 10,000 it may not, so only the scope changes. Each agent's first request (it loads the agent's
   memberships and makes its scope) is timed alone; then ``list`` (100), ``fetch`` of a key, a query-space
   statement over ``items``, ``GET /v1/export`` and a hybrid ``search``, each ``--broad-rounds`` blocks of
   ``--broad-block`` requests per agent, the agents' order rotated, with the service's CPU time per request
   (``/proc``). Checked: every agent gets the same answer. Goal: at 10,000 rooms, p50 within 3x of 1 room
   and under 200 ms.

``--phases`` runs some of them (e.g. ``--phases broad``).

The load generator runs on the same machine as the services and PostgreSQL;
on a small or shared machine absolute times move with the load, the ratios
much less (the subjects of each ratio are timed interleaved in the same run).

Example::

    python bench/sharing.py --backend both --json /tmp/sharing.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

import memlane  # noqa: E402
from _util import (  # noqa: E402
    Goal,
    format_table,
    free_port,
    machine_info,
    percentile,
    pg_url_for,
    postgres_server,
    progress,
    ratio,
    summarize,
    time_calls_interleaved,
    write_json,
)
from memlane.core.access import Access  # noqa: E402

WORDS = (
    "orchid basil invoice deploy billing cutover standup deadline theme font editor release budget vendor "
    "contract roadmap sprint incident pager latency cache index vector lexical ranking memory agent room "
    "grant token audit backup restore migration schema replica quorum ledger forecast churn pricing "
    "harbor lantern meadow copper falcon glacier ember willow summit canyon prairie tundra delta"
).split()
CTE = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {n}) SELECT count(*) FROM r"
AT = "2026-01-01T00:00:00+00:00"

GOAL_SEARCH = Goal("agent/admin p50 <= 1.3", 1.3)
GOAL_ROOMS = Goal("20k rooms/no rooms p50 <= 1.2", 1.2)
GOAL_VICTIM = Goal("victim get p99 < 50 ms", 50.0)
GOAL_BROAD = Goal("10k rooms / 1 room p50 <= 3, and < 200 ms", 3.0)
GOAL_BROAD_ROOMS = 10_000
GOAL_BROAD_MS = 200.0


def sentence(rng: random.Random, n: int = 10) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def ms(us: float) -> float:
    return us / 1000


# -- stores and services ------------------------------------------------------------------


class Stores:
    """Fresh stores for one backend: SQLite files in the work folder, or databases on one PostgreSQL."""

    def __init__(self, backend: str, workdir: Path, admin_url: str | None) -> None:
        self.backend = backend
        self.workdir = workdir
        self.admin_url = admin_url
        self.made: list[str] = []

    def create(self, name: str) -> str:
        if self.backend == "sqlite":
            return str(self.workdir / f"sharing-{name}.db")
        import psycopg

        assert self.admin_url is not None
        db = f"memlane_bench_sharing_{name}_{os.getpid()}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{db}"')
        self.made.append(db)
        return pg_url_for(self.admin_url, db)

    def close(self) -> None:
        if not self.made:
            return
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for db in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


class Server:
    """``memlane serve --embedder fake`` on loopback, importing the same memlane as this process.

    The store already has an admin (made by the seeding), so the service prints no token.
    """

    def __init__(self, url: str, workdir: Path, workers: int = 1) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        src = str(Path(memlane.__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
        self._log = (workdir / f"serve-{self.port}.log").open("w")
        cmd = [sys.executable, "-c", "import sys; from memlane.cli import main; sys.argv[0] = 'memlane'; main()"]
        cmd += ["serve", "--db", url, "--host", "127.0.0.1", "--port", str(self.port), "--embedder", "fake"]
        cmd += ["--workers", str(workers)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memlane serve exited with {self.proc.returncode}; see {self._log.name}")
            try:
                if httpx.get(f"{self.base}/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("memlane serve did not answer within 60 s")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()
        return int(self.proc.returncode)


def client(base: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.Client(base_url=base, headers=headers, timeout=60, limits=limits)


def put_all(mem: memlane.Memory, records: list[dict[str, Any]], batch: int = 2000) -> None:
    for i in range(0, len(records), batch):
        mem.put_many(records[i : i + batch])


# -- 1. agent search over 50 rooms vs an admin's ---------------------------------------------


def seed_search(url: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    with memlane.open(url, embedder="fake") as mem:
        acc = Access(mem)
        _, admin = acc.create_agent("root", admin=True)
        _, reader = acc.create_agent("reader")
        _, hog = acc.create_agent("hog")
        _, victim = acc.create_agent("victim")
        rooms = [f"team{i:02d}" for i in range(args.rooms)]
        for room in rooms:
            acc.create_room(room)
            acc.add_member(room, "reader")
        for i in range(10):
            acc.create_room(f"closed{i}")
        records = [
            {"namespace": ("room", room), "key": f"doc{j:04d}", "value": sentence(rng)}
            for room in rooms
            for j in range(args.room_items)
        ]
        records += [
            {"namespace": ("room", f"closed{i}"), "key": f"doc{j:04d}", "value": sentence(rng)}
            for i in range(10)
            for j in range(100)
        ]
        records += [
            {"namespace": ("agent", f"other{i:02d}"), "key": f"note{j:03d}", "value": sentence(rng)}
            for i in range(20)
            for j in range(100)
        ]
        records += [
            {"namespace": ("proj", f"p{j % 10}", "notes"), "key": f"n{j:04d}", "value": sentence(rng)}
            for j in range(1000)
        ]
        records += [
            {"namespace": ("agent", "reader"), "key": f"mine{j:02d}", "value": sentence(rng)} for j in range(50)
        ]
        records += [{"namespace": ("agent", "victim"), "key": f"v{j:03d}", "value": sentence(rng)} for j in range(100)]
        put_all(mem, records)
        stats = mem.stats()
        total, vectors = stats.active_items, stats.vectors
    readable = [("agent", "reader")] + [("room", r) for r in rooms]
    return {
        "tokens": {"admin": admin, "reader": reader, "hog": hog, "victim": victim},
        "readable": readable,
        "items": total,
        "vectors": vectors,
        "victim_keys": [f"v{j:03d}" for j in range(100)],
    }


def inside(ns: list[str], prefixes: list[tuple[str, ...]]) -> bool:
    return any(tuple(ns[: len(p)]) == p for p in prefixes)


def phase_search(base: str, seeded: dict[str, Any], args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    tokens = seeded["tokens"]
    queries = [sentence(rng, rng.choice((2, 3))) for _ in range(args.queries)]
    out: dict[str, Any] = {
        "items": seeded["items"],
        "vectors": seeded["vectors"],
        "rooms": args.rooms,
        "readable_prefixes": len(seeded["readable"]),
    }
    with (
        client(base, tokens["reader"]) as agent,
        client(base, tokens["admin"]) as admin,
        client(base, tokens["admin"]) as admin_rooms,
    ):
        for mode, extra in (("lexical", {"channels": ["lexical"]}), ("hybrid", {})):
            answers: dict[str, list[httpx.Response]] = {"agent": [], "admin": [], "admin_room": []}

            def caller(
                http: httpx.Client,
                name: str,
                prefix: list[str] | None,
                extra: dict[str, Any] = extra,
                answers: dict[str, list[httpx.Response]] = answers,
            ) -> Any:
                def call(q: str) -> None:
                    body = {"query": q, "limit": 10, **extra}
                    if prefix:
                        body["namespace_prefix"] = prefix
                    answers[name].append(http.post("/v1/search", json=body))

                return call

            count = args.warmup + args.searches
            qs = [(queries[i % len(queries)],) for i in range(count)]
            progress(f"  search {mode}: {args.searches} timed per subject (+{args.warmup} warm-up), 3 subjects")
            samples = time_calls_interleaved(
                {
                    "agent": (caller(agent, "agent", None), qs),
                    "admin": (caller(admin, "admin", None), qs),
                    "admin_room": (caller(admin_rooms, "admin_room", ["room"]), qs),
                },
                rounds=args.rounds,
                warmup=args.warmup,
            )
            bad = {n: sum(r.status_code != 200 for r in rs) for n, rs in answers.items()}
            leaks = sum(
                not inside(h["namespace"], seeded["readable"])
                for r in answers["agent"]
                if r.status_code == 200
                for h in r.json()["hits"]
            )
            hits = {
                n: sum(len(r.json()["hits"]) for r in rs if r.status_code == 200) / max(1, len(rs))
                for n, rs in answers.items()
            }
            summ = {n: summarize(s).to_dict() for n, s in samples.items()}
            out[mode] = {
                "latency_us": summ,
                "agent_over_admin_p50": ratio(summ["agent"]["p50_us"], summ["admin"]["p50_us"]),
                "agent_over_admin_room_p50": ratio(summ["agent"]["p50_us"], summ["admin_room"]["p50_us"]),
                "non_200": bad,
                "agent_hits_outside_scope": leaks,
                "mean_hits": {n: round(h, 2) for n, h in hits.items()},
            }
            progress(
                f"  search {mode}: p50 agent {ms(summ['agent']['p50_us']):.2f} ms, admin "
                f"{ms(summ['admin']['p50_us']):.2f} ms, ratio {out[mode]['agent_over_admin_p50']:.2f}"
            )
    return out


# -- 2. point get with 20,000 rooms -------------------------------------------------------------


def seed_rooms(url: str, args: argparse.Namespace, big: bool) -> dict[str, Any]:
    rng = random.Random(args.seed + 7)  # the same items in both stores
    with memlane.open(url, embedder="fake") as mem:
        acc = Access(mem)
        if big:
            rooms = [f"r{i:05d}" for i in range(args.many_rooms)]
            agents = [f"a{i:04d}" for i in range(args.many_agents)]
            members = sorted({(rng.choice(rooms), a) for a in agents for _ in range(4)})
            with mem.store.session(write=True) as s:  # bulk set-up; every measured read goes through the service
                s.many("INSERT INTO access_rooms (name, created_at) VALUES (?, ?)", [(r, AT) for r in rooms])
                s.many(
                    "INSERT INTO access_agents (name, admin, token_hash, created_at) VALUES (?, ?, ?, ?)",
                    [(a, False, f"bulk-{a}", AT) for a in agents],
                )
                s.many(
                    "INSERT INTO access_members (room, agent, added_at) VALUES (?, ?, ?)",
                    [(r, a, AT) for r, a in members],
                )
                log = [(AT, "create_room", None, r) for r in rooms] + [(AT, "create_agent", a, None) for a in agents]
                log += [(AT, "add_member", a, r) for r, a in members]
                s.many("INSERT INTO access_log (at, action, agent, room) VALUES (?, ?, ?, ?)", log)
        else:
            members = []
        _, admin = acc.create_agent("root", admin=True)
        _, getter = acc.create_agent("getter")
        if big:
            for i in range(5):  # an ordinary agent: a member of a few rooms, the last one among them
                room = f"r{(i + 1) * args.many_rooms // 5 - 1:05d}"
                acc.add_member(room, "getter")
        keys = [f"g{j:04d}" for j in range(200)]
        records = [{"namespace": ("agent", "getter"), "key": k, "value": sentence(rng)} for k in keys]
        records += [
            {"namespace": ("agent", f"o{i:02d}"), "key": f"k{j:03d}", "value": sentence(rng)}
            for i in range(8)
            for j in range(100)
        ]
        put_all(mem, records)
        with mem.store.session() as s:
            counts = {
                t: s.rows(f"SELECT count(*) FROM {t}")[0][0]
                for t in ("access_rooms", "access_agents", "access_members", "access_log", "items")
            }
    return {"tokens": {"admin": admin, "getter": getter}, "keys": keys, "counts": counts, "members": len(members)}


def list_rooms(base: str, token: str) -> tuple[float, int, int, int]:
    """(seconds, pages, rooms, memberships) of one admin listing of every room, 1,000 a page."""
    with client(base, token) as http:
        t0 = time.perf_counter()
        cursor, pages, rooms, members = None, 0, 0, 0
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            resp = http.get("/v1/admin/rooms", params=params)
            resp.raise_for_status()
            body = resp.json()
            pages += 1
            rooms += len(body["rooms"])
            members += sum(len(r["members"]) for r in body["rooms"])
            cursor = body.get("next_cursor")
            if not cursor:
                break
        return time.perf_counter() - t0, pages, rooms, members


def phase_rooms(stores: Stores, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    progress(f"  seeding {args.many_rooms:,} rooms, {args.many_agents:,} agents")
    big_url, none_url = stores.create("rooms"), stores.create("norooms")
    big = seed_rooms(big_url, args, True)
    none = seed_rooms(none_url, args, False)
    rng = random.Random(args.seed + 3)
    keys = [(rng.choice(big["keys"]),) for _ in range(args.warmup + args.gets)]
    servers = [Server(big_url, workdir), Server(none_url, workdir)]
    try:
        results: dict[str, list[httpx.Response]] = {"rooms_20k": [], "no_rooms": []}
        with (
            client(servers[0].base, big["tokens"]["getter"]) as a,
            client(servers[1].base, none["tokens"]["getter"]) as b,
        ):

            def getter(http: httpx.Client, name: str) -> Any:
                def call(key: str) -> None:
                    results[name].append(http.post("/v1/get", json={"namespace": ["agent", "getter"], "key": key}))

                return call

            progress(f"  point get: {args.gets} timed per store (+{args.warmup} warm-up)")
            samples = time_calls_interleaved(
                {"rooms_20k": (getter(a, "rooms_20k"), keys), "no_rooms": (getter(b, "no_rooms"), keys)},
                rounds=args.rounds,
                warmup=args.warmup,
            )
        wrong = {
            n: sum(r.status_code != 200 or r.json()["key"] != k[0] for r, k in zip(rs, keys, strict=True))
            for n, rs in results.items()
        }
        summ = {n: summarize(s).to_dict() for n, s in samples.items()}
        progress("  admin listing of every room")
        listings = [list_rooms(servers[0].base, big["tokens"]["admin"]) for _ in range(args.list_repeats)]
    finally:
        for s in servers:
            s.stop()
    secs = sorted(x[0] for x in listings)
    return {
        "counts": {"rooms_20k": big["counts"], "no_rooms": none["counts"]},
        "latency_us": summ,
        "ratio_p50": ratio(summ["rooms_20k"]["p50_us"], summ["no_rooms"]["p50_us"]),
        "wrong_or_non_200": wrong,
        "listing": {
            "seconds": [round(x, 3) for x in secs],
            "median_s": secs[len(secs) // 2],
            "pages": listings[0][1],
            "rooms": listings[0][2],
            "memberships": listings[0][3],
        },
    }


# -- 3. one agent saturating the query space ------------------------------------------------------


def hog_main(config: str) -> int:
    """The saturating agent, in its own process: threads looping over POST /v1/query until told to stop."""
    cfg = json.loads(config)
    stop = threading.Event()
    lock = threading.Lock()
    answers: Counter[str] = Counter()
    ok_ms: list[float] = []
    body = {"sql": CTE.format(n=cfg["cte_n"]), "timeout_ms": cfg["timeout_ms"], "max_rows": 10}

    def loop() -> None:
        with client(cfg["base"], cfg["token"]) as http:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    resp = http.post("/v1/query", json=body)
                except httpx.HTTPError as e:
                    with lock:
                        answers[type(e).__name__] += 1
                    continue
                took = (time.perf_counter() - t0) * 1000
                with lock:
                    kind = str(resp.status_code)
                    if resp.status_code == 400 and "time cap" in resp.text:
                        kind = "400 time cap"
                    answers[kind] += 1
                    if resp.status_code == 200:
                        ok_ms.append(took)
                if resp.status_code == 429 and cfg["polite"]:
                    stop.wait(float(resp.headers.get("retry-after", "1")))

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(cfg["threads"])]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.readline()  # the parent writes a line when its timed window is over
    stopped = time.perf_counter()
    stop.set()
    for t in threads:
        t.join(timeout=cfg["timeout_ms"] / 1000 + 30)
    ok_ms.sort()
    print(
        json.dumps(
            {
                "answers": dict(answers),
                "requests": sum(answers.values()),
                "ok_p50_ms": percentile(ok_ms, 50) if ok_ms else None,
                "drain_s": round(time.perf_counter() - stopped, 2),
                "threads_left": sum(t.is_alive() for t in threads),
            }
        ),
        flush=True,
    )
    return 0


def timed_gets(http: httpx.Client, keys: list[str], seconds: float, rng: random.Random) -> tuple[list[int], int]:
    samples: list[int] = []
    bad = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        key = rng.choice(keys)
        t0 = time.perf_counter_ns()
        try:
            resp = http.post("/v1/get", json={"namespace": ["agent", "victim"], "key": key})
        except httpx.HTTPError:
            bad += 1
            continue
        samples.append(time.perf_counter_ns() - t0)
        if resp.status_code != 200 or resp.json()["key"] != key:
            bad += 1
    return samples, bad


class HealthPoller(threading.Thread):
    def __init__(self, base: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.base, self.interval = base, interval
        self.samples: list[int] = []
        self.failed = 0
        self._halt = threading.Event()

    def run(self) -> None:
        with client(self.base) as http:
            while not self._halt.is_set():
                t0 = time.perf_counter_ns()
                try:
                    ok = http.get("/v1/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.samples.append(time.perf_counter_ns() - t0)
                self.failed += not ok
                self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=90)


def phase_saturate(base: str, seeded: dict[str, Any], args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    tokens, keys = seeded["tokens"], seeded["victim_keys"]
    out: dict[str, Any] = {"threads": args.hog_threads, "cte_n": args.cte_n, "timeout_ms": args.timeout_ms}
    with client(base, tokens["victim"]) as http:
        timed_gets(http, keys, 0.5, rng)  # warm: authentication cached, connection open
        progress(f"  victim alone: {args.baseline_seconds:g} s of sequential gets")
        samples, bad = timed_gets(http, keys, args.baseline_seconds, rng)
        out["alone"] = {"get_us": summarize(samples).to_dict(), "bad": bad}
        for mode in args.hog_modes:
            cfg = {
                "base": base,
                "token": tokens["hog"],
                "threads": args.hog_threads,
                "cte_n": args.cte_n,
                "timeout_ms": args.timeout_ms,
                "polite": mode == "polite",
            }
            hog = subprocess.Popen(
                [sys.executable, __file__, "--hog", json.dumps(cfg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert hog.stdin is not None and hog.stdout is not None
            try:
                if hog.stdout.readline().strip() != "ready":
                    raise RuntimeError("the saturating process did not start")
                health = HealthPoller(base, args.health_interval)
                health.start()
                time.sleep(args.ramp_seconds)  # let the hog's threads fill its share of the gate
                progress(f"  {mode} hog ({args.hog_threads} threads): {args.saturate_seconds:g} s of victim gets")
                samples, bad = timed_gets(http, keys, args.saturate_seconds, rng)
                hog.stdin.write("stop\n")
                hog.stdin.flush()
                progress("  waiting for the hog's requests in flight")
                line = hog.stdout.readline()
                health.stop()
                hog.wait(timeout=60)
            finally:
                if hog.poll() is None:
                    hog.kill()
                    hog.wait()
            hog_out = json.loads(line) if line.strip() else {"answers": {}, "requests": 0}
            victim = summarize(samples).to_dict()
            out[mode] = {
                "get_us": victim,
                "bad": bad,
                "hog": hog_out,
                "health_us": summarize(health.samples).to_dict(),
                "health_failed": health.failed,
            }
            progress(
                f"  {mode}: victim get p50 {ms(victim['p50_us']):.1f} ms p99 {ms(victim['p99_us']):.1f} ms; "
                f"hog answers {hog_out['answers']}"
            )
    return out


# -- 4. broad reads of an agent in 1 to 50,000 rooms -----------------------------------------------

BROAD_READS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "list": ("POST", "/v1/list", {"limit": 100}),
    "fetch": ("POST", "/v1/fetch", {"key": "doc0001", "limit": 10}),
    "query": ("POST", "/v1/query", {"sql": "SELECT namespace, key FROM items ORDER BY updated_at DESC LIMIT 100"}),
    "export": ("GET", "/v1/export", None),
    "search": ("POST", "/v1/search", {"query": "orchid note", "limit": 10}),
}


def seed_broad(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One store: ``--broad-rooms`` rooms, an agent per size of ``--broad-sizes`` in the first that many rooms.

    What every agent may read is the same: the 1,000 items of room r00000 and the 100 of its own namespace (the
    other rooms are empty), beside 10,000 items it may not read; so a broad read's answer does not change with
    the rooms, only the scope it is checked against. The rooms and memberships go in as bulk SQL.
    """
    started = time.perf_counter()
    rng = random.Random(args.seed + 11)
    sizes = [n for n in args.broad_sizes if n <= args.broad_rooms]
    with memlane.open(url, embedder="fake") as mem:
        acc = Access(mem)
        tokens = {n: acc.create_agent(f"in{n}")[1] for n in sizes}
        rooms = [f"r{i:05d}" for i in range(args.broad_rooms)]
        with mem.store.session(write=True) as s:
            s.many("INSERT INTO access_rooms (name, created_at) VALUES (?, ?)", [(r, AT) for r in rooms])
            s.many(
                "INSERT INTO access_members (room, agent, added_at) VALUES (?, ?, ?)",
                [(rooms[i], f"in{n}", AT) for n in sizes for i in range(n)],
            )
            s.run("INSERT INTO access_log (at, action, agent) VALUES (?, ?, ?)", (AT, "bulk_members", "in1"))
        mine = [sentence(rng, 6) for _ in range(100)]  # every agent's own notes say the same
        records = [
            {"namespace": ("room", rooms[0]), "key": f"doc{j:04d}", "value": f"shared note {j} {sentence(rng)}"}
            for j in range(1000)
        ]
        records += [
            {"namespace": ("agent", f"in{n}"), "key": f"own{j:03d}", "value": f"own note {j} {own}"}
            for n in sizes
            for j, own in enumerate(mine)
        ]
        records += [
            {"namespace": ("agent", f"o{i:03d}"), "key": f"doc{j:04d}", "value": f"other note {sentence(rng)}"}
            for i in range(100)
            for j in range(100)
        ]
        put_all(mem, records)
        mem.wait_indexed(timeout=300)
        with mem.store.session() as s:
            counts = {t: s.rows(f"SELECT count(*) FROM {t}")[0][0] for t in ("access_rooms", "access_members", "items")}
    return {"tokens": tokens, "sizes": sizes, "counts": counts, "seconds": round(time.perf_counter() - started, 1)}


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the service process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase_broad(stores: Stores, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    progress(f"  seeding {args.broad_rooms:,} rooms, agents in {args.broad_sizes} of them")
    url = stores.create("broad")
    seeded = seed_broad(url, args)
    progress(f"  seeded in {seeded['seconds']} s: {seeded['counts']}")
    server = Server(url, workdir)
    sizes = seeded["sizes"]
    out: dict[str, Any] = {"counts": seeded["counts"], "setup_s": seeded["seconds"], "sizes": sizes, "reads": {}}
    try:
        clients = {n: client(server.base, seeded["tokens"][n]) for n in sizes}
        try:
            # the first request of each agent loads its memberships and makes its scope (then remembered)
            first = {}
            for n in sizes:
                t0 = time.perf_counter()
                clients[n].post("/v1/list", json={"limit": 1}).raise_for_status()
                first[n] = round((time.perf_counter() - t0) * 1000, 1)
            out["first_request_ms"] = first
            for name, (method, path, body) in BROAD_READS.items():
                answers: dict[int, set[Any]] = {}
                wall: dict[int, list[int]] = {n: [] for n in sizes}
                cpu: dict[int, float] = dict.fromkeys(sizes, 0.0)
                for n in sizes:  # untimed: warm the statement caches and check the answers agree
                    for _ in range(args.warmup // 4 or 1):
                        resp = clients[n].request(method, path, json=body)
                        resp.raise_for_status()
                    answers[n] = broad_answer(name, resp)
                for r in range(args.broad_rounds):
                    order = sizes[r % len(sizes) :] + sizes[: r % len(sizes)]
                    for n in order:
                        c0 = server_cpu(server.proc.pid)
                        for _ in range(args.broad_block):
                            t0 = time.perf_counter_ns()
                            clients[n].request(method, path, json=body).raise_for_status()
                            wall[n].append(time.perf_counter_ns() - t0)
                        cpu[n] += server_cpu(server.proc.pid) - c0
                calls = args.broad_rounds * args.broad_block
                summ = {n: summarize(wall[n]).to_dict() for n in sizes}
                out["reads"][name] = {
                    "latency_us": summ,
                    "server_cpu_ms": {n: round(1000 * cpu[n] / calls, 2) for n in sizes},
                    "same_answer": all(answers[n] == answers[sizes[0]] for n in sizes),
                }
                shown = ", ".join(f"{n:,}: {ms(summ[n]['p50_us']):.1f}" for n in sizes)
                progress(f"  {name} p50 ms by rooms: {shown}")
        finally:
            for c in clients.values():
                c.close()
    finally:
        server.stop()
    return out


def broad_answer(name: str, resp: httpx.Response) -> Any:
    """What a broad read answered, to compare across agents (their own namespaces differ by name only)."""
    if name == "export":
        lines = [json.loads(x) for x in resp.text.splitlines()]
        return frozenset((tuple(r["namespace"][:1]), r["key"]) for r in lines)
    body = resp.json()
    if name == "query":
        return len(body["rows"])
    rows = body.get("items") or body.get("hits") or []
    return frozenset(
        (tuple(r["namespace"])[:1] if r["namespace"][0] == "agent" else tuple(r["namespace"]), r["key"]) for r in rows
    )


# -- one backend ----------------------------------------------------------------------------------


def run_backend(backend: str, admin_url: str | None, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    stores = Stores(backend, workdir, admin_url)
    started = time.perf_counter()
    out: dict[str, Any] = {"backend": backend}
    try:
        if "search" in args.phases or "saturate" in args.phases:
            rng = random.Random(args.seed)
            url = stores.create("search")
            progress(f"{backend}: seeding {args.rooms} rooms x {args.room_items} items and other namespaces")
            seeded = seed_search(url, args, rng)
            server = Server(url, workdir, args.workers)
            try:
                if "search" in args.phases:
                    progress(f"{backend}: 1. search as an agent over {args.rooms} rooms vs as an admin")
                    out["search"] = phase_search(server.base, seeded, args, random.Random(args.seed + 1))
                if "saturate" in args.phases:
                    progress(f"{backend}: 3. one agent saturating the query space")
                    out["saturate"] = phase_saturate(server.base, seeded, args, random.Random(args.seed + 2))
            finally:
                server.stop()
        if "rooms" in args.phases:
            progress(f"{backend}: 2. point get with {args.many_rooms:,} rooms vs none")
            out["rooms"] = phase_rooms(stores, workdir, args)
        if "broad" in args.phases:
            progress(f"{backend}: 4. broad reads of an agent in {args.broad_sizes} rooms")
            out["broad"] = phase_broad(stores, workdir, args)
    finally:
        stores.close()
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


# -- report -------------------------------------------------------------------------------------


def status(goal: Goal, value: float) -> str:
    return goal.status(value)


def report(r: dict[str, Any]) -> str:
    rows: list[list[Any]] = []
    s = r.get("search")
    for mode in ("lexical", "hybrid") if s else ():
        lat = s[mode]["latency_us"]
        for who, label in (
            ("agent", f"agent ({s['readable_prefixes']} prefixes)"),
            ("admin", "admin (whole store)"),
            ("admin_room", "admin (room/)"),
        ):
            rows.append(
                [f"search {mode}, {label}", f"{ms(lat[who]['p50_us']):.2f} / {ms(lat[who]['p99_us']):.2f} ms", "", ""]
            )
        value = s[mode]["agent_over_admin_p50"]
        rows.append([f"search {mode}: agent/admin p50", f"{value:.2f}", GOAL_SEARCH.label, status(GOAL_SEARCH, value)])
        rows.append([f"search {mode}: agent/admin(room/) p50", f"{s[mode]['agent_over_admin_room_p50']:.2f}", "", ""])
    g = r.get("rooms")
    if g:
        for who, label in (
            ("rooms_20k", f"{g['counts']['rooms_20k']['access_rooms']:,} rooms"),
            ("no_rooms", "no rooms"),
        ):
            lat = g["latency_us"][who]
            rows.append([f"get, {label}", f"{ms(lat['p50_us']):.2f} / {ms(lat['p99_us']):.2f} ms", "", ""])
        ratio_p50 = g["ratio_p50"]
        rows.append(
            ["get: 20k rooms/no rooms p50", f"{ratio_p50:.2f}", GOAL_ROOMS.label, status(GOAL_ROOMS, ratio_p50)]
        )
        li = g["listing"]
        rows.append(
            [
                f"admin lists {li['rooms']:,} rooms ({li['pages']} pages)",
                f"{li['median_s']:.2f} s (median of {len(li['seconds'])})",
                "",
                "",
            ]
        )
    t = r.get("saturate")
    if t:
        lat = t["alone"]["get_us"]
        rows.append(["victim get, no hog", f"{ms(lat['p50_us']):.2f} / {ms(lat['p99_us']):.2f} ms", "", ""])
    for mode in ("polite", "hostile") if t else ():
        if mode not in t:
            continue
        m = t[mode]
        lat = m["get_us"]
        p99 = ms(lat["p99_us"])
        rows.append(
            [
                f"victim get, {mode} hog",
                f"{ms(lat['p50_us']):.2f} / {p99:.2f} ms (n={lat['n']})",
                GOAL_VICTIM.label,
                "met" if p99 < GOAL_VICTIM.limit else "MISSED",
            ]
        )
        a = m["hog"]["answers"]
        rows.append(
            [
                f"  {mode} hog requests: 200 / 429 / other",
                f"{a.get('200', 0)} / {a.get('429', 0)} / {m['hog']['requests'] - a.get('200', 0) - a.get('429', 0)}",
                "",
                "",
            ]
        )
        h = m["health_us"]
        rows.append(
            [
                f"  health during {mode} hog p50 / p99",
                f"{ms(h['p50_us']):.2f} / {ms(h['p99_us']):.2f} ms ({h['n']} polls, {m['health_failed']} failed)",
                "",
                "",
            ]
        )
    b = r.get("broad")
    if b:
        sizes = b["sizes"]
        base = sizes[0]
        rows.append([f"broad reads: {b['counts']['access_rooms']:,} rooms, set up in {b['setup_s']} s", "", "", ""])
        rows.append(["  first request (loads the scope), by rooms", ", ".join(
            f"{n:,}: {b['first_request_ms'][n]:.0f} ms" for n in sizes), "", ""])  # fmt: skip
        for name, read in b["reads"].items():
            lat = read["latency_us"]
            shown = ", ".join(f"{n:,}: {ms(lat[n]['p50_us']):.1f}" for n in sizes)
            cpu = ", ".join(f"{read['server_cpu_ms'][n]:.1f}" for n in sizes)
            rows.append([f"  {name} p50 ms (server CPU ms) by rooms", f"{shown} ({cpu})", "", ""])
            if GOAL_BROAD_ROOMS in lat:
                value = ratio(lat[GOAL_BROAD_ROOMS]["p50_us"], lat[base]["p50_us"])
                slow = ms(lat[GOAL_BROAD_ROOMS]["p50_us"]) >= GOAL_BROAD_MS
                met = "MISSED" if slow else status(GOAL_BROAD, value)
                rows.append([f"  {name}: {GOAL_BROAD_ROOMS:,} rooms / {base}", f"{value:.2f}", GOAL_BROAD.label, met])
    title = f"{r['backend']}: figures p50 / p99 (client-side, loopback HTTP); {r['seconds']:g} s"
    if s:
        title = (
            f"{r['backend']}: {s['items']:,} items, agent reads {s['readable_prefixes']} prefixes; "
            + title.split(": ", 1)[1]
        )
    lines = [format_table(["figure", "value", "goal", "status"], rows, title=title)]
    problems = checks(r)
    lines.append("checks: " + ("all answers as expected" if not problems else "; ".join(problems)))
    return "\n".join(lines)


def checks(r: dict[str, Any]) -> list[str]:
    """Anything a correct service would not do: a non-200, a wrong item, a leak, health failing."""
    out = []
    for mode in ("lexical", "hybrid") if "search" in r else ():
        m = r["search"][mode]
        if any(m["non_200"].values()):
            out.append(f"search {mode} non-200: {m['non_200']}")
        if m["agent_hits_outside_scope"]:
            out.append(f"search {mode}: {m['agent_hits_outside_scope']} agent hits outside its scope")
    if "rooms" in r:
        if any(r["rooms"]["wrong_or_non_200"].values()):
            out.append(f"get wrong or non-200: {r['rooms']['wrong_or_non_200']}")
        li = r["rooms"]["listing"]
        want = r["rooms"]["counts"]["rooms_20k"]
        if li["rooms"] != want["access_rooms"] or li["memberships"] != want["access_members"]:
            out.append(f"listing saw {li['rooms']} rooms / {li['memberships']} members, store has {want}")
    t = r.get("saturate", {})
    for mode in ("alone", "polite", "hostile"):
        if mode in t and t[mode]["bad"]:
            out.append(f"victim {mode}: {t[mode]['bad']} failed or wrong gets")
        if mode in t and mode != "alone":
            if t[mode]["health_failed"]:
                out.append(f"health failed {t[mode]['health_failed']} times during the {mode} hog")
            odd = {k: v for k, v in t[mode]["hog"]["answers"].items() if k not in ("200", "429", "400 time cap")}
            if odd:
                out.append(f"{mode} hog got {odd}")
    for name, read in r.get("broad", {}).get("reads", {}).items():
        if not read["same_answer"]:
            out.append(f"broad {name}: agents in different numbers of rooms got different answers")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    ap.add_argument("--pg-url", help="an admin URL of a PostgreSQL server (default: $MEMLANE_TEST_PG_URL or pgserver)")
    ap.add_argument("--rooms", type=int, default=50, help="rooms the searching agent belongs to")
    ap.add_argument("--room-items", type=int, default=200, help="items in each of those rooms")
    ap.add_argument("--queries", type=int, default=100, help="distinct search queries")
    ap.add_argument("--searches", type=int, default=200, help="timed searches per subject and mode")
    ap.add_argument("--many-rooms", type=int, default=20_000)
    ap.add_argument("--many-agents", type=int, default=5_000)
    ap.add_argument("--gets", type=int, default=2000, help="timed point gets per store")
    ap.add_argument("--list-repeats", type=int, default=3, help="full admin listings of the rooms")
    ap.add_argument("--warmup", type=int, default=20, help="untimed requests per subject first")
    ap.add_argument("--rounds", type=int, default=50, help="interleaved blocks per comparison (order rotated)")
    ap.add_argument("--hog-threads", type=int, default=40)
    ap.add_argument("--hog-modes", default="polite,hostile", help="comma list of polite (sleep Retry-After), hostile")
    ap.add_argument("--cte-n", type=int, default=5_000_000, help="the recursive CTE counts to this")
    ap.add_argument("--timeout-ms", type=int, default=20_000, help="timeout_ms of each saturating query")
    ap.add_argument("--ramp-seconds", type=float, default=1.0, help="after the hog starts, before timing")
    ap.add_argument("--saturate-seconds", type=float, default=10.0, help="victim gets while the hog runs")
    ap.add_argument("--baseline-seconds", type=float, default=3.0, help="victim gets before the hog starts")
    ap.add_argument("--health-interval", type=float, default=0.02, help="seconds between health polls")
    ap.add_argument("--broad-rooms", type=int, default=50_000, help="rooms in the broad-read store")
    ap.add_argument("--broad-sizes", default="1,100,10000,50000", help="rooms each broad-reading agent is in")
    ap.add_argument("--broad-rounds", type=int, default=10, help="interleaved blocks per broad read (order rotated)")
    ap.add_argument("--broad-block", type=int, default=5, help="requests per agent in each block")
    ap.add_argument(
        "--workers", type=int, default=1, help="worker processes of the service for search and saturate (broad: 1)"
    )
    ap.add_argument("--phases", default="search,rooms,saturate,broad", help="comma list of the phases to run")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--hog", help=argparse.SUPPRESS)  # internal: run as the saturating process
    args = ap.parse_args(argv)
    if args.hog:
        return hog_main(args.hog)
    args.hog_modes = [m for m in args.hog_modes.split(",") if m]
    args.phases = sorted({p for p in args.phases.split(",") if p})
    if not set(args.phases) <= {"search", "rooms", "saturate", "broad"}:
        ap.error("--phases takes search, rooms, saturate and/or broad")
    args.broad_sizes = sorted({int(n) for n in args.broad_sizes.split(",") if n})
    if any(m not in ("polite", "hostile") for m in args.hog_modes):
        ap.error("--hog-modes takes polite and/or hostile")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the services on the way out
    machine = machine_info()
    machine["memlane_path"] = str(Path(memlane.__file__).resolve().parent)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = []
    with tempfile.TemporaryDirectory(prefix="memlane-sharing-bench-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        for backend in backends:
            if backend == "sqlite":
                results.append(run_backend(backend, None, workdir, args))
            else:
                pg: AbstractContextManager[str] = nullcontext(args.pg_url) if args.pg_url else postgres_server()
                with pg as admin_url:
                    results.append(run_backend(backend, admin_url, workdir, args))
            print(report(results[-1]), end="\n\n", flush=True)
    load = machine.get("loadavg_1_5_15")
    print(
        f"machine: {machine['cpu_model']}, {machine['cpu_usable']} usable CPUs, Python {machine['python']}, "
        f"SQLite {machine['sqlite']}, load average at start {load}, memlane from {machine['memlane_path']}"
    )
    try:
        machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        print(f"load average at end {machine['loadavg_at_end']}")
    except OSError:
        pass
    if args.json:
        write_json(args.json, {"machine": machine, "args": vars(args), "results": results})
    problems = [p for r in results for p in checks(r)]
    if problems:
        print("FAILED checks: " + "; ".join(problems), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
