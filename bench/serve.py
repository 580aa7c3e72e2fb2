"""Load and abuse test of ``memlane serve``: many concurrent agents over loopback HTTP.

Starts a real ``memlane serve`` subprocess (loopback only) on a temporary SQLite
file and/or a fresh PostgreSQL database, creates one agent per client (each a
member of one shared room), seeds some items, then runs ``--clients``
concurrent clients for ``--seconds``. Each client keeps one HTTP/1.1
connection and loops over a weighted mix of operations:

* ``get``    (40 %) an exact lookup of a seeded address in its own namespace or the room;
* ``put``    (30 %) an upsert of a new key in its own namespace (acknowledged keys are remembered);
* ``search`` (20 %) hybrid search (lexical + vector, RRF) over everything the agent may read;
* ``recall`` (10 %) keyed recall: every visible item under a seeded key, newest first.

The server runs with the deterministic ``fake`` embedder (64-dimensional
hashed vectors, microseconds per text), so figures measure the service, the
access checks and the store, not a neural model.

After the load phase, an abuse phase sends refused requests (no token, wrong
token, a namespace outside the agent's scope, malformed JSON, a body over the
size limit) and checks each gets its 4xx and the server keeps answering. Then
the server is stopped and the store is opened directly: every acknowledged put
must be there with its value (nothing lost).

Reported per backend: requests/s, p50/p99 per operation (client-side wall
time, loopback), errors (must be 0), server RSS (start, peak, end), lost puts
(must be 0). The load generator shares the machine with the server; on a
small machine it takes a good part of the CPU, which the report shows.

Example::

    python bench/serve.py --backend both --clients 32 --seconds 20 --json /tmp/serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
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
from memlane.access import Access
from memlane.server.app import MAX_BODY_BYTES

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

    def create(self) -> str:
        from urllib.parse import urlsplit, urlunsplit

        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.name}"')
        return urlunsplit(urlsplit(self.admin_url)._replace(path="/" + self.name))

    def close(self) -> None:
        try:
            with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
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


class Server:
    """``memlane serve`` on loopback; stderr goes to a file (it holds the admin token: never printed)."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = (workdir / f"serve-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [str(MEMLANE), "serve", "--db", url, "--host", "127.0.0.1", "--port", str(self.port), "--embedder", "fake"],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memlane serve exited with {self.proc.returncode}; see {self._log.name}")
            try:
                if httpx.get(f"{self.base}/v1/operations", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("memlane serve did not answer within 60 s")

    def rss(self) -> int | None:
        """Resident set size of the server process, in bytes."""
        try:
            import psutil

            return int(psutil.Process(self.proc.pid).memory_info().rss)
        except ImportError:
            pass
        except Exception:  # the process is gone
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def cpu_seconds(self) -> float | None:
        try:
            import psutil

            t = psutil.Process(self.proc.pid).cpu_times()
            return float(t.user + t.system)
        except Exception:  # psutil missing or process gone: informational only
            return None

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


class RssSampler(threading.Thread):
    """Samples the server's RSS every ``interval`` seconds; keeps the peak."""

    def __init__(self, server: Server, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.interval = interval
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, self.server.rss() or 0)
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
    acked: dict[str, Any] = field(default_factory=dict)  # key -> value of every acknowledged put

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def client_loop(
    n: int, base: str, seeded: Seeded, deadline: float, max_requests: int, rng: random.Random
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
            body = request_body(op, n, seq, seeded, rng)
            t0 = time.perf_counter_ns()
            try:
                resp = await http.post(f"/v1/{op}", json=body)
            except httpx.HTTPError as e:
                tally.error(f"{op}: {type(e).__name__}")
                continue
            elapsed = time.perf_counter_ns() - t0
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


def request_body(op: str, n: int, seq: int, seeded: Seeded, rng: random.Random) -> dict[str, Any]:
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
            "key": f"load.c{n}.s{seq}",
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
            bodies = [request_body(op, 0, 2_000_000 + i, seeded, rng) for i in range(count)]
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
            out[op] = (time.process_time() - c0) * 1000 / count
    return out


def run_sequential(server: Server, seeded: Seeded, count: int, rng: random.Random) -> dict[str, dict[str, float]]:
    """One client, one request at a time: the latency floor and the server CPU per request of each operation."""
    out: dict[str, dict[str, float]] = {}
    headers = {"Authorization": f"Bearer {seeded.tokens[0]}"}
    with httpx.Client(base_url=server.base, headers=headers, timeout=60) as http:
        http.get("/v1/me")  # connect
        for op in MIX:
            bodies = [request_body(op, 0, 1_000_000 + i, seeded, rng) for i in range(count)]
            samples = []
            cpu0 = server.cpu_seconds()
            for body in bodies:
                t0 = time.perf_counter_ns()
                resp = http.post(f"/v1/{op}", json=body)
                samples.append(time.perf_counter_ns() - t0)
                if resp.status_code != 200:
                    raise RuntimeError(f"sequential {op}: HTTP {resp.status_code} {resp.text[:200]}")
            cpu1 = server.cpu_seconds()
            samples.sort()
            out[op] = {
                "requests": count,
                "p50_ms": percentile(samples, 50) / 1e6,
                "p99_ms": percentile(samples, 99) / 1e6,
                "server_cpu_ms_per_request": (cpu1 - cpu0) * 1000 / count
                if cpu0 is not None and cpu1
                else float("nan"),
            }
    return out


async def run_load(
    base: str, seeded: Seeded, clients: int, seconds: float, max_requests: int, seed_: int
) -> list[Tally]:
    deadline = time.monotonic() + seconds
    tasks = [
        client_loop(n, base, seeded, deadline, max_requests, random.Random(seed_ * 1000 + n)) for n in range(clients)
    ]
    return list(await asyncio.gather(*tasks))


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


def check_nothing_lost(url: str, clients: int, tallies: list[Tally]) -> dict[str, int]:
    """Open the store directly (server stopped) and compare with every acknowledged put."""
    acked = missing = wrong = 0
    with memlane.open(url, embedder=None) as mem:
        for n, tally in enumerate(tallies):
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


def bench_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    pg: Postgres | None = None
    if backend == "sqlite":
        url = str(workdir / "serve-bench.db")
    else:
        pg = Postgres(workdir)
        url = pg.create()
    try:
        rng = random.Random(args.seed)
        progress(f"{backend}: seeding {args.clients} agents")
        seeded = seed(url, args.clients, args.per_agent, args.room_items, rng)
        core = run_core(url, seeded, args.sequential, random.Random(args.seed + 2)) if args.sequential else {}
        server = Server(url, workdir)
        try:
            rss_start = server.rss()
            sequential: dict[str, Any] = {}
            if args.sequential:
                progress(f"{backend}: {args.sequential} sequential requests per operation")
                sequential = run_sequential(server, seeded, args.sequential, random.Random(args.seed + 1))
                for op, ms in core.items():
                    sequential[op]["core_cpu_ms_per_request"] = ms
            cpu_start = server.cpu_seconds()
            sampler = RssSampler(server)
            sampler.start()
            progress(f"{backend}: {args.clients} clients for {args.seconds:g} s against {server.base}")
            c0, t0 = time.process_time(), time.perf_counter()
            tallies = asyncio.run(
                run_load(server.base, seeded, args.clients, args.seconds, args.max_requests, args.seed)
            )
            wall = time.perf_counter() - t0
            client_cpu = time.process_time() - c0
            cpu_end = server.cpu_seconds()
            progress(f"{backend}: abuse phase")
            abuse = asyncio.run(run_abuse(server.base, seeded, args.abuse_rounds))
            rss_peak = max(sampler.stop(), server.rss() or 0)
            rss_end = server.rss()
        finally:
            code = server.stop()
        progress(f"{backend}: server stopped ({code}); checking every acknowledged put")
        lost = check_nothing_lost(url, args.clients, tallies)
    finally:
        if pg is not None:
            pg.close()
    ops = summarize_ops(tallies, wall)
    total = sum(o["requests"] for o in ops.values())
    errors: dict[str, int] = {}
    for t in tallies:
        for k, v in t.errors.items():
            errors[k] = errors.get(k, 0) + v
    return {
        "backend": backend,
        "clients": args.clients,
        "seconds": round(wall, 2),
        "requests": total,
        "rps": total / wall,
        "operations": ops,
        "errors": errors,
        "error_count": sum(errors.values()),
        "server_rss_bytes": {"start": rss_start, "peak": rss_peak, "end": rss_end},
        "server_cpu_seconds": None if cpu_start is None or cpu_end is None else round(cpu_end - cpu_start, 2),
        "sequential": sequential,
        "client_cpu_seconds": round(client_cpu, 2),
        "abuse": abuse,
        "durability": lost,
    }


def report(result: dict[str, Any]) -> str:
    rows = [
        [op, o["requests"], fmt_num(o["rps"]), fmt_num(o["p50_ms"], 2), fmt_num(o["p99_ms"], 2)]
        for op, o in result["operations"].items()
    ]
    rows.append(["all", result["requests"], fmt_num(result["rps"]), "", ""])
    rss = result["server_rss_bytes"]
    seq = result["sequential"]
    seq_table = format_table(
        ["operation", "requests", "p50 ms", "p99 ms", "server CPU ms/req", "in-process CPU ms/req"],
        [
            [
                op,
                o["requests"],
                fmt_num(o["p50_ms"], 2),
                fmt_num(o["p99_ms"], 2),
                fmt_num(o["server_cpu_ms_per_request"], 2),
                fmt_num(o.get("core_cpu_ms_per_request"), 2),
            ]
            for op, o in seq.items()
        ],
        title="one client, one request at a time:",
    )
    per_request = (
        result["server_cpu_seconds"] * 1000 / result["requests"]
        if result["server_cpu_seconds"] and result["requests"]
        else None
    )
    lines = [
        *([seq_table] if seq else []),
        format_table(
            ["operation", "requests", "req/s", "p50 ms", "p99 ms"],
            rows,
            title=f"{result['backend']}: {result['clients']} clients, {result['seconds']:g} s, embedder fake",
        ),
        f"errors: {result['error_count']} {result['errors'] or ''}".rstrip(),
        f"server RSS: start {fmt_bytes(rss['start'])}, peak {fmt_bytes(rss['peak'])}, end {fmt_bytes(rss['end'])}",
        f"CPU seconds during the load: server {result['server_cpu_seconds']} "
        f"({fmt_num(per_request, 2)} ms per request), load generator {result['client_cpu_seconds']}",
        "abuse: "
        + ", ".join(f"{k} {v['as_expected']}/{v['sent']}" for k, v in result["abuse"]["cases"].items())
        + f"; healthy after: {result['abuse']['healthy_after']}",
        "durability: {acknowledged_puts} acknowledged puts, {missing} missing, {wrong_value} with a wrong value".format(
            **result["durability"]
        ),
    ]
    return "\n".join(lines)


def passed(result: dict[str, Any]) -> bool:
    abuse_ok = all(v["as_expected"] == v["sent"] for v in result["abuse"]["cases"].values())
    d = result["durability"]
    return (
        result["error_count"] == 0
        and abuse_ok
        and result["abuse"]["healthy_after"]
        and not d["missing"] + d["wrong_value"]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients (one agent and connection each)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the load phase")
    ap.add_argument("--max-requests", type=int, default=1_000_000, help="per client; the load also stops at --seconds")
    ap.add_argument("--per-agent", type=int, default=50, help="items seeded in each agent's namespace")
    ap.add_argument("--room-items", type=int, default=500, help="items seeded in the shared room")
    ap.add_argument("--sequential", type=int, default=200, help="requests per operation, one at a time, first")
    ap.add_argument("--abuse-rounds", type=int, default=200, help="rounds of refused requests after the load")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = ap.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.seconds > 3600:
        ap.error("--clients must be >= 1 and --seconds in (0, 3600]")
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
