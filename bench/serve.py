"""Load and abuse test of ``memlane serve``: many concurrent agents over loopback HTTP, 1 to N workers.

For each backend (a temporary SQLite file, a fresh PostgreSQL database), the
store is seeded once: one agent per client (all members of one shared room),
items in each agent's namespace and in the room. Then, for each worker count
(``--workers 1,2,auto``), a real ``memlane serve --workers W --embedder fake``
is started on loopback and measured in four phases:

1. **floor**: ``GET /v1/health`` one at a time: the HTTP stack alone (uvicorn,
   the service's front layers), no token, no store;
2. **one at a time**: each operation of the mix sent one request at a time,
   with the CPU time of every server process (supervisor and workers) per
   request, beside the same call in-process (``authenticate`` + the agent's
   view + the call, measured once per backend);
3. **load**: for each ``--clients`` count, that many concurrent clients (one
   agent and one keep-alive connection each, spread over ``--generators``
   load-generator processes) loop for ``--seconds`` over a weighted mix:

   * ``get``    (40 %) an exact lookup of a seeded address in its own namespace or the room;
   * ``put``    (30 %) an upsert of a new key in its own namespace (acknowledged keys are remembered);
   * ``search`` (20 %) hybrid search (lexical + vector, RRF) over everything the agent may read;
   * ``recall`` (10 %) keyed recall: every visible item under a seeded key, newest first.

   Reported: requests/s, p50/p99 per operation (client-side wall time), 429s
   (refused) and other errors, server CPU per request, load-generator CPU;
4. **abuse**: refused requests (no token, wrong token, another agent's
   namespace, malformed JSON, a bad namespace, a body over the size limit),
   each must get its 4xx in the error shape, and the service must still answer.

Then the server is stopped and the store opened directly: every acknowledged
put of every load phase must be there with its value (nothing lost).

The ``fake`` embedder (64-dimensional hashed vectors, microseconds per text)
keeps the figures about the service, the access checks and the store, not a
neural model. The load generator shares the machine with the server: on a
small machine it takes a good part of the CPU, which the report shows; the
portable figures are the CPU times per request.

Example::

    python bench/serve.py --backend both --workers 1,2,auto --clients 16,64 --seconds 20 --json /tmp/serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import memlane
from memlane.core.access import Access
from memlane.server.app import MAX_BODY_BYTES
from memlane.store.base import EVERYTHING

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import (  # noqa: E402
    fmt_bytes,
    fmt_num,
    format_table,
    free_port,
    machine_info,
    percentile,
    progress,
    write_json,
)

MEMLANE = Path(sys.executable).with_name("memlane")
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)

MIX = {"get": 40, "put": 30, "search": 20, "recall": 10}
ROOM = "load"
WORDS = (
    "orchid basil invoice deploy billing cutover standup deadline theme font editor release budget vendor "
    "contract roadmap sprint incident pager latency cache index vector lexical ranking memory agent room "
    "grant token audit backup restore migration schema replica quorum ledger forecast churn pricing"
).split()


def sentence(rng: random.Random, n: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


# -- the store under test ----------------------------------------------------------


class Postgres:
    """A database on ``$MEMLANE_TEST_PG_URL``, or on a pgserver-run PostgreSQL started for the run."""

    def __init__(self, workdir: Path) -> None:
        import psycopg

        self._psycopg = psycopg
        self._server = None
        url = os.environ.get("MEMLANE_TEST_PG_URL")
        if not url:
            import pgserver

            base = workdir / "pg"
            base.mkdir()
            os.chmod(workdir, 0o755)
            os.chmod(base, 0o755)  # pgserver's postgres runs as another user when we are root
            progress("starting PostgreSQL (pgserver)")
            self._server = pgserver.get_server(str(base), cleanup_mode="stop")
            url = self._server.get_uri()
        self.admin_url = url
        self.name = f"memlane_bench_serve_{os.getpid()}"
        self.clones: list[str] = []

    def create(self) -> str:
        from urllib.parse import urlsplit, urlunsplit

        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.name}"')
        return urlunsplit(urlsplit(self.admin_url)._replace(path="/" + self.name))

    def clone(self, tag: str) -> str:
        """A copy of the seeded database (its template) for one run."""
        from urllib.parse import urlsplit, urlunsplit

        name = f"{self.name}_{tag}"
        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')
        self.clones.append(name)
        return urlunsplit(urlsplit(self.admin_url)._replace(path="/" + name))

    def close(self) -> None:
        try:
            with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
                for name in self.clones:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            if self._server is not None:
                self._server.cleanup()


@dataclass
class Seeded:
    """What the clients know before the load starts."""

    tokens: list[str]
    own_keys: list[list[str]]  # per client: keys seeded in agent/<client>
    room_keys: list[str]
    shared_keys: list[str]  # keys present in every agent namespace (for keyed recall)


def seed(url: str, clients: int, per_agent: int, in_room: int, rng: random.Random) -> Seeded:
    """Create one agent per client (all in room ``load``) and some items; return their tokens and keys."""
    with memlane.open(url, embedder="fake") as mem:
        access = Access(mem)
        access.create_room(ROOM)
        tokens, own = [], []
        shared = [f"profile.{k}" for k in ("theme", "timezone", "language")]
        for n in range(clients):
            name = f"bench{n}"
            _, token = access.create_agent(name)
            access.add_member(ROOM, name)
            tokens.append(token)
            keys = [f"notes.n{j}" for j in range(per_agent)]
            own.append(keys)
            records = [{"namespace": ("agent", name), "key": k, "value": sentence(rng)} for k in keys]
            records += [{"namespace": ("agent", name), "key": k, "value": rng.choice(WORDS)} for k in shared]
            mem.put_many(records)
        room_keys = [f"team.doc{j}" for j in range(in_room)]
        mem.put_many([{"namespace": ("room", ROOM), "key": k, "value": sentence(rng, 12)} for k in room_keys])
        mem.put_many([{"namespace": ("room", ROOM), "key": k, "value": "room default"} for k in shared])
    return Seeded(tokens, own, room_keys, shared)


# -- the server process ----------------------------------------------------------------


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Server:
    """``memlane serve --workers W`` on loopback; stderr goes to a file (it holds the admin token: never printed)."""

    def __init__(self, url: str, workdir: Path, workers: int) -> None:
        self.port = free_port()
        self.workers = workers
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = (workdir / f"serve-{self.port}.log").open("w")
        command = [str(MEMLANE), "serve", "--db", url, "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "--embedder", "fake", "--workers", str(workers)], stdout=subprocess.DEVNULL, stderr=self._log
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memlane serve exited with {self.proc.returncode}; see {self._log.name}")
            # every worker up: the supervisor plus W processes answering (one process when W is 1)
            if self._answers() and (workers == 1 or len(self._processes()) >= workers + 1):
                time.sleep(0.5 if workers > 1 else 0)  # the last worker finishes its start-up
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("memlane serve did not answer within 120 s")

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.base}/v1/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _processes(self) -> list[Any]:
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            # uvicorn's workers (forks of the fork server), not multiprocessing's helpers (the fork server, the
            # resource tracker: the supervisor's own children)
            helpers = ("forkserver", "resource_tracker")
            children = [
                c
                for c in root.children(recursive=True)
                if not (c.ppid() == root.pid and any(h in " ".join(c.cmdline()) for h in helpers))
            ]
            return [root, *children]
        except psutil.Error:
            return []

    def cpu_seconds(self) -> float:
        """User + system CPU of the supervisor and every worker."""
        total = 0.0
        for p in self._processes():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except Exception:  # a process gone meanwhile: informational only
                pass
        return total

    def cpu_by_process(self) -> dict[int, float]:
        """User + system CPU seconds of each server process (supervisor first)."""
        out: dict[int, float] = {}
        for p in self._processes():
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except Exception:  # gone meanwhile
                pass
        return out

    def rss(self) -> int:
        """Resident set size of all server processes together, in bytes."""
        total = 0
        for p in self._processes():
            try:
                total += p.memory_info().rss
            except Exception:  # gone meanwhile
                pass
        return total

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()
        return int(self.proc.returncode)


class RssSampler(threading.Thread):
    """Samples the server's RSS every ``interval`` seconds; keeps the peak."""

    def __init__(self, server: Server, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.interval = interval
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, self.server.rss())
            self._halt.wait(self.interval)

    def stop(self) -> int:
        self._halt.set()
        self.join(timeout=5)
        return self.peak


