"""``memlane serve --workers N``, and several services over one PostgreSQL: what one process guarantees holds.

Every test runs real ``memlane serve`` processes on loopback. Which worker
answers a connection is the kernel's choice, so the tests open connections
until each worker holds one (read from the workers' sockets), then speak to
each worker on purpose.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import memlane
from memlane.core.access import Access
from memlane.values.errors import ForbiddenError

MEMLANE = Path(sys.executable).with_name("memlane")
TOKEN_IN_TEXT = re.compile(r"ml_[A-Za-z0-9_-]{20,}")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """A ``memlane serve --workers N`` process tree; stderr in a file (it holds the admin token)."""

    def __init__(
        self, db: str, tmp: Path, *, workers: int = 2, embedder: str = "fake", env: dict[str, str] | None = None
    ) -> None:
        self.port = _free_port()
        self.workers = workers
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"serve-{self.port}.log"
        self._log_file = self.log.open("w")
        self.proc = subprocess.Popen(
            [str(MEMLANE), "serve", "--db", db, "--port", str(self.port), "--embedder", embedder]
            + ["--workers", str(workers)],
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            env=os.environ | {"COLUMNS": "200"} | (env or {}),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"memlane serve exited {self.proc.returncode}: {self.log.read_text()}"
            if len(self.worker_pids()) == workers and self._answers():
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"memlane serve did not start its workers: {self.log.read_text()}")
        self.admin = (TOKEN_IN_TEXT.findall(self.log.read_text()) or [None])[0]

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def worker_pids(self) -> list[int]:
        """The worker processes (uvicorn's): the fork server's children, not the supervisor's own (the fork
        server, multiprocessing's resource tracker)."""
        if self.workers == 1:
            return [self.proc.pid]
        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True) if not self._helper(c)]
        except psutil.Error:
            return []

    def _helper(self, process: psutil.Process) -> bool:
        """Whether a process is one of multiprocessing's own (the fork server, the resource tracker)."""
        command = " ".join(process.cmdline())
        return process.ppid() == self.proc.pid and ("forkserver" in command or "resource_tracker" in command)

    def per_worker(self) -> dict[int, http.client.HTTPConnection]:
        """One open keep-alive connection to each worker, found by asking the workers which sockets they hold."""
        found: dict[int, http.client.HTTPConnection] = {}
        spare: list[http.client.HTTPConnection] = []
        for _ in range(200):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.connect()
            assert conn.sock is not None
            mine = conn.sock.getsockname()[1]
            owner = None
            deadline = time.monotonic() + 5
            while owner is None and time.monotonic() < deadline:
                for pid in self.worker_pids():
                    try:
                        sockets = psutil.Process(pid).net_connections(kind="tcp")
                    except psutil.Error:
                        continue
                    if any(s.raddr and s.raddr.port == mine and s.laddr.port == self.port for s in sockets):
                        owner = pid
                time.sleep(0.005 if owner is None else 0)
            if owner is not None and owner not in found:
                found[owner] = conn
            else:
                spare.append(conn)
            if len(found) == self.workers:
                break
        for conn in spare:
            conn.close()
        assert len(found) == self.workers, f"connections reached only {len(found)} of {self.workers} workers"
        return found

    def stop(self) -> int:
        pids = self.worker_pids()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log_file.close()
        for pid in pids:  # no worker outlives its supervisor
            deadline = time.monotonic() + 10
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline, f"worker {pid} outlived the supervisor"
                time.sleep(0.05)
        return self.proc.returncode


def call(
    conn: http.client.HTTPConnection, path: str, token: str, body: Any = None, method: str = "POST"
) -> tuple[int, Any]:
    payload = None if body is None else json.dumps(body)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request(method, path, body=payload, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, json.loads(data) if data else None


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "workers.db")
        return
    server = request.getfixturevalue("postgres")
    url = server.create()
    yield url
    server.drop(url)


def _agents(db: str) -> dict[str, str]:
    with memlane.open(db, embedder=None) as mem:
        access = Access(mem)
        tokens = {name: access.create_agent(name)[1] for name in ("alice", "bob")}
        access.create_room("eng")
        access.add_member("eng", "alice")
        access.add_member("eng", "bob")
        mem.put("room/eng", "plan.q3", "ship the billing cutover")
    return tokens


