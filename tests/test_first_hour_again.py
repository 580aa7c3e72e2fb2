"""The first hour, second pass (issue 39): each stumble found by trying memlane again as a new user is a test here.

- a wrong Client base URL (``/v1``, ``/api``, ``/docs`` appended) or a misspelt operation is an error naming the
  URL, never "no such item";
- ``memlane serve`` refuses a port outside 1-65535 and says which port ``--port 0`` found;
- a missing extra is one line naming it, before any bare import of what it brings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import memlane
from memlane.core.access import Access
from memlane.server import create_app
from memlane.values.errors import ValidationError

MEMLANE = Path(sys.executable).with_name("memlane")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[memlane.Memory, str, str]]:
    from live import LiveServer

    with memlane.open(tmp_path / "svc.db", embedder=None) as mem:
        _, token = Access(mem).create_agent("root", admin=True)
        server = LiveServer(create_app(mem))
        try:
            yield mem, server.url, token
        finally:
            server.stop()


# -- a wrong base URL or a misspelt operation -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["/v1", "/api", "/docs", "/v1/"])
def test_a_client_base_url_that_is_not_the_service_root_is_an_error_naming_it(service: Any, suffix: str) -> None:
    mem, url, token = service
    mem.put("notes", "k", "there")
    with memlane.Client(url, token) as right:
        assert right.get("notes", "k") is not None  # the item exists
    wrong = url + suffix
    with memlane.Client(wrong, token, retries=0) as client:
        for call in (
            lambda: client.get("notes", "k"),
            lambda: client.delete("notes", "k"),
            lambda: client.exists("notes", "k"),
            lambda: client.me(),
        ):
            with pytest.raises(ValidationError) as refused:
                call()
            said = str(refused.value)
            assert said.startswith("url: ") and wrong.rstrip("/") in said and "\n" not in said
            assert f"the service root, such as {url}," in said  # what to use instead
    assert mem.exists("notes", "k")  # nothing was deleted


def test_an_unknown_route_has_its_own_error_naming_the_path(service: Any) -> None:
    _, url, token = service
    headers = {"Authorization": f"Bearer {token}"}
    misspelt = httpx.post(f"{url}/v1/serach", json={"query": "x"}, headers=headers)
    assert misspelt.status_code == 404
    error = misspelt.json()["error"]
    assert error["type"] == "no_such_route" and error["path"] == "/v1/serach"
    assert "GET /v1/operations" in error["message"] and "service root" in error["message"]
    # a missing item keeps its own answer
    missing = httpx.post(f"{url}/v1/get", json={"namespace": "notes", "key": "nope"}, headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"


def test_a_misspelt_operation_through_the_client_is_the_same_clear_error(service: Any) -> None:
    _, url, token = service
    with memlane.Client(url, token) as client:
        with pytest.raises(ValidationError, match=r"no_such_route|nothing is served at POST /v1/serach"):
            client._call("POST", "serach", {"query": "x"})


def test_a_404_that_is_not_memlanes_is_no_missing_item(service: Any) -> None:
    """Another web server at that URL (or a proxy) answers 404 in its own words: the URL is wrong, not the key."""
    from live import LiveServer

    async def plain_404(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<h1>Not Found</h1>"})

    other = LiveServer(plain_404)
    try:
        with memlane.Client(other.url, "t", retries=0) as client:
            with pytest.raises(ValidationError, match="url: .*not a memlane service"):
                client.get("notes", "k")
    finally:
        other.stop()


# -- memlane serve --port ----------------------------------------------------------------------------------------


def _no_columns() -> dict[str, str]:
    """The environment of a script: no terminal width, no embedder chosen."""
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "MEMLANE_EMBEDDER")}


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_serve_refuses_a_port_outside_the_range_in_one_line(tmp_path: Path, port: str) -> None:
    db = tmp_path / "m.db"
    done = subprocess.run(
        [MEMLANE, "serve", "--db", str(db), "--port", port, "--workers", "1"],
        capture_output=True,
        text=True,
        env=_no_columns(),
        timeout=60,
    )
    assert done.returncode != 0 and "serving" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "port must be 1-65535, or 0" in lines[0] and port in lines[0], done.stderr
    assert not db.exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_port_0_says_the_port_it_listens_on(tmp_path: Path, workers: str) -> None:
    # a long path, and stderr a pipe without COLUMNS: the line stays one line a script can read
    db = tmp_path / ("a-rather-long-directory-name-" * 3) / "m.db"
    db.parent.mkdir()
    server = subprocess.Popen(
        [MEMLANE, "serve", "--db", str(db), "--port", "0", "--workers", workers, "--embedder", "none"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_no_columns(),
    )
    try:
        assert server.stderr is not None
        said = []
        for line in server.stderr:
            said.append(line)
            if "serving" in line:
                break
        else:
            pytest.fail(f"memlane serve ended without saying it was serving: {said}")
        token_line = next(x for x in said if "token" in x)
        assert token_line.rstrip().split()[-1].startswith("ml_")  # the token is on its line, whole
        match = re.search(r"serving (.+) at http://127\.0\.0\.1:(\d+) \(workers: \d\)$", line.rstrip("\n"))
        assert match, said
        assert match.group(1) == str(db)
        port = int(match.group(2))
        assert port != 0
        assert httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=10).json()["status"] == "ok"
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- a missing extra names itself before anything else fails ---------------------------------------------------

# Runs Python with the named top-level modules made unimportable by a meta-path finder (as on an install without
# the extra, whatever is installed here), and prints the exception an import raises, on one line.
BLOCKED = """
import sys
blocked = set(sys.argv[1].split(','))

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
try:
    exec(sys.argv[2])
