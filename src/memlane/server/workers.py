"""``memlane serve --workers N``: several processes answer one store, and one of them indexes it.

One Python process answers on one core (the interpreter's lock), so the service
runs ``N`` worker processes on one listening socket; the kernel hands each new
connection to one of them. This process, the supervisor, binds the socket,
creates the admin agent on a new store, starts the workers (uvicorn's
supervisor, which also restarts a worker that dies) and runs the store's one
write-behind indexer: workers mark what they write and never embed in the
background, so the model's work happens once per store, not once per worker.

Nothing a worker keeps is needed by another: agents, rooms, grants and items
live in the store, and each worker re-reads an agent when the access log moves
(one indexed read per request), so a change made through one worker is
enforced by every worker at its next request. Each worker has its own fair
gate on expensive work (:mod:`memlane.gate`): an agent's fair share holds per
worker. A worker killed in the middle of a request loses nothing that was
acknowledged: an answer is sent only after its transaction committed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import memlane

from ..memory import Memory

# PostgreSQL connections of all workers' pools together: with each worker's dedicated read connection and
# the supervisor's pool, 16 workers stay under the server's default max_connections (100)
PG_CONNECTIONS = 64
MAX_POOL = 10
# uvicorn as the service runs it: no access log (a line per request costs more than a point read) and no
# X-Forwarded-* rewriting (nothing in memlane reads the client's address)
UVICORN: dict[str, Any] = {"log_level": "warning", "access_log": False, "proxy_headers": False}


def single(app: Any, host: str, port: int) -> Any:
    """A uvicorn server for one process whose stop signal ends serving and returns, so the caller closes its
    memory (the indexer, the checkpoint thread) and exits 0, as the supervisor of several workers does.

    uvicorn re-raises the signal after its shutdown, which would end the process before the memory is closed.
    """
    import uvicorn

    class Server(uvicorn.Server):
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

    return Server(uvicorn.Config(app, host=host, port=port, **UVICORN))


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def pool_size(workers: int) -> int:
    """PostgreSQL connections per worker process when ``workers`` share one database."""
    return max(2, min(MAX_POOL, PG_CONNECTIONS // max(1, workers)))


def worker_app(url: str, embedder: str | None, pool: int | None, options: dict[str, Any]) -> Any:
    """The service of one worker process (uvicorn calls this in each new worker).

    The worker opens the store itself, indexes nothing in the background (the
    supervisor does) and closes the store when uvicorn shuts it down.
    """
    from .app import create_app

    mem = memlane.open(url, embedder=embedder, indexing="external", pool_size=pool)
    app = create_app(mem, index=False, **options)
    original = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with original(a) as state:
            try:
                yield state
            finally:
                mem.close()

    app.router.lifespan_context = lifespan
    return app


def run(
    mem: Memory, url: str, listener: socket.socket, *, workers: int, pool: int | None, options: dict[str, Any]
) -> bool:
    """Serve the store at ``url`` from ``workers`` processes on ``listener`` until SIGINT or SIGTERM.

    This process keeps ``mem`` (the same store) open to run its write-behind
    indexer. Returns whether the workers started.
    """
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    embedder = mem.embedder.name if mem.embedder is not None else None
    app = functools.partial(worker_app, url, embedder, pool, options)
    config = uvicorn.Config(app, factory=True, workers=workers, lifespan="on", **UVICORN)
    mem.start_indexing()
    supervisor = Multiprocess(config, sockets=[listener])
    supervisor.run()
    return not any(p.exitcode == 3 for p in supervisor.processes)  # uvicorn's STARTUP_FAILURE
