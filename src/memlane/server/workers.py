"""``memlane serve --workers N``: several processes answer one store, and one of them indexes it.

One Python process answers on one core (the interpreter's lock), so the service
runs ``N`` worker processes. Each listens on the same port with its own socket
(``SO_REUSEPORT``): the kernel spreads new connections evenly between them by
their addresses. On one shared socket, the worker that woke first took every
connection waiting (an event loop accepts as many as it can), so a fleet's
long-lived connections piled on a few workers while others idled. This
process, the supervisor, holds the port, creates the admin agent on a new
store, starts the workers, replaces one that dies, and runs the store's one
write-behind indexer: workers mark what they write and never embed in the
background, so the model's work happens once per store, not once per worker.

Nothing a worker keeps is needed by another: agents, rooms, grants and items
live in the store, and each worker re-reads an agent when the access log moves
(one indexed read per request), so a change made through one worker is
enforced by every worker at its next request. Each worker has its own fair
gate on expensive work (:mod:`memlane.values.gate`): an agent's fair share holds per
worker. A worker killed in the middle of a request loses nothing that was
acknowledged: an answer is sent only after its transaction committed.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

import memlane

from ..core.memory import Memory
from ..domain.search.embedders import embedder_spec

# PostgreSQL connections of all workers' pools together: with each worker's dedicated read connection and
# the supervisor's pool, 16 workers stay under the server's default max_connections (100)
PG_CONNECTIONS = 64
MAX_POOL = 10
MAX_PG_WORKERS = 16  # 16 workers x (4 pooled + 1 reader) connections: 80, under PostgreSQL's default 100
# uvicorn as the service runs it: no access log (a line per request costs more than a point read) and no
# X-Forwarded-* rewriting (nothing in memlane reads the client's address)
UVICORN: dict[str, Any] = {"log_level": "warning", "access_log": False, "proxy_headers": False}
BACKLOG = 2048  # uvicorn's default
STARTUP_FAILURE = 3  # a worker's exit code when it could not start (uvicorn's own)
WATCH_S = 0.2  # how often the supervisor looks at its workers
STOP_S = 30.0  # how long workers may take to finish their requests after a stop signal
RETRY_S = 1.0  # before starting again a worker that could not start, or died soon after, while others serve
MAX_RETRY_S = 30.0  # the longest wait: each quick death in a row doubles it
SETTLED_S = 10.0  # a worker that served this long died of something else than its start: replaced at once
ALONE_S = 0.5  # while no worker listens, the longest a slot waits after its last start before starting again
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


class _Server(uvicorn.Server):
    """uvicorn's server, whose stop signal ends serving and returns (uvicorn re-raises it after its shutdown,
    which would end the process before the caller closes its memory: the indexer, the checkpoint thread)."""

    def __init__(self, config: uvicorn.Config, ready: Any = None) -> None:
        super().__init__(config)
        self._ready = ready

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._ready is not None:
            self._ready.set()


def single(app: Any, host: str, port: int) -> Any:
    """A uvicorn server for one process: on a stop signal it returns, so the caller closes its memory and
    exits 0, as the supervisor of several workers does."""
    return _Server(uvicorn.Config(app, host=host, port=port, **UVICORN))


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def default_workers(*, postgres: bool = False) -> int:
    """``memlane serve``'s worker count: one per CPU where the kernel spreads connections over the workers'
    sockets (Linux); one elsewhere (without ``SO_REUSEPORT``, or where it does not balance: macOS, Windows).

    Over PostgreSQL at most :data:`MAX_PG_WORKERS`: each worker holds at least :func:`pool_size` connections
    and a reader, and PostgreSQL's default ``max_connections`` is 100.
    """
    count = cpu_count() if sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT") else 1
    return min(count, MAX_PG_WORKERS) if postgres else count


def pool_size(workers: int) -> int:
    """PostgreSQL connections per worker process when ``workers`` share one database."""
    return max(2, min(MAX_POOL, PG_CONNECTIONS // max(1, workers)))


def shared_port(family: int, address: Any) -> socket.socket:
    """A socket bound to ``address`` that other sockets of this user may bind too (``SO_REUSEPORT``).

    The supervisor binds one to hold the port and never listens on it (a socket that does not listen gets no
    connections); each worker binds one and listens.
    """
    if not hasattr(socket, "SO_REUSEPORT"):  # pragma: no cover - Linux, the BSDs and macOS have it
        raise OSError("several workers need SO_REUSEPORT, which this system lacks; run with --workers 1")
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _leave_fork_server() -> None:
    """Close this worker's copy of the fork server's "supervisor alive" pipe (multiprocessing hands one to every
    process it forks): the fork server ends when the supervisor's end of it closes, and with it its workers
    (:func:`_end_with`); a copy held here would keep it, and so this worker, alive after the supervisor died."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def _end_with(supervisor: int) -> None:
    """Have the kernel stop this worker (SIGTERM) when its parent dies, even by SIGKILL (Linux): a worker
    left behind would go on serving the port with nobody to replace or stop it."""
    _leave_fork_server()
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return
    # the parent is the fork server, which ends with the supervisor (its pipe from it closes): then the
    # kernel stops this worker. A supervisor already gone before the request: stop now
    try:
        os.kill(supervisor, 0)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGTERM)


