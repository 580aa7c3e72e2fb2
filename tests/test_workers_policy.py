"""What ``memlane serve`` decides before any worker runs: how many workers, their pools, the shared port, how
workers are made, and the single-process server's stop signal. In-process, so ``make mutate``'s ``workers``
module can run them against each mutant (the real services of tests/test_workers.py and tests/test_faults.py
import the installed memlane)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing import forkserver
from typing import Any

import pytest

from memlane.server import workers

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU affinity and SO_REUSEPORT of Linux")


@linux
def test_the_cpu_count_is_this_processs_affinity_not_the_machines() -> None:
    before = os.sched_getaffinity(0)
    assert workers.cpu_count() == len(before)
    try:
        os.sched_setaffinity(0, {min(before)})  # this process may run on one CPU: one worker
        assert workers.cpu_count() == 1
    finally:
        os.sched_setaffinity(0, before)


def test_without_an_affinity_the_cpu_count_is_the_machines_and_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert workers.cpu_count() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # undetermined: one
    assert workers.cpu_count() == 1


@linux
def test_one_worker_by_default_where_the_kernel_does_not_spread_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "cpu_count", lambda: 8)
    assert workers.default_workers() == 8
    monkeypatch.setattr(sys, "platform", "darwin")  # SO_REUSEPORT, but it does not balance
    assert workers.default_workers() == 1
    assert workers.default_workers(postgres=True) == 1
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delattr(socket, "SO_REUSEPORT")  # Linux without it: one socket, one worker
    assert workers.default_workers() == 1


def test_the_pool_of_each_worker_is_a_whole_number_of_connections() -> None:
    sizes = {count: workers.pool_size(count) for count in (0, 1, 3, 6, 7, 9, 31, 32, 33, 64, 1000)}
    assert sizes == {0: 10, 1: 10, 3: 10, 6: 10, 7: 9, 9: 7, 31: 2, 32: 2, 33: 2, 64: 2, 1000: 2}
    assert all(type(size) is int for size in sizes.values())  # a pool of 9.14 connections is refused


@linux
def test_sockets_on_the_shared_port_bind_side_by_side_and_listen() -> None:
    first = workers.shared_port(socket.AF_INET, ("127.0.0.1", 0))
    try:
        address = first.getsockname()
        second = workers.shared_port(socket.AF_INET, address)  # a worker's socket on the supervisor's port
        try:
            for sock in (first, second):
                assert sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM
                assert sock.getsockname() == address
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            second.listen(8)
            with socket.create_connection(address, timeout=5):  # the listening one takes it
                accepted, _ = second.accept()
                accepted.close()
        finally:
            second.close()
    finally:
        first.close()


@linux
def test_a_port_held_without_sharing_is_refused_and_the_socket_closed() -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    fds = len(os.listdir("/proc/self/fd"))
    try:
        with pytest.raises(OSError):
            workers.shared_port(socket.AF_INET, holder.getsockname())
        assert len(os.listdir("/proc/self/fd")) == fds  # the refused socket closed, not leaked
    finally:
        holder.close()


def test_without_so_reuseport_several_workers_are_refused_saying_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(socket, "SO_REUSEPORT", raising=False)
    with pytest.raises(OSError) as refused:
        workers.shared_port(socket.AF_INET, ("127.0.0.1", 0))
    assert str(refused.value) == "several workers need SO_REUSEPORT, which this system lacks; run with --workers 1"


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server")
def test_workers_are_forks_of_a_server_that_imported_the_service_once() -> None:
    context = workers._context()
    assert context.get_start_method() == "forkserver"
    assert forkserver._forkserver._preload_modules == workers.PRELOAD  # type: ignore[attr-defined]
    assert "memlane.server.preload" in workers.PRELOAD


def test_without_a_fork_server_each_worker_is_a_fresh_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])  # Windows
    assert workers._context().get_start_method() == "spawn"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[-1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_the_single_server_is_configured_as_the_service_runs_it() -> None:
    server = workers.single(_app, "localhost", 1234)
    config = server.config
    assert (config.app, config.host, config.port) == (_app, "localhost", 1234)
    assert config.access_log is False and config.proxy_headers is False and config.log_level == "warning"


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals: the main thread")
def test_a_stop_signal_ends_the_single_server_which_returns_and_gives_the_signals_back() -> None:
    """SIGTERM stops serving and ``run`` returns (the caller then closes its memory); the handlers installed
    before are back afterwards. A server that let the signal through would reach the test's own handler."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = workers.single(_app, "127.0.0.1", port)
    reached: list[int] = []

    def ours(signum: int, _frame: Any) -> None:
        reached.append(signum)
        server.should_exit = True  # end the test's server anyway

    before = {sig: signal.signal(sig, ours) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:

        def stop() -> None:
            deadline = time.monotonic() + 20
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGTERM)

        stopper = threading.Thread(target=stop, daemon=True)
        stopper.start()
        server.run()  # returns: no SystemExit, no re-raised signal
        stopper.join(5)
        assert server.started
        assert reached == []  # the server's handler took the signal, not the one installed before
        assert signal.getsignal(signal.SIGTERM) is ours and signal.getsignal(signal.SIGINT) is ours
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_outside_the_main_thread_the_single_server_leaves_the_signals_alone() -> None:
    server = workers.single(_app, "127.0.0.1", 0)
    seen: list[Any] = []

    def inside() -> None:
        with server.capture_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=inside)
    thread.start()
    thread.join(5)
    assert seen == [before]
