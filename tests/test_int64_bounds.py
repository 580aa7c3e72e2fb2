"""Numbers at the edge of 64 bits over HTTP (#35): a 400 naming the field, never a 5xx, nothing written.

A JSON number has no size limit and Python's ints none either, but the
stores bind 64-bit integers: ``2**63`` is the first one no driver binds,
``2**63 - 1`` the last one it does. Every numeric parameter of every
operation is sent both (and their negatives) as raw JSON over ``POST
/v1/<operation>``, on SQLite and PostgreSQL: an out-of-range one is refused
naming its field; a query's ``params`` within 64 bits are bound exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import memlane
from memlane.server import create_app

EDGES = [2**63, 2**63 - 1, 2**64, -(2**63), -(2**63) - 1]

# (operation path, a body valid but for the parameter, the parameter)
NUMERIC = [
    ("put", {"namespace": "room", "key": "k2", "value": 1}, "ttl"),
    ("add_conversation", {"namespace": "chat", "messages": [{"role": "user", "text": "hi"}]}, "window"),
    ("fetch", {"key": "kept"}, "limit"),
    ("list", {}, "limit"),
    ("namespaces", {}, "max_depth"),
    ("select", {}, "limit"),
    ("select", {}, "offset"),
    ("summarize", {}, "depth"),
    ("search", {"query": "kept"}, "limit"),
    ("search", {"query": "kept"}, "candidate_k"),
    ("search", {"query": "kept"}, "rrf_k"),
    ("search", {"query": "kept"}, "min_score"),
    ("recall", {"query": "kept"}, "limit"),
    ("recall", {"query": "kept"}, "min_score"),
    ("facts_context", {"query": "kept"}, "hops"),
    ("facts_context", {"query": "kept"}, "limit"),
    ("claims_and_sources_context", {"query": "kept"}, "k"),
    ("claims_and_sources_context", {"query": "kept"}, "candidate_k"),
    ("combined_context", {"query": "kept"}, "hops"),
    ("combined_context", {"query": "kept"}, "k"),
    ("traverse", {"entity_ids": ["ent_01a24ef3e8e4a9083121724cd023fcd8"]}, "hops"),
    ("neighbours", {"chunk_id": "c1"}, "before"),
    ("neighbours", {"chunk_id": "c1"}, "after"),
    ("set_retention", {"prefix": "room"}, "keep_versions"),
    ("set_retention", {"prefix": "room"}, "keep_days"),
    ("add_document", {"namespace": "docs", "title": "t", "text": "some text"}, "chunk_chars"),
    ("query", {"sql": "SELECT 1"}, "max_rows"),
    ("query", {"sql": "SELECT 1"}, "timeout_ms"),
]
# a float parameter takes any 64-bit-sized number as a float: these may answer 200 at 2**63 - 1 (as 9.2e18)
FLOATS = {"min_score"}


class Service:
    def __init__(self, mem: memlane.Memory) -> None:
        self.mem = mem
        self.app = create_app(mem)
        self.http = TestClient(self.app, raise_server_exceptions=False)
        _, self.admin = self.app.state.access.create_agent("root", admin=True)

    def post(self, path: str, raw: str) -> Any:
        headers = {"Authorization": f"Bearer {self.admin}", "Content-Type": "application/json"}
        return self.http.post(f"/v1/{path}", content=raw.encode(), headers=headers)

    def export(self) -> list[Any]:
        return list(self.mem.export_records()) + [r.prefix for r in self.mem.retention_rules()]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def svc(store_url: str) -> Iterator[Service]:
    with memlane.open(store_url, embedder="fake", indexing="sync") as mem:
        mem.put("room", "kept", "kept value")
        yield Service(mem)


@pytest.fixture
def sqlite_svc(tmp_path: Any) -> Iterator[Service]:
    """The parameters' checks are the core's, before any store: one backend is enough for them."""
    with memlane.open(str(tmp_path / "m.db"), embedder="fake", indexing="sync") as mem:
        mem.put("room", "kept", "kept value")
        yield Service(mem)


def _raw(body: dict[str, Any], field: str, number: int) -> str:
    import json

    # written out by hand: the number exactly as a client sends it, never through a float
    return json.dumps(body)[:-1] + ("," if body else "") + f' "{field}": {number}}}'


@pytest.mark.parametrize(("path", "body", "field"), NUMERIC, ids=[f"{p}-{f}" for p, _, f in NUMERIC])
def test_a_number_past_64_bits_is_a_400_naming_its_field(sqlite_svc: Service, path: str, body: Any, field: str) -> None:
    svc = sqlite_svc
    for number in EDGES:
        before = svc.export()
        resp = svc.post(path, _raw(body, field, number))
        assert resp.status_code < 500, (path, field, number, resp.status_code, resp.text[:300])
        if field in FLOATS and resp.status_code == 200:
            continue
        assert resp.status_code == 400, (path, field, number, resp.status_code, resp.text[:300])
        err = resp.json()["error"]
        assert err["type"] == "validation_error" and err.get("field") == field, (number, err)
        assert "Traceback" not in resp.text
        assert svc.export() == before


@pytest.mark.parametrize("path", ["query", "query/explain"])
def test_query_params_bind_every_64_bit_integer_and_refuse_the_next(svc: Service, path: str) -> None:
    for number in (2**63, -(2**63) - 1, 2**64, -(2**64)):
        resp = svc.post(path, '{"sql": "SELECT ? AS x", "params": [' + str(number) + "]}")
        assert resp.status_code == 400, (number, resp.status_code, resp.text[:300])
        err = resp.json()["error"]
        assert err.get("field") == "params" and "64 bits" in err["message"], err
    if path == "query":
        for number in (2**63 - 1, -(2**63), 0, -1):
            resp = svc.post(path, '{"sql": "SELECT ? AS x", "params": [' + str(number) + "]}")
            assert resp.status_code == 200 and resp.json()["rows"] == [[number]], (number, resp.text[:300])
        named = svc.post(path, '{"sql": "SELECT :n AS x", "params": {"n": 9223372036854775808}}')
        assert named.status_code == 400 and named.json()["error"]["field"] == "params"


def test_a_where_operand_past_64_bits_never_fails_the_select(svc: Service) -> None:
    svc.mem.put("nums", "big", {"v": 2**63 - 1})
    svc.mem.put("nums", "small", {"v": 1})
    for number in EDGES:
        for where in (f'{{"v": {number}}}', f'{{"v": {{"$gt": {number}}}}}', f'{{"v": {{"$lt": {number}}}}}'):
            resp = svc.post("select", '{"namespace_prefix": "nums", "where": ' + where + "}")
            assert resp.status_code in (200, 400), (where, resp.status_code, resp.text[:300])
            if resp.status_code == 400:
                assert resp.json()["error"].get("field") == "where"
    found = svc.post("select", '{"namespace_prefix": "nums", "where": {"v": 9223372036854775807}}')
    assert [i["key"] for i in found.json()["items"]] == ["big"]
