"""The depth and size budget through the service's surfaces: raw HTTP bodies and the MCP tools (#27).

``tests/conformance/test_budget.py`` holds every budget at and past its
limit through Python and the Client. Here the same inputs arrive as a hostile
agent would send them: raw JSON over ``POST /v1/<operation>`` (where JSON
escapes can carry a lone surrogate, which no Python caller types by accident)
and MCP tool calls over the service's ``/mcp``, on both backends. Each input
at its limit is stored and matched; each past it is a 400 or a tool error
naming the field, never a 5xx, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import memlane
from memlane.server import create_app
from test_boundary import DEPTH, nested
from test_mcp import call, fail, http_session, run


class Surface:
    """A service over a fresh store of one backend: raw HTTP in process, and MCP over loopback."""

    def __init__(self, mem: memlane.Memory) -> None:
        from live import LiveServer
        from memlane.core.access import Access

        self.mem = mem
        self.app = create_app(mem)
        self.http = TestClient(self.app, raise_server_exceptions=False)
        self.access: Access = self.app.state.access
        _, self.token = self.access.create_agent("root", admin=True)
        self.tokens = {"root": self.token}
        self.server = LiveServer(self.app)
        self.url = self.server.url

    def post(self, path: str, body: Any = None, *, raw: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        content = raw.encode() if raw is not None else json.dumps(body).encode()
        return self.http.post(f"/v1/{path}", content=content, headers=headers)

    def export(self) -> list[Any]:
        return list(self.mem.export_records())


@pytest.fixture
def surface(store_url: str) -> Iterator[Surface]:
    with memlane.open(store_url, embedder="fake", indexing="sync") as mem:
        s = Surface(mem)
        yield s
        s.server.stop()


def refused(surface: Surface, path: str, field: str, *, body: Any = None, raw: str | None = None) -> dict[str, Any]:
    before = surface.export()
    resp = surface.post(path, body, raw=raw)
    assert resp.status_code == 400, (path, resp.status_code, resp.text[:300])
    err = resp.json()["error"]
    assert err.get("field") == field, err
    assert "Traceback" not in resp.text
    assert surface.export() == before
    return err


# a where whose operand holds what no driver can bind, written as the JSON escapes a client can send
RAW_WHERE = {
    "lone surrogate in a value": '{"where": {"v": "\\ud800"}}',
    "lone surrogate in an object key": '{"where": {"v": {"$eq": {"\\udfff": 1}}}}',
    "lone surrogate in a field path": '{"where": {"\\ud83d": 1}}',
    "quote in an object key": '{"where": {"v": {"$eq": {"a\\"b": 1}}}}',
    "newline in an object key": '{"where": {"v": {"$eq": {"a\\nb": 1}}}}',
    "NUL in a value": '{"where": {"v": ["a\\u0000"]}}',
}


@pytest.mark.parametrize("raw", RAW_WHERE.values(), ids=RAW_WHERE.keys())
def test_raw_where_bodies_no_layer_can_bind_are_refused_naming_where(surface: Surface, raw: str) -> None:
    surface.mem.put("budget", "k", {"v": 1})
    refused(surface, "select", "where", raw=raw)


def test_raw_http_select_matches_at_the_depth_budget_and_refuses_past_it(surface: Surface) -> None:
    deepest = nested(DEPTH - 1)
    assert surface.post("put", {"namespace": "budget", "key": "deep", "value": {"v": deepest}}).status_code == 200
    found = surface.post("select", {"namespace_prefix": "budget", "where": {"v": {"$eq": deepest}}})
    assert found.status_code == 200 and [i["key"] for i in found.json()["items"]] == ["deep"]
    err = refused(surface, "select", "where", body={"where": {"v": nested(DEPTH + 1)}})
    assert f"nested more than {DEPTH} levels" in err["message"]
    # written by hand: deeper than the test's own encoder follows; the service's JSON decoder gives up
    text = '{"where": {"v": ' + "[" * 5000 + "]" * 5000 + "}}"
    assert refused(surface, "select", "body", raw=text)["type"] == "validation_error"
    wide = list(range(999))
    surface.post("put", {"namespace": "budget", "key": "wide", "value": {"v": wide}})
    found = surface.post("select", {"namespace_prefix": "budget", "where": {"v": wide}})
    assert [i["key"] for i in found.json()["items"]] == ["wide"]
    refused(surface, "select", "where", body={"where": {"v": [*wide, 1]}})


def test_raw_query_params_no_backend_can_bind_are_refused_naming_params(surface: Surface) -> None:
    surface.mem.put("budget", "k", 1)
    for params in ('["\\ud800"]', '["a\\u0000"]', "[100000000000000000000]", "[-9223372036854775809]"):
        raw = '{"sql": "SELECT ? AS x", "params": ' + params + "}"
        refused(surface, "query", "params", raw=raw)
        refused(surface, "query/explain", "params", raw=raw)
    ok = surface.post("query", {"sql": "SELECT ? AS x", "params": [2**63 - 1]})
    assert ok.status_code == 200 and ok.json()["rows"] == [[2**63 - 1]]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("query/run", {"name": "\ud800"}),
        ("query/delete", {"name": "\ud800"}),
        ("neighbours", {"chunk_id": "\ud800"}),
        ("supersede_claim", {"claim_id": "\ud800"}),
    ],
    ids=["run_saved_query", "delete_saved_query", "neighbours", "supersede_claim"],
)
def test_names_and_ids_no_record_can_have_are_answered_without_a_5xx(surface: Surface, path: str, body: Any) -> None:
    raw = json.dumps(body)  # ensure_ascii: the lone surrogate travels as its escape
    before = surface.export()
    resp = surface.post(path, raw=raw)
    assert resp.status_code in (200, 404), (path, resp.status_code, resp.text[:300])
    assert surface.export() == before


def test_mcp_tools_carry_the_budget_at_its_limit_and_refuse_past_it(surface: Surface) -> None:
    async def main() -> None:
        async with http_session(surface, "root") as s:  # type: ignore[arg-type]
            deepest = nested(DEPTH)
            stored = await call(s, "memory_set", namespace="budget", key="deep", value=deepest)
            assert stored["item"]["value"] == deepest
            assert (await call(s, "memory_get", namespace="budget", key="deep"))["item"]["value"] == deepest
            _, err = await fail(s, "memory_set", namespace="budget", key="deeper", value=nested(DEPTH + 1))
            assert err["field"] == "value"
            kim = (await call(s, "memory_add_entity", namespace="budget", name="Kim"))["id"]
            fact = await call(
                s, "memory_assert_fact", namespace="budget", subject=kim, predicate="holds", object=deepest
            )
            assert fact["value"] == deepest
            _, err = await fail(
                s, "memory_assert_fact", namespace="budget", subject=kim, predicate="holds", object=nested(DEPTH + 1)
            )
            assert err["field"] == "object"
            # the query space: the deepest value read back through SQL, parameters at and past their limit
            rows = (await call(s, "memory_query", sql="SELECT value FROM items WHERE key = 'deep'"))["rows"]
            assert json.loads(rows[0][0]) == deepest
            many = "SELECT " + " + ".join(["?"] * 1000) + " AS total"
            assert (await call(s, "memory_query", sql=many, params=[1] * 1000))["rows"] == [[1000]]
            _, err = await fail(s, "memory_query", sql=many + " + ?", params=[1] * 1001)
            assert err["type"] == "query_refused"
            _, err = await fail(s, "memory_query", sql="SELECT ?", params=["a\x00"])  # the SDK sends no lone surrogate
            assert err["field"] == "params"
            _, err = await fail(s, "memory_query", sql="SELECT ?", params=[10**20])
            assert err["field"] == "params"
            # a search query at its length, and one past it
            assert (await call(s, "memory_search", query="deep " * 819))["hits"] is not None
            _, err = await fail(s, "memory_search", query="x" * 4097)
            assert err["field"] == "query"

    run(main)
    assert [i.key for i in surface.mem.list("budget").items] == ["deep"]


BAD_WHERE = [
    {"v": {"$like": "a%"}},
    {".".join(["a"] * 17): 1},
    {"v": {"$gt": [1]}},
    {"author": 3},
    {"created_at": {"$gte": "last tuesday"}},
    {"updated_at.x": "-7d"},
]


def test_a_bad_filter_on_search_recall_and_select_is_a_400_or_a_tool_error_naming_where(surface: Surface) -> None:
    surface.mem.put("budget", "k", {"text": "rocket", "v": 1})
    for where in BAD_WHERE:
        for path in ("search", "recall", "select"):
            refused(surface, path, "where", body={"query": "rocket", "where": where})
    found = surface.post("search", {"query": "rocket", "where": {"v": 1, "created_at": {"$lte": "+1d"}}})
    assert found.status_code == 200 and [h["key"] for h in found.json()["hits"]] == ["k"]

    async def main() -> None:
        async with http_session(surface, "root") as s:  # type: ignore[arg-type]
            hits = (await call(s, "memory_search", query="rocket", where={"v": 1}))["hits"]
            assert [h["key"] for h in hits] == ["k"]
            assert (await call(s, "memory_recall", query="rocket", where={"v": 2}))["hits"] == []
            for where in BAD_WHERE:
                for tool in ("memory_search", "memory_recall"):
                    _, err = await fail(s, tool, query="rocket", where=where)
                    assert err["field"] == "where", (tool, where, err)

    run(main)
