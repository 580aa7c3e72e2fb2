"""The house's shape: dependencies point one way, with nothing hidden (docs/architecture.md).

Every import counts: at the top of a module, inside a function, and under
``TYPE_CHECKING``. A cycle dodged by an import inside a function is still a
cycle. A module's layer is its folder (``memlane/values/``, ``store/``,
``domain/``, ``core/``; the surfaces at the package root and in ``server/``); a
module imports only its own layer or those below, and the surfaces do not import
one another except where :data:`SURFACE_EDGES` says why.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import memlane

SRC = Path(memlane.__file__).parent

# bottom to top: a folder of the package is a layer, and a module's folder is its layer
ORDER = ["values", "store", "domain", "core", "surfaces"]
LAYER_FOLDERS = ("values", "store", "domain", "core")
# what callers touch: these modules at the package root, and the service's folder
SURFACES = ("client", "aio", "cli", "mcp", "langgraph", "server")
# the package root itself (a facade over the layers): no layer
ROOT = ("",)

# surface -> surface imports, each with its reason
SURFACE_EDGES = {
    ("cli", "server"): "`memlane serve` starts the service (imported inside the command)",
    ("cli", "mcp"): "`memlane mcp` starts the MCP server (imported inside the command)",
    ("server", "mcp"): "the service mounts the MCP endpoint at /mcp beside the HTTP API",
    ("aio", "client"): "AsyncClient runs the Client's methods off the event loop",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path  # "" is the package root
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the memlane modules it imports, anywhere in its text (the package root left out: a facade)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = [p for p in package if p]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name.removeprefix("memlane.") for a in node.names if a.name.startswith("memlane.")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").startswith("memlane"):
                    module = (node.module or "").removeprefix("memlane").lstrip(".")
                else:
                    continue
                targets = [module] + [f"{module}.{a.name}".strip(".") for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def _layer(module: str) -> str | None:
    """The layer of a module by its folder; ``None`` for the package root and a module in no layer."""
    top = module.split(".")[0]
    if top in LAYER_FOLDERS:
        return top
    if top in SURFACES:
        return "surfaces"
    return None


def _surface(module: str) -> str:
    return module.split(".")[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


MODULES = _modules()
GRAPH = _imports(MODULES)


def test_no_import_cycle_counting_imports_inside_functions_and_for_type_checking() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle_made_by_an_import_inside_a_function() -> None:
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["store.base"].add("core.memory")  # what `def f(): from ..core.memory import Memory` in the store would add
    assert any({"core.memory", "store.base"} <= set(c) for c in _cycles(graph))


def test_every_module_sits_in_a_layer_folder_or_is_a_surface_at_the_root() -> None:
    unplaced = sorted(m for m in MODULES if m not in ROOT and _layer(m) is None)
    assert unplaced == [], (
        f"move these into a layer's folder ({', '.join(LAYER_FOLDERS)}) or, for a new surface, add it to "
        f"SURFACES (and to docs/architecture.md): {unplaced}"
    )
    # the placing itself: a module's folder is its layer, whatever its name
    assert [_layer(m) for m in ("values.facts", "store.fence", "domain.search.rank", "core.memory")] == [
        "values",
        "store",
        "domain",
        "core",
    ]
    assert _layer("server.app") == _layer("cli") == "surfaces"
    assert _layer("helpers") is None and _layer("utils.text") is None  # a module at the root, a new folder


def test_imports_point_down_the_layers() -> None:
    upward = []
    for module, targets in GRAPH.items():
        if module in ROOT:
            continue
        for target in targets:
            layer, below = _layer(module), _layer(target)
            if below is None or ORDER.index(below) > ORDER.index(str(layer)):
                upward.append(f"{module} ({layer}) -> {target} ({below})")
    assert sorted(upward) == []


def test_surfaces_do_not_import_one_another_except_as_stated() -> None:
    crossing = {
        (_surface(m), _surface(t))
        for m, targets in GRAPH.items()
        for t in targets
        if _layer(m) == _layer(t) == "surfaces" and _surface(m) != _surface(t)
    }
    assert crossing == set(SURFACE_EDGES)


@pytest.mark.parametrize("module", ["memlane.client", "memlane.aio", "memlane"])
def test_the_client_is_imported_without_any_backend_or_driver(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "heavy = [m for m in sys.modules if m.partition('.')[0] in ('sqlite3', 'psycopg', 'numpy', 'fastapi', 'mcp') "
        "or m in ('memlane.store.sqlite', 'memlane.store.postgres', 'memlane.store.runner', 'memlane.cli', "
        "'memlane.mcp', 'memlane.langgraph') or m.startswith('memlane.server')]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# a process that only talks HTTP: the Client, its import and its calls, in a fresh interpreter
_CLIENT_ALONE = """
import json, sys
import memlane.client
from memlane import Client
after_import = sorted(m for m in sys.modules if m.startswith("memlane"))
client = Client("http://127.0.0.1:9", "token", retries=0)  # nothing listens on port 9
try:
    client.get("notes", "k")
except memlane.StoreError as e:
    assert "cannot reach" in str(e), e
