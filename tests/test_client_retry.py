"""The Client's transport: what it sends again (a 429, a lost connection of a read), what never, and failover.

A scripted HTTP server on loopback answers each request as told (an item, a
429 with some Retry-After, or a connection closed without an answer) and
counts what it received; the Client's sleeps are recorded instead of slept.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import memlane
from conftest import Blocking
from memlane.values import errors

ITEM = {
    "id": "01",
    "namespace": ["agent", "alice"],
    "key": "k",
    "value": 1,
    "value_type": "number",
    "text": "1",
    "metadata": {},
    "created_at": "2026-01-01T00:00:00+00:00",
    "updated_at": "2026-01-01T00:00:00+00:00",
    "version": 1,
}


class Scripted:
    """Answers requests in the order of ``script``: ``"ok"``, ``("busy", retry_after)``, ``"drop"`` or ``"slow"``
    (answers after half a second)."""

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.received: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.received.append(self.path)
                step = owner.script.pop(0) if owner.script else "ok"
                if step == "slow":
                    threading.Event().wait(0.5)  # not time.sleep: the tests record the Client's sleeps there
                if step == "drop":  # the request arrived; no answer will
                    self.close_connection = True
                    self.connection.close()
                    return
                status, body, headers = 200, ITEM, {}
                if isinstance(step, tuple):
                    status = 429
                    body = {"error": {"type": "busy", "message": "over its share", "retry_after": step[1]}}
                    headers = {"Retry-After": str(step[1])}
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served() -> Iterator[Scripted]:
    s = Scripted()
    yield s
    s.close()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(memlane.client.time, "sleep", slept.append)
    return slept


class _Driven(Blocking):
    """An AsyncClient, each call awaited on its own loop: the same transport tests, through the async surface."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(params=["Client", "AsyncClient"])
def connect(request: pytest.FixtureRequest) -> Any:
    """Makes a client of either kind: the async one must retry, fail over and refuse exactly as the Client."""
    if request.param == "Client":
        return memlane.Client
    return lambda *args, **kwargs: _Driven(memlane.AsyncClient(*args, **kwargs))


def _dead_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("wait", [1, 3, 17])
def test_a_429_is_sent_again_after_the_retry_after_it_gives(
    connect: Any, served: Scripted, sleeps: list[float], wait: int
) -> None:
    served.script = [("busy", wait), ("busy", wait), "ok"]
    with connect(served.url, "ml_t") as client:
        assert client.put("agent/alice", "k", 1).key == "k"  # a write too: a 429 means it did not run
    assert sleeps == [wait, wait] and served.received == ["/v1/put"] * 3


@pytest.mark.parametrize("wait", [2, 7])
def test_without_retries_a_429_raises_busy_with_the_servers_retry_after(
    connect: Any, served: Scripted, sleeps: list[float], wait: int
) -> None:
    served.script = [("busy", wait)]
    with connect(served.url, "ml_t", retries=0) as client, pytest.raises(errors.BusyError) as busy:
        client.search("anything")
    assert busy.value.retry_after == wait and sleeps == [] and len(served.received) == 1


def test_retries_are_bounded_and_every_wait_is_capped(connect: Any, served: Scripted, sleeps: list[float]) -> None:
    served.script = [("busy", 3600)] * 3
    with connect(served.url, "ml_t", retries=2) as client, pytest.raises(errors.BusyError) as busy:
        client.get("agent/alice", "k")
    assert sleeps == [30.0, 30.0] and len(served.received) == 3 and busy.value.retry_after == 3600


def test_a_read_whose_connection_was_lost_is_sent_again(connect: Any, served: Scripted, sleeps: list[float]) -> None:
    served.script = ["drop", "drop", "ok"]
    with connect(served.url, "ml_t", backoff=0.5) as client:
        assert client.get("agent/alice", "k").value == 1
    assert served.received == ["/v1/get"] * 3
    assert len(sleeps) == 2 and 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0  # doubling, with jitter


def test_a_write_whose_connection_was_lost_is_never_sent_again(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    served.script = ["drop"]
    with connect(served.url, "ml_t") as client, pytest.raises(errors.StoreError) as lost:
        client.put("agent/alice", "k", 1)
    assert served.received == ["/v1/put"] and sleeps == []
    assert "may or may not have been applied" in str(lost.value)


def test_a_lost_read_gives_up_after_its_retries(connect: Any, served: Scripted, sleeps: list[float]) -> None:
    served.script = ["drop"] * 4
    with connect(served.url, "ml_t", retries=3) as client, pytest.raises(errors.StoreError) as lost:
        client.get("agent/alice", "k")
    assert len(served.received) == 4 and len(sleeps) == 3
    assert "cannot reach the memlane service" in str(lost.value) and "may or may not" not in str(lost.value)


def test_a_refused_connection_moves_to_the_next_service_even_for_a_write(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    dead = _dead_url()
    with connect([dead, served.url], "ml_t") as client:
        assert client.put("agent/alice", "k", 1).key == "k"  # never reached the first: safe on the second
        assert client.url == served.url
    assert served.received == ["/v1/put"] and len(sleeps) == 1


def test_a_refused_connection_is_retried_then_reported(connect: Any, sleeps: list[float]) -> None:
    with connect(_dead_url(), "ml_t", retries=2) as client, pytest.raises(errors.StoreError) as lost:
        client.put("agent/alice", "k", 1)
    assert len(sleeps) == 2 and "cannot reach the memlane service" in str(lost.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": []}, "url"),
        ({"url": ["http://a", ""]}, "url"),
        ({"url": 5}, "url"),
        ({"retries": -1}, "retries"),
        ({"retries": True}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"backoff": -0.1}, "backoff"),
        ({"backoff": 31}, "backoff"),
        ({"backoff": "1"}, "backoff"),
    ],
)
def test_bad_transport_settings_are_refused_naming_them(kwargs: dict[str, Any], field: str) -> None:
    args = {"url": "http://127.0.0.1:1", "token": "ml_t"} | kwargs
    with pytest.raises(errors.ValidationError) as refused:
        memlane.Client(**args)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("send", "path"),
    [(lambda c: c.get("agent/alice", "k"), "/v1/get"), (lambda c: c.put("agent/alice", "k", 1), "/v1/put")],
)
def test_a_request_the_service_is_slow_to_answer_is_never_sent_again(
    connect: Any, served: Scripted, sleeps: list[float], send: Any, path: str
) -> None:
    """A timeout means the service is still at work on it: a copy would only add to its load (a read as well)."""
    served.script = ["slow", "slow", "slow", "slow"]
    with connect(served.url, "t", timeout=0.1, retries=3) as client:
        with pytest.raises(errors.StoreError, match=r"cannot reach the memlane service at .*: no answer within 0\.1s"):
            send(client)
    assert served.received == [path] and sleeps == []


def test_what_json_cannot_carry_is_refused_by_field_before_sending(connect: Any, served: Scripted) -> None:
    with connect(served.url, "t") as client:
        with pytest.raises(errors.ValidationError) as e:
            client.get_many({("agent/alice", "k")})  # a set
    assert e.value.field == "addresses" and "JSON cannot carry" in str(e.value)
    assert served.received == []
