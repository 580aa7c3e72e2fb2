"""The Client's transport: what it sends again (a 429, a lost connection of a read), what never, and failover.

A scripted HTTP server on loopback answers each request as told (an item, a
429 with some Retry-After, or a connection closed without an answer) and
counts what it received; the Client's sleeps are recorded instead of slept.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
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


@dataclass
class Answer:
    """A step of the script: this status, these headers and this body, as they are."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Scripted:
    """Answers requests in the order of ``script``: ``"ok"``, ``("busy", retry_after)``, ``"drop"`` (the connection
    closed once the request arrived), ``"reset"`` (reset once it arrived: the Client's read of the answer fails)
    or ``"slow"`` (answers after half a second)."""

    def __init__(self, log: list[str] | None = None) -> None:
        self.script: list[Any] = []
        self.received: list[str] = []
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []  # method, path, headers, body
        self.log = log if log is not None else []  # shared by several servers: who received what, in order
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                sent = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.received.append(self.path)
                owner.log.append(owner.url)
                owner.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, sent))
                step = owner.script.pop(0) if owner.script else "ok"
                if isinstance(step, Answer):
                    self.send_response(step.status)
                    for k, v in step.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(step.body)))
                    self.end_headers()
                    self.wfile.write(step.body)
                    return
                if step == "slow":
                    threading.Event().wait(0.5)  # not time.sleep: the tests record the Client's sleeps there
                if step in ("drop", "reset"):  # the request arrived; no answer will
                    if step == "reset":  # an RST, not a FIN: the Client's read fails with "connection reset"
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
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
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]  # a dropped peer is the point
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served() -> Iterator[Scripted]:
    s = Scripted()
    yield s
    s.close()


