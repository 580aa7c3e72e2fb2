"""Every answer the service can give, made by a real request, and what each interface makes of it.

For each (status, type) the HTTP service answers, a case below makes a live
server (uvicorn on loopback, a real SQLite file) give it, checks the one error
shape ``{"error": {"type", "message"[, "field"]}}``, and makes ``memlane.Client``
hit the same condition, checking the exact exception class (and ``field``).
The same conditions are then driven through the MCP tools (the official SDK's
client over the ``/mcp`` mount, and once over stdio) and the CLI (exit code and
one ``Error:`` line on stderr).

How each answer is produced:

* 4xx: ordinary requests (a bad namespace, no token, another agent's namespace,
  a missing saved query, a conditional write on a taken address...).
* ``409 embedder_mismatch``: another process rebuilds the store's vectors with
  an embedder of another dimension while the service runs.
* ``501 unavailable``: the query space of a service over an in-memory store.
* ``502 embedder_error``: an OpenAI-compatible embedder whose endpoint is a
  loopback port nobody listens on.
* ``503 store_error``: another connection holds SQLite's write lock past the
  store's busy timeout; and a memory closed under the running service.
* ``503 store_unavailable``: a service over PostgreSQL whose connections go
  through a loopback relay, cut after it started (the database away).
* ``507 storage_full``: a SQLite database whose page limit is its size (SQLite's
  own "database or disk is full"; tests/test_faults.py fills a real tmpfs too).
* ``502 chooser_error`` and ``500 error`` cannot come from the service's own
  components (choosers run in the caller's process; nothing raises a bare
  ``MemlaneError``), so those cases replace one method of the served
  ``Memory`` with one that raises, and say so.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent
from typer.testing import CliRunner, Result

import memlane
from memlane import cli
from memlane.core.access import Access
from memlane.core.memory import Memory
from memlane.domain.search.embedders import FakeEmbedder, OpenAIEmbedder
from memlane.server import create_app
from memlane.store.sqlite import SqliteStore
from memlane.values import errors

sys.path.insert(0, str(Path(__file__).parent))
from live import LiveServer  # noqa: E402

MEMLANE = Path(sys.executable).with_name("memlane")
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)

SMALL_BODY = 16 * 1024  # max_body_bytes of the shared service
ALICE = "agent/alice"
NO_FACT = "fact_" + "0" * 32
INJECTED = "injected failure: the detail after this colon is what the caller must see"


def free_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- live services ----------------------------------------------------------------------


class Served:
    """A memory behind a live server, with an admin (root) and one agent (alice)."""

    def __init__(self, mem: Memory, *, max_body_bytes: int = SMALL_BODY) -> None:
        self.mem = mem
        self.access = Access(mem)
        self.tokens = {
            "root": self.access.create_agent("root", admin=True)[1],
            "alice": self.access.create_agent("alice")[1],
        }
        self.ids: dict[str, str] = {}
        self.app = create_app(mem, max_body_bytes=max_body_bytes)
        self.server = LiveServer(self.app)
        self.url = self.server.url
        self.http = httpx.Client(base_url=self.url, timeout=30)
        self._clients: list[memlane.Client] = []

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        as_: str | None = "alice",
        raw: Any = None,
    ) -> httpx.Response:
        headers = {} if as_ is None else {"Authorization": f"Bearer {self.tokens[as_]}"}
        if raw is not None:
            headers["content-type"] = "application/json"
            return self.http.request(method, path, content=raw, headers=headers)
        return self.http.request(method, path, json=body, headers=headers)

    def client(self, token: str | None = None) -> memlane.Client:
        c = memlane.Client(self.url, token or self.tokens["alice"], retries=0)  # each answer as it comes
        self._clients.append(c)
        return c

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self.http.close()
        self.server.stop()
        self.mem.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The shared service for every answer a healthy store gives; no case changes what another sees.

    alice owns an item at ``taken.key``, an entity, a superseded claim and a
    retracted fact, so each kind of conflict has something to conflict with.
    """
    mem = memlane.open(str(tmp_path_factory.mktemp("world") / "world.db"), embedder="fake")
    mem.put(ALICE, "taken.key", "first value")
    svc = Served(mem)
    svc.ids["entity"] = mem.add_entity(ALICE, "Kim").id
    claim = mem.add_claim(ALICE, "Kim said the launch moved")
    mem.supersede_claim(claim.id)
    svc.ids["claim"] = claim.id
    fact = mem.assert_fact(ALICE, svc.ids["entity"], "works_on", "billing")
    mem.retract_fact(fact.id)
    svc.ids["fact"] = fact.id
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A service whose store another process re-embedded with a 32-dimensional embedder.

    The service opened the store when it recorded ``fake`` at 64 dimensions;
    every write it embeds is then refused, since its vectors would not match.
    """
    path = str(tmp_path_factory.mktemp("mismatch") / "m.db")
    mem = memlane.open(path, embedder="fake", indexing="sync")  # a write embeds (and so checks) before it answers
    mem.put(ALICE, "seed", "seed text")  # the store records the service's embedder before it serves
    svc = Served(mem)
    other = memlane.open(path, embedder=None)  # a 32-dimensional fake is refused at open: reindex switches
    other.reindex(FakeEmbedder(32))
    other.close()
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def dead_embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A service whose OpenAI-compatible embedder points at a loopback port nobody listens on."""
    embedder = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{free_port()}/v1", dimension=8, max_retries=0)
    # sync: a write calls the embedder before it answers (in the background it would not call it at all)
    svc = Served(memlane.open(str(tmp_path_factory.mktemp("dead") / "m.db"), embedder=embedder, indexing="sync"))
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def in_memory() -> Iterator[Served]:
    """A service over an in-memory SQLite store, which has no query space."""
    svc = Served(memlane.open(":memory:", embedder="fake"))
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A service whose writes wait 0.2 s for SQLite's write lock, which another connection holds throughout."""
    path = str(tmp_path_factory.mktemp("locked") / "m.db")
    svc = Served(Memory(SqliteStore(path, busy_timeout=0.2), embedder=None))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    yield svc
    holder.execute("ROLLBACK")
    holder.close()
    svc.close()


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A service whose memory was closed under it (its connection is gone)."""
    svc = Served(memlane.open(str(tmp_path_factory.mktemp("closed") / "m.db"), embedder="fake"))
    svc.mem.close()
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A service whose SQLite database may not grow (``max_page_count`` at its size: SQLITE_FULL, "database or
    disk is full", as on a full disk; tests/test_faults.py fills a real small filesystem too)."""
    svc = Served(memlane.open(str(tmp_path_factory.mktemp("full") / "m.db"), embedder="fake"))
    conn = svc.mem.store.connection
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def unreachable(postgres: Any) -> Iterator[Served]:
    """A service over PostgreSQL whose server went away after it started (a relay to it, cut)."""
    from cuttable import Cuttable

    db = postgres.create()
    relay = Cuttable(postgres.admin_url)
    svc = Served(memlane.open(relay.url(db), embedder="fake"))
    relay.cut()
    yield svc
    svc.close()
    relay.close()
    postgres.drop(db)


