"""The first hour of a newcomer (issue 26): each stumble found by trying memlane as a new user is a test here.

- a missing extra fails when it is chosen (``open()``), in one line, writing nothing; notes name the fix;
- an unreachable PostgreSQL fails in a few seconds, in one line, without the driver's noise;
- one verb per operation (``memlane put``, MCP ``memory_put``), the old names kept; the CLI suggests the
  nearest command; namespace forms other tools use (``user:42``, ``/user/42``) get a hint;
- the Client administers the service (agents, rooms, members, grants, the access log) with the usual errors;
- MCP offers tool profiles: the default one fits an agent's context (sizes measured here, docs/mcp.md).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import memlane
from memlane import cli
from memlane.core.access import Access
from memlane.mcp import PROFILES, TOOL_ALIASES, build_server, tool_selection
from memlane.server import create_app
from memlane.values.errors import ConflictError, ForbiddenError, NotFoundError, StoreError, ValidationError

MEMLANE = Path(sys.executable).with_name("memlane")

# -- a missing extra, at the moment it is chosen --------------------------------------------------------------

# Runs Python with the named modules made unimportable, as on an install without the extra.
WITHOUT = """
import sys
for name in sys.argv[1].split(','):
    sys.modules[name] = None
import memlane
try:
    exec(sys.argv[2])
except memlane.MemlaneError as e:
    print(type(e).__name__ + ': ' + str(e))