# -- the load ----------------------------------------------------------------------


@dataclass
class Tally:
    """What one client saw."""

    latencies: dict[str, list[int]] = field(default_factory=lambda: {op: [] for op in MIX})
    errors: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    acked: dict[str, Any] = field(default_factory=dict)  # key -> value of every acknowledged put

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def client_loop(
    n: int, base: str, seeded: Seeded, deadline: float, max_requests: int, rng: random.Random, tag: str
) -> Tally:
    tally = Tally()
    ops, weights = list(MIX), list(MIX.values())
    headers = {"Authorization": f"Bearer {seeded.tokens[n]}"}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, limits=limits) as http:
        seq = 0
        for _ in range(max_requests):
            if time.monotonic() >= deadline:
                break
            op = rng.choices(ops, weights)[0]
            if op == "put":
                seq += 1
            body = request_body(op, n, seq, seeded, rng, tag)
            t0 = time.perf_counter_ns()
            try:
                resp = await http.post(f"/v1/{op}", json=body)
            except httpx.HTTPError as e:
                tally.error(f"{op}: {type(e).__name__}")
                continue
            elapsed = time.perf_counter_ns() - t0
            if resp.status_code == 429:
                tally.refused += 1
                continue
            if resp.status_code != 200:
                tally.error(f"{op}: HTTP {resp.status_code}")
                continue
            tally.latencies[op].append(elapsed)
            if op == "put":
                tally.acked[body["key"]] = body["value"]
            elif op == "get" and resp.json()["key"] != body["key"]:
                tally.error("get: wrong item")
            elif op == "recall":
                hits = resp.json()["hits"]
                # the agent's own copy and the room's copy, nothing else
                if len(hits) != 2 or any(h["key"] != body["key"] for h in hits):
                    tally.error("recall: wrong hits")
    return tally


