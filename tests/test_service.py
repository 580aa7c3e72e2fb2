"""The HTTP service end to end: real uvicorn on loopback, real SQLite/PostgreSQL, real processes.

Every test speaks HTTP to a live server (``tests/live.py`` or a ``memlane serve``
subprocess); nothing is mocked. What is pinned down here:

* authentication and the visibility rule on every endpoint (401 / 403 /
  restricted results), with the stored data unchanged after every refusal;
* tokens never reach a log line or an error body;
* malformed input of every kind ends in a clean 4xx in the one error shape;
* the v1 wire format, against requests and responses recorded from this
  version (``tests/data/recorded_v1.json``), and the additive API rules;
* ``Client.recall_keyed`` stays exact against a server that ignores ``key``;
* the service commands of the CLI, and several ``memlane serve`` replicas over
  one PostgreSQL database.

To re-record the v1 exchanges (only when the v1 API deliberately changes):
``.venv/bin/python tests/test_service.py --record``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import memlane
from memlane.core.access import Access

sys.path.insert(0, str(Path(__file__).parent))  # `live` when run as a script (--record)

from live import LiveServer  # noqa: E402
from memlane.server import create_app  # noqa: E402

DATA = Path(__file__).parent / "data" / "recorded_v1.json"
MEMLANE = Path(sys.executable).with_name("memlane")
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)
SMALL_BODY = 16 * 1024  # max_body_bytes of the test services


# -- a live service over one memory ---------------------------------------------------


class Service:
    """A memory, its access records and a live server in front of it, plus a plain HTTP client."""

    def __init__(self, path: Path, *, keyed_recall: bool = True, max_body_bytes: int = SMALL_BODY) -> None:
        self.mem = memlane.open(str(path), embedder="fake")
        self.access = Access(self.mem)
        self.tokens: dict[str, str] = {}
        self.server = LiveServer(create_app(self.mem, keyed_recall=keyed_recall, max_body_bytes=max_body_bytes))
        self.url = self.server.url
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def agent(self, name: str, *, admin: bool = False) -> str:
        _, token = self.access.create_agent(name, admin=admin)
        self.tokens[name] = token
        return token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        as_: str | None = None,
        token: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request; ``as_`` names an agent whose token to send, ``token`` sends any string."""
        h = dict(headers or {})
        if as_ is not None:
            token = self.tokens[as_]
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if raw is not None:
            h.setdefault("content-type", "application/json")
            return self.http.request(method, path, content=raw, headers=h)
        if body is None:
            return self.http.request(method, path, headers=h)
        return self.http.request(method, path, json=body, headers=h)

    def state(self) -> str:
        """Everything stored, access records and history included: equal before and after a refusal."""
        items = [i.to_dict() for i in self.mem.list((), limit=10_000).items]
        stats = self.mem.stats()
        with self.mem.store.session() as s:  # the facts layer's rows, every version and stamp
            facts = [
                s.rows(f"SELECT * FROM {table} ORDER BY 1, 2")
                for table in ("entities", "entity_aliases", "facts", "evidence", "documents", "chunks", "claims")
            ]
        return json.dumps(
            [items, stats.active_items, stats.history_versions, stats.expired_items, facts], sort_keys=True, default=str
        )

    def close(self) -> None:
        self.http.close()
        self.server.stop()
        self.mem.close()


def error_of(resp: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """Assert the one error shape with this status and type; return the inner error object."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) <= {"type", "message", "field"}, err
    assert err["type"] == kind, err
    assert isinstance(err["message"], str) and err["message"], err
    return err  # type: ignore[no-any-return]


# -- the shared world: three agents, rooms, grants and items in every corner -------

ALICE_SEES = {"agent/alice", "agent/alice/sub", "room/eng", "project/x", "project/w"}
BOB_SEES = {"agent/bob", "room/ops"}
HIDDEN = {"agent/bob", "room/ops", "project/y", "team/secret", "agent/alice-corp"}
EVERYWHERE = sorted(ALICE_SEES | HIDDEN)
KEY = "topic.orchid"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Read-mostly service shared by the refusal tests (each checks the data is unchanged).

    alice: member of room eng, read on project/x, write on project/w.
    bob: member of room ops. root: admin. Every namespace holds an item under
    the same key and with the same searchable word, so any leak would show.
    """
    svc = Service(tmp_path_factory.mktemp("world") / "world.db")
    svc.agent("root", admin=True)
    svc.agent("alice")
    svc.agent("bob")
    svc.access.create_room("eng")
    svc.access.add_member("eng", "alice")
    svc.access.create_room("ops")
    svc.access.add_member("ops", "bob")
    svc.access.grant("alice", "project/x", "read")
    svc.access.grant("alice", "project/w", "write")
    for ns in EVERYWHERE:
        svc.mem.put(ns, KEY, f"orchid care notes kept in {ns}", metadata={"where": ns})
        svc.mem.put(ns, "misc.count", len(ns))
    yield svc
    svc.close()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Service]:
    """A new, empty service with an admin (root) and one agent (alice), for tests that write."""
    svc = Service(tmp_path / "fresh.db")
    svc.agent("root", admin=True)
    svc.agent("alice")
    yield svc
    svc.close()


# (method, path, a body alice may legitimately send, kind): kind is write/read/self/admin.
ENDPOINTS: list[tuple[str, str, Any, str]] = [
    ("POST", "/v1/put", {"namespace": "agent/alice", "key": "new.one", "value": 1}, "write"),
    ("POST", "/v1/put_many", {"records": [{"namespace": "agent/alice", "key": "new.two", "value": 2}]}, "write"),
    ("POST", "/v1/get", {"namespace": "agent/alice", "key": KEY}, "read"),
    ("POST", "/v1/get_many", {"addresses": [["agent/alice", KEY]]}, "read"),
    ("POST", "/v1/fetch", {"key": KEY}, "read"),
    ("POST", "/v1/delete", {"namespace": "agent/alice", "key": KEY}, "write"),
    ("POST", "/v1/clear", {"namespace_prefix": "agent/alice"}, "write"),
    ("POST", "/v1/list", {}, "read"),
    ("POST", "/v1/namespaces", {}, "read"),
    ("POST", "/v1/summarize", {}, "read"),
    ("POST", "/v1/history", {"namespace": "agent/alice", "key": KEY}, "read"),
    ("POST", "/v1/search", {"query": "orchid"}, "read"),
    ("POST", "/v1/recall", {"query": "orchid"}, "read"),
    ("POST", "/v1/recall", {"query": "orchid", "key": KEY}, "read"),
    ("GET", "/v1/export", None, "read"),
    ("POST", "/v1/add_entity", {"namespace": "agent/alice", "name": "Kim"}, "write"),
    (
        "POST",
        "/v1/assert_fact",
        {"namespace": "agent/alice", "subject": "ent_" + "0" * 32, "predicate": "p", "object": 1},
        "write",
    ),
    ("POST", "/v1/add_document", {"namespace": "agent/alice", "title": "t", "text": "x"}, "write"),
    ("POST", "/v1/add_claim", {"namespace": "agent/alice", "text": "x"}, "write"),
    ("POST", "/v1/add_claims", {"namespace": "agent/alice", "claims": [{"text": "x"}]}, "write"),
    ("POST", "/v1/retract_fact", {"fact_id": "fact_" + "0" * 32}, "write"),
    ("POST", "/v1/resolve_entity", {"name": "Kim"}, "read"),
    ("POST", "/v1/facts_context", {"query": "orchid"}, "read"),
    ("POST", "/v1/claims_and_sources_context", {"query": "orchid"}, "read"),
    ("POST", "/v1/combined_context", {"query": "orchid"}, "read"),
    ("POST", "/v1/lookup", {"ids": ["ent_" + "0" * 32]}, "read"),
    ("POST", "/v1/traverse", {"entity_ids": ["ent_" + "0" * 32]}, "read"),
    ("POST", "/v1/neighbours", {"chunk_id": "chunk_" + "0" * 32}, "read"),
    ("GET", "/v1/me", None, "self"),
    ("GET", "/v1/stats", None, "admin"),
    ("POST", "/v1/cleanup", None, "admin"),
    ("GET", "/v1/admin/agents", None, "admin"),
    ("POST", "/v1/admin/agents", {"name": "mallory", "admin": True}, "admin"),
    ("GET", "/v1/admin/agents/alice", None, "admin"),
    ("POST", "/v1/admin/agents/alice/token", {}, "admin"),
    ("GET", "/v1/admin/rooms", None, "admin"),
    ("POST", "/v1/admin/rooms", {"name": "mallory-room"}, "admin"),
    ("POST", "/v1/admin/rooms/ops/members", {"agent": "alice"}, "admin"),
    ("DELETE", "/v1/admin/rooms/ops/members/bob", None, "admin"),
    ("POST", "/v1/admin/grants", {"agent": "alice", "prefix": "team/secret", "mode": "write"}, "admin"),
]