def test_every_worker_sees_each_write_and_enforces_each_access_change_at_its_next_request(db, tmp_path):
    tokens = _agents(db)
    svc = Service(db, tmp_path)
    try:
        assert svc.admin is not None  # the supervisor created the admin, once
        conns = svc.per_worker()
        first, *others = conns.values()
        # a write through one worker is read through every other, at once
        status, _ = call(first, "/v1/put", tokens["alice"], {"namespace": "room/eng", "key": "plan.q4", "value": 4})
        assert status == 200
        for conn in conns.values():
            assert call(conn, "/v1/get", tokens["bob"], {"namespace": "room/eng", "key": "plan.q4"})[1]["value"] == 4
        # an access change through one worker is enforced by every worker at its next request
        status, _ = call(first, "/v1/admin/rooms/eng/members/alice", svc.admin, method="DELETE")
        assert status == 200
        for conn in conns.values():
            status, answer = call(conn, "/v1/get", tokens["alice"], {"namespace": "room/eng", "key": "plan.q3"})
            assert status == 403 and answer["error"]["type"] == "forbidden"
            assert call(conn, "/v1/search", tokens["alice"], {"query": "billing"})[1]["hits"] == []
            assert call(conn, "/v1/get", tokens["bob"], {"namespace": "room/eng", "key": "plan.q3"})[0] == 200
        # a new token works at once everywhere; the old one nowhere
        status, created = call(first, "/v1/admin/agents", svc.admin, {"name": "carol"})
        assert status == 200
        for conn in conns.values():
            assert call(conn, "/v1/me", created["token"], method="GET")[1]["name"] == "carol"
        with memlane.open(db, embedder=None) as mem:  # a change made beside the service counts too
            Access(mem).rotate_token("bob")
        for conn in conns.values():
            assert call(conn, "/v1/me", tokens["bob"], method="GET")[0] == 401
        for conn in conns.values():
            conn.close()
    finally:
        assert svc.stop() == 0


def test_a_burst_of_connections_spreads_over_every_worker(db, tmp_path):
    """64 connections opened at once (a fleet starting): every worker gets its part, none sits idle.

    Each worker listens on its own socket of the port, and the kernel spreads connections by their addresses
    (64 over 4: fewer than 4 for one worker is a chance of about 1 in 10,000). On one shared socket, the
    worker that woke first accepted every connection waiting.
    """
    import socket

    svc = Service(db, tmp_path, workers=4)
    socks = []
    try:
        pids = svc.worker_pids()
        for _ in range(64):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", svc.port))
            socks.append(sock)
        mine = set()
        for sock in socks:
            sock.setblocking(True)
            sock.settimeout(10)
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")  # answered: accepted by a worker
            assert b"200 OK" in sock.recv(4096)
            mine.add(sock.getsockname()[1])
        held = {pid: 0 for pid in pids}
        for pid in pids:
            for conn in psutil.Process(pid).net_connections(kind="tcp"):
                if conn.raddr and conn.raddr.port in mine and conn.laddr.port == svc.port:
                    held[pid] += 1
        assert sum(held.values()) == 64, held
        assert min(held.values()) >= 4, held
    finally:
        for sock in socks:
            sock.close()
        assert svc.stop() == 0


def test_a_killed_worker_loses_nothing_acknowledged_and_is_replaced(db, tmp_path):
    tokens = _agents(db)
    svc = Service(db, tmp_path)
    acked: dict[str, int] = {}
    failed = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            key = f"load.w{n}.i{i}"
            try:
                with httpx.Client(base_url=svc.url, timeout=30) as http:  # a new connection: any worker
                    resp = http.post(
                        "/v1/put",
                        json={"namespace": "agent/alice", "key": key, "value": i},
                        headers={"Authorization": f"Bearer {tokens['alice']}"},
                    )
            except httpx.HTTPError as e:
                with lock:
                    failed[type(e).__name__] += 1
                continue
            with lock:
                if resp.status_code == 200:
                    acked[key] = i
                else:
                    failed[f"HTTP {resp.status_code}"] += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(acked) < 40:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        victim = svc.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)  # mid-stream: some of its requests are in flight
        before = len(acked)
        deadline = time.monotonic() + 30
        while len(acked) < before + 40:  # the other worker (and then the new one) keep answering
            assert time.monotonic() < deadline, failed
            time.sleep(0.01)
        deadline = time.monotonic() + 30
        while victim in svc.worker_pids() or len(svc.worker_pids()) < 2:
            assert time.monotonic() < deadline, "the supervisor did not replace the killed worker"
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert svc.stop() == 0
    assert set(failed) <= {"RemoteProtocolError", "ReadError", "ConnectError", "WriteError"}, failed
    with memlane.open(db, embedder=None) as mem:
        stored = {i.key: i.value for i in mem.list("agent/alice", key_prefix="load", limit=10_000).items}
    assert {k: stored.get(k) for k in acked} == acked  # every acknowledged write, with its value