class _Time:
    """The Client's clock: its sleeps are recorded and move the clock on, instead of being slept."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = _Time()
    monkeypatch.setattr(memlane.client, "time", clock)
    return clock.slept


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


def test_a_lost_read_is_sent_again_until_the_retry_window_ends(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    served.script = ["drop"] * 100
    with connect(served.url, "ml_t", retry_window=10) as client, pytest.raises(errors.StoreError) as lost:
        client.get("agent/alice", "k")
    assert sum(sleeps) == pytest.approx(10.0) and len(served.received) == len(sleeps) + 1
    # waits double from backoff (0.25 s, with jitter down to half) up to 2 s; the last one ends with the window
    assert 0.125 <= sleeps[0] <= 0.25 and 0.25 <= sleeps[1] <= 0.5 and 0.5 <= sleeps[2] <= 1.0
    assert all(1.0 <= s <= 2.0 for s in sleeps[3:-1]) and 0 < sleeps[-1] <= 2.0
    assert "cannot reach the memlane service" in str(lost.value) and "tried for 10 s" in str(lost.value)
    assert "retry_window" in str(lost.value) and "may or may not" not in str(lost.value)


def test_the_retry_window_is_the_clients_default_and_retries_count_only_busy_answers(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    served.script = ["drop"] * 100
    with connect(served.url, "ml_t", retries=0) as client, pytest.raises(errors.StoreError):
        client.get("agent/alice", "k")
    assert sum(sleeps) == pytest.approx(memlane.client.RETRY_WINDOW) == pytest.approx(10.0)
    assert len(served.received) > 5


def test_a_backoff_above_the_cap_is_kept_and_a_zero_window_never_retries(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    served.script = ["drop"] * 100
    with connect(served.url, "ml_t", backoff=5, retry_window=30) as client, pytest.raises(errors.StoreError):
        client.get("agent/alice", "k")
    assert 2.5 <= sleeps[0] <= 5 and all(2.5 <= s <= 5 for s in sleeps[1:-1]) and sum(sleeps) == pytest.approx(30)
    sleeps.clear()
    served.received.clear()
    with connect(_dead_url(), "ml_t", retry_window=0) as client, pytest.raises(errors.StoreError) as lost:
        client.put("agent/alice", "k", 1)
    assert sleeps == [] and "tried for 0 s" in str(lost.value)
    served.script = ["drop"]
    with connect(served.url, "ml_t", retry_window=0) as client, pytest.raises(errors.StoreError):
        client.get("agent/alice", "k")
    assert sleeps == [] and served.received == ["/v1/get"]


def test_a_connection_reset_while_reading_the_answer_may_have_applied_a_write(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    """Reset after the request arrived: it may have run. A write is never sent again; a read is."""
    served.script = ["reset"]
    with connect(served.url, "ml_t") as client, pytest.raises(errors.StoreError) as lost:
        client.put("agent/alice", "k", 1)
    assert served.received == ["/v1/put"] and sleeps == []
    assert "may or may not have been applied" in str(lost.value)
    served.script = ["reset", "ok"]
    served.received.clear()
    with connect(served.url, "ml_t") as client:
        assert client.get("agent/alice", "k").value == 1
    assert served.received == ["/v1/get"] * 2 and len(sleeps) == 1


def test_clear_whose_connection_was_lost_is_never_sent_again(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    served.script = ["drop"]
    with connect(served.url, "ml_t") as client, pytest.raises(errors.StoreError, match="may or may not"):
        client.clear("agent/alice")
    assert served.received == ["/v1/clear"] and sleeps == []


def test_the_operations_safe_to_send_again_are_exactly_these() -> None:
    """Each one only reads: sent twice it changes nothing. Adding one here is a decision about retries."""
    from memlane.values.operations import OPERATIONS

    assert sorted(memlane.client._SAFE) == sorted(op.name for op in OPERATIONS if op.safe) == [
        "activity", "claims_and_sources_context", "combined_context", "describe_query_space", "exists", "explain_query",
        "facts_context", "fetch", "get", "get_by_id", "get_many", "history", "hydrate", "list", "lookup", "namespaces",
        "neighbours", "query", "recall", "resolve_entity", "retention_rules", "run_saved_query", "saved_queries",
        "search", "search_query_space", "select", "summarize", "traverse",
    ]  # fmt: skip


def test_failover_goes_round_the_services_back_to_the_first(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    other = Scripted()
    try:
        served.script = ["drop"]
        other.script = ["drop"]
        with connect([served.url, other.url], "ml_t") as client:
            assert client.get("agent/alice", "k").value == 1  # first, second, then the first again
            assert client.url == served.url
        assert served.received == ["/v1/get"] * 2 and other.received == ["/v1/get"] and len(sleeps) == 2
    finally:
        other.close()


def test_a_refused_connection_moves_to_the_next_service_even_for_a_write(
    connect: Any, served: Scripted, sleeps: list[float]
) -> None:
    dead = _dead_url()
    with connect([dead, served.url], "ml_t") as client:
        assert client.put("agent/alice", "k", 1).key == "k"  # never reached the first: safe on the second
        assert client.url == served.url
    assert served.received == ["/v1/put"] and len(sleeps) == 1


def test_a_refused_connection_is_retried_then_reported(connect: Any, sleeps: list[float]) -> None:
    with connect(_dead_url(), "ml_t", retry_window=3) as client, pytest.raises(errors.StoreError) as lost:
        client.put("agent/alice", "k", 1)  # a write too: it never left
    assert len(sleeps) >= 3 and sum(sleeps) == pytest.approx(3.0)
    assert "cannot reach the memlane service" in str(lost.value) and "may or may not" not in str(lost.value)


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
        ({"retry_window": -1}, "retry_window"),
        ({"retry_window": "10"}, "retry_window"),
        ({"retry_window": True}, "retry_window"),
        ({"retry_window": float("inf")}, "retry_window"),
        ({"retry_window": float("nan")}, "retry_window"),
    ],
)
def test_bad_transport_settings_are_refused_naming_them(kwargs: dict[str, Any], field: str) -> None:
    args = {"url": "http://127.0.0.1:1", "token": "ml_t"} | kwargs
    with pytest.raises(errors.ValidationError) as refused:
        memlane.Client(**args)
    assert refused.value.field == field
    says = {"url": "must be a service URL such as http://127.0.0.1:8420, or a list of them",
        "retries": "must be a whole number >= 0, not ", "backoff": "must be a number of seconds in [0, 30], not ",
        "retry_window": "must be a number of seconds >= 0, not "}  # fmt: skip
    assert says[field] in str(refused.value)


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


def _json_answer(status: int, body: Any, **headers: str) -> Answer:
    return Answer(status, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})


def test_each_request_carries_the_token_and_its_body_as_json(served: Scripted) -> None:
    with memlane.Client(served.url + "/", "ml_token") as client:
        assert client.url == served.url  # the trailing slash goes
        assert memlane.Client("http://127.0.0.1:1/X/", "t").url == "http://127.0.0.1:1/X"  # and only that
        client.put("agent/alice", "k", 1)
        served.script = [_json_answer(200, {"items": 1})]
        assert client._call("GET", "stats") == {"items": 1}
    (put_method, put_path, put_headers, put_body), (get_method, get_path, get_headers, get_body) = served.requests
    assert (put_method, put_path, get_method, get_path) == ("POST", "/v1/put", "GET", "/v1/stats")
    assert put_headers["authorization"] == get_headers["authorization"] == "Bearer ml_token"
    assert put_headers["content-type"] == "application/json"
    assert json.loads(put_body) == {"namespace": "agent/alice", "key": "k", "value": 1, "text": None,
        "metadata": None, "ttl": None, "if_absent": False, "index": True}  # fmt: skip
    assert get_body == b"" and "content-type" not in get_headers


def test_an_answer_that_is_not_json_is_read_as_text(served: Scripted) -> None:
    served.script = [Answer(200, b'{"a":1}\n{"b":2}\n', {"Content-Type": "application/x-ndjson"}), Answer(200, b"x")]
    with memlane.Client(served.url, "t") as client:
        assert list(client.export_records()) == [{"a": 1}, {"b": 2}]
        assert client._call("GET", "export") == "x"  # no Content-Type at all: text


def test_an_error_answer_is_the_services_error_and_a_bare_one_keeps_its_text(
    served: Scripted, sleeps: list[float]
) -> None:
    gone = {"error": {"type": "not_found", "message": "no list for that address", "field": "key"}}
    served.script = [
        _json_answer(409, gone),
        Answer(502, b"<html>bad gateway</html>" + b"x" * 300),
        Answer(404, b"<html>no such page</html>"),
    ]
    with memlane.Client(served.url, "t") as client:
        with pytest.raises(errors.NotFoundError) as missing:
            client.list("agent/alice")
        assert str(missing.value).startswith("no list for that address") and "(HTTP 409 from " in str(missing.value)
        with pytest.raises(errors.MemlaneError) as bad:
            client.list("agent/alice")
        with pytest.raises(errors.ValidationError) as bare:  # a 404 with no error object: not a memlane service
            client.list("agent/alice")
    assert (
        bare.value.field == "url"
        and "not a memlane service" in str(bare.value)
        and "(HTTP 404 from " in str(bare.value)
    )
    assert str(bad.value).startswith("<html>bad gateway</html>" + "x" * 176 + " (HTTP 502 from ")  # 200 characters
    assert sleeps == []


def test_a_busy_answer_waits_its_body_retry_after_else_the_header(served: Scripted, sleeps: list[float]) -> None:
    busy = {"type": "busy", "message": "over its share"}
    served.script = [
        _json_answer(429, {"error": {**busy, "retry_after": 3}}, **{"Retry-After": "9"}),
        _json_answer(429, {"error": busy}, **{"Retry-After": "7"}),
        _json_answer(429, {"error": busy}),
    ]
    with memlane.Client(served.url, "t", retries=2) as client, pytest.raises(errors.BusyError):
        client.get("agent/alice", "k")
    assert sleeps == [3, 7]


def test_what_the_client_says_when_it_gives_up(served: Scripted, sleeps: list[float]) -> None:
    served.script = ["slow", "slow"]
    with memlane.Client(served.url, "t", timeout=0.1) as client:
        with pytest.raises(errors.StoreError) as read:
            client.get("agent/alice", "k")
        with pytest.raises(errors.StoreError) as write:
            client.put("agent/alice", "k", 1)
    within = f"cannot reach the memlane service at {served.url}: no answer within 0.1s; "
    assert str(read.value) == within + "raise the Client's timeout or ask for less"
    assert str(write.value) == within + (
        "a write may or may not have been applied: read it back before sending it again"
    )
    dead = _dead_url()
    with memlane.Client(dead, "t", retry_window=1) as client, pytest.raises(errors.StoreError) as gone:
        client.get("agent/alice", "k")
    assert str(gone.value).startswith(f"cannot reach the memlane service at {dead}: ")
    assert str(gone.value).endswith(" (tried for 1 s; start the service, or raise the Client's retry_window)")


def test_the_waits_double_up_to_the_cap_with_jitter(
    served: Scripted, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each wait is its step times 0.5 to 1 (random): here 0.5 + 0.5 / 2, so 0.75 of the step."""

    class Half:
        @staticmethod
        def random() -> float:
            return 0.5

    monkeypatch.setattr(memlane.client, "random", Half)
    served.script = ["drop"] * 100
    with memlane.Client(served.url, "t", retry_window=7) as client, pytest.raises(errors.StoreError):
        client.get("agent/alice", "k")
    assert sleeps[:6] == [0.1875, 0.375, 0.75, 1.5, 1.5, 1.5] and sum(sleeps) == pytest.approx(7)