def _id(e: tuple[str, str, Any, str]) -> str:
    return f"{e[0]} {e[1]}" + (" keyed" if isinstance(e[2], dict) and "key" in e[2] and "query" in e[2] else "")


# -- authentication -----------------------------------------------------------


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[_id(e) for e in ENDPOINTS])
def test_every_endpoint_refuses_a_missing_or_wrong_token_and_changes_nothing(world, endpoint):
    method, path, body, _ = endpoint
    before = world.state()
    alice = world.tokens["alice"]
    attempts: list[dict[str, Any]] = [
        {},  # no Authorization header at all
        {"token": "ml_" + "x" * 43},  # well-formed, unknown
        {"token": alice[:-1] + ("A" if alice[-1] != "A" else "B")},  # one character off
        {"token": alice[::-1]},
        {"token": alice.upper()},
        {"token": "y" * 500},  # longer than any token
        {"headers": {"Authorization": "Bearer"}},  # scheme without a token
        {"headers": {"Authorization": f"Basic {alice}"}},  # right secret, wrong scheme
        {"headers": {"Authorization": alice}},  # no scheme
        {"headers": {"X-Token": alice}},  # wrong header
    ]
    for attempt in attempts:
        resp = world.call(method, path, body, **attempt)
        err = error_of(resp, 401, "unauthorized")
        assert "Bearer" in err["message"] and "field" not in err
        assert alice not in resp.text
    assert world.state() == before


def _openapi_path(path: str) -> str:
    parts = path.split("/")
    if parts[3:4] == ["agents"] and len(parts) > 4:
        parts[4] = "{name}"
    if "members" in parts:
        parts[4] = "{room}"
        if len(parts) > 6:
            parts[6] = "{agent}"
    return "/".join(parts)


def test_operations_and_openapi_are_public_and_list_every_operation(world):
    resp = world.call("GET", "/v1/operations")
    assert resp.status_code == 200
    ops = resp.json()
    assert ops["version"] == "v1"
    names = {op["name"] for op in ops["operations"]}
    posted = {p.removeprefix("/v1/") for m, p, _, _ in ENDPOINTS if m == "POST" and "/admin/" not in p}
    assert posted - {"cleanup"} <= names
    for op in ops["operations"]:
        assert op["method"] == "POST" and op["path"] == f"/v1/{op['name']}"
        assert op["params"]["type"] == "object" and "properties" in op["params"]
        assert "properties" in op["result"]
    spec = world.call("GET", "/openapi.json").json()
    for method, path, _, _ in ENDPOINTS:
        assert method.lower() in spec["paths"][_openapi_path(path)], (method, path)
    assert world.call("GET", "/docs").status_code == 200


# -- visibility: explicit namespaces outside the scope ---------------------------

OUTSIDE: list[tuple[str, dict[str, Any]]] = [
    ("put", {"namespace": "agent/bob", "key": "planted", "value": "x"}),
    ("put", {"namespace": ["agent", "bob", "deeper"], "key": "planted", "value": "x"}),
    ("put", {"namespace": "agent/alice-corp", "key": "planted", "value": "x"}),  # segment boundary
    ("put", {"namespace": "project/x", "key": "planted", "value": "x"}),  # read grant only
    ("put", {"namespace": "project", "key": "planted", "value": "x"}),  # above a grant
    (
        "put_many",
        {
            "records": [
                {"namespace": "agent/alice", "key": "first.ok", "value": 1},
                {"namespace": "room/ops", "key": "planted", "value": 2},
            ]
        },
    ),
    ("get", {"namespace": "agent/bob", "key": KEY}),
    ("get", {"namespace": "team/secret", "key": KEY}),
    ("get_many", {"addresses": [["agent/alice", KEY], ["agent/bob", KEY]]}),
    ("fetch", {"key": KEY, "namespace_prefix": "agent/bob"}),
    ("fetch", {"key": KEY, "namespace_prefix": "room/ops"}),
    ("delete", {"namespace": "agent/bob", "key": KEY}),
    ("delete", {"namespace": "project/x", "key": KEY}),  # readable, not writable
    ("clear", {"namespace_prefix": "agent/bob"}),
    ("clear", {"namespace_prefix": "project/x"}),
    ("clear", {"namespace_prefix": "agent"}),  # contains alice's, but is not hers
    ("list", {"namespace_prefix": "agent/bob"}),
    ("list", {"namespace_prefix": "agent/alice-corp"}),
    ("namespaces", {"prefix": "agent/bob"}),
    ("namespaces", {"prefix": "team"}),
    ("summarize", {"namespace_prefix": "room/ops"}),
    ("history", {"namespace": "agent/bob", "key": KEY}),
    ("search", {"query": "orchid", "namespace_prefix": "agent/bob"}),
    ("search", {"query": "orchid", "namespace_prefix": "project/y"}),
    ("recall", {"query": "orchid", "namespace": "agent/bob"}),
    ("recall", {"query": "orchid", "namespace": "team/secret", "mode": "lexical"}),
    ("recall", {"query": "orchid", "key": KEY, "namespace": "agent/bob"}),
    ("recall", {"query": "orchid", "key": KEY, "namespace": "room/ops"}),
    ("add_entity", {"namespace": "agent/bob", "name": "Planted"}),
    ("add_entity", {"namespace": "project/x", "name": "Planted"}),  # readable, not writable
    ("add_document", {"namespace": "room/ops", "title": "t", "text": "planted"}),
    ("add_claims", {"namespace": "agent/bob", "claims": [{"text": "planted"}]}),
    ("assert_fact", {"namespace": "agent/bob", "subject": "ent_" + "0" * 32, "predicate": "p", "object": 1}),
    ("resolve_entity", {"name": "Kim", "namespace_prefix": "agent/bob"}),
    ("facts_context", {"query": "orchid", "namespace_prefix": "room/ops"}),
    ("claims_and_sources_context", {"query": "orchid", "namespace_prefix": "team/secret"}),
    ("combined_context", {"query": "orchid", "namespace_prefix": "agent/bob"}),
]


# access records live in their own tables: the old _memlane root is no namespace at all, for anyone
RESERVED_ROOT: list[tuple[str, dict[str, Any]]] = [
    ("put", {"namespace": "_memlane/tokens", "key": "planted", "value": "alice"}),
    ("put", {"namespace": "_memlane/agents", "key": "alice", "value": {"admin": True}}),
    ("put_many", {"records": [{"namespace": "_memlane/agents", "key": "alice", "value": {"admin": True}}]}),
    ("get", {"namespace": "_memlane/tokens", "key": "anything"}),
    ("delete", {"namespace": "_memlane/agents", "key": "alice"}),
    ("clear", {"namespace_prefix": "_memlane"}),
    ("list", {"namespace_prefix": "_memlane"}),
    ("namespaces", {"prefix": "_memlane"}),
    ("summarize", {"namespace_prefix": "_memlane/agents"}),
    ("history", {"namespace": "_memlane/agents", "key": "alice"}),
    ("search", {"query": "alice", "namespace_prefix": "_memlane"}),
    ("add_claim", {"namespace": "_memlane/agents", "text": "planted"}),
    ("add_entity", {"namespace": "_memlane", "name": "Planted"}),
]


@pytest.mark.parametrize("caller", ["alice", "root"])
@pytest.mark.parametrize(("op", "body"), RESERVED_ROOT, ids=[f"{o}-{n}" for n, (o, _) in enumerate(RESERVED_ROOT)])
def test_the_reserved_root_is_refused_for_everyone_and_changes_nothing(world, caller, op, body):
    before = world.state()
    resp = world.call("POST", f"/v1/{op}", body, as_=caller)
    err = error_of(resp, 400, "validation_error")
    assert "reserved" in err["message"] and err["field"] in ("namespace", "namespace_prefix", "prefix", "records")
    assert world.state() == before


@pytest.mark.parametrize(("op", "body"), OUTSIDE, ids=[f"{o}-{n}" for n, (o, _) in enumerate(OUTSIDE)])
def test_explicit_namespace_outside_the_scope_is_403_and_changes_nothing(world, op, body):
    before = world.state()
    resp = world.call("POST", f"/v1/{op}", body, as_="alice")
    err = error_of(resp, 403, "forbidden")
    assert "outside what this agent may" in err["message"]
    assert "orchid care notes" not in resp.text  # nothing of the refused namespace leaks
    assert world.state() == before


