"""Mistaken and hostile input at the HTTP and MCP boundaries: a clear 400 naming the field, nothing written.

Each test is a class of input (#12), tried on every operation it reaches:
nesting past the documented depth, required fields left out or misspelt,
strings where booleans or integers belong, bodies that are not JSON objects,
and MCP arguments of the wrong type. After each refused call the store's
export is the same as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import memlane
from memlane.server import create_app
from test_mcp import stdio_session

DEPTH = 100


def nested(depth: int, leaf: Any = "deep") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


class Service:
    """The real app in process, an admin and a member token, and the store's export for before/after."""

    def __init__(self, mem: memlane.Memory) -> None:
        self.mem = mem
        self.app = create_app(mem)
        self.http = TestClient(self.app, raise_server_exceptions=False)
        _, self.admin = self.app.state.access.create_agent("root", admin=True)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None, **headers: str) -> Any:
        headers = {"Authorization": f"Bearer {self.admin}", **headers}
        if raw is not None:
            headers.setdefault("Content-Type", "application/json")
            return self.http.post(f"/v1/{path}", content=raw, headers=headers)
        return self.http.post(f"/v1/{path}", json=body, headers=headers)

    def export(self) -> list[Any]:
        return list(self.mem.export_records()) + [a.name for a in self.app.state.access.agents()]


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    with memlane.open(tmp_path / "b.db", embedder="fake") as mem:
        mem.put("room", "kept", "kept value")
        yield Service(mem)


def refused(svc: Service, path: str, body: Any = None, *, field: str | None, raw: bytes | None = None, **h: str) -> Any:
    before = svc.export()
    resp = svc.post(path, body, raw=raw, **h)
    assert resp.status_code == 400, (path, resp.status_code, resp.text[:300])
    err = resp.json()["error"]
    assert err["type"] == "validation_error" and err.get("field") == field, err
    assert "Traceback" not in resp.text and "pydantic" not in resp.text
    assert svc.export() == before
    return err


# -- nesting ------------------------------------------------------------------------------

WRITES = [
    ("put", lambda v: {"namespace": "room", "key": "k", "value": v}, "value"),
    ("put", lambda v: {"namespace": "room", "key": "k", "value": 1, "metadata": {"m": v}}, "metadata"),
    ("put_many", lambda v: {"records": [{"namespace": "room", "key": "k", "value": v}]}, "value"),
    (
        "put_many",
        lambda v: {"records": [{"namespace": "room", "key": "k", "value": 1, "metadata": {"m": v}}]},
        "metadata",
    ),
]


@pytest.mark.parametrize(("path", "body", "field"), WRITES, ids=[f"{w[0]}-{w[2]}" for w in WRITES])
@pytest.mark.parametrize("depth", [DEPTH + 1, 300, 600, 989, 1200, 100_000])
def test_nesting_past_the_limit_is_refused_before_anything_is_written(svc: Service, path, body, field, depth):
    raw = None
    if depth > 900:  # written out by hand: the encoder of the test itself would give up
        import json

        text = json.dumps(body("@"))
        raw = text.replace('"@"', "[" * depth + "]" * depth).encode()
    err = refused(svc, path, None if raw else body(nested(depth)), field="body" if raw else field, raw=raw)
    assert "nested" in err["message"] or "JSON" in err["message"], err


def test_a_value_at_the_limit_reads_back_on_every_http_read(svc: Service) -> None:
    deepest = nested(DEPTH)
    assert svc.post("put", {"namespace": "room", "key": "deep", "value": deepest, "text": "deepest"}).status_code == 200
    answers = {
        "get": svc.post("get", {"namespace": "room", "key": "deep"}).json()["value"],
        "get_many": svc.post("get_many", {"addresses": [["room", "deep"]]}).json()["items"][0]["value"],
        "list": svc.post("list", {"namespace_prefix": "room", "key_prefix": "deep"}).json()["items"][0]["value"],
        "fetch": svc.post("fetch", {"key": "deep"}).json()["items"][0]["value"],
        "search": svc.post("search", {"query": "deepest"}).json()["hits"][0]["value"],
        "recall": svc.post("recall", {"key": "deep"}).json()["hits"][0]["value"],
    }
    assert answers == dict.fromkeys(answers, deepest)
    assert svc.http.get("/v1/export", headers={"Authorization": f"Bearer {svc.admin}"}).status_code == 200


def test_a_fact_object_past_the_limit_is_refused(svc: Service) -> None:
    kim = svc.post("add_entity", {"namespace": "room", "name": "Kim"}).json()["id"]
    body = {"namespace": "room", "subject": kim, "predicate": "holds"}
    refused(svc, "assert_fact", {**body, "object": nested(DEPTH + 1)}, field="object")
    assert svc.post("assert_fact", {**body, "object": nested(DEPTH)}).status_code == 200


