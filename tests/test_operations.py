"""Every interface states the core's parameters: required where the core requires them, the same defaults.

The core's signatures are the one statement (``memlane.values.operations``); HTTP
bodies (from ``GET /v1/operations``), MCP tools (from ``tools/list``) and the
Client's methods are held to them here. A difference must be listed in
``DELIBERATE`` with its reason, or the test fails: that is how ``k=20`` in
``memory_combined_context`` (the core says 50) and ``max_rows=100`` in
``memory_query`` (the core says 1000) would have been caught.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import memlane
from memlane import Client
from memlane.core.access import AgentView
from memlane.core.memory import Memory
from memlane.mcp import ALIASES, build_server
from memlane.server import create_app
from memlane.values import operations

# an HTTP operation or MCP tool whose core method has another name
HTTP_METHOD = {
    "query/explain": "explain_query",
    "query/space": "describe_query_space",
    "query/space/search": "search_query_space",
    "query/save": "save_query",
    "query/run": "run_saved_query",
    "query/saved": "saved_queries",
    "query/delete": "delete_saved_query",
}
MCP_METHOD = {"memory_put": "put", "memory_query_space": "describe_query_space"}

# (interface, operation, parameter): why it differs from the core
DELIBERATE: dict[tuple[str, str, str], str] = {
    ("http", "put", "key"): "optional on the wire: leaving it out files a new note under a fresh id (key=None)",
    ("mcp", "memory_put", "key"): "the same: a note without key gets a fresh id",
    ("http", "recall", "query"): "may be left out for the keyed recall (key given); the core takes '' then",
    ("mcp", "memory_recall", "query"): "the same",
    ("mcp", "memory_query", "sql"): "memory_query runs either sql or a saved query by name (saved)",
}
# parameters an interface leaves out on purpose
LEFT_OUT: dict[str, set[str]] = {
    # a Python object cannot travel
    "http": {"chooser", "extractor"},  # the extractor runs in the caller's process (Client.add_conversation)
    # expert knobs an agent does not need, kept out of its context (each schema costs tokens)
    # (and the Python objects, as on http)
    "mcp": {"chooser", "extractor", "embedding", "candidate_k", "rrf_k", "weights", "chunk_chars", "if_absent"}
    | {"predicate"}
    # an agent acts on each hit's matched words and similarity; fused scores are not comparable across searches
    | {"min_score"},
}
# the everything-prefix is written '' or [] alike
EVERYTHING = ("", [], ())


def same_default(ours: Any, core: Any) -> bool:
    if ours in EVERYTHING and core in EVERYTHING:
        return True
    return bool(ours == operations.wire_default(core))


def differences(interface: str, name: str, method: str, schema: dict[str, Any]) -> list[str]:
    """Where a parameter schema and the core's signature disagree, not counting DELIBERATE ones."""
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    found: list[str] = []
    for param in operations.params(method):
        if (interface, name, param.name) in DELIBERATE:
            continue
        if param.name not in props:
            if param.name not in LEFT_OUT[interface]:
                found.append(f"{name}: lacks {param.name}")
            continue
        if param.required and param.name not in required:
            found.append(f"{name}: {param.name} is required by the core, optional here")
        elif not param.required and param.name in required:
            found.append(f"{name}: {param.name} is optional in the core, required here")
        elif not param.required and not same_default(props[param.name].get("default"), param.default):
            ours = props[param.name].get("default")
            found.append(f"{name}: {param.name} defaults to {ours!r}, core {param.default!r}")
    return found


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with memlane.open(tmp_path_factory.mktemp("ops") / "ops.db", embedder=None) as m:
        yield m


def http_operations(mem: Any) -> list[dict[str, Any]]:
    with TestClient(create_app(mem)) as http:
        return list(http.get("/v1/operations").json()["operations"])


def mcp_tools(mem: Any) -> list[Any]:
    return list(anyio.run(build_server(lambda ctx: mem, "all").list_tools))


def test_every_http_operation_states_the_cores_parameters(mem: Any) -> None:
    found: list[str] = []
    for op in http_operations(mem):
        method = HTTP_METHOD.get(op["name"], op["name"])
        assert hasattr(Memory, method), f"{op['name']}: no core method; add it to HTTP_METHOD"
        found += differences("http", op["name"], method, op["params"])
    assert found == []