def test_bob_is_refused_alices_namespace_too(world):
    before = world.state()
    for op, body in [
        ("get", {"namespace": "agent/alice", "key": KEY}),
        ("put", {"namespace": "room/eng", "key": "planted", "value": 1}),
        ("recall", {"query": "", "key": KEY, "namespace": "project/w"}),
    ]:
        error_of(world.call("POST", f"/v1/{op}", body, as_="bob"), 403, "forbidden")
    assert world.state() == before


# -- visibility: reads without a namespace see exactly the scope -----------------


def _namespaces_seen(svc: Service, agent: str) -> dict[str, set[str]]:
    """For every broad read, the namespaces that appear in its answer."""

    def post(path: str, body: dict[str, Any]) -> Any:
        resp = svc.call("POST", path, body, as_=agent)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def ns(item: dict[str, Any]) -> str:
        return "/".join(item["namespace"])

    export = svc.call("GET", "/v1/export", as_=agent)
    assert export.status_code == 200
    assert export.headers["content-type"].startswith("application/x-ndjson")
    return {
        "list": {ns(i) for i in post("/v1/list", {"limit": 1000})["items"]},
        "list agent/": {ns(i) for i in post("/v1/list", {"namespace_prefix": "agent", "limit": 1000})["items"]},
        "namespaces": {"/".join(n) for n in post("/v1/namespaces", {})["namespaces"]},
        "summarize": set(post("/v1/summarize", {})["summary"]),
        "fetch": {ns(i) for i in post("/v1/fetch", {"key": KEY, "limit": 100})["items"]},
        "search": {ns(h) for h in post("/v1/search", {"query": "orchid care", "limit": 100})["hits"]},
        "search lexical": {
            ns(h) for h in post("/v1/search", {"query": "orchid", "limit": 100, "channels": ["lexical"]})["hits"]
        },
        "recall": {ns(h) for h in post("/v1/recall", {"query": "orchid care", "limit": 100})["hits"]},
        "recall keyed": {ns(h) for h in post("/v1/recall", {"query": "", "key": KEY, "limit": 100})["hits"]},
        "export": {ns(json.loads(line)) for line in export.text.splitlines()},
    }


@pytest.mark.parametrize(
    ("agent", "expected"),
    [("alice", ALICE_SEES), ("bob", BOB_SEES), ("root", set(EVERYWHERE))],
)
def test_reads_without_a_namespace_see_exactly_the_agent_rooms_and_grants(world, agent, expected):
    before = world.state()
    seen = _namespaces_seen(world, agent)
    for read, namespaces in seen.items():
        if read == "list agent/":
            assert namespaces == {n for n in expected if n.startswith("agent/")}, (read, namespaces)
            continue
        assert namespaces == expected, (read, namespaces)
        assert not any(n.startswith("_memlane") for n in namespaces)
    assert world.state() == before


def test_me_reports_the_scope(world):
    me = world.call("GET", "/v1/me", as_="alice").json()
    assert me["name"] == "alice" and me["admin"] is False and me["namespace"] == "agent/alice"
    assert me["rooms"] == ["eng"]
    assert set(me["read"]) == {"agent/alice", "room/eng", "project/x", "project/w"}
    assert set(me["write"]) == {"agent/alice", "room/eng", "project/w"}
    assert "token" not in json.dumps(me)


# -- admin endpoints ----------------------------------------------------------------

ADMIN = [e for e in ENDPOINTS if e[3] == "admin"]


@pytest.mark.parametrize("endpoint", ADMIN, ids=[_id(e) for e in ADMIN])
def test_admin_endpoints_refuse_a_non_admin_and_change_nothing(world, endpoint):
    method, path, body, _ = endpoint
    before = world.state()
    for agent in ("alice", "bob"):
        err = error_of(world.call(method, path, body, as_=agent), 403, "forbidden")
        assert "admin" in err["message"]
    assert world.state() == before
    assert world.access.agent("alice").admin is False


def test_admin_endpoints_work_for_an_admin(fresh):
    made = fresh.call("POST", "/v1/admin/agents", {"name": "carol"}, as_="root")
    assert made.status_code == 200
    token = made.json()["token"]
    assert made.json()["agent"] == {
        "name": "carol",
        "admin": False,
        "namespace": "agent/carol",
        "rooms": [],
        "grants": [],
    }
    fresh.tokens["carol"] = token
    assert fresh.call("GET", "/v1/me", as_="carol").json()["name"] == "carol"
    dup = fresh.call("POST", "/v1/admin/agents", {"name": "carol"}, as_="root")
    kind = "conflict" if dup.status_code == 409 else "validation_error"
    assert "already exists" in error_of(dup, 409 if kind == "conflict" else 400, kind)["message"]
    assert fresh.call("GET", "/v1/me", as_="carol").json()["name"] == "carol"  # the first token still works
    assert fresh.call("POST", "/v1/admin/rooms", {"name": "eng"}, as_="root").json() == {"name": "eng", "members": []}
    added = fresh.call("POST", "/v1/admin/rooms/eng/members", {"agent": "carol"}, as_="root").json()
    assert added == {"name": "eng", "members": ["carol"]}
    assert fresh.call("POST", "/v1/put", {"namespace": "room/eng", "key": "k", "value": 1}, as_="carol").is_success
    error_of(fresh.call("POST", "/v1/admin/rooms/nope/members", {"agent": "carol"}, as_="root"), 404, "not_found")
    assert fresh.call("GET", "/v1/admin/rooms", as_="root").json() == {"rooms": [{"name": "eng", "members": ["carol"]}]}
    removed = fresh.call("DELETE", "/v1/admin/rooms/eng/members/carol", as_="root").json()
    assert removed == {"name": "eng", "members": []}
    error_of(fresh.call("POST", "/v1/get", {"namespace": "room/eng", "key": "k"}, as_="carol"), 403, "forbidden")
    granted = fresh.call(
        "POST", "/v1/admin/grants", {"agent": "carol", "prefix": "room/eng", "mode": "read"}, as_="root"
    )
    assert granted.json()["grants"] == [{"prefix": "room/eng", "mode": "read"}]
    assert fresh.call("POST", "/v1/get", {"namespace": "room/eng", "key": "k"}, as_="carol").json()["value"] == 1
    err = error_of(
        fresh.call("POST", "/v1/admin/grants", {"agent": "carol", "prefix": "x", "mode": "own"}, as_="root"),
        400,
        "validation_error",
    )
    assert err["field"] == "mode"
    agents = {a["name"]: a for a in fresh.call("GET", "/v1/admin/agents", as_="root").json()["agents"]}
    assert set(agents) == {"root", "alice", "carol"} and agents["root"]["admin"] is True
    assert "token" not in json.dumps(agents)
    stats = fresh.call("GET", "/v1/stats", as_="root").json()
    assert stats["active_items"] == 1 and stats["access_records"] > 0
    assert fresh.call("POST", "/v1/cleanup", as_="root").json() == {"deleted": 0}


# -- tokens never in logs or error bodies ----------------------------------------------

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record at DEBUG from every logger, uvicorn's non-propagating ones included."""
    caplog.set_level(logging.DEBUG)
    saved = []
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        if not logger.propagate or name == "uvicorn.access":
            logger.addHandler(caplog.handler)
    yield caplog
    for logger, level in saved:
        logger.setLevel(level)
        if caplog.handler in logger.handlers:
            logger.removeHandler(caplog.handler)


