"""The routes built from the operations table, the wire's error words, and the Client's own logic.

Guards ``src/memlane/values/operations.py`` (each table entry as built, the wire's
adjustments to a body), ``src/memlane/server/routes.py`` (the 404 that names
the address), ``src/memlane/server/app.py`` (the OpenAPI document: the bearer
scheme, the error answers, no never-given 422), ``src/memlane/values/wire.py`` (how a
pydantic refusal reads in memlane's words) and ``src/memlane/client.py``
(retention rules and keyed recall, whose fallback for servers that ignore
``key`` runs in the caller's process). Everything runs against a real service
on loopback or the real app in process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import memlane
from memlane.core.access import Access
from memlane.server import create_app
from memlane.values import errors, operations, wire
from memlane.values.retention import RetentionRule

sys.path.insert(0, str(Path(__file__).parent))
from live import LiveServer  # noqa: E402

NS = "agent/alice"
KEY = "shared.key"


class Service:
    """One memory behind a live server: alice (a plain agent) and root (admin), each with a Client."""

    def __init__(self, path: Path) -> None:
        self.mem = memlane.open(str(path), embedder="fake")
        access = Access(self.mem)
        self.tokens = {"root": access.create_agent("root", admin=True)[1], "alice": access.create_agent("alice")[1]}
        self.access = access
        self.server = LiveServer(create_app(self.mem))
        self.http = httpx.Client(base_url=self.server.url, timeout=30)
        self.alice = memlane.Client(self.server.url, self.tokens["alice"])
        self.root = memlane.Client(self.server.url, self.tokens["root"])

    def post(self, path: str, body: Any, *, as_: str = "alice") -> httpx.Response:
        return self.http.post(f"/v1/{path}", json=body, headers={"Authorization": f"Bearer {self.tokens[as_]}"})

    def close(self) -> None:
        for closing in (self.alice, self.root, self.http):
            closing.close()
        self.server.stop()
        self.mem.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    s = Service(tmp_path_factory.mktemp("routes") / "routes.db")
    # twelve items under one key (over recall's default limit of 10), each newer than the one before
    for i in range(12):
        s.mem.put(f"{NS}/n{i:02}", KEY, f"shared value {i}")
    s.mem.put(NS, "other.key", "shared value elsewhere")
    yield s
    s.close()


# -- the operations table --------------------------------------------------------------------------


def test_a_table_entry_keeps_its_name_and_freezes_its_mappings() -> None:
    op = operations._op("put", "item", "Write one value.", optional={"key": None}, aliases={"old": "key"})
    assert (op.name, op.result, op.summary, op.route) == ("put", "item", "Write one value.", "put")
    assert isinstance(op.optional, MappingProxyType) and dict(op.optional) == {"key": None}
    assert isinstance(op.aliases, MappingProxyType) and dict(op.aliases) == {"old": "key"}
    bare = operations._op("get", "found", "Look up.")
    assert bare.optional == {} and bare.aliases == {} and bare.path == "" and bare.admin is False
    with pytest.raises(TypeError):
        op.optional["key"] = 1  # type: ignore[index]
    assert all(isinstance(o.optional, MappingProxyType) for o in operations.OPERATIONS)


def test_null_channels_on_the_wire_means_both_channels(service: Service) -> None:
    answer = service.post("search", {"query": "shared", "channels": None})
    assert answer.status_code == 200, answer.text
    assert answer.json()["params"]["channels"] == ["lexical", "vector"]
    refused = service.post("search", {"query": "shared", "channels": []}).json()["error"]
    assert refused["type"] == "validation_error" and refused["field"] == "channels"


# -- routes: a missing address is a 404 naming it ----------------------------------------------------


@pytest.mark.parametrize("path", ["get", "delete"])
def test_a_missing_address_is_a_404_that_names_namespace_and_key(service: Service, path: str) -> None:
    answer = service.post(path, {"namespace": NS, "key": "no.such.key"})
    assert answer.status_code == 404
    assert answer.json() == {"error": {"type": "not_found", "message": f"no item at {NS!r} key 'no.such.key'"}}
    with pytest.raises(errors.NotFoundError) as e:
        service.alice._send(path, {"namespace": NS, "key": "no.such.key"})
    assert "key 'no.such.key'" in str(e.value)


# -- OpenAPI ---------------------------------------------------------------------------------------


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_openapi_declares_the_bearer_scheme_the_error_answers_and_no_422(service: Service) -> None:
    doc = TestClient(create_app(service.mem)).get("/openapi.json").json()
    assert doc["info"] == {
        "title": "memlane",
        "version": "v1",
        "description": "Durable memory for AI agents: exact keyed lookup and confirmed hybrid search. "
        "Every /v1 operation needs `Authorization: Bearer <token>` (Authorize, above).",
    }
    components = doc["components"]
    assert components["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer", "description": "An agent's token (memlane agent create)."}
    }
    schemas = components["schemas"]
    assert "ErrorOut" in schemas and "$defs" not in schemas["ErrorOut"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    for ref in _refs(doc):  # every reference resolves, the error shape's nested models too
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    for path, methods in doc["paths"].items():
        for operation in methods.values():
            assert "422" not in operation["responses"], path
            if path.startswith("/v1/") and path != "/v1/health":
                assert operation["security"] == [{"bearer": []}], path
                for status in ("400", "401", "403", "404", "409", "413", "429", "503"):
                    ref = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/ErrorOut", (path, status)
            else:
                assert "security" not in operation, path


# -- the wire: pydantic's refusals in memlane's words --------------------------------------------------


@pytest.mark.parametrize(
    ("problem", "field", "message"),
    [
        ({"type": "missing", "loc": ("body", "key"), "input": {}}, "key", "is required"),
        ({"type": "extra_forbidden", "loc": ("body", "nope"), "input": 1}, "nope", "is not a known field"),
        (
            {"type": "bool_parsing", "loc": ("body", "if_absent"), "input": "yes"},
            "if_absent",
            "must be true or false, got 'yes'",
        ),
        (
            {"type": "literal_error", "loc": ("body", "mode"), "input": "x", "ctx": {"expected": "'read' or 'write'"}},
            "mode",
            "must be one of 'read' or 'write', got 'x'",
        ),
        ({"type": "literal_error", "loc": ("body", "mode"), "input": "x"}, "mode", "must be one of, got 'x'"),
        (
            {"type": "too_long", "loc": ("body", "records"), "input": [], "ctx": {"max_length": 3}},
            "records",
            "is too long (limit 3), got []",
        ),
        (
            {"type": "too_short", "loc": ("body", "name"), "input": "", "ctx": {"min_length": 1}},
            "name",
            "is too short (limit 1), got ''",
        ),
        (
            {"type": "greater_than_equal", "loc": ("body", "limit"), "input": 0, "ctx": {"ge": 1}},
            "limit",
            "is too small (limit 1), got 0",
        ),
        (
            {"type": "less_than_equal", "loc": ("body", "limit"), "input": 9, "ctx": {"le": 5}},
            "limit",
            "is too large (limit 5), got 9",
        ),
        ({"type": "less_than_equal", "loc": ("body", "limit"), "input": 9}, "limit", "is too large, got 9"),
        (
            {"type": "int_type", "loc": ("body", "records", 2, "ttl"), "input": "x"},
            "records",
            "must be an integer, got 'x' (at records.2.ttl)",
        ),
        (
            {"type": "value_error", "loc": ("body", "when"), "msg": "Value error, Bad time.", "input": 1},
            "when",
            "value error, Bad time, got 1",
        ),
        (
            {"type": "odd", "loc": ("body", "when"), "input": "a" * 100},
            "when",
            "is not valid, got '" + "a" * 56 + "...",
        ),
        ({"type": "missing", "loc": ("body",)}, "body", f"is missing or not a JSON object; {wire.NOT_JSON}"),
    ],
)
def test_a_pydantic_refusal_reads_in_memlanes_words(problem: dict[str, Any], field: str, message: str) -> None:
    e = wire.refusal([problem])
    assert e.field == field and str(e) == f"{field}: {message}"


def test_a_refusal_outside_a_body_keeps_its_location_and_an_empty_one_names_the_request() -> None:
    e = wire.refusal([{"type": "missing", "loc": ("limit",)}], body=False)
    assert (e.field, str(e)) == ("limit", "limit: is required")
    e = wire.refusal([{"type": "int_type", "loc": ("body",), "input": "x"}], body=False)
    assert e.field == "body" and str(e) == "body: must be an integer, got 'x'"
    e = wire.refusal([], body=False)
    assert e.field == "request" and str(e) == "request: is not valid"


# -- the Client: retention rules, keyed recall ------------------------------------------------------


def test_retention_rules_round_trip_through_the_client(service: Service) -> None:
    root = service.root
    made = root.set_retention("", keep_versions=3)
    assert made.prefix == () and made.keep_versions == 3 and made.keep_days is None
    under = root.set_retention(("agent", "alice"), keep_days=1.5)
    assert under.prefix == ("agent", "alice") and under.keep_days == 1.5 and under.keep_versions is None
    rules = root.retention_rules()
    assert rules == service.mem.retention_rules()
    assert all(isinstance(r, RetentionRule) and isinstance(r.updated_at, datetime) for r in rules)
    assert [r.prefix for r in rules] == [(), ("agent", "alice")]
    assert all(r.updated_at.tzinfo is not None and r.updated_at <= datetime.now(UTC) for r in rules)
    assert root.clear_retention("agent/alice") is True and root.clear_retention("agent/alice") is False
    assert root.clear_retention(()) is True and root.retention_rules() == []
    with pytest.raises(errors.ForbiddenError):
        service.alice.retention_rules()


def _keys(env: Any) -> list[tuple[tuple[str, ...], str]]:
    return [(h.namespace, h.key) for h in env.hits]


def test_keyed_recall_answers_the_exact_key_with_the_default_limit_of_ten(service: Service) -> None:
    got = service.alice.recall_keyed(KEY, "shared value")
    wanted = service.access.view(service.access.agent("alice")).recall("shared value", key=KEY)
    assert _keys(got) == _keys(wanted) and len(got.hits) == 10
    assert all(h.key == KEY for h in got.hits) and got.params["mode"] == "keyed"
    assert not any("ignored" in n for n in got.notes)
    assert len(service.alice.recall_keyed(KEY, "shared value", limit=12).hits) == 12
    assert _keys(service.alice.recall_keyed(KEY, "x", namespace=f"{NS}/n03")) == [(("agent", "alice", "n03"), KEY)]


def test_keyed_recall_stays_exact_against_a_server_that_ignores_key(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = service.alice
    searched = type(client).recall

    def old_server(query: str, *, key: Any = None, **kw: Any) -> Any:  # searches instead, as servers before 0.3
        return searched(client, query, **kw)

    monkeypatch.setattr(client, "recall", old_server)
    got = client.recall_keyed(KEY, "elsewhere")
    assert got.notes[-1] == "the server ignored 'key'; kept only hits with that key and fetched it exactly"
    assert all(h.key == KEY for h in got.hits) and len(got.hits) == 10
    newest = [i.namespace for i in service.mem.fetch(KEY, limit=12)]
    assert [h.namespace for h in got.hits] == newest[:10]  # newest first, whatever the search ranked
    assert len(client.recall_keyed(KEY, "shared", limit=3).hits) == 3
    only = client.recall_keyed(KEY, "shared", namespace=("agent", "alice", "n05"))
    assert _keys(only) == [(("agent", "alice", "n05"), KEY)]


# -- a refused query carries its reason and part both ways -----------------------------------------


def test_a_refused_query_answers_its_reason_and_part_and_the_client_raises_them(service: Service) -> None:
    answer = service.post("query", {"sql": "SELECT * FROM nope"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "query_refused" and error["reason"] == "unknown_view" and error["part"] == "nope"
    assert error["message"].startswith("'nope' is not a view of the query space")
    with pytest.raises(errors.QueryRefused) as e:
        service.alice.query("SELECT * FROM nope")
    assert (e.value.reason, e.value.part, str(e.value)) == ("unknown_view", "nope", error["message"])


@pytest.mark.parametrize("header", [None, "Basic abc", "Bearer", "Bearer not-a-token", "Token x"])
def test_a_request_without_a_valid_token_is_a_401_that_says_how_to_send_one(service: Service, header: Any) -> None:
    headers = {} if header is None else {"Authorization": header}
    answer = service.http.post("/v1/get", json={"namespace": NS, "key": KEY}, headers=headers)
    assert answer.status_code == 401
    assert answer.json() == {
        "error": {"type": "unauthorized", "message": "a valid token is required: send 'Authorization: Bearer <token>'"}
    }
    # the app built here too: mutmut reruns a mutant of create_app only on tests during which it ran
    own = TestClient(create_app(service.mem)).post("/v1/get", json={"namespace": NS, "key": KEY}, headers=headers)
    assert own.status_code == 401 and own.json() == answer.json()
    with pytest.raises(errors.UnauthorizedError) as e:
        memlane.Client(service.server.url, "not-a-token").get(NS, KEY)
    assert str(e.value).startswith("a valid token is required: send 'Authorization: Bearer <token>'")


def test_a_server_made_without_keyed_recall_searches_and_the_client_still_answers_the_key(service: Service) -> None:
    old = LiveServer(create_app(service.mem, keyed_recall=False))
    try:
        answer = httpx.post(
            f"{old.url}/v1/recall",
            json={"query": "elsewhere", "key": KEY},
            headers={"Authorization": f"Bearer {service.tokens['alice']}"},
            timeout=30,
        ).json()
        assert answer["params"]["mode"] != "keyed"  # the key was dropped before the core saw it
        with memlane.Client(old.url, service.tokens["alice"]) as client:
            got = client.recall_keyed(KEY, "elsewhere", limit=4)
        assert got.notes[-1] == "the server ignored 'key'; kept only hits with that key and fetched it exactly"
        assert [h.namespace for h in got.hits] == [i.namespace for i in service.mem.fetch(KEY, limit=4)]
    finally:
        old.stop()


def test_the_old_server_fallback_breaks_time_ties_by_namespace_text(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = service.alice
    searched = type(client).recall
    monkeypatch.setattr(client, "recall", lambda query, *, key=None, **kw: searched(client, query, **kw))
    # one put_many: one updated_at, so only the namespace orders them ("t/z" before "t0": '/' < '0')
    service.mem.put_many([{"namespace": f"{NS}/tie/{ns}", "key": "tied", "value": "tied"} for ns in ("t0", "t/z")])
    got = client.recall_keyed("tied", "nothing matches this", namespace=f"{NS}/tie")
    assert [h.namespace[-2:] for h in got.hits] == [("t", "z"), ("tie", "t0")]