def inject(svc: Served, monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """Make the served memory's ``history`` raise ``exc`` (for answers no real component gives)."""

    def history(*args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(svc.mem, "history", history)


# -- the HTTP answers and the Client's exceptions ----------------------------------------


@dataclass(frozen=True)
class Answer:
    """One answer: how to make the server give it, and what the Client must raise for it."""

    name: str
    server: str  # the fixture that serves it
    status: int
    kind: str
    request: Callable[[Served], httpx.Response]
    fragment: str  # in the message
    field: str | None = None
    client: Callable[[memlane.Client, Served], Any] | None = None  # the same condition through the Client
    exc: type[errors.MemlaneError] | None = None
    injected: Exception | None = None  # raised by the served memory's history() (see the module docstring)
    check: Callable[[Served, httpx.Response], None] | None = None  # more to assert afterwards


def _unchanged_taken_key(svc: Served, resp: httpx.Response) -> None:
    item = svc.mem.get(ALICE, "taken.key")
    assert item is not None and item.value == "first value" and item.version == 1
    assert svc.mem.get(ALICE, "never.written") is None


def _allow_post(svc: Served, resp: httpx.Response) -> None:
    assert resp.headers["allow"] == "POST"


def _nothing_written_locked(svc: Served, resp: httpx.Response) -> None:
    assert svc.mem.get(ALICE, "locked.out") is None  # reads still work under the write lock (WAL)


def _retry_after_one(svc: Served, resp: httpx.Response) -> None:
    assert resp.headers["retry-after"] == "1" and resp.json()["error"]["retry_after"] == 1


def _nothing_written_full(svc: Served) -> None:
    assert svc.mem.get(ALICE, "big") is None  # and reads still work


def _chunks(data: bytes, size: int = 4096) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


BIG = "x" * (SMALL_BODY + 1)
WRONG_TOKEN = "ml_" + "x" * 43


def _with_share_taken(call: Callable[[Served], Any]) -> Callable[[Served], Any]:
    """Run ``call`` while alice holds her fair share of expensive work and another agent waits for a place."""

    def run(svc: Served) -> Any:
        from gating import over_share
        from memlane.server.app import WorkGate

        with over_share(svc.app.state.access.gate, WorkGate.key_of(svc.tokens["alice"])):
            return call(svc)

    return run


def _retry_after_as_said(svc: Served, resp: httpx.Response) -> None:
    assert resp.headers["retry-after"] == str(resp.json()["error"]["retry_after"])
    assert int(resp.headers["retry-after"]) >= 1


ANSWERS: list[Answer] = [
    # -- 400 validation_error: the core, the request model, the JSON parser
    Answer(
        "core-names-the-field",
        "world",
        400,
        "validation_error",
        lambda s: s.call("POST", "/v1/put", {"namespace": "a//b", "key": "k", "value": 1}),
        "has an empty segment",
        field="namespace",
        client=lambda c, s: c.put("a//b", "k", 1),
        exc=errors.ValidationError,
    ),
    Answer(
        "core-names-the-field-of-a-read",
        "world",
        400,
        "validation_error",
        lambda s: s.call("POST", "/v1/list", {"cursor": "not-a-cursor"}),
        "cursor",
        field="cursor",
        client=lambda c, s: c.list(cursor="not-a-cursor"),
        exc=errors.ValidationError,
    ),
    Answer(
        "missing-field",
        "world",
        400,
        "validation_error",
        lambda s: s.call("POST", "/v1/put", {"key": "k", "value": 1}),
        "is required",
        field="namespace",
    ),
    Answer(
        "mistyped-field",
        "world",
        400,
        "validation_error",
        lambda s: s.call("POST", "/v1/put_many", {"records": "not a list"}),
        "list",
        field="records",
    ),
    Answer(
        "invalid-json",
        "world",
        400,
        "validation_error",
        lambda s: s.call("POST", "/v1/put", raw=b'{"namespace": "agent/alice", "key": '),
        "not valid JSON",
        "body",
    ),
    Answer(
        "unparsable-body",  # a 5000-digit integer: the parser raises ValueError, FastAPI an HTTPException(400)
        "world",
        400,
        "validation_error",
        lambda s: s.call(
            "POST", "/v1/put", raw=b'{"namespace": "agent/alice", "key": "k", "value": ' + b"1" * 5000 + b"}"
        ),
        "could not be parsed as JSON",
        "body",
    ),
    # -- 400 query_refused
    Answer(
        "query-not-a-select",
        "world",
        400,
        "query_refused",
        lambda s: s.call("POST", "/v1/query", {"sql": "DELETE FROM items"}),
        "only SELECT statements",
        client=lambda c, s: c.query("DELETE FROM items"),
        exc=errors.QueryRefused,
    ),
    Answer(
        "saved-query-not-a-select",
        "world",
        400,
        "query_refused",
        lambda s: s.call("POST", "/v1/query/save", {"name": "wipe", "sql": "DELETE FROM items"}),
        "only SELECT statements",
        client=lambda c, s: c.save_query("wipe", "DELETE FROM items"),
        exc=errors.QueryRefused,
    ),
    # -- 401 unauthorized
    Answer(
        "no-token",
        "world",
        401,
        "unauthorized",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "k", "value": 1}, as_=None),
        "Authorization: Bearer <token>",
        client=lambda c, s: s.client(WRONG_TOKEN).put(ALICE, "k", 1),
        exc=errors.UnauthorizedError,
    ),
    # -- 403 forbidden
    Answer(
        "namespace-outside-the-scope",
        "world",
        403,
        "forbidden",
        lambda s: s.call("POST", "/v1/put", {"namespace": "agent/bob", "key": "k", "value": 1}),
        "outside what this agent may write",
        client=lambda c, s: c.put("agent/bob", "k", 1),
        exc=errors.ForbiddenError,
    ),
    Answer(
        "admin-only",
        "world",
        403,
        "forbidden",
        lambda s: s.call("GET", "/v1/stats"),
        "needs an admin agent",
        client=lambda c, s: c.stats(),
        exc=errors.ForbiddenError,
    ),
    # -- 404 not_found: the core, access administration, the inspector; no_such_route: the router
    Answer(
        "unknown-saved-query",
        "world",
        404,
        "not_found",
        lambda s: s.call("POST", "/v1/query/run", {"name": "nope"}),
        "no saved query named 'nope'",
        client=lambda c, s: c.run_saved_query("nope"),
        exc=errors.NotFoundError,
    ),
    Answer(
        "unknown-fact",
        "world",
        404,
        "not_found",
        lambda s: s.call("POST", "/v1/retract_fact", {"fact_id": NO_FACT}),
        f"no fact {NO_FACT!r}",
        client=lambda c, s: c.retract_fact(NO_FACT),
        exc=errors.NotFoundError,
    ),
    Answer(
        "unknown-room",
        "world",
        404,
        "not_found",
        lambda s: s.call("POST", "/v1/admin/rooms/nope/members", {"agent": "alice"}, as_="root"),
        "no room named 'nope'",
    ),
    Answer(
        "unknown-route",
        "world",
        404,
        "no_such_route",
        lambda s: s.call("POST", "/v1/no_such_operation", {}),
        "nothing is served at POST /v1/no_such_operation",
    ),
    Answer(
        "unknown-inspector-asset",
        "world",
        404,
        "not_found",
        lambda s: s.call("GET", "/inspector/nope.js", as_=None),
        "no inspector asset named 'nope.js'",
    ),
    # -- 405 method_not_allowed
    Answer(
        "wrong-method",
        "world",
        405,
        "method_not_allowed",
        lambda s: s.call("GET", "/v1/put"),
        "Method Not Allowed",
        check=_allow_post,
    ),
    # -- 409 conflict: every conditional write and every state that refuses a second change
    Answer(
        "put-if-absent-on-a-taken-address",
        "world",
        409,
        "conflict",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "taken.key", "value": 2, "if_absent": True}),
        "already exists at agent/alice key 'taken.key'",
        client=lambda c, s: c.put(ALICE, "taken.key", 2, if_absent=True),
        exc=errors.ConflictError,
        check=_unchanged_taken_key,
    ),
    Answer(
        "put-many-if-absent-with-one-taken",
        "world",
        409,
        "conflict",
        lambda s: s.call(
            "POST",
            "/v1/put_many",
            {
                "records": [
                    {"namespace": ALICE, "key": "never.written", "value": 1},
                    {"namespace": ALICE, "key": "taken.key", "value": 2},
                ],
                "if_absent": True,
            },
        ),
        "'taken.key'",
        client=lambda c, s: c.put_many(
            [
                {"namespace": ALICE, "key": "never.written", "value": 1},
                {"namespace": ALICE, "key": "taken.key", "value": 2},
            ],
            if_absent=True,
        ),
        exc=errors.ConflictError,
        check=_unchanged_taken_key,
    ),
    Answer(
        "agent-name-taken",
        "world",
        409,
        "conflict",
        lambda s: s.call("POST", "/v1/admin/agents", {"name": "alice"}, as_="root"),
        "agent 'alice' already exists",
    ),
    Answer(
        "merge-an-entity-into-itself",
        "world",
        409,
        "conflict",
        lambda s: s.call("POST", "/v1/merge_entities", {"survivor": s.ids["entity"], "merged": s.ids["entity"]}),
        "nothing to merge",
        client=lambda c, s: c.merge_entities(s.ids["entity"], s.ids["entity"]),
        exc=errors.ConflictError,
    ),
    Answer(
        "supersede-a-superseded-claim",
        "world",
        409,
        "conflict",
        lambda s: s.call("POST", "/v1/supersede_claim", {"claim_id": s.ids["claim"]}),
        "was already superseded",
        client=lambda c, s: c.supersede_claim(s.ids["claim"]),
        exc=errors.ConflictError,
    ),
    Answer(
        "retract-a-retracted-fact",
        "world",
        409,
        "conflict",
        lambda s: s.call("POST", "/v1/retract_fact", {"fact_id": s.ids["fact"]}),
        "was already retracted",
        client=lambda c, s: c.retract_fact(s.ids["fact"]),
        exc=errors.ConflictError,
    ),
    # -- 409 embedder_mismatch
    Answer(
        "write-after-another-process-changed-the-embedder",
        "mismatched",
        409,
        "embedder_mismatch",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "k", "value": "some words"}),
        "made by 'fake' (32 dimensions), not 'fake' (64 dimensions)",
        client=lambda c, s: c.put(ALICE, "k", "some words"),
        exc=errors.EmbedderMismatchError,
    ),
    Answer(
        "claim-after-another-process-changed-the-embedder",
        "mismatched",
        409,
        "embedder_mismatch",
        lambda s: s.call("POST", "/v1/add_claim", {"namespace": ALICE, "text": "a claim"}),
        "made by 'fake' (32 dimensions)",
        client=lambda c, s: c.add_claim(ALICE, "a claim"),
        exc=errors.EmbedderMismatchError,
    ),
    # -- 413 payload_too_large (the Client refuses it as invalid input, naming the request)
    Answer(
        "declared-body-over-the-limit",
        "world",
        413,
        "payload_too_large",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "big", "value": BIG}),
        f"over {SMALL_BODY:,} bytes",
        field=None,
        client=lambda c, s: c.put(ALICE, "big", BIG),
        exc=errors.ValidationError,
    ),
    Answer(
        "chunked-body-over-the-limit",
        "world",
        413,
        "payload_too_large",
        lambda s: s.call(
            "POST", "/v1/put", raw=_chunks(json.dumps({"namespace": ALICE, "key": "big", "value": BIG * 2}).encode())
        ),
        f"over {SMALL_BODY:,} bytes",
    ),
    # -- 501 unavailable
    Answer(
        "query-space-of-an-in-memory-store",
        "in_memory",
        501,
        "unavailable",
        lambda s: s.call("POST", "/v1/query", {"sql": "SELECT 1"}),
        "in-memory SQLite store",
        client=lambda c, s: c.query("SELECT 1"),
        exc=errors.BackendUnavailableError,
    ),
    # -- 502 embedder_error, chooser_error
    Answer(
        "write-with-an-unreachable-embedder",
        "dead_embedder",
        502,
        "embedder_error",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "k", "value": "some words"}),
        "could not reach http://127.0.0.1:",
        client=lambda c, s: c.put(ALICE, "k", "some words"),
        exc=errors.EmbedderError,
    ),
    Answer(
        "search-with-an-unreachable-embedder",
        "dead_embedder",
        502,
        "embedder_error",
        lambda s: s.call("POST", "/v1/search", {"query": "some words"}),
        "could not reach http://127.0.0.1:",
        client=lambda c, s: c.search("some words"),
        exc=errors.EmbedderError,
    ),
    Answer(
        "chooser-error-injected",
        "world",
        502,
        "chooser_error",
        lambda s: s.call("POST", "/v1/history", {"namespace": ALICE, "key": "taken.key"}),
        INJECTED,
        client=lambda c, s: c.history(ALICE, "taken.key"),
        exc=errors.ChooserError,
        injected=errors.ChooserError(INJECTED),
    ),
    # -- 503 store_error
    Answer(
        "write-while-another-connection-holds-the-lock",
        "locked",
        503,
        "store_error",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "locked.out", "value": 1}),
        "database is locked",
        client=lambda c, s: c.put(ALICE, "locked.out", 1),
        exc=errors.StoreError,
        check=_nothing_written_locked,
    ),
    Answer(
        "memory-closed-under-the-service",
        "closed",
        503,
        "store_error",
        lambda s: s.call("POST", "/v1/get", {"namespace": ALICE, "key": "k"}),
        "this memory is closed",
        client=lambda c, s: c.get(ALICE, "k"),
        exc=errors.StoreError,
    ),
    Answer(
        "any-request-while-the-database-is-unreachable",
        "unreachable",
        503,
        "store_unavailable",
        lambda s: s.call("POST", "/v1/get", {"namespace": ALICE, "key": "k"}),
        "the database is unreachable",
        client=lambda c, s: c.get(ALICE, "k"),
        exc=errors.StoreUnavailableError,
        check=_retry_after_one,
    ),
    # -- 507 storage_full
    Answer(
        "write-on-a-full-disk",
        "full",
        507,
        "storage_full",
        lambda s: s.call("POST", "/v1/put", {"namespace": ALICE, "key": "big", "value": "x" * 12_000}),
        "the disk is full",
        client=lambda c, s: c.put(ALICE, "big", "x" * 12_000),
        exc=errors.StorageFullError,
        check=lambda s, r: _nothing_written_full(s),
    ),
    # -- 500 error
    Answer(
        "any-other-memlane-error-injected",
        "world",
        500,
        "error",
        lambda s: s.call("POST", "/v1/history", {"namespace": ALICE, "key": "taken.key"}),
        INJECTED,
        client=lambda c, s: c.history(ALICE, "taken.key"),
        exc=errors.MemlaneError,
        injected=errors.MemlaneError(INJECTED),
    ),
]