def generator(
    clients: list[int],
    base: str,
    seeded: Seeded,
    start_at: float,
    seconds: float,
    max_requests: int,
    seed_: int,
    tag: str,
) -> tuple[list[tuple[int, Tally]], float]:
    """One load-generator process: its clients, from ``start_at`` (wall clock) for ``seconds``; its CPU time."""
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    deadline = time.monotonic() + seconds

    async def all_clients() -> list[Tally]:
        loops = [
            client_loop(n, base, seeded, deadline, max_requests, random.Random(seed_ * 1000 + n), tag) for n in clients
        ]
        return list(await asyncio.gather(*loops))

    c0 = time.process_time()
    tallies = asyncio.run(all_clients())
    return list(zip(clients, tallies, strict=True)), time.process_time() - c0


def run_load(
    base: str, seeded: Seeded, clients: int, generators: int, seconds: float, max_requests: int, seed_: int, tag: str
) -> tuple[list[Tally], float, float]:
    """``clients`` clients over ``generators`` processes; their tallies (by client), wall seconds, generator CPU."""
    from concurrent.futures import ProcessPoolExecutor

    shares = [list(range(clients))[g::generators] for g in range(generators)]
    shares = [s for s in shares if s]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(shares), mp_context=context) as pool:
        start_at = time.time() + 2.0  # every generator started and imported before the clock runs
        futures = [
            pool.submit(generator, share, base, seeded, start_at, seconds, max_requests, seed_, tag) for share in shares
        ]
        results = [f.result() for f in futures]
    by_client = dict(pair for tallies, _ in results for pair in tallies)
    return [by_client[n] for n in range(clients)], seconds, sum(cpu for _, cpu in results)