def _work(
    url: str,
    embedder: str | None,
    pool: int | None,
    options: dict[str, Any],
    family: int,
    address: Any,
    ready: Any,
    supervisor: int,
) -> None:
    """One worker process: its own socket on the shared port, the service, until a stop signal."""
    from .app import create_app

    _end_with(supervisor)
    try:
        sock = shared_port(family, address)
        sock.listen(BACKLOG)
        # the worker's own store; it indexes nothing in the background (the supervisor does)
        mem = memlane.open(url, embedder=embedder, indexing="external", pool_size=pool)
    except (memlane.MemlaneError, OSError) as e:  # the store or the port: one line, as the supervisor's own
        sys.stderr.write(f"Error: a worker could not start: {e}\n")  # one write: workers fail side by side
        sys.stderr.flush()
        raise SystemExit(STARTUP_FAILURE) from None
    try:
        server = _Server(uvicorn.Config(create_app(mem, index=False, **options), lifespan="on", **UVICORN), ready)
        server.run(sockets=[sock])  # returns on a stop signal, after the requests under way
    finally:
        mem.close()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


# what every worker imports (and builds: memlane.server.preload) before it serves: a fork server does it once,
# and each worker is a fork of it
PRELOAD = ["memlane.server.app", "memlane.mcp", "uvicorn", "memlane.server.preload"]


def _context() -> Any:
    """How workers are made: forks of a fork server (Linux, macOS) that imported :data:`PRELOAD` once, so a
    replacement listens in a fraction of a second instead of importing and building everything anew (about
    1.5 s of CPU, 3 to 4 s on a busy machine, while the port may have no other listener); the fork server is a
    fresh interpreter, holding none of this process's threads or connections. Elsewhere a fresh interpreter
    per worker."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def next_start(now: float, born: float, started: bool, delay: float) -> tuple[float, float]:
    """When a dead worker's slot starts another while other workers serve, and the wait after the next quick
    death there.

    A worker that served :data:`SETTLED_S` is replaced at once; one that could not start or died sooner
    waits ``delay``, which doubles (up to :data:`MAX_RETRY_S`) while its slot keeps dying quickly. While no
    other worker listens, :func:`start_at` brings the start forward.
    """
    if started and now - born >= SETTLED_S:
        return now, RETRY_S
    return now + delay, min(MAX_RETRY_S, delay * 2)


def start_at(planned: float, born: float, serving: int) -> float:
    """When a waiting slot starts its worker, given how many other workers listen now.

    While others serve, at ``planned`` (the back-off of :func:`next_start`): connections go to them meanwhile.
    While none does, the port refuses every connection, so the slot waits no longer than :data:`ALONE_S`
    after its last start (``born``): at once for a worker killed after that, and never more than one
    interpreter per slot each :data:`ALONE_S` for workers that cannot start at all (the store away).
    """
    return planned if serving > 0 else min(planned, born + ALONE_S)


def run(
    mem: Memory,
    url: str,
    holder: socket.socket,
    *,
    workers: int,
    pool: int | None,
    options: dict[str, Any],
    ready: Callable[[], None] = lambda: None,
) -> bool:
    """Serve the store at ``url`` from ``workers`` processes on ``holder``'s port until SIGINT or SIGTERM.

    ``holder`` is a :func:`shared_port` socket that keeps the port; this process
    keeps ``mem`` (the same store) open to run its write-behind indexer, calls
    ``ready`` once a worker listens (the kernel gives connections only to
    sockets that listen), and replaces a worker that dies.
    Returns whether the workers started.
    """
    spawn = _context()
    # the full spec ("fake:384"), not the name: a name alone may make another dimension in the worker
    embedder = embedder_spec(mem.embedder) if mem.embedder is not None else None
    address = holder.getsockname()

    def start() -> tuple[Any, Any]:
        started = spawn.Event()
        process = spawn.Process(
            target=_work,
            args=(url, embedder, pool, options, holder.family, address, started, os.getpid()),
            daemon=False,
        )
        process.start()
        return process, started

    stopping = threading.Event()
    before = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    processes = [start() for _ in range(workers)]
    failed = False
    log = logging.getLogger("uvicorn.error")
    born = [time.monotonic()] * workers
    not_before = [0.0] * workers  # when a dead worker's slot may start another (0: not decided yet)
    delay = [RETRY_S] * workers  # how long the next quick death in a slot waits
    try:
        mem.start_indexing()
        announced = False
        while not stopping.wait(WATCH_S if announced else 0.01):
            if not announced and any(started.is_set() for _, started in processes):
                announced = True  # a worker listens: connections go to the workers that listen
                ready()
            for i, (process, started) in enumerate(processes):
                if process.is_alive():
                    continue
                if not started.is_set() and not announced:
                    failed = True  # the first workers could not open the store or serve (each said why): stop
                    stopping.set()
                    break
                now = time.monotonic()
                if not not_before[i]:
                    # one that could not start (the store away?) or died soon after is tried again after a
                    # wait that doubles while it keeps dying and others serve: never a loop of interpreters
                    # spawned 5 times a second
                    not_before[i], delay[i] = next_start(now, born[i], started.is_set(), delay[i])
                    if started.is_set():
                        wait = f" in {not_before[i] - now:.0f} s" if not_before[i] > now else ""
                        log.warning("memlane: worker %s exited (%s); starting another%s", process.pid,
                                    process.exitcode, wait)  # fmt: skip
                # the workers listening now (a replacement under way does not, yet): with none, the wait is short
                serving = sum(p.is_alive() and s.is_set() for p, s in processes)
                if now < start_at(not_before[i], born[i], serving):
                    continue
                not_before[i] = 0.0
                try:
                    processes[i] = start()
                except OSError as e:  # no process could be made now (memory, a process limit): next round
                    log.warning("memlane: could not start a worker (%s); trying again", e)
                    not_before[i], delay[i] = next_start(now, now, False, delay[i])
                born[i] = now
    finally:
        for process, _ in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes the requests under way, then the worker exits
        deadline = time.monotonic() + STOP_S
        for process, _ in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return not failed