SHAPE = {"type", "message", "field", "reason", "part", "retry_after", "path"}


def error_of(resp: httpx.Response, status: int, kind: str, field: str | None) -> dict[str, Any]:
    """Assert the one error shape with this status, type and field; return the inner error object."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) <= SHAPE, err
    assert err["type"] == kind, err
    # a refused query says why and where, on the wire as in Python; nothing else carries those
    assert (err["type"] == "query_refused") == ("reason" in err), err
    assert isinstance(err["message"], str) and err["message"].strip(), err
    assert err.get("field") == field, err
    assert "Traceback" not in resp.text
    return err  # type: ignore[no-any-return]


ANSWERS.append(
    Answer(
        "busy-agent-share-taken",
        "world",
        429,
        "busy",
        _with_share_taken(lambda s: s.call("POST", "/v1/search", {"query": "taken"})),
        "its fair share is 4",
        client=lambda c, s: _with_share_taken(lambda _: c.search("taken"))(s),
        exc=errors.BusyError,
        check=_retry_after_as_said,
    )
)


@pytest.mark.parametrize("case", ANSWERS, ids=[f"{a.status}-{a.kind}-{a.name}" for a in ANSWERS])
def test_each_answer_is_given_over_http_and_the_client_raises_its_exception(
    case: Answer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc: Served = request.getfixturevalue(case.server)
    if case.injected is not None:
        inject(svc, monkeypatch, case.injected)
    resp = case.request(svc)
    err = error_of(resp, case.status, case.kind, case.field)
    assert case.fragment in err["message"], err
    for token in svc.tokens.values():
        assert token not in resp.text
    if case.check:
        case.check(svc, resp)
    if case.client is None:
        return
    assert case.exc is not None
    with pytest.raises(errors.MemlaneError) as raised:
        case.client(svc.client(), svc)
    assert type(raised.value) is case.exc, (type(raised.value), raised.value)
    assert case.fragment in str(raised.value)
    if case.exc is errors.ValidationError:
        assert raised.value.field == (case.field or "request")  # type: ignore[attr-defined]
    if isinstance(raised.value, errors.QueryRefused):  # reason and part survive the trip
        assert (raised.value.reason, raised.value.part) == (err["reason"], err.get("part")), err
    if case.check:
        case.check(svc, resp)


# Every (status, type) of docs/http.md's error table, plus the framework's 405 and the 400 / 404 it
# shares; a new row in the service's mapping needs a case above.
DOCUMENTED = {
    (400, "validation_error"),
    (400, "query_refused"),
    (401, "unauthorized"),
    (403, "forbidden"),
    (404, "not_found"),
    (404, "no_such_route"),
    (405, "method_not_allowed"),
    (409, "conflict"),
    (409, "embedder_mismatch"),
    (413, "payload_too_large"),
    (429, "busy"),
    (500, "error"),
    (501, "unavailable"),
    (502, "embedder_error"),
    (502, "chooser_error"),
    (503, "store_error"),
    (503, "store_unavailable"),
    (507, "storage_full"),
}


def test_every_documented_answer_and_every_error_class_has_a_case() -> None:
    assert {(a.status, a.kind) for a in ANSWERS} == DOCUMENTED
    raised = {a.exc for a in ANSWERS}
    # SchemaVersionError is raised only while opening a store, never on a request (the CLI cases cover it)
    public = {getattr(errors, name) for name in errors.__all__} - {errors.SchemaVersionError}
    assert public <= raised, public - raised


def test_an_unexpected_exception_is_a_500_that_leaks_nothing_and_the_client_raises_a_memlane_error(
    world: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (an exception that is no MemlaneError) in the served memory's ``history``, injected.

    What must hold: status 500 in the one error shape, no traceback or
    exception text in the body, and the Client raises a MemlaneError, not
    StoreError (the store did not fail).
    """
    inject(world, monkeypatch, RuntimeError("secret internals " + INJECTED))
    # uvicorn would format and log the traceback in the server thread while this one runs (and, on
    # Python 3.11, formatting two tracebacks at once can fail: CPython gh-106905); the answer is the same
    monkeypatch.setattr(logging.getLogger("uvicorn.error"), "disabled", True)
    resp = world.call("POST", "/v1/history", {"namespace": ALICE, "key": "taken.key"})
    assert resp.status_code == 500
    assert "secret internals" not in resp.text and "Traceback" not in resp.text
    with pytest.raises(errors.MemlaneError) as raised:
        world.client().history(ALICE, "taken.key")
    assert type(raised.value) is errors.MemlaneError
    assert "HTTP 500" in str(raised.value) and "secret internals" not in str(raised.value)