def run_sequential(
    server: Server, seeded: Seeded, count: int, rng: random.Random, url: str
) -> dict[str, dict[str, float]]:
    """One client, one request at a time: the floor, then each operation; server CPU per request (all processes).

    A put's CPU includes embedding it: the put phase ends once the service's indexer has nothing pending (the
    in-process figure waits for the same), so neither side leaves its indexing to the next phase.
    """
    out: dict[str, dict[str, float]] = {}
    watcher = memlane.open(url, indexing="external", migrate=False)  # reads the pending marks, embeds nothing
    headers = {"Authorization": f"Bearer {seeded.tokens[0]}"}
    with httpx.Client(base_url=server.base, headers=headers, timeout=60) as http:
        http.get("/v1/me")  # connect
        for op in ("floor", *MIX):
            bodies = [request_body(op, 0, 1_000_000 + i, seeded, rng, "seq") for i in range(count)] if op in MIX else []
            samples = []
            cpu0 = server.cpu_seconds()
            for i in range(count):
                t0 = time.perf_counter_ns()
                resp = http.get("/v1/health") if op == "floor" else http.post(f"/v1/{op}", json=bodies[i])
                samples.append(time.perf_counter_ns() - t0)
                if resp.status_code != 200:
                    raise RuntimeError(f"sequential {op}: HTTP {resp.status_code} {resp.text[:200]}")
            deadline = time.monotonic() + 60
            while op == "put" and watcher.store.count_pending(EVERYTHING) and time.monotonic() < deadline:
                time.sleep(0.01)
            cpu1 = server.cpu_seconds()
            samples.sort()
            out[op] = {
                "requests": count,
                "p50_ms": percentile(samples, 50) / 1e6,
                "p99_ms": percentile(samples, 99) / 1e6,
                "server_cpu_ms_per_request": (cpu1 - cpu0) * 1000 / count,
            }
    watcher.close()
    return out


def request_body(op: str, n: int, seq: int, seeded: Seeded, rng: random.Random, tag: str = "") -> dict[str, Any]:
    """One request of the mix for client ``n`` (``seq`` numbers its puts)."""
    ns = ["agent", f"bench{n}"]
    if op == "get":
        if rng.random() < 0.5:
            return {"namespace": ns, "key": rng.choice(seeded.own_keys[n])}
        return {"namespace": ["room", ROOM], "key": rng.choice(seeded.room_keys)}
    if op == "put":
        note = sentence(rng, 6)
        return {
            "namespace": ns,
            "key": f"load.{tag}.c{n}.s{seq}",
            "value": {"client": n, "seq": seq, "note": note},
            "text": note,
        }
    if op == "search":
        return {"query": sentence(rng, 3), "limit": 10}
    return {"query": "what is my setting", "key": rng.choice(seeded.shared_keys), "limit": 10}


def run_core(url: str, seeded: Seeded, count: int, rng: random.Random) -> dict[str, float]:
    """The same requests in-process, without HTTP: CPU ms per request of authenticate + the agent's view + the call."""
    out: dict[str, float] = {}
    with memlane.open(url, embedder="fake") as mem:
        access = Access(mem)
        token = seeded.tokens[0]
        for op in MIX:
            bodies = [request_body(op, 0, 2_000_000 + i, seeded, rng, "core") for i in range(count)]
            c0 = time.process_time()
            for b in bodies:
                agent = access.authenticate(token)
                assert agent is not None
                view = access.view(agent)
                if op == "get":
                    view.get(b["namespace"], b["key"])
                elif op == "put":
                    view.put(b["namespace"], b["key"], b["value"], text=b["text"])
                elif op == "search":
                    view.search(b["query"], limit=b["limit"])
                else:
                    view.recall(b["query"], key=b["key"], limit=b["limit"])
            mem.wait_indexed(timeout=60)  # a put's cost includes embedding it, as the service's figure does
            out[op] = (time.process_time() - c0) * 1000 / count
    return out


# -- abuse -----------------------------------------------------------------------