def test_tokens_never_appear_in_logs_or_error_bodies(world, all_logs):
    wrong = "ml_" + "Q" * 43
    long_wrong = "ml_" + "W" * 300
    tokens = [*world.tokens.values(), wrong, long_wrong]
    bodies: list[str] = []
    # a fresh connection, so uvicorn's access logger (checked per connection) is live
    with httpx.Client(base_url=world.url, timeout=30) as http:
        for method, path, body, kind in ENDPOINTS:
            if kind not in ("read", "self") and method != "GET":
                continue  # this world is shared: valid tokens only read
            for token in tokens:
                for header in (f"Bearer {token}", f"Basic {token}", token):
                    resp = http.request(method, path, json=body, headers={"Authorization": header})
                    bodies.append(resp.text)
        # refusals that carry a valid token: 400, 403, 404
        alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
        bodies.append(http.post("/v1/get", json={"namespace": "agent/bob", "key": KEY}, headers=alice).text)
        bodies.append(http.post("/v1/get", json={"namespace": "a//b", "key": KEY}, headers=alice).text)
        bodies.append(http.post("/v1/get", json={"namespace": "agent/alice", "key": "none"}, headers=alice).text)
        bodies.append(http.post("/v1/put", content=b"{oops", headers=alice).text)
    # the client library too: its repr and its errors
    with memlane.Client(world.url, world.tokens["alice"]) as client:
        assert world.tokens["alice"] not in repr(client)
        with pytest.raises(memlane.ForbiddenError) as e:
            client.get("agent/bob", KEY)
        bodies.append(str(e.value))
    with memlane.Client(world.url, wrong) as client, pytest.raises(memlane.UnauthorizedError) as e:
        client.list()
    bodies.append(str(e.value))
    logged = "\n".join(
        [all_logs.text]
        + [r.getMessage() for r in all_logs.records]
        + [repr(r.args) for r in all_logs.records]
        + [repr(getattr(r, "scope", "")) for r in all_logs.records]
    )
    assert any(r.name == "uvicorn.access" for r in all_logs.records), "the access log was not captured"
    for token in tokens:
        assert token not in logged
        for text in bodies:
            assert token not in text
    # the secret part alone, too (a log could strip the prefix)
    for token in world.tokens.values():
        assert token[3:] not in logged


# -- malformed input: clean 4xx, one shape, the field named, nothing written ----------

NAMESPACE = "agent/alice"
MALFORMED: list[Any] = [
    # (path, body (bytes: sent raw), status, field)
    ("put", b"{not json", 400, "body"),
    ("put", b'{"namespace": "agent/alice", "key": "k", "value": 1', 400, "body"),
    ("put", b"", 400, "body"),
    ("put", b"[1, 2]", 400, "body"),
    ("put", b'"a string"', 400, "body"),
    ("put", {"key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": "agent//alice", "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": "agent/alice/", "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", "a\x00b"], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", "tab\there"], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", "\x85next"], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", *"abcdefg"], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", "a/b"], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", ""], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", "s" * 129], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", "alice", 7], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": ["agent", ["alice"]], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": 5, "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": {"a": 1}, "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": [], "key": "k", "value": 1}, 400, "namespace"),
    ("put", {"namespace": NAMESPACE, "key": 5, "value": 1}, 400, "key"),
    ("put", {"namespace": NAMESPACE, "key": "", "value": 1}, 400, "key"),
    ("put", {"namespace": NAMESPACE, "key": "bell\x07", "value": 1}, 400, "key"),
    ("put", {"namespace": NAMESPACE, "key": "a..b", "value": 1}, 400, "key"),
    ("put", {"namespace": NAMESPACE, "key": "k" * 257, "value": 1}, 400, "key"),
    ("put", b'{"namespace": "agent/alice", "key": "k", "value": NaN}', 400, "value"),
    ("put", b'{"namespace": "agent/alice", "key": "k", "value": [1, Infinity]}', 400, "value"),
    ("put", b'{"namespace": "agent/alice", "key": "k", "value": {"a": -1e999}}', 400, "value"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "ttl": "abc"}, 400, "ttl"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "ttl": -1}, 400, "ttl"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "ttl": 0}, 400, "ttl"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "ttl": True}, 400, "ttl"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "ttl": 10**12}, 400, "ttl"),
    ("put", b'{"namespace": "agent/alice", "key": "k", "value": 1, "ttl": 1e999}', 400, "ttl"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "metadata": [1]}, 400, "metadata"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "metadata": "m"}, 400, "metadata"),
    ("put", b'{"namespace": "agent/alice", "key": "k", "value": 1, "metadata": {"a": NaN}}', 400, "metadata"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "text": 5}, 400, "text"),
    ("put", {"namespace": NAMESPACE, "key": "k", "value": 1, "metadata": {"m": "x" * 70_000}}, 413, None),
    ("put_many", {"records": "abc"}, 400, "records"),
    ("put_many", {"records": [1]}, 400, "records"),
    ("put_many", {"records": [{"namespace": NAMESPACE, "key": "k"}]}, 400, "records"),
    (
        "put_many",
        {
            "records": [
                {"namespace": NAMESPACE, "key": "ok", "value": 1},
                {"namespace": NAMESPACE, "key": "", "value": 1},
            ]
        },
        400,
        "key",
    ),
    ("get", {"namespace": NAMESPACE}, 400, "key"),
    ("get", {"namespace": NAMESPACE, "key": None}, 400, "key"),
    ("get", {"namespace": NAMESPACE, "key": ["k"]}, 400, "key"),
    ("get_many", {"addresses": [1]}, 400, "addresses"),
    ("get_many", {"addresses": [[NAMESPACE, KEY, "extra"]]}, 400, "addresses"),
    ("get_many", {"addresses": "abc"}, 400, "addresses"),
    ("fetch", {"key": KEY, "limit": 0}, 400, "limit"),
    ("fetch", {"key": KEY, "limit": 5000}, 400, "limit"),
    ("fetch", {"key": "bad..key"}, 400, "key"),
    ("list", {"limit": "abc"}, 400, "limit"),
    ("list", {"limit": 10**30}, 400, "limit"),
    ("list", {"limit": -1}, 400, "limit"),
    ("list", {"limit": 1.5}, 400, "limit"),
    ("list", {"limit": True}, 400, "limit"),
    ("list", {"limit": None}, 400, "limit"),
    ("list", {"cursor": "not-a-cursor"}, 400, "cursor"),
    ("list", {"cursor": 5}, 400, "cursor"),
    ("list", {"namespace_prefix": "agent//alice"}, 400, "namespace_prefix"),
    ("list", {"key_prefix": "a..b"}, 400, "key_prefix"),
    ("namespaces", {"max_depth": "deep"}, 400, "max_depth"),
    ("namespaces", {"max_depth": 99}, 400, "max_depth"),
    ("summarize", {"depth": 0}, 400, "depth"),
    ("summarize", {"depth": [3]}, 400, "depth"),
    ("history", {"namespace": NAMESPACE, "key": "\x1b[31m"}, 400, "key"),
    ("search", {"query": 5}, 400, "query"),
    ("search", {"query": "q" * 5000}, 400, "query"),
    ("search", {}, 400, "query"),
    ("search", {"query": "q", "limit": "ten"}, 400, "limit"),
    ("search", {"query": "q", "channels": 5}, 400, "channels"),
    ("search", {"query": "q", "channels": ["telepathy"]}, 400, "channels"),
    ("search", {"query": "q", "channels": []}, 400, "channels"),
    ("search", {"query": "q", "candidate_k": -3}, 400, "candidate_k"),
    ("search", {"query": "q", "rrf_k": "x"}, 400, "rrf_k"),
    ("search", {"query": "q", "weights": {"lexical": "heavy"}}, 400, "weights"),
    ("search", {"query": "q", "weights": [1, 2]}, 400, "weights"),
    ("search", {"query": "q", "embedding": "abc"}, 400, "embedding"),
    ("search", {"query": "q", "embedding": [1.0, 2.0]}, 400, "embedding"),
    ("search", {"query": "q", "embedding": []}, 400, "embedding"),
    ("search", {"query": "q", "embedding": [True] * 64}, 400, "embedding"),
    ("search", b'{"query": "q", "embedding": [NaN]}', 400, "embedding"),
    ("recall", {"query": "q", "mode": "psychic"}, 400, "mode"),
    ("recall", {"query": 1.5}, 400, "query"),
    ("recall", {"query": "q", "key": 5}, 400, "key"),
    ("recall", {"query": "q", "key": ""}, 400, "key"),
    ("recall", {"query": "q", "key": "k", "limit": 0}, 400, "limit"),
    # 'namespace' is the earlier name of recall's namespace_prefix: accepted, and errors name the field as it is now
    ("recall", {"query": "q", "namespace": "a//b"}, 400, "namespace_prefix"),
    ("recall", {"query": "q", "namespace_prefix": "a//b"}, 400, "namespace_prefix"),
    ("delete", {"namespace": NAMESPACE, "key": 12}, 400, "key"),
    ("clear", {}, 400, "namespace_prefix"),
    ("clear", {"namespace_prefix": ""}, 400, "namespace_prefix"),
    ("clear", {"namespace_prefix": []}, 400, "namespace_prefix"),
]


def _malformed_id(n: int, case: Any) -> str:
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}-{n}"