def test_the_client_raises_store_error_when_the_service_cannot_be_reached() -> None:
    with memlane.Client(f"http://127.0.0.1:{free_port()}", WRONG_TOKEN, timeout=5, retry_window=0.5) as client:
        with pytest.raises(errors.MemlaneError) as raised:
            client.get(ALICE, "k")
    assert type(raised.value) is errors.StoreError
    assert "cannot reach the memlane service" in str(raised.value) and WRONG_TOKEN not in str(raised.value)


def test_the_mcp_endpoint_answers_503_when_the_store_fails_before_any_tool_runs(closed: Served) -> None:
    """Authentication reads the store, so a failed store is refused at the HTTP level, with its message."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {closed.tokens['alice']}"}
    resp = closed.http.post("/mcp", json=init, headers=headers)
    assert resp.status_code == 503
    assert "this memory is closed" in resp.text and closed.tokens["alice"] not in resp.text


# -- MCP: each error kind a tool can hit is a tool error naming the problem ----------------


@dataclass(frozen=True)
class ToolAnswer:
    name: str
    server: str
    tool: str
    arguments: Callable[[Served], dict[str, Any]]
    kind: str
    label: str  # the text starts with "<label>: "
    fragment: str
    field: str | None = None
    injected: Exception | None = None


TOOL_ANSWERS: list[ToolAnswer] = [
    ToolAnswer(
        "bad-namespace",
        "world",
        "memory_set",
        lambda s: {"namespace": "a//b", "key": "k", "value": 1},
        "validation_error",
        "Invalid input",
        "namespace: has an empty segment",
        field="namespace",
    ),
    ToolAnswer(
        "namespace-outside-the-scope",
        "world",
        "memory_get",
        lambda s: {"namespace": "agent/bob", "key": "k"},
        "forbidden",
        "Forbidden",
        "outside what this agent may read",
    ),
    ToolAnswer(
        "unknown-fact",
        "world",
        "memory_retract_fact",
        lambda s: {"fact_id": NO_FACT},
        "not_found",
        "Not found",
        f"no fact {NO_FACT!r}",
    ),
    ToolAnswer(
        "unknown-saved-query",
        "world",
        "memory_query",
        lambda s: {"saved": "nope"},
        "not_found",
        "Not found",
        "no saved query named 'nope'",
    ),
    ToolAnswer(
        "merge-an-entity-into-itself",
        "world",
        "memory_merge_entities",
        lambda s: {"survivor": s.ids["entity"], "merged": s.ids["entity"]},
        "conflict",
        "Conflict",
        "nothing to merge",
    ),
    ToolAnswer(
        "supersede-a-superseded-claim",
        "world",
        "memory_supersede_claim",
        lambda s: {"claim_id": s.ids["claim"]},
        "conflict",
        "Conflict",
        "was already superseded",
    ),
    ToolAnswer(
        "query-not-a-select",
        "world",
        "memory_query",
        lambda s: {"sql": "DELETE FROM items"},
        "query_refused",
        "Query refused",
        "only SELECT statements",
    ),
    ToolAnswer(
        "write-after-another-process-changed-the-embedder",
        "mismatched",
        "memory_set",
        lambda s: {"namespace": ALICE, "key": "k", "value": "some words"},
        "embedder_mismatch",
        "Embedder mismatch",
        "made by 'fake' (32 dimensions)",
    ),
    ToolAnswer(
        "query-space-of-an-in-memory-store",
        "in_memory",
        "memory_query",
        lambda s: {"sql": "SELECT 1"},
        "unavailable",
        "Unavailable",
        "in-memory SQLite store",
    ),
    ToolAnswer(
        "search-with-an-unreachable-embedder",
        "dead_embedder",
        "memory_search",
        lambda s: {"query": "some words"},
        "embedder_error",
        "Embedder error",
        "could not reach http://127.0.0.1:",
    ),
    ToolAnswer(
        "write-while-another-connection-holds-the-lock",
        "locked",
        "memory_set",
        lambda s: {"namespace": ALICE, "key": "locked.out", "value": 1},
        "store_error",
        "Store error",
        "database is locked",
    ),
    ToolAnswer(
        "chooser-error-injected",
        "world",
        "memory_history",
        lambda s: {"namespace": ALICE, "key": "taken.key"},
        "chooser_error",
        "Chooser error",
        INJECTED,
        injected=errors.ChooserError(INJECTED),
    ),
    ToolAnswer(
        "any-other-memlane-error-injected",
        "world",
        "memory_history",
        lambda s: {"namespace": ALICE, "key": "taken.key"},
        "error",
        "Error",
        INJECTED,
        injected=errors.MemlaneError(INJECTED),
    ),
]


@asynccontextmanager
async def http_session(svc: Served) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {svc.tokens['alice']}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(svc.url + "/mcp?tools=all", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def tool_error(session: ClientSession, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Call a tool that must fail with a tool error; its text and structured error."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, (tool, result.content)
    assert isinstance(result.content[0], TextContent)
    text = result.content[0].text
    assert "Traceback" not in text and "\n" not in text
    assert result.structured_content is not None and set(result.structured_content) == {"error"}
    error = result.structured_content["error"]
    assert set(error) <= SHAPE and error["message"].strip(), error
    assert (error["type"] == "query_refused") == ("reason" in error), error
    return text, error


@pytest.mark.parametrize("case", TOOL_ANSWERS, ids=[f"{t.kind}-{t.name}" for t in TOOL_ANSWERS])
def test_each_error_kind_a_tool_can_hit_is_a_tool_error_naming_it_over_http(
    case: ToolAnswer, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc: Served = request.getfixturevalue(case.server)
    if case.injected is not None:
        inject(svc, monkeypatch, case.injected)

    async def main() -> None:
        async with http_session(svc) as session:
            text, error = await tool_error(session, case.tool, case.arguments(svc))
        assert error["type"] == case.kind, error
        assert error.get("field") == case.field, error
        assert text.startswith(case.label + ": "), text
        assert case.fragment in text
        # the text is the label and the whole message (with the field in front when there is one)
        assert text == f"{case.label}: " + (f"{case.field}: " if case.field else "") + error["message"]

    anyio.run(main)


def test_stdio_tool_errors_name_conflict_not_found_and_refused_queries(tmp_path: Path) -> None:
    """The single-owner server (``memlane mcp`` spawned over stdio) maps errors like the HTTP mount."""
    mem = memlane.open(str(tmp_path / "memory.db"), embedder="fake")
    entity = mem.add_entity("user/1", "Kim").id
    mem.close()
    params = StdioServerParameters(
        command=str(MEMLANE),
        args=["mcp", "--db", str(tmp_path / "memory.db"), "--embedder", "fake", "--tools", "all"],
        cwd=str(tmp_path),
    )

    async def main() -> None:
        with open(tmp_path / "server.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                text, error = await tool_error(s, "memory_merge_entities", {"survivor": entity, "merged": entity})
                assert error["type"] == "conflict" and text.startswith("Conflict: ")
                text, error = await tool_error(s, "memory_retract_fact", {"fact_id": NO_FACT})
                assert error["type"] == "not_found" and text.startswith("Not found: ")
                text, error = await tool_error(s, "memory_query", {"sql": "DROP TABLE items"})
                assert error["type"] == "query_refused" and text.startswith("Query refused: ")
                assert (error["reason"], error["part"]) == ("not_select", "DROP")

    anyio.run(main)
    assert "Traceback" not in (tmp_path / "server.log").read_text()


# -- CLI: each error kind gives its documented exit code and one line on stderr ------------


def _newer_schema(tmp_path: Path) -> str:
    db = tmp_path / "newer.db"
    memlane.open(str(db), embedder=None).close()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO _memlane_migrations (name, applied_at) VALUES ('m999_future', datetime('now'))")
    return str(db)


def _recorded_by_openai(tmp_path: Path) -> str:
    db = tmp_path / "openai.db"
    embedder = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{free_port()}/v1", dimension=8)
    mem = memlane.open(str(db), embedder=embedder)
    mem.reindex()  # records the embedder; nothing to embed, so no request is sent
    mem.close()
    return str(db)


def _with_entity(tmp_path: Path) -> list[str]:
    db = str(tmp_path / "memory.db")
    mem = memlane.open(db, embedder="fake")
    entity = mem.add_entity("user/1", "Kim").id
    mem.close()
    return ["entity", "merge", entity, entity, "--db", db]


def _with_agent(tmp_path: Path) -> list[str]:
    db = str(tmp_path / "memory.db")
    mem = memlane.open(db, embedder=None)
    Access(mem).create_agent("alice")
    mem.close()
    return ["agent", "create", "alice", "--db", db]


def _junk(tmp_path: Path) -> str:
    (tmp_path / "junk.db").write_bytes(b"this is not a database " * 100)
    return str(tmp_path / "junk.db")


def _empty(tmp_path: Path) -> str:
    """An empty database: a command that only reads refuses a path that does not exist."""
    db = tmp_path / "m.db"
    memlane.open(str(db), embedder=None).close()
    return str(db)


def _unreachable_chooser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("MEMLANE_CHAT_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    return ["recall", "q", "--mode", "single", "--chooser-model", "m", "--db", _empty(tmp_path)]


def _failing_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No real component raises a bare MemlaneError: ``Memory.history`` is replaced by one that does."""

    def history(*args: Any, **kwargs: Any) -> Any:
        raise errors.MemlaneError("first line\nsecond line")  # a message of two lines still prints as one

    monkeypatch.setattr(Memory, "history", history)
    return ["history", "user/1", "k", "--db", _empty(tmp_path)]