async def run_abuse(base: str, seeded: Seeded, rounds: int) -> dict[str, Any]:
    """Refused requests of every kind; each must get its status and the error shape."""
    # one byte over the service's body cap: refused from its Content-Length, never read
    over = MAX_BODY_BYTES + 1 - len(b'{"namespace": ["agent", "bench0"], "key": "big", "value": ""}')
    big = b'{"namespace": ["agent", "bench0"], "key": "big", "value": "' + b"x" * over + b'"}'
    token = seeded.tokens[0]
    cases: list[tuple[str, dict[str, str], bytes, int]] = [
        ("no token", {}, b'{"namespace": ["agent", "bench0"], "key": "x", "value": 1}', 401),
        ("wrong token", {"Authorization": "Bearer ml_" + "0" * 43}, b'{"namespace": "agent/bench0", "key": "k"}', 401),
        ("other agent", {"Authorization": f"Bearer {token}"}, b'{"namespace": "agent/bench1", "key": "notes.n0"}', 403),
        ("malformed JSON", {"Authorization": f"Bearer {token}"}, b'{"namespace": ["agent",', 400),
        (
            "bad namespace",
            {"Authorization": f"Bearer {token}"},
            b'{"namespace": "agent//x", "key": "k", "value": 1}',
            400,
        ),
    ]
    counts: dict[str, dict[str, int]] = {}
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        for _ in range(rounds):
            for name, headers, body, want in cases:
                path = "/v1/get" if b'"value"' not in body else "/v1/put"
                resp = await http.post(path, content=body, headers=headers | {"content-type": "application/json"})
                ok = resp.status_code == want and set(resp.json()) == {"error"}
                c = counts.setdefault(name, {"sent": 0, "as_expected": 0})
                c["sent"] += 1
                c["as_expected"] += ok
        # a body over the cap, a few times
        for _ in range(3):
            resp = await http.post("/v1/put", content=big, headers={"Authorization": f"Bearer {token}"})
            c = counts.setdefault("over the body cap", {"sent": 0, "as_expected": 0})
            c["sent"] += 1
            c["as_expected"] += resp.status_code == 413
        healthy = (await http.get("/v1/me", headers={"Authorization": f"Bearer {token}"})).status_code == 200
    return {"cases": counts, "healthy_after": healthy}


# -- checks and report -------------------------------------------------------------


def check_nothing_lost(url: str, tallies: list[tuple[int, Tally]]) -> dict[str, int]:
    """Open the store directly (server stopped) and compare with every acknowledged put of each client's agent."""
    acked = missing = wrong = 0
    by_agent: dict[int, Tally] = {}
    for n, tally in tallies:
        by_agent.setdefault(n, Tally()).acked.update(tally.acked)
    with memlane.open(url, embedder=None) as mem:
        for n, tally in by_agent.items():
            stored: dict[str, Any] = {}
            cursor = None
            while True:
                page = mem.list(("agent", f"bench{n}"), key_prefix="load", limit=10_000, cursor=cursor)
                stored.update((i.key, i.value) for i in page.items)
                cursor = page.next_cursor
                if cursor is None:
                    break
            for key, value in tally.acked.items():
                acked += 1
                if key not in stored:
                    missing += 1
                elif stored[key] != value:
                    wrong += 1
    return {"acknowledged_puts": acked, "missing": missing, "wrong_value": wrong}