@pytest.mark.parametrize(
    ("op", "body", "status", "field"), MALFORMED, ids=[_malformed_id(n, m) for n, m in enumerate(MALFORMED)]
)
def test_malformed_input_is_a_clean_4xx_naming_the_field(world, op, body, status, field):
    before = world.state()
    if isinstance(body, bytes):
        resp = world.call("POST", f"/v1/{op}", as_="alice", raw=body)
    else:
        resp = world.call("POST", f"/v1/{op}", body, as_="alice")
    err = error_of(resp, status, "validation_error" if status == 400 else "payload_too_large")
    assert err.get("field") == field, err
    assert "Traceback" not in resp.text and world.tokens["alice"] not in resp.text
    assert world.state() == before


def test_body_over_max_body_bytes_is_413_before_anything_runs(world):
    before = world.state()
    big = {"namespace": NAMESPACE, "key": "big", "value": "x" * (SMALL_BODY + 1)}
    err = error_of(world.call("POST", "/v1/put", big, as_="alice"), 413, "payload_too_large")
    assert f"{SMALL_BODY:,}" in err["message"]
    records = [{"namespace": NAMESPACE, "key": f"r{i}", "value": "y" * 100} for i in range(300)]
    error_of(world.call("POST", "/v1/put_many", {"records": records}, as_="alice"), 413, "payload_too_large")
    # even without a token: the size is checked first, and nothing is parsed
    error_of(world.call("POST", "/v1/put", big), 413, "payload_too_large")
    assert world.state() == before
    # just under the limit goes through
    ok = {"namespace": NAMESPACE, "key": "just.under", "value": "z" * (SMALL_BODY - 200)}
    assert world.call("POST", "/v1/put", ok, as_="alice").status_code == 200
    world.mem.delete(NAMESPACE, "just.under")


def _chunked(data: bytes, size: int = 4096) -> Iterator[bytes]:
    """Body chunks: httpx sends an iterator with Transfer-Encoding: chunked and no Content-Length."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_chunked_body_over_max_body_bytes_is_413(fresh):
    big = json.dumps({"namespace": NAMESPACE, "key": "chunked", "value": "x" * (4 * SMALL_BODY)}).encode()
    resp = fresh.call("POST", "/v1/put", as_="alice", raw=_chunked(big))  # type: ignore[arg-type]
    error_of(resp, 413, "payload_too_large")
    assert fresh.mem.get(NAMESPACE, "chunked") is None
    # without a token too, and a small chunked body still goes through
    error_of(fresh.call("POST", "/v1/put", raw=_chunked(big)), 413, "payload_too_large")  # type: ignore[arg-type]
    small = json.dumps({"namespace": NAMESPACE, "key": "chunked", "value": "small"}).encode()
    resp = fresh.call("POST", "/v1/put", as_="alice", raw=_chunked(small, 7))  # type: ignore[arg-type]
    assert resp.status_code == 200 and fresh.mem.get(NAMESPACE, "chunked").value == "small"


def test_huge_integers_and_odd_json_are_data_or_a_clean_400(fresh):
    # JSON has no integer limit: a 400-digit integer is stored and read back exactly
    huge = 10**400
    resp = fresh.call("POST", "/v1/put", {"namespace": NAMESPACE, "key": "huge", "value": huge}, as_="alice")
    assert resp.status_code == 200 and resp.json()["value"] == huge
    got = fresh.call("POST", "/v1/get", {"namespace": NAMESPACE, "key": "huge"}, as_="alice").json()
    assert got["value"] == huge and got["value_type"] == "number"
    odd = {"nested": [[[{"": None}]]], "unicode": "snow \u2603 and \U0001f600", "neg0": -0.0, "big": -(2**70)}
    resp = fresh.call("POST", "/v1/put", {"namespace": NAMESPACE, "key": "odd", "value": odd}, as_="alice")
    assert resp.status_code == 200
    assert fresh.call("POST", "/v1/get", {"namespace": NAMESPACE, "key": "odd"}, as_="alice").json()["value"] == odd
    # the JSON value null is a value, not a missing one
    resp = fresh.call("POST", "/v1/put", {"namespace": NAMESPACE, "key": "nothing", "value": None}, as_="alice")
    assert resp.json()["value"] is None and resp.json()["value_type"] == "null"
    # a query string full of index syntax is just text
    resp = fresh.call("POST", "/v1/search", {"query": 'NEAR( "x" OR * ) AND ^', "channels": ["lexical"]}, as_="alice")
    assert resp.status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b'{"namespace": "agent/alice", "key": "k", "value": "\\ud800"}',
        b'{"namespace": "agent/alice", "key": "k\\udc80", "value": "v"}',
        b'{"query": "\\ud800"}',
    ],
    ids=["value", "key", "query"],
)
def test_lone_surrogates_are_a_clean_400(fresh, raw):
    path = "/v1/search" if b"query" in raw else "/v1/put"
    resp = fresh.call("POST", path, as_="alice", raw=raw)
    # Let the server thread finish logging its 500 before this thread fails: Python 3.11's traceback
    # formatting calls ast.parse, whose recursion guard is shared between threads (CPython gh-106905),
    # so pytest formatting this failure at the same moment can die with "AST constructor recursion
    # depth mismatch".
    fresh.server.stop()
    error_of(resp, 400, "validation_error")


@pytest.mark.parametrize(
    ("method", "path", "raw", "status"),
    [
        ("POST", "/v1/put", b'{"namespace": "agent/alice", "key": "k", "value": ' + b"1" * 5000 + b"}", 400),
        ("POST", "/v1/no_such_operation", b"{}", 404),
        ("GET", "/v1/put", None, 405),
    ],
    ids=["5000-digit-int", "unknown-route", "wrong-method"],
)
def test_framework_errors_use_the_one_error_shape(world, method, path, raw, status):
    if raw is None:
        resp = world.call(method, path, as_="alice")
    else:
        resp = world.call(method, path, as_="alice", raw=raw)
    assert resp.status_code == status
    assert set(resp.json()) == {"error"}, resp.text


# -- recorded v1 exchanges -------------------------------------------------------------

_HEX_ID = re.compile(r"^[0-9a-f]{32}$")
_TOKEN = re.compile(r"^ml_[A-Za-z0-9_-]{20,}$")
_TIME_FIELDS = {"created_at", "updated_at", "expires_at", "changed_at"}


class Normaliser:
    """Replaces volatile values by stable placeholders, keeping which ones are equal.

    Ids and timestamps become ``<id:N>`` / ``<time:N>`` numbered in order of
    first appearance across a whole session, so "a replace keeps the id and
    ``created_at``" survives normalisation. Timings become ``<ms>``; ranked
    scores (BM25 / RRF floats) become ``<score>`` while ranks and order stay.
    """

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self.times: dict[str, str] = {}

    def __call__(self, obj: Any, key: str | None = None) -> Any:
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            for k, v in obj.items():
                if k == "timings":
                    out[k] = {name: "<ms>" for name in v}
                elif k in ("score", "channel_scores") and "ranks" in obj and obj.get("score") != 0.0:
                    out[k] = {ch: "<score>" for ch in v} if isinstance(v, dict) else "<score>"
                else:
                    out[k] = self(v, k)
            return out
        if isinstance(obj, list):
            return [self(v, key) for v in obj]
        if isinstance(obj, str):
            if key in ("id", "item_id") and _HEX_ID.match(obj):
                return self.ids.setdefault(obj, f"<id:{len(self.ids) + 1}>")
            if key in _TIME_FIELDS:
                return self.times.setdefault(obj, f"<time:{len(self.times) + 1}>")
            if _TOKEN.match(obj):
                return "<token>"
        return obj


# The requests of the recorded session, in order; "as" is the agent whose token is sent.
V1_SESSION: list[dict[str, Any]] = [
    {
        "name": "put",
        "as": "alice",
        "method": "POST",
        "path": "/v1/put",
        "body": {
            "namespace": ["agent", "alice"],
            "key": "preferences.ui.theme",
            "value": "dark",
            "metadata": {"source": "chat"},
        },
    },
    {
        "name": "put replaces: same id and created_at, version 2",
        "as": "alice",
        "method": "POST",
        "path": "/v1/put",
        "body": {"namespace": "agent/alice", "key": "preferences.ui.theme", "value": {"mode": "light", "contrast": 2}},
    },
    {
        "name": "put with ttl: expires_at appears",
        "as": "alice",
        "method": "POST",
        "path": "/v1/put",
        "body": {"namespace": "room/eng", "key": "notes.standup", "value": "standup moved to 10am", "ttl": 3600},
    },
    {
        "name": "put_many",
        "as": "alice",
        "method": "POST",
        "path": "/v1/put_many",
        "body": {
            "records": [
                {"namespace": "agent/alice", "key": "preferences.editor.font", "value": "mono"},
                {"namespace": "agent/alice", "key": "preferences.ui.font", "value": 14, "metadata": {"unit": "pt"}},
                {"namespace": "room/eng", "key": "preferences.ui.theme", "value": "solarized", "text": "team theme"},
            ]
        },
    },
    {
        "name": "get",
        "as": "alice",
        "method": "POST",
        "path": "/v1/get",
        "body": {"namespace": "agent/alice", "key": "preferences.ui.theme"},
    },
    {
        "name": "get missing: 404",
        "as": "alice",
        "method": "POST",
        "path": "/v1/get",
        "body": {"namespace": "agent/alice", "key": "preferences.missing"},
    },
    {
        "name": "get_many, null where missing",
        "as": "alice",
        "method": "POST",
        "path": "/v1/get_many",
        "body": {"addresses": [["agent/alice", "preferences.editor.font"], ["agent/alice", "nope"]]},
    },
    {
        "name": "list, first page",
        "as": "alice",
        "method": "POST",
        "path": "/v1/list",
        "body": {"namespace_prefix": "agent/alice", "limit": 1},
    },
    {
        "name": "list, next page by cursor",
        "as": "alice",
        "method": "POST",
        "path": "/v1/list",
        "body": {
            "namespace_prefix": "agent/alice",
            "limit": 1,
            "cursor": "W1siYWdlbnQiLCJhbGljZSJdLCJwcmVmZXJlbmNlcy5lZGl0b3IuZm9udCJd",
        },
    },
    {
        "name": "list, everything visible",
        "as": "alice",
        "method": "POST",
        "path": "/v1/list",
        "body": {"key_prefix": "preferences.ui"},
    },
    {
        "name": "fetch",
        "as": "alice",
        "method": "POST",
        "path": "/v1/fetch",
        "body": {"key": "preferences.ui.theme"},
    },
    {
        "name": "search, lexical",
        "as": "alice",
        "method": "POST",
        "path": "/v1/search",
        "body": {"query": "standup 10am", "channels": ["lexical"], "limit": 5},
    },
    {
        "name": "recall keyed",
        "as": "alice",
        "method": "POST",
        "path": "/v1/recall",
        "body": {"query": "what theme", "key": "preferences.ui.theme"},
    },
    {
        "name": "recall keyed, one namespace",
        "as": "alice",
        "method": "POST",
        "path": "/v1/recall",
        "body": {"query": "what theme", "key": "preferences.ui.theme", "namespace": "room/eng"},
    },
    {
        "name": "history",
        "as": "alice",
        "method": "POST",
        "path": "/v1/history",
        "body": {"namespace": "agent/alice", "key": "preferences.ui.theme"},
    },
    {
        "name": "summarize",
        "as": "alice",
        "method": "POST",
        "path": "/v1/summarize",
        "body": {"depth": 2},
    },
    {"name": "namespaces", "as": "alice", "method": "POST", "path": "/v1/namespaces", "body": {}},
    {"name": "me", "as": "alice", "method": "GET", "path": "/v1/me", "body": None},
    {
        "name": "error 400: bad namespace, with field",
        "as": "alice",
        "method": "POST",
        "path": "/v1/put",
        "body": {"namespace": "agent//alice", "key": "k", "value": 1},
    },
    {
        "name": "error 400: wrong type",
        "as": "alice",
        "method": "POST",
        "path": "/v1/list",
        "body": {"limit": "abc"},
    },
    {
        "name": "error 403: outside the scope",
        "as": "alice",
        "method": "POST",
        "path": "/v1/get",
        "body": {"namespace": "agent/bob", "key": "k"},
    },
    {"name": "error 401: no token", "as": None, "method": "GET", "path": "/v1/me", "body": None},
    {
        "name": "delete",
        "as": "alice",
        "method": "POST",
        "path": "/v1/delete",
        "body": {"namespace": "agent/alice", "key": "preferences.editor.font"},
    },
    {
        "name": "delete again: 404",
        "as": "alice",
        "method": "POST",
        "path": "/v1/delete",
        "body": {"namespace": "agent/alice", "key": "preferences.editor.font"},
    },
]


def _v1_service(path: Path) -> Service:
    """The fixed starting state of the recorded session: agents alice and bob, room eng."""
    svc = Service(path)
    svc.agent("alice")
    svc.agent("bob")
    svc.access.create_room("eng")
    svc.access.add_member("eng", "alice")
    return svc


def _play(svc: Service, session: list[dict[str, Any]]) -> list[dict[str, Any]]:
    norm = Normaliser()
    out = []
    for step in session:
        resp = svc.call(step["method"], step["path"], step["body"], as_=step["as"])
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else resp.text
        out.append({"status": resp.status_code, "response": norm(body)})
    return out


def record_v1(path: Path = DATA) -> None:
    """Record the v1 session into ``tests/data/recorded_v1.json``. Run by hand, never by pytest."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        svc = _v1_service(Path(tmp) / "record.db")
        try:
            played = _play(svc, V1_SESSION)
        finally:
            svc.close()
    exchanges = [{"request": step, **result} for step, result in zip(V1_SESSION, played, strict=True)]
    doc = {
        "about": "memlane HTTP API v1: requests and normalised responses, recorded by "
        "tests/test_service.py record_v1(); replayed by test_recorded_v1_exchanges_replay_unchanged",
        "setup": "agents alice and bob; room eng with member alice; embedder fake",
        "exchanges": exchanges,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def test_recorded_v1_exchanges_replay_unchanged(tmp_path):
    recorded = json.loads(DATA.read_text(encoding="utf-8"))
    exchanges = recorded["exchanges"]
    names = [e["request"]["name"] for e in exchanges]
    for wanted in ("put", "get", "search, lexical", "recall keyed", "list, first page", "error 403: outside the scope"):
        assert wanted in names
    svc = _v1_service(tmp_path / "replay.db")
    try:
        # replay the requests as stored in the file, not as this file's code would write them today
        played = _play(svc, [e["request"] for e in exchanges])
    finally:
        svc.close()
    for exchange, got in zip(exchanges, played, strict=True):
        want = {"status": exchange["status"], "response": exchange["response"]}
        assert got == want, f"v1 exchange {exchange['request']['name']!r} changed"


def test_recorded_v1_file_holds_no_volatile_values():
    text = DATA.read_text(encoding="utf-8")
    assert not re.search(r'"[0-9a-f]{32}"', text)  # ids
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text)  # timestamps
    assert "ml_" not in text  # tokens