signature = str(__import__("inspect").signature(Client.search))
print(json.dumps([after_import, sorted(m for m in sys.modules if m.startswith("memlane")), signature]))
"""


def test_the_client_loads_no_core_domain_or_store_module() -> None:
    """``import memlane.client`` and ``memlane.Client`` load the Client and the values it speaks in, and so does
    an operation sent: ``Memory``'s signatures come from ``values/operations.json``, not from importing it."""
    done = subprocess.run([sys.executable, "-c", _CLIENT_ALONE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    after_import, after_a_call, signature = json.loads(done.stdout)
    for loaded in (after_import, after_a_call):
        assert [
            m for m in loaded if _layer(m.removeprefix("memlane.")) not in (None, "values") and m != "memlane.client"
        ] == []
        assert {"memlane", "memlane.client", "memlane.values.operations"} <= set(loaded)
    assert signature.startswith("(self, query: 'str', *, namespace_prefix: 'Namespace | str' = ()")


def test_every_public_name_of_the_package_resolves_where_it_lives() -> None:
    """The package root imports each name when it is first asked for: every name of ``__all__`` resolves (in a
    fresh process) to the object of the module it lives in, ``dir()`` lists them, and the names a type checker
    sees are those ``__all__`` lists."""
    code = (
        "import importlib, json, memlane\n"
        "where = {n: importlib.import_module('memlane.' + memlane._WHERE[n]) for n in memlane.__all__}\n"
        "print(json.dumps({n: [m.__name__, getattr(memlane, n) is getattr(m, n)] for n, m in where.items()}"
        " | {'': sorted(set(memlane.__all__) - set(dir(memlane)))}"
        # the layers' packages and the async module, as attributes: `memlane.aio.open(...)` after `import memlane`
        " | {m: [m, getattr(memlane, m) is importlib.import_module('memlane.' + m)] for m in memlane._SUBMODULES}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found.pop("") == []
    assert [n for n, (_, same) in found.items() if not same] == []
    assert found["Memory"][0] == found["open"][0] == "memlane.core.memory" and found["Client"][0] == "memlane.client"
    assert found["NotFoundError"][0] == "memlane.values.errors" and found["AsyncMemory"][0] == "memlane.aio"
    assert {"aio", "core", "values"} <= set(found)
    seen = {  # the TYPE_CHECKING block of memlane/__init__.py
        a.asname or a.name
        for node in ast.walk(ast.parse((SRC / "__init__.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.level
        for a in node.names
    }
    assert seen == set(memlane.__all__) == set(memlane._WHERE)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        memlane.nothing  # noqa: B018


# modules outside the store layer that still hold SQL statements, each with its reason (to move into the stores)
SQL_OUTSIDE_THE_STORES: dict[str, str] = {}
_STATEMENT = re.compile(
    r"^\s*(SELECT|(INSERT|REPLACE)( OR \w+)? INTO|UPDATE \w+ SET|DELETE FROM|WITH( RECURSIVE)? \w+"
    r"|CREATE|DROP|ALTER|PRAGMA)\b"
)
# a whole statement in any case ("select x from t"), which prose ("Select the hits...") is not
_ANY_CASE = re.compile(r"^\s*(select\s.+?\sfrom\s|insert\s+into\s|update\s+\w+\s+set\s|delete\s+from\s)", re.I | re.S)


def _statements(path: Path) -> int:
    """String literals (f-strings by their first part) that begin an SQL statement."""
    found = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr) and node.values:
            node = node.values[0]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += bool(_STATEMENT.match(node.value) or _ANY_CASE.match(node.value))
    return found


def test_sql_statements_live_in_the_store_layer() -> None:
    """The stores own the SQL: agents, rooms and grants (store/sharing.py), saved queries (store/saved.py), the
    facts layer (store/facts.py) with its export and import (store/facts_transfer.py), the query space's views; a
    statement written anywhere else fails here unless listed with its reason."""
    holding = {name for name, path in MODULES.items() if _layer(name) != "store" and _statements(path)}
    assert holding == set(SQL_OUTSIDE_THE_STORES)
    # the finder sees statements where they are, in each form the stores write them
    assert _statements(MODULES["store.sharing"]) >= 15
    for text in ("INSERT OR IGNORE INTO t VALUES (1)", "WITH RECURSIVE up(x) AS (SELECT 1)", "PRAGMA query_only = ON"):
        assert _STATEMENT.match(text), text
    assert _ANY_CASE.match("select a from t where b = ?") and not _ANY_CASE.match("Select hits by topic.")


# a piece of a statement: an SQL function over JSON, a cast, a JSON path operator, a CASE (what a `where` renders)
_FRAGMENT = re.compile(r"\b(COALESCE|json_\w+|jsonb_\w+|strpos)\s*\(|::(jsonb|text|numeric)\b|\s#>>?\s|\bCASE WHEN\b")


def _fragments(path: Path) -> int:
    """String literals (each part of an f-string) that hold a piece of SQL."""
    return sum(
        isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_FRAGMENT.search(node.value))
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_sql_fragments_live_in_the_store_layer_too() -> None:
    """Not a whole statement only: the pieces a store joins into one (a ``where`` as SQL, store/where_sql.py) are
    SQL, and the values layer holds none (docs/architecture.md)."""
    holding = {name for name, path in MODULES.items() if _layer(name) != "store" and _fragments(path)}
    assert holding == set()
    assert _fragments(MODULES["store.where_sql"]) >= 10
    for text in ("COALESCE(json_type(items.value, ?), 'null')", "(v #> %s::text[])", "CASE WHEN x THEN 1 END"):
        assert _FRAGMENT.search(text), text
    assert not _FRAGMENT.search("Select the hits whose value meets the conditions (in SQL), newest first.")