def test_mcp_reads_back_the_deepest_value_and_refuses_one_more(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            ok = await s.call_tool("memory_set", {"namespace": "a", "key": "deep", "value": nested(DEPTH)})
            assert not ok.is_error, ok.content
            got = await s.call_tool("memory_get", {"namespace": "a", "key": "deep"})
            assert not got.is_error and got.structured_content["item"]["value"] == nested(DEPTH)
            bad = await s.call_tool("memory_set", {"namespace": "a", "key": "deeper", "value": nested(DEPTH + 1)})
            assert bad.is_error and bad.structured_content["error"]["field"] == "value"
            listed = await s.call_tool("memory_list", {"namespace_prefix": "a"})
            assert [i["key"] for i in listed.structured_content["items"]] == ["deep"]

    anyio.run(main)


# -- required, strict, JSON -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [{"namespace": "room", "key": "kept"}, {"namespace": "room", "key": "kept", "valeu": "typo"}],
    ids=["no-value", "misspelt-value"],
)
def test_a_put_without_value_is_refused_and_keeps_the_stored_value(svc: Service, body) -> None:
    err = refused(svc, "put", body, field="value")
    assert err["message"] == "is required"
    assert svc.mem.get("room", "kept").value == "kept value"


def test_null_is_still_a_value_to_store(svc: Service) -> None:
    assert svc.post("put", {"namespace": "room", "key": "nothing", "value": None}).status_code == 200
    assert svc.mem.get("room", "nothing").value is None


STRICT = [
    ("admin/agents", {"name": "eve", "admin": "yes"}, "admin"),
    ("admin/agents", {"name": "eve", "admin": 1}, "admin"),
    ("admin/agents", {"name": 7}, "name"),
    ("put", {"namespace": "room", "key": "k", "value": 1, "if_absent": "true"}, "if_absent"),
    ("put_many", {"records": [], "if_absent": 0}, "if_absent"),
    ("admin/rooms", {"name": ["r"]}, "name"),
]


@pytest.mark.parametrize(("path", "body", "field"), STRICT, ids=[f"{s[2]}-{n}" for n, s in enumerate(STRICT)])
def test_booleans_and_names_are_strict(svc: Service, path, body, field) -> None:
    err = refused(svc, path, body, field=field)
    assert "got" in err["message"], err


@pytest.mark.parametrize(
    ("raw", "headers"),
    [(b"", {}), (b"namespace=room", {"Content-Type": "text/plain"}), (b"[1, 2]", {}), (b'"text"', {})],
    ids=["empty", "text-plain", "list", "string"],
)
def test_a_body_that_is_not_a_json_object_says_how_to_send_one(svc: Service, raw, headers) -> None:
    err = refused(svc, "put", raw=raw, field="body", **headers)
    assert "Content-Type: application/json" in err["message"], err


def test_mcp_arguments_of_the_wrong_type_name_the_field_in_plain_words(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            for tool, args, field in [
                ("memory_set", {"namespace": "a", "key": "k", "value": 1, "ttl": "soon"}, "ttl"),
                ("memory_list", {"limit": "ten"}, "limit"),
                ("memory_recall", {"query": "x", "mode": "psychic"}, "mode"),
                ("memory_search", {"query": "x", "channels": ["telepathy"]}, "channels"),
                ("memory_get", {"namespace": "a"}, "key"),
            ]:
                result = await s.call_tool(tool, args)
                assert result.is_error, (tool, result.content)
                error = result.structured_content["error"]
                assert error["type"] == "validation_error" and error["field"] == field, (tool, error)
                text = result.content[0].text
                assert text.startswith(f"Invalid input: {field}: ") and "http" not in text, text
            assert (await s.call_tool("memory_list", {})).structured_content["items"] == []

    anyio.run(main)


def test_the_services_body_limit_reaches_the_mcp_endpoint(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "small.db", embedder=None) as mem:
        app = create_app(mem, max_body_bytes=2000)
        assert app.state.mcp._max_body_bytes == 2000
        http = TestClient(app, raise_server_exceptions=False)
        _, token = app.state.access.create_agent("a")
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_set"}}
        call["params"]["arguments"] = {"namespace": "agent/a", "key": "k", "value": "x" * 3000}
        answer = http.post("/mcp", json=call, headers=headers)
        assert answer.status_code == 413, answer.text
        assert mem.get("agent/a", "k") is None