# -- additivity ---------------------------------------------------------------------

FUTURE = {"future_option": {"nested": [1, 2]}, "x_client_hint": "ignored", "author": "mallory", "version": 99}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("get", {"namespace": "agent/alice", "key": KEY}),
        ("get_many", {"addresses": [["agent/alice", KEY]]}),
        ("fetch", {"key": KEY}),
        ("list", {"limit": 3}),
        ("namespaces", {}),
        ("summarize", {"depth": 1}),
        ("history", {"namespace": "agent/alice", "key": KEY}),
        ("search", {"query": "orchid", "channels": ["lexical"]}),
        ("recall", {"query": "orchid", "mode": "lexical"}),
        ("recall", {"query": "", "key": KEY}),
    ],
)
def test_unknown_request_fields_are_ignored(world, path, body):
    plain = world.call("POST", f"/v1/{path}", body, as_="alice")
    extended = world.call("POST", f"/v1/{path}", body | FUTURE, as_="alice")
    assert plain.status_code == extended.status_code == 200
    assert Normaliser()(extended.json()) == Normaliser()(plain.json())


def test_unknown_fields_on_writes_are_ignored_and_cannot_spoof(fresh):
    body = {"namespace": NAMESPACE, "key": "k", "value": 1} | FUTURE | {"created_at": "1999-01-01T00:00:00+00:00"}
    resp = fresh.call("POST", "/v1/put", body, as_="alice")
    assert resp.status_code == 200, resp.text
    item = resp.json()
    assert item["author"] == "alice" and item["version"] == 1 and not item["created_at"].startswith("1999")
    assert "future_option" not in item
    resp = fresh.call("POST", "/v1/put_many", {"records": [], "future_option": 1}, as_="alice")
    assert resp.json() == {"items": []}