def test_a_get_is_sent_again_after_a_lost_connection_and_a_bare_post_is_not(
    served: Scripted, sleeps: list[float]
) -> None:
    served.script = ["drop", _json_answer(200, {"items": 0})]
    with memlane.Client(served.url, "t") as client:
        assert client._call("GET", "stats") == {"items": 0}  # a GET only reads
        served.script = ["drop"]
        with pytest.raises(errors.StoreError, match="may or may not"):
            client.cleanup()  # POST outside the table: it may have deleted
    assert served.received == ["/v1/stats", "/v1/stats", "/v1/cleanup"] and len(sleeps) == 1


def test_failover_follows_the_order_of_the_urls(sleeps: list[float]) -> None:
    log: list[str] = []
    servers = [Scripted(log) for _ in range(3)]
    try:
        for s in servers:
            s.script = ["drop"]
        with memlane.Client([s.url for s in servers], "t") as client:
            assert client._call("POST", "get", {}, safe=True) == ITEM
            assert client.url == servers[0].url
        assert log == [servers[0].url, servers[1].url, servers[2].url, servers[0].url]
    finally:
        for s in servers:
            s.close()


def test_without_httpx_the_client_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(errors.BackendUnavailableError) as missing:
        memlane.Client("http://127.0.0.1:1", "t")
    assert str(missing.value) == "memlane.Client needs httpx: pip install 'memlane[client]'"