"""


def python_without(modules: str, code: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MEMLANE_EMBEDDER"}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, code], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("missing", "embedder", "module"),
    [("numpy", "minilm", "numpy"), ("onnxruntime", "minilm", "onnxruntime"), ("numpy", "fake", "numpy")],
)
def test_an_embedder_whose_extra_is_missing_fails_at_open_in_one_line_writing_nothing(
    tmp_path: Path, missing: str, embedder: str, module: str
) -> None:
    said = python_without(missing, f"memlane.open('x.db', embedder={embedder!r})", tmp_path)
    assert said.startswith(f"EmbedderError: embedder {embedder!r} needs memlane's optional 'vectors' dependencies")
    assert f"the module {module!r} is not installed" in said and "\n" not in said
    assert said.endswith("pip install 'memlane[vectors]'") and "embedder=None" in said
    assert not (tmp_path / "x.db").exists()  # nothing written: no file, no recorded embedder


def test_a_store_recording_an_embedder_this_install_cannot_run_says_so_at_open(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder="fake") as mem:
        mem.put("user/1", "k", "cats")
    said = python_without("numpy", "memlane.open('m.db')", tmp_path)
    assert said.startswith("EmbedderError: embedder 'fake' needs memlane's optional 'vectors' dependencies")
    assert "this store's vectors were made by it" in said and said.endswith("pip install 'memlane[vectors]'")
    # lexical search only, as the message says, still opens it
    assert python_without("numpy", "print(memlane.open('m.db', embedder=None).get('user/1', 'k').value)", tmp_path) == (
        "cats"
    )


def test_a_search_without_vectors_notes_the_extra_or_the_choice(tmp_path: Path, monkeypatch: Any) -> None:
    import memlane.core.memory

    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        mem.put("user/1", "k", "cats")
        monkeypatch.setattr(memlane.core.memory, "default_available", lambda: False)
        (note,) = mem.search("cats").notes
        assert "no embedder is installed" in note and "pip install 'memlane[vectors]'" in note
        monkeypatch.setattr(memlane.core.memory, "default_available", lambda: True)
        (note,) = mem.search("cats").notes
        assert "opened without an embedder (embedder=None" in note


def test_the_cli_says_when_vectors_are_missing_and_how_to_make_them(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    env = {**os.environ, "COLUMNS": "200"}
    for n in range(3):  # written without vectors: marked for the indexer
        subprocess.run(
            [MEMLANE, "put", "user/1", f"k{n}", "cats", "--db", db, "--embedder", "none"], env=env, check=True
        )
    # the store now records an embedder; a one-shot command embeds only what it writes
    subprocess.run([MEMLANE, "put", "user/2", "o", "dogs", "--db", db, "--embedder", "fake"], env=env, check=True)
    out = subprocess.run(
        [MEMLANE, "search", "cats", "--db", db, "--channels", "vector", "--prefix", "user/1"],
        env={**env, "MEMLANE_EMBEDDER": "fake"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("No results.")
    assert "Note: 3 items have no vector yet" in out.stdout and "`memlane index` embeds them" in out.stdout


# -- an unreachable PostgreSQL ------------------------------------------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a server that hangs, a firewall that swallows)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def test_an_unreachable_postgres_fails_fast_in_one_line_without_driver_noise(tmp_path: Path, silent_port: int) -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a port nobody listens on: refused at once
        probe.bind(("127.0.0.1", 0))
        refused = probe.getsockname()[1]
    env = {**os.environ, "MEMLANE_PG_CONNECT_TIMEOUT": "2", "COLUMNS": "200"}
    # a bound, not a speed goal: the pool alone waited 15 s and retried, logging each attempt
    for port, at_most in ((refused, 10), (silent_port, 10)):
        url = f"postgresql://me:s3cret@127.0.0.1:{port}/db"
        started = time.monotonic()
        done = subprocess.run([MEMLANE, "stats", "--db", url], capture_output=True, text=True, env=env, timeout=60)
        took = time.monotonic() - started
        assert done.returncode == 1 and took < at_most, (took, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: cannot connect to postgresql://me:***@"), lines
        assert "s3cret" not in done.stderr and "connect_timeout" in lines[0]
    with pytest.raises(StoreError, match="cannot connect") as refused_in_python:
        memlane.open(f"postgresql://me@127.0.0.1:{refused}/db")
    assert "\n" not in str(refused_in_python.value)


def test_the_connect_timeout_is_checked(monkeypatch: Any) -> None:
    from memlane.store.postgres import connect_timeout_s

    monkeypatch.setenv("MEMLANE_PG_CONNECT_TIMEOUT", "2.5")
    assert connect_timeout_s() == 2.5 and connect_timeout_s(1) == 1
    monkeypatch.delenv("MEMLANE_PG_CONNECT_TIMEOUT")
    assert connect_timeout_s() == 5
    for bad in ("soon", "0", "-1", "nan"):
        monkeypatch.setenv("MEMLANE_PG_CONNECT_TIMEOUT", bad)
        with pytest.raises(StoreError, match="connect timeout"):
            connect_timeout_s()


# -- names and mistakes ----------------------------------------------------------------------------------------


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMLANE_DB": str(tmp_path / "m.db"), "MEMLANE_EMBEDDER": "fake", "COLUMNS": "200"}
    return subprocess.run([MEMLANE, *args], capture_output=True, text=True, env=env, timeout=60)


def test_put_is_the_cli_verb_and_set_still_works(tmp_path: Path) -> None:
    assert run_cli(tmp_path, "put", "user/42", "theme", "dark").returncode == 0
    assert run_cli(tmp_path, "set", "user/42", "font", "mono").returncode == 0  # the older name
    with memlane.open(tmp_path / "m.db") as mem:
        assert [i.key for i in mem.list("user/42").items] == ["font", "theme"]
    listed = run_cli(tmp_path, "--help").stdout
    assert " put " in listed and " set " not in listed  # the alias is not offered twice


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("add", "put"), ("write", "put"), ("serach", "search"), ("rm", "delete"), ("ls", "list"), ("sett", "put")],
)
def test_a_mistyped_command_suggests_the_nearest(tmp_path: Path, typed: str, meant: str) -> None:
    done = run_cli(tmp_path, typed)
    assert done.returncode == 2 and f"No such command '{typed}'. Did you mean '{meant}'" in done.stderr


def test_a_group_suggests_its_own_commands_not_the_roots_aliases(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "retention", "sett")
    assert "Did you mean 'set'?" in done.stderr
    assert cli.nearest_commands("xyzzy", ["put", "get"]) == []
    assert cli.nearest_commands("clea", ["put", "clear", "cleanup", "get"]) == ["clear", "cleanup"]  # the two nearest
    assert len(cli.nearest_commands("lst", ["list", "last", "lost", "put"])) == 2  # three as near: two named


def test_a_namespace_written_the_way_other_tools_do_gets_a_hint(tmp_path: Path) -> None:
    stored = run_cli(tmp_path, "put", "user:42", "theme", "dark")
    assert stored.returncode == 0  # a valid one-segment namespace: stored, with a hint
    assert "Note: 'user:42' is one namespace segment; segments are separated by '/' (did you mean user/42?)" in (
        stored.stderr
    )
    missing = run_cli(tmp_path, "get", "user.42", "theme")
    assert missing.returncode == 1 and "did you mean user/42?" in missing.stderr
    slash = run_cli(tmp_path, "put", "/user/42", "theme", "dark")
    assert slash.returncode == 2
    assert "a namespace has no leading or trailing '/'; write 'user/42', not '/user/42'" in slash.stderr
    assert run_cli(tmp_path, "put", "user/42", "theme", "dark").stderr == ""  # no hint for the usual form
    assert cli.namespace_hint("room/eng") is None and cli.namespace_hint("notes") is None


def test_a_leading_slash_is_refused_with_the_hint_everywhere(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        for bad in ("/user/42", "user/42/"):
            with pytest.raises(ValidationError, match="write 'user/42', not"):
                mem.put(bad, "k", 1)
        with pytest.raises(ValidationError, match="no leading or trailing '/'"):
            mem.list("/user")
        assert mem.stats().active_items == 0


# -- the Client administers the service -----------------------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[memlane.Memory, str, str]]:
    from live import LiveServer

    with memlane.open(tmp_path / "svc.db", embedder=None) as mem:
        access = Access(mem)
        _, root = access.create_agent("root", admin=True)
        _, plain = access.create_agent("plain")
        server = LiveServer(create_app(mem))
        try:
            yield mem, server.url, root, plain  # type: ignore[misc]
        finally:
            server.stop()


def test_the_client_sets_up_a_fleet_agents_rooms_members_grants_and_reads_the_log(service: Any) -> None:
    mem, url, root, _ = service
    with memlane.Client(url, root) as admin:
        assert admin.me().name == "root" and admin.me().admin
        alice, token = admin.create_agent("alice")
        assert alice.name == "alice" and not alice.admin and token.startswith("ml_")
        assert admin.create_room("eng") == {"name": "eng", "members": []}
        assert admin.add_member("eng", "alice") == {"name": "eng", "members": ["alice"]}
        granted = admin.grant("alice", "team/docs", "read")
        assert [(g.prefix, g.mode) for g in granted.grants] == [(("team", "docs"), "read")]
        assert admin.agent("alice") == Access(mem).agent("alice")  # the same record the service holds
        with memlane.Client(url, token) as as_alice:
            as_alice.put("room/eng", "plan", "ship")
            assert as_alice.me().rooms == ("eng",)
        fresh = admin.rotate_token("alice")
        with memlane.Client(url, token) as stale, pytest.raises(memlane.UnauthorizedError):
            stale.get("room/eng", "plan")
        with memlane.Client(url, fresh) as renewed:
            assert renewed.get("room/eng", "plan").value == "ship"
        assert admin.revoke("alice", "team/docs").grants == ()
        assert admin.remove_member("eng", "alice") == {"name": "eng", "members": []}
        names = [a.name for a in admin.agents()]
        assert names == ["alice", "plain", "root"]
        first = admin.agent_page(limit=2)
        assert [a.name for a in first.entries] == ["alice", "plain"] and first.next_cursor
        assert [a.name for a in admin.agents(cursor=first.next_cursor)] == ["root"]
        assert admin.rooms() == [{"name": "eng", "members": []}]
        log = admin.access_log(agent="alice")
        assert [c.action for c in log] == [
            "create_agent", "add_member", "grant", "rotate_token", "revoke", "remove_member"
        ]  # fmt: skip
        assert [c.to_dict() for c in log] == [c.to_dict() for c in Access(mem).history(agent="alice")]
        assert admin.access_log(after=log[-2].seq, agent="alice") == log[-1:]
        assert admin.delete_agent("alice") is True and admin.delete_agent("alice") is False


def test_the_clients_admin_errors_are_memlanes(service: Any) -> None:
    _, url, root, plain = service
    with memlane.Client(url, root) as admin:
        with pytest.raises(ConflictError, match="already exists"):
            admin.create_agent("plain")
        with pytest.raises(NotFoundError, match="no agent named 'ghost'"):
            admin.agent("ghost")
        with pytest.raises(NotFoundError):
            admin.rotate_token("ghost")
        with pytest.raises(NotFoundError, match="create it with"):
            admin.add_member("no-such-room", "plain")
        with pytest.raises(ValidationError) as bad:
            admin.grant("plain", "team", "admin")
        assert bad.value.field == "mode"
        with pytest.raises(ValidationError):
            admin.agent("a/b")  # a slash stays in the one name, which the service refuses
    with memlane.Client(url, plain) as agent:
        for call in (lambda: agent.agents(), lambda: agent.create_room("x"), lambda: agent.access_log()):
            with pytest.raises(ForbiddenError, match="admin"):
                call()


# -- MCP tool profiles ---------------------------------------------------------------------------------------


def tools_list_chars(mem: memlane.Memory, tools: str | None) -> tuple[list[str], int]:
    """What an agent receives for ``tools/list`` from the service's ``/mcp`` (``?tools=``): names, and the
    characters of the JSON-RPC answer, which sits in the agent's context on every turn."""
    app = create_app(mem)
    _, token = app.state.access.create_agent(f"a{abs(hash(tools)) % 10**6}")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    with TestClient(app) as http:
        answer = http.post(
            "/mcp" + (f"?tools={tools}" if tools is not None else ""),
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers=headers,
        )
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["result"]["tools"]], len(answer.text)