def _full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQLite store opened may not grow past its size (SQLITE_FULL, as on a full disk)."""
    opened = SqliteStore.__init__

    def capped(self: SqliteStore, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        self.connection.execute(f"PRAGMA max_page_count = {self.connection.execute('PRAGMA page_count').fetchone()[0]}")

    db = _empty(tmp_path)
    monkeypatch.setattr(SqliteStore, "__init__", capped)
    return ["set", "user/1", "big", "x" * 100_000, "--db", db]


# (name, args given tmp_path and monkeypatch, exit code, fragment of the one stderr line)
CLI_ANSWERS: list[tuple[str, Callable[[Path, pytest.MonkeyPatch], list[str]], int, str]] = [
    ("validation_error", lambda p, m: ["set", "a//b", "k", "v", "--db", str(p / "m.db")], 2, "namespace: has an empty"),
    ("query_refused", lambda p, m: ["query", "sql", "DELETE FROM items", "--db", _empty(p)], 2, "query refused"),
    ("not_found-item", lambda p, m: ["get", "user/1", "missing", "--db", _empty(p)], 1, "no item at user/1"),
    ("not_found-database", lambda p, m: ["get", "user/1", "k", "--db", str(p / "absent.db")], 1, "no database at"),
    ("not_found-room", lambda p, m: ["room", "add", "nope", "alice", "--db", str(p / "m.db")], 1, "no room named"),
    ("conflict-agent", lambda p, m: _with_agent(p), 1, "agent 'alice' already exists"),
    ("conflict-merge", lambda p, m: _with_entity(p), 1, "nothing to merge"),
    (
        "embedder_mismatch",
        lambda p, m: ["search", "x", "--embedder", "fake", "--db", _recorded_by_openai(p)],
        1,
        "made by 'openai:m' (8 dimensions), not 'fake'",
    ),
    ("unavailable-query", lambda p, m: ["query", "sql", "SELECT 1", "--db", ":memory:"], 1, "in-memory SQLite"),
    ("unavailable-backend", lambda p, m: ["stats", "--db", "mysql://host/db"], 1, "unknown database URL scheme"),
    ("embedder_error", lambda p, m: ["stats", "--embedder", "bogus", "--db", _empty(p)], 1, "unknown embedder"),
    ("chooser_error", _unreachable_chooser, 1, "cannot reach chat endpoint"),
    ("store_error-not-a-database", lambda p, m: ["stats", "--db", _junk(p)], 1, "file is not a database"),
    ("store_error-no-directory", lambda p, m: ["set", "a", "k", "v", "--db", str(p / "no" / "m.db")], 1, "directory"),
    ("store_error-newer-schema", lambda p, m: ["stats", "--db", _newer_schema(p)], 1, "upgrade memlane"),
    ("storage_full", _full_disk, 1, "Error: the disk is full: cannot write to the SQLite database"),
    ("error-injected", _failing_history, 1, "Error: first line second line"),
]


@pytest.mark.parametrize(("name", "args", "code", "fragment"), CLI_ANSWERS, ids=[c[0] for c in CLI_ANSWERS])
def test_each_error_kind_gives_its_exit_code_and_one_line_on_stderr(
    name: str,
    args: Callable[[Path, pytest.MonkeyPatch], list[str]],
    code: int,
    fragment: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")
    result: Result = CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, args(tmp_path, monkeypatch))
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.output


def test_a_usage_error_exits_2() -> None:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, ["get", "--db", os.devnull])
    assert result.exit_code == 2
    assert result.stdout == "" and "Missing argument" in result.stderr