def test_if_absent_writes_are_409_when_the_address_is_taken(fresh):
    body = {"namespace": NAMESPACE, "key": "lock.owner", "value": "first", "if_absent": True}
    assert fresh.call("POST", "/v1/put", body, as_="alice").status_code == 200
    before = fresh.state()
    error_of(fresh.call("POST", "/v1/put", body | {"value": "second"}, as_="alice"), 409, "conflict")
    records = [
        {"namespace": NAMESPACE, "key": "lock.other", "value": 1},
        {"namespace": NAMESPACE, "key": "lock.owner", "value": "third"},
    ]
    error_of(fresh.call("POST", "/v1/put_many", {"records": records, "if_absent": True}, as_="alice"), 409, "conflict")
    assert fresh.state() == before  # all or nothing
    with memlane.Client(fresh.url, fresh.tokens["alice"]) as client, pytest.raises(memlane.ConflictError):
        client.put(NAMESPACE, "lock.owner", "fourth", if_absent=True)


def test_unknown_fields_inside_put_many_records_are_ignored(fresh):
    record = {"namespace": NAMESPACE, "key": "k", "value": 1, "future_option": True}
    resp = fresh.call("POST", "/v1/put_many", {"records": [record]}, as_="alice")
    assert resp.status_code == 200, resp.text


def test_last_page_has_no_cursor(fresh):
    for key in ("a", "b"):
        fresh.call("POST", "/v1/put", {"namespace": NAMESPACE, "key": key, "value": 1}, as_="alice")
    assert fresh.mem.list(NAMESPACE, limit=2).next_cursor is None  # the library's answer
    page = fresh.call("POST", "/v1/list", {"namespace_prefix": NAMESPACE, "limit": 2}, as_="alice").json()
    assert len(page["items"]) == 2
    assert "next_cursor" not in page


def test_unset_optional_fields_are_omitted(fresh):
    fresh.mem.put(NAMESPACE, "anonymous", "written by the library, no author, no ttl")
    got = fresh.call("POST", "/v1/get", {"namespace": NAMESPACE, "key": "anonymous"}, as_="alice").json()
    assert "author" not in got and "expires_at" not in got
    assert set(got) == {
        "id",
        "namespace",
        "key",
        "value",
        "value_type",
        "text",
        "metadata",
        "created_at",
        "updated_at",
        "version",
    }
    # set ones are present
    put = fresh.call("POST", "/v1/put", {"namespace": NAMESPACE, "key": "t", "value": 1, "ttl": 60}, as_="alice").json()
    assert put["author"] == "alice" and "expires_at" in put
    # in ranked hits, versions, pages and envelope params too
    env = fresh.call("POST", "/v1/recall", {"query": "", "key": "anonymous"}, as_="alice").json()
    assert "author" not in env["hits"][0] and "expires_at" not in env["hits"][0]
    env = fresh.call("POST", "/v1/search", {"query": "library", "channels": ["lexical"]}, as_="alice").json()
    assert "embedding" not in env["params"] and "author" not in env["hits"][0]
    fresh.mem.put(NAMESPACE, "anonymous", "replaced by the library too")
    versions = fresh.call("POST", "/v1/history", {"namespace": NAMESPACE, "key": "anonymous"}, as_="alice").json()
    assert "changed_by" not in versions["versions"][0] and "author" not in versions["versions"][0]
    page = fresh.call("POST", "/v1/list", {"limit": 100}, as_="alice").json()
    assert "next_cursor" not in page


# -- Client.recall_keyed against servers that do and do not honour `key` ----------------


@pytest.fixture(params=[True, False], ids=["keyed-server", "server-ignoring-key"])
def keyed_pair(request, tmp_path) -> Iterator[tuple[Service, bool]]:  # type: ignore[no-untyped-def]
    svc = Service(tmp_path / "keyed.db", keyed_recall=request.param)
    svc.agent("alice")
    svc.agent("bob")
    svc.access.create_room("eng")
    svc.access.add_member("eng", "alice")
    mem = svc.mem
    # the fallback query names other items far better than the keyed ones
    for i in range(30):
        mem.put("agent/alice", f"decoy.{i}", f"deadline friday deadline release deadline {i}")
    mem.put("agent/alice", "project.deadline.old", "deadline friday deadline")  # key prefix, not the key
    mem.put("agent/alice", "project.deadlines", "deadline friday")  # a longer key
    mem.put("agent/alice", "project.deadline", "the 14th")  # oldest of the wanted ones
    time.sleep(0.002)
    mem.put("room/eng", "project.deadline", "the 21st")
    time.sleep(0.002)
    mem.put("agent/alice/archive", "project.deadline", "the 28th")  # newest
    mem.put("agent/bob", "project.deadline", "bob's secret date")  # never alice's
    yield svc, request.param
    svc.close()


def test_recall_keyed_returns_only_that_key_newest_first(keyed_pair):
    svc, honours_key = keyed_pair
    with memlane.Client(svc.url, svc.tokens["alice"]) as client:
        # what a plain recall does on this server: searches when the key is ignored
        plain = client.recall("deadline friday deadline", key="project.deadline")
        assert (plain.params["mode"] == "keyed") is honours_key
        if not honours_key:
            assert plain.hits[0].key != "project.deadline"  # the fallback ranks decoys first
        env = client.recall_keyed("project.deadline", "deadline friday deadline")
        assert [h.key for h in env.hits] == ["project.deadline"] * 3
        assert [h.value for h in env.hits] == ["the 28th", "the 21st", "the 14th"]
        assert ["/".join(h.namespace) for h in env.hits] == ["agent/alice/archive", "room/eng", "agent/alice"]
        stamps = [h.item.updated_at for h in env.hits]
        assert stamps == sorted(stamps, reverse=True)
        assert (env.notes == []) is honours_key

        one = client.recall_keyed("project.deadline", "deadline friday deadline", namespace="room/eng")
        assert [(h.namespace, h.value) for h in one.hits] == [(("room", "eng"), "the 21st")]
        top = client.recall_keyed("project.deadline", "deadline friday deadline", limit=1)
        assert [h.value for h in top.hits] == ["the 28th"]
        # a key nobody stored: nothing, even though the fallback query matches plenty
        assert client.recall_keyed("project.nothing", "deadline friday deadline").hits == []
        with pytest.raises(memlane.ForbiddenError):
            client.recall_keyed("project.deadline", "deadline", namespace="agent/bob")

    with memlane.Client(svc.url, svc.tokens["bob"]) as client:
        env = client.recall_keyed("project.deadline", "deadline friday deadline")
        assert [h.value for h in env.hits] == ["bob's secret date"]


# -- the CLI's service commands -----------------------------------------------------------