def summarize_ops(tallies: list[Tally], wall: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for op in MIX:
        samples = sorted(x for t in tallies for x in t.latencies[op])
        out[op] = {
            "requests": len(samples),
            "rps": len(samples) / wall,
            "p50_ms": percentile(samples, 50) / 1e6 if samples else float("nan"),
            "p99_ms": percentile(samples, 99) / 1e6 if samples else float("nan"),
        }
    return out


def load_phase(
    server: Server, seeded: Seeded, clients: int, args: argparse.Namespace, tag: str
) -> tuple[dict[str, Any], list[Tally]]:
    generators = args.generators or max(1, min(clients, cpu_count() // 4))
    cpu_start = server.cpu_seconds()
    per_process_start = server.cpu_by_process()
    sampler = RssSampler(server)
    sampler.start()
    tallies, wall, generator_cpu = run_load(
        server.base, seeded, clients, generators, args.seconds, args.max_requests, args.seed, tag
    )
    server_cpu = server.cpu_seconds() - cpu_start
    # how busy each process was: the supervisor (first), then each worker
    per_process = [round(cpu - per_process_start.get(pid, 0.0), 2) for pid, cpu in server.cpu_by_process().items()]
    peak = sampler.stop()
    ops = summarize_ops(tallies, wall)
    total = sum(o["requests"] for o in ops.values())
    errors: dict[str, int] = {}
    for t in tallies:
        for k, v in t.errors.items():
            errors[k] = errors.get(k, 0) + v
    return {
        "clients": clients,
        "generators": generators,
        "seconds": round(wall, 2),
        "requests": total,
        "rps": total / wall,
        "operations": ops,
        "refused": sum(t.refused for t in tallies),
        "errors": errors,
        "error_count": sum(errors.values()),
        "server_cpu_seconds": round(server_cpu, 2),
        "server_cpu_seconds_by_process": per_process,
        "server_cpu_ms_per_request": server_cpu * 1000 / total if total else None,
        "generator_cpu_seconds": round(generator_cpu, 2),
        "server_rss_peak_bytes": peak,
    }, tallies


def bench_workers(
    url: str,
    backend: str,
    workers: int,
    seeded: Seeded,
    args: argparse.Namespace,
    workdir: Path,
    core: dict[str, float],
) -> dict[str, Any]:
    progress(f"{backend}: starting memlane serve --workers {workers}")
    server = Server(url, workdir, workers)
    all_tallies: list[tuple[int, Tally]] = []
    try:
        rss_start = server.rss()
        sequential: dict[str, Any] = {}
        if args.sequential:
            progress(f"{backend}, {workers} workers: {args.sequential} requests per operation, one at a time")
            sequential = run_sequential(server, seeded, args.sequential, random.Random(args.seed + 1), url)
            for op, ms in core.items():
                sequential[op]["core_cpu_ms_per_request"] = ms
        loads = []
        for clients in args.clients:
            progress(f"{backend}, {workers} workers: {clients} clients for {args.seconds:g} s")
            result, tallies = load_phase(server, seeded, clients, args, f"w{workers}c{clients}")
            loads.append(result)
            all_tallies += list(enumerate(tallies))
        progress(f"{backend}, {workers} workers: abuse phase")
        abuse = asyncio.run(run_abuse(server.base, seeded, args.abuse_rounds))
        rss_end = server.rss()
    finally:
        code = server.stop()
    progress(f"{backend}, {workers} workers: server stopped ({code}); checking every acknowledged put")
    return {
        "workers": workers,
        "sequential": sequential,
        "loads": loads,
        "abuse": abuse,
        "server_rss_bytes": {"start": rss_start, "end": rss_end},
        "durability": check_nothing_lost(url, all_tallies),
    }


def bench_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    pg: Postgres | None = None
    if backend == "sqlite":
        url = str(workdir / "serve-bench.db")
    else:
        pg = Postgres(workdir)
        url = pg.create()
    try:
        rng = random.Random(args.seed)
        agents = max(args.clients)
        progress(f"{backend}: seeding {agents} agents")
        seeded = seed(url, agents, args.per_agent, args.room_items, rng)

        def fresh(tag: str) -> str:
            # every run starts from the seeded store: a run's writes (thousands of puts into the agents'
            # namespaces) would make the next run's searches read more
            if pg is not None:
                return pg.clone(tag)
            copy = workdir / f"serve-bench-{tag}.db"
            source, target = sqlite3.connect(url), sqlite3.connect(copy)
            try:
                source.backup(target)
            finally:
                source.close()
                target.close()
            return str(copy)

        core = run_core(fresh("core"), seeded, args.sequential, random.Random(args.seed + 2)) if args.sequential else {}
        runs = [bench_workers(fresh(f"w{w}"), backend, w, seeded, args, workdir, core) for w in args.workers]
    finally:
        if pg is not None:
            pg.close()
    return {"backend": backend, "runs": runs}


def report(result: dict[str, Any]) -> str:
    backend = result["backend"]
    lines = []
    seq_rows = []
    for run in result["runs"]:
        for op, o in run["sequential"].items():
            seq_rows.append([
                run["workers"], op, fmt_num(o["p50_ms"], 2), fmt_num(o["p99_ms"], 2),
                fmt_num(o["server_cpu_ms_per_request"], 3), fmt_num(o.get("core_cpu_ms_per_request"), 3),
            ])  # fmt: skip
    if seq_rows:
        lines.append(format_table(
            ["workers", "operation", "p50 ms", "p99 ms", "server CPU ms/req", "in-process CPU ms/req"],
            seq_rows,
            title=f"{backend}: one request at a time (floor: GET /v1/health)",
        ))  # fmt: skip
    rows = []
    for run in result["runs"]:
        for load in run["loads"]:
            ops = load["operations"]
            rows.append([
                run["workers"], load["clients"], load["generators"], fmt_num(load["rps"]),
                *(f"{fmt_num(ops[op]['p50_ms'], 1)} / {fmt_num(ops[op]['p99_ms'], 1)}" for op in MIX),
                load["refused"], load["error_count"], fmt_num(load["server_cpu_ms_per_request"], 3),
                " ".join(str(c) for c in load["server_cpu_seconds_by_process"]), load["generator_cpu_seconds"],
            ])  # fmt: skip
    lines.append(format_table(
        ["workers", "clients", "gens", "req/s", *(f"{op} p50/p99 ms" for op in MIX), "429", "errors",
         "server CPU ms/req", "CPU s by process", "gen CPU s"],
        rows,
        title=f"{backend}: load, {MIX}, embedder fake",
    ))  # fmt: skip
    for run in result["runs"]:
        d = run["durability"]
        abuse = ", ".join(f"{k} {v['as_expected']}/{v['sent']}" for k, v in run["abuse"]["cases"].items())
        lines.append(
            f"{run['workers']} workers: server RSS {fmt_bytes(run['server_rss_bytes']['start'])} -> "
            f"{fmt_bytes(run['server_rss_bytes']['end'])}; abuse: {abuse}; healthy after: "
            f"{run['abuse']['healthy_after']}; durability: {d['acknowledged_puts']} acknowledged puts, "
            f"{d['missing']} missing, {d['wrong_value']} with a wrong value"
        )
    return "\n".join(lines)


def passed(result: dict[str, Any]) -> bool:
    for run in result["runs"]:
        abuse_ok = all(v["as_expected"] == v["sent"] for v in run["abuse"]["cases"].values())
        d = run["durability"]
        if not abuse_ok or not run["abuse"]["healthy_after"] or d["missing"] + d["wrong_value"]:
            return False
        if any(load["error_count"] for load in run["loads"]):
            return False
    return True


def _counts(text: str, what: str) -> list[int]:
    try:
        values = [cpu_count() if v.strip() == "auto" else int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: a comma-separated list of whole numbers, not {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{what}: every count must be at least 1")
    return list(dict.fromkeys(values))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    ap.add_argument(
        "--workers",
        type=lambda t: _counts(t, "--workers"),
        default=[1, 2],
        help="worker counts to measure side by side, e.g. 1,2,auto (auto: one per usable CPU)",
    )
    ap.add_argument(
        "--clients",
        type=lambda t: _counts(t, "--clients"),
        default=[16, 64],
        help="concurrent clients (one agent and connection each), e.g. 16,64",
    )
    ap.add_argument(
        "--generators",
        type=int,
        default=0,
        help="load-generator processes (default: one per 4 usable CPUs, at most one per client)",
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each load phase")
    ap.add_argument("--max-requests", type=int, default=1_000_000, help="per client; the load also stops at --seconds")
    ap.add_argument("--per-agent", type=int, default=50, help="items seeded in each agent's namespace")
    ap.add_argument("--room-items", type=int, default=500, help="items seeded in the shared room")
    ap.add_argument(
        "--sequential",
        type=int,
        default=1000,
        help="requests per operation, one at a time, first (CPU time ticks are 10 ms: 1000 or more)",
    )
    ap.add_argument("--abuse-rounds", type=int, default=50, help="rounds of refused requests after the load")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = ap.parse_args(argv)  # fmt: skip
    if args.seconds <= 0 or args.seconds > 3600 or args.generators < 0:
        ap.error("--seconds must be in (0, 3600] and --generators >= 0")
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = []
    with tempfile.TemporaryDirectory(prefix="memlane-serve-bench-") as tmp:
        for backend in backends:
            result = bench_backend(backend, args, Path(tmp))
            results.append(result)
            print(report(result), end="\n\n", flush=True)
    if args.json:
        write_json(args.json, {"machine": machine_info(), "args": vars(args), "results": results})
    ok = all(passed(r) for r in results)
    if not ok:
        print("FAILED: errors, unexpected abuse answers or lost writes (see above)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