class Embeddings:
    """An OpenAI-compatible embeddings endpoint that counts every text it is asked to embed."""

    def __init__(self) -> None:
        self.texts: Counter[str] = Counter()
        self.senders: dict[str, set[int]] = {}  # text -> the processes that sent it
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.texts.update(body["input"])
                port = self.client_address[1]
                pids = {c.pid for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port}
                for text in body["input"]:
                    owner.senders.setdefault(text, set()).update(p for p in pids if p is not None)
                data = [
                    {"index": n, "embedding": [float((hash(t) >> k) & 7) + 1.0 for k in range(8)]}
                    for n, t in enumerate(body["input"])
                ]
                raw = json.dumps({"data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_write_behind_indexing_runs_once_per_store_not_once_per_worker(tmp_path):
    db = str(tmp_path / "indexed.db")
    embeddings = Embeddings()
    tokens = _agents(db)
    svc = Service(db, tmp_path, workers=2, embedder="openai:counted", env={"MEMLANE_EMBED_BASE_URL": embeddings.url})
    try:
        texts = [f"note {n} about the orchid greenhouse" for n in range(30)]
        with memlane.Client(svc.url, tokens["alice"]) as client:
            for n, text in enumerate(texts):  # new connections each time would spread them; one is enough here
                client.put("agent/alice", f"notes.n{n}", text)
            deadline = time.monotonic() + 60
            while any(embeddings.texts[t] == 0 for t in texts):
                assert time.monotonic() < deadline, "the items were never embedded"
                time.sleep(0.1)
            assert client.search("orchid greenhouse", channels=["vector"]).hits
        time.sleep(1.5)  # an idle poll of every indexer that might run
        assert {t: embeddings.texts[t] for t in texts} == dict.fromkeys(texts, 1)
        # the supervisor embedded every item; the workers only the query
        assert set().union(*(embeddings.senders[t] for t in texts)) == {svc.proc.pid}
        assert embeddings.senders["orchid greenhouse"] <= set(svc.worker_pids())
    finally:
        svc.stop()
        embeddings.close()


def test_two_services_over_one_postgres_share_writes_access_and_load(postgres, tmp_path):
    db = postgres.create()
    tokens = _agents(db)
    a, b = Service(db, tmp_path, workers=1), Service(db, tmp_path, workers=1)
    try:
        admin = a.admin or b.admin
        assert admin is not None and not (a.admin and b.admin)  # one admin, made by whichever started first
        with memlane.Client(a.url, tokens["alice"]) as via_a, memlane.Client(b.url, tokens["alice"]) as via_b:
            via_a.put("room/eng", "handoff", {"from": "a"})
            assert via_b.get("room/eng", "handoff").value == {"from": "a"}  # at once, through the other
            httpx.delete(f"{a.url}/v1/admin/rooms/eng/members/alice", headers={"Authorization": f"Bearer {admin}"})
            with pytest.raises(ForbiddenError):
                via_b.get("room/eng", "handoff")  # the other service's next request
        # one agent flooding service a; another agent's reads on service b are all served
        stop = threading.Event()
        flood: Counter[int] = Counter()

        def flooder() -> None:
            with httpx.Client(base_url=a.url, headers={"Authorization": f"Bearer {tokens['bob']}"}) as http:
                while not stop.is_set():
                    flood[http.post("/v1/search", json={"query": "billing cutover"}).status_code] += 1

        threads = [threading.Thread(target=flooder) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            seen: Counter[int] = Counter()
            with httpx.Client(base_url=b.url, headers={"Authorization": f"Bearer {tokens['bob']}"}) as http:
                for _ in range(100):
                    seen[http.post("/v1/get", json={"namespace": "room/eng", "key": "plan.q3"}).status_code] += 1
                    seen[http.post("/v1/search", json={"query": "billing"}).status_code] += 1
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert seen == {200: 200} and sum(flood.values()) > 100 and set(flood) <= {200, 429}
    finally:
        a.stop()
        b.stop()
        postgres.drop(db)


def test_the_client_fails_over_to_the_next_service(postgres, tmp_path):
    db = postgres.create()
    tokens = _agents(db)
    a, b = Service(db, tmp_path, workers=1), Service(db, tmp_path, workers=1)
    try:
        with memlane.Client([a.url, b.url], tokens["alice"], backoff=0) as client:
            assert client.url == a.url
            client.put("agent/alice", "before", 1)
            a.stop()
            assert client.get("agent/alice", "before").value == 1  # a read, retried on b
            assert client.url == b.url
            client.put("agent/alice", "after", 2)  # a refused connection never sent the write: safe on b
        with memlane.open(db, embedder=None) as mem:
            assert mem.get("agent/alice", "after").value == 2
    finally:
        a.stop()
        b.stop()
        postgres.drop(db)


def test_serve_refuses_a_worker_count_below_one(tmp_path):
    done = subprocess.run(
        [str(MEMLANE), "serve", "--db", str(tmp_path / "x.db"), "--workers", "0", "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "200"},
    )
    assert done.returncode != 0 and "--workers" in done.stderr
    assert not (tmp_path / "x.db").exists()


def test_workers_that_cannot_open_the_store_stop_the_service_each_saying_why(tmp_path, capfd):
    """The first workers fail to start (their store cannot be opened): the supervisor stops, nothing serves."""
    import socket

    from memlane.server.workers import run, shared_port

    holder = shared_port(socket.AF_INET, ("127.0.0.1", 0))
    said: list[str] = []
    unreachable = str(tmp_path / "no-such-folder" / "x.db")  # the workers' store: its folder does not exist
    try:
        with memlane.open(str(tmp_path / "ok.db"), embedder=None) as mem:
            started = run(mem, unreachable, holder, workers=2, pool=None, options={}, ready=lambda: said.append("x"))
    finally:
        holder.close()
    assert started is False and said == []  # never announced
    errors = capfd.readouterr().err
    assert errors.count("Error: a worker could not start:") >= 1 and "no-such-folder" in errors


def test_workers_end_when_their_supervisor_is_killed(db, tmp_path):
    """A supervisor killed outright (SIGKILL: no handler runs) takes its workers with it: none goes on serving."""
    svc = Service(db, tmp_path)
    workers = svc.worker_pids()
    assert len(workers) == 2
    svc.proc.kill()
    svc.proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in workers):
        assert time.monotonic() < deadline, "a worker outlived its killed supervisor"
        time.sleep(0.05)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{svc.url}/v1/health", timeout=2)
    svc._log_file.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="one worker by default elsewhere")
def test_the_default_over_postgresql_stays_within_its_default_connection_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from memlane.server import workers

    monkeypatch.setattr(workers, "cpu_count", lambda: 128)
    assert workers.default_workers() == 128  # SQLite: one per CPU
    count = workers.default_workers(postgres=True)
    assert count == workers.MAX_PG_WORKERS
    assert (count + 1) * (workers.pool_size(count) + 1) <= 100  # each pool and reader: the workers, the supervisor


def test_a_slot_whose_workers_keep_dying_waits_longer_each_time_and_a_settled_one_not_at_all() -> None:
    from memlane.server.workers import MAX_RETRY_S, RETRY_S, SETTLED_S, next_start

    delay, waits = RETRY_S, []
    for n in range(8):  # each worker dies a moment after it started
        at, delay = next_start(100.0 * n, 100.0 * n - 0.5, True, delay)
        waits.append(at - 100.0 * n)
    assert waits == [min(MAX_RETRY_S, RETRY_S * 2**n) for n in range(8)]
    assert next_start(500.0, 500.0 - SETTLED_S, True, delay) == (500.0, RETRY_S)  # served a while: at once, reset
    assert next_start(500.0, 499.0, False, RETRY_S) == (500.0 + RETRY_S, 2 * RETRY_S)  # never started: a wait