def test_a_zero_backoff_is_allowed(served: Scripted, sleeps: list[float]) -> None:
    served.script = ["drop"]
    with memlane.Client(served.url, "t", backoff=0) as client:
        assert client._call("POST", "get", {}, safe=True) == ITEM
    assert sleeps == [0]


# -- a real service that is down for a while: a worker restarting -------------------------------------------


class _Later:
    """The real service (uvicorn, as ``memlane serve`` runs it) listening on ``port`` only after ``after`` seconds."""

    def __init__(self, app: Any, port: int, after: float) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, args=(after,), daemon=True)
        self.thread.start()

    def _run(self, after: float) -> None:
        threading.Event().wait(after)
        self.server.run()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _reset_once(port: int) -> tuple[threading.Thread, list[bytes]]:
    """A stand-in for a worker killed while it ran a request: on ``port``, take one request, reset the connection,
    stop listening (connections are refused until the service is back)."""
    listener = socket.create_server(("127.0.0.1", port))
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
        while len(body) < length:
            body += conn.recv(65536)
        got.append(head.split(b"\r\n")[0] + b" " + body)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, got


@pytest.fixture
def restarting(tmp_path: Any) -> Iterator[tuple[Any, str, int]]:
    """A memory with an agent's token and a free port nothing listens on yet."""
    from memlane.core.access import Access

    mem = memlane.open(tmp_path / "restart.db", embedder=None)
    _, token = Access(mem).create_agent("alice")
    mem.put("agent/alice", "before", "written before the restart")
    port = int(_dead_url().rsplit(":", 1)[1])
    yield mem, token, port
    mem.close()


def test_reads_and_unsent_writes_outlast_a_real_service_down_for_three_seconds(restarting: Any) -> None:
    from memlane.server import create_app

    mem, token, port = restarting
    later = _Later(create_app(mem), port, after=3.0)
    try:
        with memlane.Client(f"http://127.0.0.1:{port}", token) as client:  # the default retry window
            started = time.monotonic()
            before = client.get("agent/alice", "before")
            assert before is not None and before.value == "written before the restart"
            assert time.monotonic() - started >= 2.5  # it waited for the service, without giving up
            client.put("agent/alice", "after", 1)  # refused connections never sent it: once, when it is back
        assert mem.get("agent/alice", "after").version == 1 and mem.history("agent/alice", "after") == []
    finally:
        later.stop()


def test_a_write_that_may_have_run_is_not_sent_again_when_the_real_service_is_back(restarting: Any) -> None:
    from memlane.server import create_app

    mem, token, port = restarting
    thread, got = _reset_once(port)
    later = _Later(create_app(mem), port, after=1.5)  # back within the retry window: a resend would reach it
    try:
        with memlane.Client(f"http://127.0.0.1:{port}", token) as client:
            with pytest.raises(errors.StoreError, match="may or may not have been applied"):
                client.put("agent/alice", "maybe", 1)
            thread.join(timeout=10)
            assert len(got) == 1 and got[0].startswith(b"POST /v1/put")
            # the service is back: a read finds it within the window, and the write was sent only once
            before = client.get("agent/alice", "before")
            assert before is not None and before.value == "written before the restart"
            assert client.get("agent/alice", "maybe") is None
        assert mem.get("agent/alice", "maybe") is None
    finally:
        later.stop()


def test_arguments_nested_past_what_json_can_carry_are_refused_by_field_before_sending(served: Scripted) -> None:
    deep: list[Any] = []
    for _ in range(5000):  # past Python's recursion limit: the encoder could not even try
        deep = [deep]
    with memlane.Client(served.url, "t", backoff=30) as client:  # 30 s: the largest backoff allowed
        with pytest.raises(errors.ValidationError) as refused:
            client.get_many(deep)
    assert refused.value.field == "addresses" and "nested more than" in str(refused.value)
    assert served.received == []