def test_the_default_mcp_profile_fits_an_agents_context_and_each_profile_is_measured(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        sizes = {}
        for profile in [None, *PROFILES]:
            names, chars = tools_list_chars(mem, profile)
            assert names == list(PROFILES[profile or "default"])
            sizes[profile or "default"] = (len(names), chars)
    assert sizes["default"][0] < 10 and sizes["default"][1] < 8_000, sizes
    print("\nMCP tools/list per profile (tools, characters):", json.dumps(sizes))  # the figures in docs/mcp.md
    assert sizes["all"][0] == len(set(sum(PROFILES.values(), ()))) == 32


def test_profiles_combine_and_subtract_and_a_typo_names_the_nearest(tmp_path: Path) -> None:
    assert tool_selection("default,-memory_delete,facts")[:8] == tuple(
        n for n in PROFILES["default"] if n != "memory_delete"
    )
    assert tool_selection(["get", "put"]) == ("memory_get", "memory_put")
    assert tool_selection("memory_set") == ("memory_put",)  # the old name selects the tool
    with pytest.raises(ValidationError, match="did you mean memory_get"):
        tool_selection("memory_gett")
    with pytest.raises(ValidationError, match="leaves no tool"):
        tool_selection("-default")
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        app = create_app(mem)
        _, token = app.state.access.create_agent("a")
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        with TestClient(app) as http:
            bad = http.post(
                "/mcp?tools=factz", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers
            )
    assert bad.status_code == 400 and "did you mean facts" in bad.text


def test_a_tool_outside_the_profile_is_refused_and_the_old_name_still_answers(tmp_path: Path) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        server = build_server(lambda ctx: mem)  # the default profile

        async def main() -> None:
            put = await server.call_tool("memory_set", {"namespace": "user/1", "key": "k", "value": 1})
            assert not put.is_error and put.structured_content["item"]["key"] == "k"
            with pytest.raises(ToolError, match="Unknown tool: memory_query"):
                await server.call_tool("memory_query", {"sql": "SELECT 1"})

        anyio.run(main)
        assert mem.get("user/1", "k").value == 1
    assert TOOL_ALIASES == {"memory_set": "memory_put"}


def test_memlane_mcp_takes_tools_and_refuses_a_typo_before_opening(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "mcp", "--tools", "defualt")
    assert done.returncode == 2 and "did you mean default" in done.stderr
    assert not (tmp_path / "m.db").exists()