except ImportError as e:
    print(type(e).__name__ + ': ' + str(e))
"""


@pytest.mark.parametrize("missing", ["numpy,langgraph", "numpy", "langgraph"])
def test_the_langgraph_store_without_its_extra_names_the_extra_first(tmp_path: Path, missing: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, missing, "from memlane.langgraph import MemlaneStore"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    said = done.stdout.strip()
    assert said.startswith("ImportError: memlane.langgraph needs") and "\n" not in said, said
    assert "pip install 'memlane[langgraph]'" in said
    assert f"No module named '{missing.split(',')[0]}'" in said  # which module is missing


# -- one spelling of "no embedder" --------------------------------------------------------------------------------


def test_embedder_none_as_text_is_lexical_only_in_python_as_on_the_command_line(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder="none") as mem:
        assert mem.embedder is None
        mem.put("notes", "k", "cats purr")
        assert [h.key for h in mem.search("cats").hits] == ["k"]
    # nothing was recorded: a later open with an embedder is no mismatch
    with memlane.open(tmp_path / "m.db", embedder="fake") as mem:
        assert mem.embedder is not None and mem.embedder.name == "fake"


# -- memlane.aio.open in async with, with or without await --------------------------------------------------------


def test_aio_open_is_awaitable_and_an_async_context_manager(tmp_path: Path) -> None:
    import asyncio

    import memlane.aio

    async def main() -> None:
        async with memlane.aio.open(tmp_path / "m.db", embedder=None) as mem:  # no await
            await mem.put("notes", "k", "v")
            inner = mem
        with pytest.raises(memlane.StoreError):  # closed at the end of the block
            inner.sync.get("notes", "k")
        async with await memlane.aio.open(tmp_path / "m.db", embedder=None) as mem:  # the documented form
            assert (await mem.get("notes", "k")).value == "v"
        mem = await memlane.aio.open(tmp_path / "m.db", embedder=None)
        try:
            assert await mem.exists("notes", "k")
        finally:
            await mem.close()

    asyncio.run(main())


# -- the Client: set-up mistakes at construction, and what retries=0 raises ----------------------------------------


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("127.0.0.1:8420", "url: '127.0.0.1:8420' has no scheme: write http://127.0.0.1:8420"),
        ("localhost:8420", "url: 'localhost:8420' has no scheme: write http://localhost:8420"),
        ("ftp://127.0.0.1:8420", "url: 'ftp://127.0.0.1:8420' must start with http:// or https://"),
        ("http://", "url: 'http://' names no host"),
        (["http://127.0.0.1:8420", "127.0.0.2:8420"], "url: '127.0.0.2:8420' has no scheme"),
    ],
)
def test_a_client_url_without_a_scheme_or_host_is_refused_at_once(url: Any, said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        memlane.Client(url, "ml_token")
    assert str(refused.value).startswith(said), str(refused.value)


@pytest.mark.parametrize("token", ["", "   ", "ml_x\n", "ml_x y", None, 5])
def test_a_client_token_that_cannot_be_sent_is_refused_at_once(token: Any) -> None:
    with pytest.raises(ValidationError, match="^token: ") as refused:
        memlane.Client("http://127.0.0.1:8420", token)
    assert "memlane agent create" in str(refused.value)


def test_a_refused_connection_with_retries_0_is_the_store_error_the_docs_name() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with memlane.Client(f"http://127.0.0.1:{port}", "ml_t", retries=0, retry_window=0) as client:
        with pytest.raises(memlane.StoreError, match="cannot reach the memlane service"):
            client.get("notes", "k")
    doc = (Path(__file__).parents[1] / "docs" / "python-api.md").read_text()
    said = doc[doc.index("`retries=0, retry_window=0` raises at the first failure") :][:200]
    assert "`StoreError`" in said and "BackendUnavailableError" not in said


# -- output to a pipe is not wrapped at 80 columns ----------------------------------------------------------------


def test_tokens_and_messages_to_a_pipe_stay_on_one_line(tmp_path: Path) -> None:
    db = tmp_path / ("a-rather-long-directory-name-" * 3) / "m.db"
    db.parent.mkdir()

    def run(*args: str) -> str:
        done = subprocess.run(
            [MEMLANE, *args, "--db", str(db)], capture_output=True, text=True, env=_no_columns(), timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    created = run("agent", "create", "a-rather-long-agent-name-for-a-long-line-of-output")
    said, token = created.splitlines()  # two lines, each whole
    assert said.startswith("Created agent") and said.endswith("-line-of-output).") and " agent/a-rather" in said
    assert token.startswith("Token (shown once): ml_"), created
    rotated = run("agent", "token", "a-rather-long-agent-name-for-a-long-line-of-output")
    assert len(rotated.splitlines()) == 1 and rotated.split()[-1].startswith("ml_"), rotated
    assert rotated.split()[-1] != created.split()[-1]


# -- memlane import of a record without a value -------------------------------------------------------------------


def test_import_of_a_record_without_a_field_names_the_line_and_the_field(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        mem.put("notes", "a", "one")
        mem.put("notes", "b", "two")
        records = list(mem.export_records())
    del records[1]["value"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run(
        [MEMLANE, "import", str(bad), "--db", str(tmp_path / "fresh.db")],
        capture_output=True,
        text=True,
        env=_no_columns(),
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "Error: line 2: has no 'value' field (an exported record has namespace, key, value, ...); nothing was imported"
    ), done.stderr
    with memlane.open(tmp_path / "other.db", embedder=None) as mem, pytest.raises(ValidationError) as refused:
        mem.import_records(records)
    assert "KeyError" not in str(refused.value) and "record 2: has no 'value' field" in str(refused.value)


# -- a retention rule set by an admin records the admin ------------------------------------------------------------


def test_a_retention_rule_set_through_an_admin_client_records_the_admin(service: Any) -> None:
    mem, url, token = service
    with memlane.Client(url, token) as admin:
        rule = admin.set_retention("notes", keep_versions=3)
        assert rule.updated_by == "root"
        assert [r.updated_by for r in admin.retention_rules()] == ["root"]
        assert admin.clear_retention("notes")
    assert mem.retention_rules() == []


# -- the not_yet_indexed note says what a caller can do --------------------------------------------------------------


def test_the_not_yet_indexed_note_asks_only_for_what_every_surface_has(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder="fake") as first:  # the store records its embedder
        first.put("other", "k", "something else")
        assert first.wait_indexed(30)
    with memlane.open(tmp_path / "m.db", embedder=None) as plain:  # a lexical writer marks what it writes
        plain.put("notes", "k", "a note written without vectors")
    with memlane.open(tmp_path / "m.db", embedder="fake", indexing="external") as mem:
        mem.catch_up = memlane.CatchUp(items=0)  # the search does not embed the waiting items first
        env = mem.search("note", channels=["vector"])
        assert env.status == "not_yet_indexed"
        note = next(n for n in env.notes if n.startswith("not yet indexed"))
        # a Client and an MCP agent have no wait_indexed: what they can do comes first, the Python wait after
        assert "search again in a few seconds" in note and "call wait_indexed" not in note
        assert "Memory's or AsyncMemory's wait_indexed()" in note
        assert not hasattr(memlane.Client, "wait_indexed")  # if it ever gets one, say so in the note


def test_a_docs_python_block_with_top_level_await_fails_as_it_would_for_a_reader() -> None:
    from docrun import compile_example

    with pytest.raises(SyntaxError):
        compile_example("async def f():\n    pass\n\nawait f()\n", "docs/x.md:1")
    compile_example("import asyncio\n\nasync def main():\n    pass\n\nasyncio.run(main())\n", "docs/x.md:1")


# -- docs/backends.md's local PostgreSQL recipe runs as written -----------------------------------------------------


def test_the_local_postgres_recipe_runs_as_written() -> None:
    import shutil
    import tempfile

    pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    doc = (Path(__file__).parents[1] / "docs" / "backends.md").read_text()
    start = doc.index("```python\nimport memlane\nimport pgserver\n")
    block = doc[start + len("```python\n") : doc.index("```", start + 10)]
    printed = next(line[2:] for line in block.splitlines() if line.startswith("# "))
    where = tempfile.mkdtemp(prefix="memlane-recipe-")
    os.chmod(where, 0o755)  # pgserver's postgres runs as another user when this one is root: it reaches ./pgdata
    try:
        env = {k: v for k, v in os.environ.items() if k != "MEMLANE_EMBEDDER"}
        done = subprocess.run(
            [sys.executable, "-c", block], capture_output=True, text=True, cwd=where, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == printed
    finally:
        shutil.rmtree(where, ignore_errors=True)


# -- docs/mcp.md's size table is the measured one ---------------------------------------------------------------------


def test_the_mcp_size_table_in_the_docs_is_what_tools_list_measures(tmp_path: Path) -> None:
    from memlane.mcp import PROFILES
    from test_first_hour import tools_list_chars

    doc = (Path(__file__).parents[1] / "docs" / "mcp.md").read_text()
    documented = {
        m.group(1): (int(m.group(2)), int(m.group(3).replace(",", "")))
        for m in re.finditer(r"^\| `(\w+)`[^|]*\| (\d+) \| ([\d,]+) \|$", doc, re.MULTILINE)
    }
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        measured = {}
        for profile in [None, *PROFILES]:
            names, chars = tools_list_chars(mem, profile)
            measured[profile or "default"] = (len(names), chars)
    table = "\n".join(f"{name}: {n} tools, {chars:,} characters" for name, (n, chars) in measured.items())
    assert documented == measured, f"docs/mcp.md's profile table should say:\n{table}"


# -- what changed lately: list(order="recent"), on every surface ----------------------------------------------------


def _written_in_order(mem: memlane.Memory) -> None:
    for key in ("c", "a", "b"):
        mem.put("notes", key, f"note {key}")
    mem.put("notes", "c", "note c, changed")  # c is now the latest
    mem.put("other", "z", "elsewhere")


def test_list_recent_orders_by_last_write_and_pages(tmp_path: Path) -> None:
    clock = iter(range(100))
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 1, 1, tzinfo=UTC)
    with memlane.open(tmp_path / "m.db", embedder=None, clock=lambda: start + timedelta(seconds=next(clock))) as mem:
        _written_in_order(mem)
        assert [i.key for i in mem.list("notes").items] == ["a", "b", "c"]  # address order, as before
        first = mem.list("notes", order="recent", limit=2)
        assert [i.key for i in first.items] == ["c", "b"] and first.next_cursor is not None
        rest = mem.list("notes", order="recent", limit=2, cursor=first.next_cursor)
        assert [i.key for i in rest.items] == ["a"] and rest.next_cursor is None
        assert [i.key for i in mem.list(order="recent").items] == ["z", "c", "b", "a"]
        with pytest.raises(ValidationError, match="order: 'newest' is not one of address, recent"):
            mem.list("notes", order="newest")
        with pytest.raises(ValidationError, match="^key_prefix: "):
            mem.list("notes", order="recent", key_prefix="a")
        with pytest.raises(ValidationError, match="^cursor: "):
            mem.list("notes", order="recent", cursor=mem.list("notes", limit=1).next_cursor)


def test_list_recent_is_scoped_and_offered_by_the_client_and_the_mcp_default_profile(service: Any) -> None:
    import asyncio

    import memlane.aio

    mem, url, token = service
    _written_in_order(mem)
    access = Access(mem)
    _, alice = access.create_agent("alice")
    access.grant("alice", "notes", "read")
    with memlane.Client(url, alice) as client:
        assert [i.key for i in client.list(order="recent").items] == ["c", "b", "a"]  # not other/z: out of scope
    with memlane.Client(url, token) as admin:
        assert [i.key for i in admin.list(order="recent", limit=1).items] == ["z"]

    async def from_asyncio() -> list[str]:
        async with memlane.aio.AsyncMemory(mem) as amem:
            return [i.key for i in (await amem.list("notes", order="recent")).items]

    # AsyncMemory closes the memory it wraps: the service's is used last
    from test_first_hour import tools_list_chars

    names, _ = tools_list_chars(mem, None)
    assert "memory_list" in names
    app = create_app(mem)
    from starlette.testclient import TestClient

    with TestClient(app) as http:
        answer = http.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "memory_list", "arguments": {"order": "recent", "limit": 2}},
            },
            headers={"Authorization": f"Bearer {alice}", "Accept": "application/json, text/event-stream"},
        )
    listed = answer.json()["result"]["structuredContent"]
    assert [i["key"] for i in listed["items"]] == ["c", "b"] and listed["next_cursor"]
    assert asyncio.run(from_asyncio()) == ["c", "b", "a"]


def test_list_recent_on_postgres_sync_and_async(postgres: Any) -> None:
    import asyncio

    import memlane.aio

    url = postgres.create()
    with memlane.open(url, embedder=None) as mem:
        _written_in_order(mem)
        page = mem.list("notes", order="recent", limit=2)
        assert [i.key for i in page.items] == ["c", "b"]
        assert [i.key for i in mem.list("notes", order="recent", cursor=page.next_cursor).items] == ["a"]

    async def main() -> list[str]:
        async with memlane.aio.open(url, embedder=None) as amem:
            return [i.key for i in (await amem.list(order="recent")).items]

    assert asyncio.run(main()) == ["z", "c", "b", "a"]