def test_every_mcp_tool_states_the_cores_parameters(mem: Any) -> None:
    found: list[str] = []
    for tool in mcp_tools(mem):
        method = MCP_METHOD.get(tool.name, tool.name.removeprefix("memory_"))
        assert hasattr(Memory, method), f"{tool.name}: no core method; add it to MCP_METHOD"
        found += differences("mcp", tool.name, method, tool.input_schema)
    assert found == []


def test_the_deliberate_differences_are_still_there(mem: Any) -> None:
    """A listed difference that no longer exists is a stale excuse: remove it from DELIBERATE."""
    schemas = {("http", op["name"]): op["params"] for op in http_operations(mem)}
    schemas |= {("mcp", tool.name): tool.input_schema for tool in mcp_tools(mem)}
    for interface, name, param in DELIBERATE:
        schema = schemas[(interface, name)]
        assert param in schema["properties"] and param not in schema.get("required", []), (interface, name, param)


def test_the_clients_methods_take_the_cores_parameters_with_the_same_defaults() -> None:
    checked = 0
    for name, fn in inspect.getmembers(Client, inspect.isfunction):
        if name.startswith("_") or not hasattr(Memory, name):
            continue
        ours = {p.name: p for p in inspect.signature(fn).parameters.values() if p.name != "self"}
        # Memory's own signature: the Client's methods outside the table too (stats, cleanup, export_records)
        core = list(inspect.signature(getattr(Memory, name)).parameters.values())[1:]
        for param in (operations.Param(p.name, p.default) for p in core if p.kind is not p.VAR_KEYWORD):
            assert param.name in ours, f"Client.{name} lacks {param.name}"
            default = ours[param.name].default
            assert (default is inspect.Parameter.empty) == param.required, f"Client.{name}({param.name})"
            if not param.required:
                assert same_default(operations.wire_default(default), param.default), f"Client.{name}({param.name})"
        checked += 1
    assert checked >= 30


def test_an_earlier_mcp_argument_name_is_still_accepted(tmp_path: Path) -> None:
    from memlane.mcp import MemoryTools

    with memlane.open(tmp_path / "alias.db", embedder=None) as m:
        m.put("user/1", "a", "in one")
        m.put("user/2", "b", "in two")
        tools = {t.name: t for t in MemoryTools(lambda ctx: m).tools()}
        for old, new in ALIASES.items():
            args = tools["memory_list"].fn_metadata.pre_parse_json({old: "user/1"})
            assert args == {new: "user/1"}
            # the new name wins when both are sent
            both = tools["memory_list"].fn_metadata.pre_parse_json({old: "user/2", new: "user/1"})
            assert both == {old: "user/2", new: "user/1"}


# public Memory methods the /v1 table does not carry, and why
NOT_IN_TABLE: dict[str, str] = {
    "embedder": "a property: the Python embedder object",
    "store": "a property: the backend object",
    "close": "the embedded handle's lifetime; a service owns its own",
    "cleanup": "an admin route of its own (POST /v1/cleanup) with no parameters",
    "cleanup_report": "Python-side detail of cleanup",
    "retention_for": "a Python helper over retention_rules",
    "stats": "an admin GET route of its own (GET /v1/stats)",
    "reindex": "rewrites every vector: run where the embedder is (CLI memlane reindex)",
    "migration_status": "schema upkeep: CLI memlane migrate",
    "migrate": "schema upkeep: CLI memlane migrate",
    "export_records": "GET /v1/export streams it as JSON lines",
    "wait_indexed": "the service indexes on its own; a client sees what still waits in pending_vectors",
    "index": "drains the indexing backlog where the embedder is (CLI memlane index), not over the wire",
    "start_indexing": "the service starts its own indexer; a client has nothing to start",
}