def _memlane(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"COLUMNS": "200"}
    done = subprocess.run([str(MEMLANE), *args], capture_output=True, text=True, timeout=60, env=env)
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """A ``memlane serve`` subprocess, its stderr in a file; stop() sends SIGTERM and waits."""

    def __init__(self, db: str, log: Path, *, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.log = log
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(
            [str(MEMLANE), "serve", "--db", db, "--port", str(self.port), "--embedder", "fake"],
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            env=os.environ | {"COLUMNS": "200"},
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30) -> str:
        """Wait until the service answers; returns its stderr so far."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"memlane serve exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                # it answers, and has said where (the line comes once a worker listens)
                if httpx.get(f"{self.url}/v1/operations", timeout=1).status_code == 200:
                    if "memlane serving" in (said := self.log.read_text()):
                        return said
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"memlane serve did not answer: {self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log_file.close()
        return self.proc.returncode


_TOKEN_IN_TEXT = re.compile(r"ml_[A-Za-z0-9_-]{20,}")


def test_cli_agent_room_grant_and_serve(tmp_path):
    db = str(tmp_path / "cli.db")
    made = _memlane("agent", "create", "alice", "--db", db, "--json")
    created = json.loads(made.stdout)
    alice = created["token"]
    assert _TOKEN_IN_TEXT.fullmatch(alice)
    assert created["agent"] == {"name": "alice", "admin": False, "namespace": "agent/alice", "rooms": [], "grants": []}
    assert made.stdout.count(alice) == 1 and alice not in made.stderr
    again = _memlane("agent", "create", "alice", "--db", db, "--json", check=False)
    assert again.returncode in (1, 2) and "already exists" in again.stderr
    assert not _TOKEN_IN_TEXT.search(again.stdout + again.stderr)
    # only a hash is stored
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("cli.db*"))
    assert alice.encode() not in stored and alice[3:].encode() not in stored

    _memlane("room", "create", "eng", "--db", db)
    added = _memlane("room", "add", "eng", "alice", "--db", db)
    assert "alice" in added.stdout
    granted = _memlane("grant", "alice", "project/x", "read", "--db", db)
    assert "read project/x" in granted.stdout
    bad = _memlane("grant", "alice", "project/x", "own", "--db", db, check=False)
    assert bad.returncode == 2 and "mode" in bad.stderr
    missing = _memlane("room", "add", "eng", "nobody", "--db", db, check=False)
    assert missing.returncode == 1 and "nobody" in missing.stderr
    listed = json.loads(_memlane("agent", "list", "--db", db, "--json").stdout)
    assert listed == [
        {
            "name": "alice",
            "admin": False,
            "namespace": "agent/alice",
            "rooms": ["eng"],
            "grants": [{"prefix": "project/x", "mode": "read"}],
        }
    ]
    assert not _TOKEN_IN_TEXT.search(json.dumps(listed))

    first = Served(db, tmp_path / "serve1.log")
    try:
        err = first.wait_ready()
        tokens = _TOKEN_IN_TEXT.findall(err)
        assert len(tokens) == 1, err  # the admin token, printed once
        admin = tokens[0]
        assert f"http://127.0.0.1:{first.port}" in err
        me = httpx.get(f"{first.url}/v1/me", headers={"Authorization": f"Bearer {admin}"}).json()
        assert me["name"] == "admin" and me["admin"] is True
        me = httpx.get(f"{first.url}/v1/me", headers={"Authorization": f"Bearer {alice}"}).json()
        assert me["rooms"] == ["eng"] and me["read"] == ["agent/alice", "room/eng", "project/x"]
        with memlane.Client(first.url, alice) as client:
            client.put("room/eng", "notes.first", "served by memlane serve")
    finally:
        assert first.stop() == 0  # a stop signal ends serving, closes the memory, exits 0
    served_log = first.log.read_text()
    assert alice not in served_log and served_log.count(admin) == 1  # printed once, at creation; never logged
    # the room change made by the CLI while no server runs shows on the next start
    _memlane("room", "remove", "eng", "alice", "--db", db)
    second = Served(db, tmp_path / "serve2.log", port=first.port)
    try:
        err = second.wait_ready()
        assert not _TOKEN_IN_TEXT.search(err), err  # never printed again
        assert f"http://127.0.0.1:{second.port}" in err
        me = httpx.get(f"{second.url}/v1/me", headers={"Authorization": f"Bearer {admin}"}).json()
        assert me["name"] == "admin"
        with memlane.Client(second.url, alice) as client:
            with pytest.raises(memlane.ForbiddenError):
                client.get("room/eng", "notes.first")
        with memlane.Client(second.url, admin) as client:
            assert client.get("room/eng", "notes.first").value == "served by memlane serve"
    finally:
        second.stop()
    assert not list(Path.cwd().glob("memlane.db*"))  # nothing written beside the test


# -- several replicas over one PostgreSQL database ----------------------------------------


@pytest.fixture
def pg_url(postgres) -> Iterator[str]:  # type: ignore[no-untyped-def]
    url = postgres.create()
    yield url
    postgres.drop(url)


def test_replicas_over_one_postgres_database_share_everything(pg_url, tmp_path):
    with memlane.open(pg_url, embedder=None) as mem:
        _, token = Access(mem).create_agent("writer")
    replicas = [Served(pg_url, tmp_path / f"replica{n}.log") for n in range(2)]
    try:
        logs = [r.wait_ready() for r in replicas]
        printed = [t for log in logs for t in _TOKEN_IN_TEXT.findall(log)]
        assert len(printed) == 1, logs  # one admin, created by whichever replica started first
        a, b = (memlane.Client(r.url, token) for r in replicas)
        with a, b:
            # write through one, read through the other
            a.put("agent/writer", "handoff.note", {"from": "a"})
            assert b.get("agent/writer", "handoff.note").value == {"from": "a"}
            b.put("agent/writer", "handoff.note", {"from": "b"}, text="handoff note written through b")
            got = a.get("agent/writer", "handoff.note")
            assert got.value == {"from": "b"} and got.version == 2
            assert [h.value for h in a.recall_keyed("handoff.note", "note").hits] == [{"from": "b"}]
            assert b.search("handoff", channels=["lexical"]).hits[0].key == "handoff.note"

            # concurrent writes through both replicas lose nothing
            per_thread, threads = 40, 4
            acked: list[str] = []
            lock = threading.Lock()

            def writer(n: int) -> None:
                url = replicas[n % 2].url
                with memlane.Client(url, token) as c:
                    for i in range(per_thread):
                        key = f"load.t{n}.i{i}"
                        c.put("agent/writer", key, {"n": n, "i": i})
                        c.put("agent/writer", "shared.counter", {"n": n, "i": i})
                        with lock:
                            acked.append(key)

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(writer, range(threads)))
            assert len(acked) == per_thread * threads
            for client in (a, b):
                items = client.list("agent/writer", key_prefix="load", limit=1000).items
                assert sorted(i.key for i in items) == sorted(acked)
            counter = b.get("agent/writer", "shared.counter")
            history = a.history("agent/writer", "shared.counter")
            # every acknowledged upsert of one address is a version, numbered without gaps
            assert counter.version == per_thread * threads
            assert sorted(v.version for v in history) == list(range(1, per_thread * threads))
    finally:
        for r in replicas:
            r.stop()


def test_concurrent_creation_of_one_agent_name_makes_one_agent(tmp_path):
    """Two replicas starting at once on an empty store both try to create 'admin': exactly one may win.

    Otherwise both tokens work, and rotating the agent's token leaves the loser's one valid.
    """
    for trial in range(10):
        path = str(tmp_path / f"race{trial}.db")
        memlane.open(path, embedder=None).close()
        mems = [memlane.open(path, embedder=None) for _ in range(2)]
        barrier = threading.Barrier(2)
        results: list[Any] = [None, None]

        def create(n: int, mems: list[Any] = mems, results: list[Any] = results, barrier: Any = barrier) -> None:
            barrier.wait()
            try:
                results[n] = Access(mems[n]).create_agent("admin", admin=True)[1]
            except memlane.MemlaneError as e:
                results[n] = e

        workers = [threading.Thread(target=create, args=(n,)) for n in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        try:
            tokens = [r for r in results if isinstance(r, str)]
            assert len(tokens) == 1, f"trial {trial}: {results}"
            refused = next(r for r in results if not isinstance(r, str))
            assert "already exists" in str(refused)
            access = Access(mems[0])
            assert access.authenticate(tokens[0]) is not None
            new = access.rotate_token("admin")
            assert access.authenticate(tokens[0]) is None and access.authenticate(new) is not None
        finally:
            for m in mems:
                m.close()


if __name__ == "__main__":  # pragma: no cover - run by hand
    if sys.argv[1:] == ["--record"]:
        record_v1()
        print(f"recorded {len(V1_SESSION)} exchanges to {DATA}")
    else:
        print("usage: python tests/test_service.py --record", file=sys.stderr)
        sys.exit(2)


def test_facts_layer_over_http_answers_only_from_the_agents_scope(fresh):
    for ns in ("agent/alice", "team/secret"):
        kim = fresh.mem.add_entity(ns, "Kim", kind="person")
        pay = fresh.mem.add_entity(ns, "Payments", kind="project")
        fresh.mem.assert_fact(ns, kim.id, "owns", pay.id, source=f"{ns}-note")
        doc = fresh.mem.add_document(ns, "notes", [f"Kim owns payments ({ns})"])
        fresh.mem.add_claim(ns, f"Kim owns payments ({ns})", chunk=doc.chunk_ids[0], about=[pay.id])
    body = fresh.call("POST", "/v1/combined_context", {"query": "who owns payments"}, as_="alice").json()
    rows = [r for section in body["sections"].values() for r in section]
    assert rows and "team/secret" not in json.dumps(body)
    assert {tuple(f["namespace"]) for f in body["sections"]["facts"]} == {("agent", "alice")}
    resolved = fresh.call("POST", "/v1/resolve_entity", {"name": "kim"}, as_="alice").json()
    assert resolved["status"] == "resolved"
    fact = fresh.call(
        "POST",
        "/v1/assert_fact",
        {
            "namespace": "agent/alice",
            "subject": resolved["sections"]["entities"][0]["entity"]["id"],
            "predicate": "likes",
            "object": {"colour": "green"},
            "valid_from": "2026-01-01",
        },
        as_="alice",
    ).json()
    assert fact["value"] == {"colour": "green"} and fact["valid_from"].startswith("2026-01-01T00:00:00")
    bad = fresh.call("POST", "/v1/facts_context", {"query": "x", "hops": 7}, as_="alice")
    assert error_of(bad, 400, "validation_error")["field"] == "hops"