def public_methods(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_every_public_core_method_is_in_the_table_or_listed_as_local() -> None:
    """An operation added to Memory must either reach the wire (and so HTTP, the Client, /v1/operations) or
    be listed here with its reason: nothing is silently left off the interfaces."""
    table = {op.name for op in operations.OPERATIONS}
    assert public_methods(Memory) - table - set(NOT_IN_TABLE) == set()
    # a listed excuse for a method that no longer exists, or that the table now carries, is stale
    assert set(NOT_IN_TABLE) <= public_methods(Memory)
    assert table.isdisjoint(NOT_IN_TABLE)


def test_every_table_operation_is_a_route_a_client_method_and_an_operations_entry(mem: Any) -> None:
    listed = {op["name"]: op for op in http_operations(mem)}
    for op in operations.OPERATIONS:
        assert op.route in listed, f"{op.name}: not in GET /v1/operations"
        assert callable(getattr(Client, op.name, None)), f"{op.name}: the Client lacks it"
        assert listed[op.route]["summary"] == op.summary
        wire = {p.name for p in op.params()}
        assert set(listed[op.route]["params"].get("properties", {})) == wire, op.name
        required = {p.name for p in op.params() if p.required}
        assert set(listed[op.route]["params"].get("required", [])) == required, op.name


def test_addresses_and_records_from_a_body_are_normalised_and_unknown_fields_dropped() -> None:
    args = operations._addresses({"addresses": [["a", "k"], ("b", "k")]})
    assert args["addresses"] == [("a", "k"), ("b", "k")]
    assert operations._addresses({"addresses": "not a list"}) == {"addresses": "not a list"}  # refused later
    # MCP's shape, which the table's description shows every surface: an object with exactly these two fields
    objects = operations._addresses({"addresses": [{"namespace": "a", "key": "k"}, {"namespace": "a"}]})
    assert objects["addresses"] == [("a", "k"), {"namespace": "a"}]  # the second is refused by the core
    records = operations._known_fields({"records": [{"namespace": "a", "key": "k", "value": 1, "extra": 2}, "x"]})
    assert records["records"] == [{"namespace": "a", "key": "k", "value": 1}, "x"]
    assert operations._known_fields({"records": "x"}) == {"records": "x"}


def test_the_clients_json_carries_numpy_values_and_names_a_field_no_utf8_can_carry() -> None:
    import numpy as np

    from memlane import client as client_module
    from memlane.values.errors import ValidationError

    assert client_module._json({"v": np.float32(0.5), "a": np.array([1, 2])}) == {"v": 0.5, "a": [1, 2]}
    with pytest.raises(ValidationError) as e:
        client_module._encode({"query": "fine", "filter": [{"k": "bad \ud800"}]})
    assert e.value.field == "filter"
    with pytest.raises(ValidationError) as e:
        client_module._encode({"metadata": {"bad \ud800": 1}})
    assert e.value.field == "metadata"


# every Python surface of the operations table; the async ones answer with coroutines
PYTHON_SURFACES = {
    "Memory": (Memory, False),
    "AgentView": (AgentView, False),
    "Client": (Client, False),
    "AsyncMemory": (memlane.AsyncMemory, True),
    "AsyncClient": (memlane.AsyncClient, True),
}


def _parameters(method: Any) -> list[tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(method).parameters.values()
        if p.name != "self" and p.kind is not p.VAR_KEYWORD
    ]


@pytest.mark.parametrize("surface", PYTHON_SURFACES)
def test_every_operation_is_a_method_of_every_python_surface_with_the_cores_parameters(surface: str) -> None:
    cls, asynchronous = PYTHON_SURFACES[surface]
    for op in operations.OPERATIONS:
        if op.admin and surface == "AgentView":
            # an owner setting: the service runs it on the whole memory, for an admin agent only
            assert not hasattr(cls, op.name), (surface, op.name)
            continue
        method = getattr(cls, op.name, None)
        assert method is not None, f"{surface} has no {op.name}"
        assert inspect.iscoroutinefunction(method) is asynchronous, (surface, op.name)
        core = _parameters(getattr(Memory, op.name))
        mine = _parameters(method)
        assert mine == core, (surface, op.name)
        assert inspect.getdoc(method) == inspect.getdoc(getattr(Memory, op.name)) or (
            op.name in getattr(cls, "DIFFERS", {})
        ), (surface, op.name)


def test_the_awaited_operations_are_the_steps_of_their_synchronous_methods() -> None:
    """``AsyncMemory``'s exact reads and item writes run the generator their ``Memory`` method is made from
    (:mod:`memlane.core.twins`): one declaration, so the native path cannot take an argument the synchronous
    one does not, check another way or read another clock."""
    from memlane import aio
    from memlane.core import twins

    assert set(aio.AWAITED) <= {op.name for op in operations.OPERATIONS}
    assert {"get", "put", "put_many", "select", "list", "delete"} <= set(aio.AWAITED)
    for name in aio.AWAITED:
        steps = twins.steps_of(getattr(Memory, name))
        assert steps is not None and inspect.isgeneratorfunction(steps), name
        assert _parameters(steps) == _parameters(getattr(Memory, name)), name
        assert inspect.iscoroutinefunction(getattr(aio.AsyncMemory, name)), name
    # no coroutine twin is written by hand beside the synchronous methods
    assert [n for n, f in vars(Memory).items() if inspect.iscoroutinefunction(f)] == ["_aclose"]


def _declared_text() -> str:
    """``operations.json`` as ``scripts/declare.py`` writes it from ``Memory`` now: a parameter a line."""
    import importlib.util

    path = Path(__file__).parents[1] / "scripts" / "declare.py"
    spec = importlib.util.spec_from_file_location("declare", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.declared_text())


def test_the_declared_signatures_are_memorys_own() -> None:
    """The Client and the service read each operation's signature and docstring from ``operations.json``,
    without importing the core: it must be what ``Memory`` declares, read back to the same signatures."""
    text = _declared_text()
    if os.environ.get("MEMLANE_UPDATE_GOLDEN"):
        Path(operations.DECLARED).write_text(text, encoding="utf-8")
    assert json.loads(Path(operations.DECLARED).read_text(encoding="utf-8")) == json.loads(text), (
        "Memory's operations changed: run python scripts/declare.py to write src/memlane/values/operations.json"
    )
    for op in operations.OPERATIONS:
        core = getattr(Memory, op.name)
        assert operations.signature(op.name) == inspect.signature(core), op.name
        assert operations.doc(op.name) == inspect.getdoc(core), op.name
        assert operations.params(op.name) == tuple(
            operations.Param(p.name, p.default) for p in list(inspect.signature(core).parameters.values())[1:]
        ), op.name


def test_a_surface_method_written_by_hand_must_say_why() -> None:
    from memlane.values import surface

    class Quiet:
        def get(self, namespace: Any, key: str) -> Any:
            return None

    with pytest.raises(TypeError, match=r"Quiet.get is written by hand: say why in Quiet.DIFFERS"):
        surface.fill(Quiet, lambda op: lambda self, *a, **k: None)

    class Said(Quiet):
        DIFFERS = {"get": "a reason"}

    Said.get = Quiet.get  # type: ignore[method-assign]
    surface.fill(Said, lambda op: lambda self, *a, **k: op.name)
    assert Said().get("n", "k") is None and Said().put("n", "k", 1) == "put"  # type: ignore[attr-defined]
    assert inspect.signature(Said.put) == inspect.signature(Memory.put)  # type: ignore[attr-defined]


def test_the_client_differs_only_where_it_says_and_every_reason_is_still_needed() -> None:
    made = {name for name, method in vars(Client).items() if getattr(method, "made_from_table", False)}
    written = {op.name for op in operations.OPERATIONS if op.name in vars(Client)} - made
    assert written == set(Client.DIFFERS)


def test_the_tables_meanings_name_real_parameters() -> None:
    """A meaning for a parameter the core does not take (a typo, a renamed argument) describes nothing."""
    every = {p.name for op in operations.OPERATIONS for p in operations.params(op.name)}
    assert set(operations.MEANINGS) <= every
    for op in operations.OPERATIONS:
        assert set(op.meanings) <= {p.name for p in operations.params(op.name)}, op.name


def test_every_mcp_parameter_is_described_by_the_table(mem: Any) -> None:
    """A tool parameter that is a core parameter says what the table says it means, and nothing else:
    the description is written once, beside the operation."""
    checked = 0
    for tool in mcp_tools(mem):
        method = MCP_METHOD.get(tool.name, tool.name.removeprefix("memory_"))
        op = operations.OPERATION["search_query_space" if tool.name == "memory_query_space" else method]
        core = {p.name for p in operations.params(op.name)} | {"search"}
        for name, schema in tool.input_schema["properties"].items():
            if name not in core:
                continue  # the tool's own argument (memory_query's saved, explain)
            meaning = op.meaning("text" if name == "search" else name)
            assert schema.get("description") == meaning, (tool.name, name)
            checked += 1
    assert checked >= 100
