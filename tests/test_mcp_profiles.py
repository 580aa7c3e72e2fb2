"""MCP tool profiles: which tools a server offers (``--tools``, ``?tools=``), what its instructions name, and the
token check in front of ``/mcp``.

In-process and real: ``memlane mcp`` through the CLI with JSON-RPC on its stdin, and the service's ``/mcp``
through Starlette's test client (the app ``memlane serve`` runs).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult
from starlette.testclient import TestClient
from typer.testing import CliRunner

import memlane
from memlane import cli
from memlane.mcp import GUIDE, INSTRUCTIONS, ITEM_TOOLS, PROFILES, TOOL_ALIASES, build_server, tool_selection
from memlane.server import create_app
from memlane.values.errors import ValidationError

FACTS = PROFILES["facts"]
QUERY = ("memory_query", "memory_query_space")
IDS = ("memory_get_by_id", "memory_delete_by_id")
EVERY = (*ITEM_TOOLS, "memory_add_conversation", *FACTS, *QUERY, *IDS)
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def named(text: str) -> set[str]:
    return set(re.findall(r"\bmemory_[a-z_]+", text))


# -- the selection ---------------------------------------------------------------------------------------------


def test_the_profiles_are_these_and_all_is_every_tool_once_in_order() -> None:
    assert PROFILES["default"] == ITEM_TOOLS and len(ITEM_TOOLS) == 9
    assert PROFILES["conversations"] == ("memory_add_conversation",)
    assert PROFILES["query"] == QUERY and len(FACTS) == 18
    assert PROFILES["ids"] == IDS
    assert PROFILES["all"] == EVERY and len(set(EVERY)) == 32
    assert list(PROFILES) == ["default", "conversations", "facts", "query", "ids", "all"]
    assert tool_selection(None) == tool_selection("") == tool_selection([]) == tool_selection(" , ") == ITEM_TOOLS


@pytest.mark.parametrize(
    ("spec", "offered"),
    [
        ("all,-facts", (*ITEM_TOOLS, "memory_add_conversation", *QUERY, *IDS)),
        ("all,-facts,-query,-conversations,-ids", ITEM_TOOLS),
        ("all, -facts , -memory_query", (*ITEM_TOOLS, "memory_add_conversation", "memory_query_space", *IDS)),
        ("facts,-memory_traverse,-lookup", tuple(n for n in FACTS if n not in ("memory_traverse", "memory_lookup"))),
        ("default,-memory_delete", tuple(n for n in ITEM_TOOLS if n != "memory_delete")),
        (["all", "-default", "-facts"], ("memory_add_conversation", *QUERY, *IDS)),
        ("default,ids", (*ITEM_TOOLS, *IDS)),
        ("query,default", (*ITEM_TOOLS, *QUERY)),  # always in the order of "all"
        ("-facts,query", QUERY),  # read left to right: taking away what is not there yet takes nothing
        ("query,-query,get", ("memory_get",)),
    ],
)
def test_profiles_and_tools_combine_and_subtract(spec: Any, offered: tuple[str, ...]) -> None:
    assert tool_selection(spec) == offered


@pytest.mark.parametrize("spec", ["memory_set", "set", " memory_set "])
def test_a_tools_earlier_name_selects_it(spec: str) -> None:
    assert TOOL_ALIASES == {"memory_set": "memory_put"}
    assert tool_selection(spec) == ("memory_put",)
    assert tool_selection(f"default,-{spec.strip()}") == tuple(n for n in ITEM_TOOLS if n != "memory_put")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("memory_gett", "'memory_gett' is neither a profile (default, conversations, facts, query, ids, all) nor "
         "a memlane tool (memory_get, ...); did you mean memory_get"),
        ("factz", "did you mean facts?"),
        ("memory_add_claimz", "; did you mean memory_add_claim or memory_add_claims?"),  # the nearest two
        ("claimz", "; did you mean memory_add_claim or memory_add_claims?"),  # near as memory_claimz
        ("xyzzy123", "nor a memlane tool (memory_get, ...)"),
        ("-default", "'-default' leaves no tool to offer"),
        ("get,-get", "leaves no tool to offer"),
    ],
)  # fmt: skip
def test_an_unknown_name_or_an_empty_selection_is_refused_naming_tools(spec: str, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        tool_selection(spec)
    assert refused.value.field == "tools" and says in str(refused.value)
    if spec == "xyzzy123":
        assert "did you mean" not in str(refused.value)


# -- the instructions --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", [*PROFILES, "get", "set", "search,recall", "facts_context", "query_space", "default,-memory_get_many"]
)
def test_the_instructions_name_only_tools_the_server_offers(spec: str) -> None:
    offered = tool_selection(spec)
    server = build_server(lambda ctx: None, spec)  # type: ignore[arg-type, return-value]
    text = server.instructions or ""
    assert text.startswith("memlane is your durable memory.") and named(text) <= set(offered)
    # and every line whose tools are all offered is kept
    kept = [line for line in GUIDE if named(line) <= set(offered)]
    assert text == "\n".join(kept) + "\n"


def test_every_tool_a_profile_offers_has_its_line_in_the_instructions() -> None:
    for profile, tools in PROFILES.items():
        text = build_server(lambda ctx: None, profile).instructions or ""  # type: ignore[arg-type, return-value]
        assert named(text) == set(tools) - {"memory_add_entity", "memory_add_alias", "memory_merge_entities",
            "memory_assert_fact", "memory_retract_fact", "memory_end_fact", "memory_add_document",
            "memory_add_claim", "memory_add_claims", "memory_supersede_claim", "memory_combined_context",
            "memory_traverse", "memory_lookup", "memory_hydrate", "memory_neighbours"}, profile  # fmt: skip
    assert named(INSTRUCTIONS) == named("\n".join(GUIDE)) and INSTRUCTIONS.count("\n") == len(GUIDE)


# -- through the CLI: memlane mcp --tools ----------------------------------------------------------------------


MEMLANE = Path(sys.executable).with_name("memlane")  # the console script beside the interpreter running the tests
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)


def stdio(tmp_path: Path, tools: str) -> list[dict[str, Any]]:
    """``memlane mcp --tools TOOLS`` as an MCP client runs it: its answers to an initialize and a tools/list."""
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    args = [str(MEMLANE), "mcp", "--db", str(tmp_path / "m.db"), "--embedder", "none", "--tools", tools]
    with subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, note, LIST)))
        proc.stdin.flush()
        timer = threading.Timer(60, proc.kill)  # bounded: a server that never answers is killed
        timer.start()
        try:
            answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
        finally:
            timer.cancel()
            proc.stdin.close()  # the client goes away: the server ends
            proc.wait(timeout=30)
    return answers


@pytest.mark.parametrize(("tools", "offered"), [("memory_set", ["memory_put"]), ("all,-facts,-query,-ids,set", None)])
def test_the_mcp_command_offers_what_tools_selects_earlier_names_included(
    tmp_path: Path, tools: str, offered: list[str] | None
) -> None:
    answers = stdio(tmp_path, tools)
    listed = [t["name"] for t in answers[1]["result"]["tools"]]
    assert listed == (offered or [*ITEM_TOOLS, "memory_add_conversation"])
    assert named(answers[0]["result"]["instructions"]) <= set(listed)


def test_the_mcp_command_refuses_an_unknown_tool_before_opening_the_store(tmp_path: Path) -> None:
    args = ["mcp", "--db", str(tmp_path / "m.db"), "--embedder", "none", "--tools", "default,memory_gett"]
    result = CliRunner().invoke(cli.app, args, input="")
    assert result.exit_code != 0 and "did you mean memory_get" in result.output
    assert not result.output.startswith("{") and not (tmp_path / "m.db").exists()


# -- through the service: /mcp?tools= and the bearer token -----------------------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    with memlane.open(tmp_path / "s.db", embedder=None) as mem:
        app = create_app(mem)
        _, token = app.state.access.create_agent("a")
        with TestClient(app) as http:
            yield http, token


def post(service: tuple[TestClient, str], query: str, message: dict[str, Any], auth: str | None = None) -> Any:
    http, token = service
    headers = {"Authorization": auth or f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    return http.post("/mcp" + query, json=message, headers=headers)


@pytest.mark.parametrize(
    ("query", "offered"),
    [
        ("", ITEM_TOOLS),
        ("?tools=default&tools=facts", (*ITEM_TOOLS, *FACTS)),
        ("?tools=query&tools=conversations&tools=get", ("memory_get", "memory_add_conversation", *QUERY)),
        ("?tools=all&tools=-facts", (*ITEM_TOOLS, "memory_add_conversation", *QUERY, *IDS)),
        ("?tools=all,-facts", (*ITEM_TOOLS, "memory_add_conversation", *QUERY, *IDS)),
        ("?tools=memory_set&tools=get", ("memory_get", "memory_put")),
        ("?other=1&tools=query", QUERY),
    ],
)
def test_every_tools_parameter_of_the_url_counts(
    service: tuple[TestClient, str], query: str, offered: tuple[str, ...]
) -> None:
    listed = post(service, query, LIST)
    assert listed.status_code == 200, listed.text
    assert tuple(t["name"] for t in listed.json()["result"]["tools"]) == offered
    init = post(service, query, INIT)
    text = init.json()["result"]["instructions"]
    assert named(text) <= set(offered) and text == build_server(lambda ctx: None, offered).instructions  # type: ignore[arg-type, return-value]


def test_a_bad_tools_parameter_is_400_naming_the_nearest(service: tuple[TestClient, str]) -> None:
    for query in ("?tools=default&tools=factz", "?tools=-default", "?tools=facts&tools=-facts"):
        bad = post(service, query, LIST)
        assert bad.status_code == 400, query
        assert bad.json()["error"]["message"].startswith("Bad request: ?tools: ")
    assert "did you mean facts" in post(service, "?tools=default&tools=factz", LIST).text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_matched_whatever_its_case(service: tuple[TestClient, str], scheme: str) -> None:
    """RFC 7235: the auth scheme is case-insensitive."""
    _, token = service
    for auth in (f"{scheme} {token}", f"{scheme}   {token}  "):
        answer = post(service, "", INIT, auth)
        assert answer.status_code == 200, (auth, answer.text)
        assert answer.json()["result"]["serverInfo"]["name"] == "memlane"


@pytest.mark.parametrize("auth", ["{token}", "Bearer{token}", "Basic {token}", "Bearer", "Bearer ", "Token {token}"])
def test_anything_but_a_bearer_token_is_401(service: tuple[TestClient, str], auth: str) -> None:
    _, token = service
    answer = post(service, "", INIT, auth.format(token=token))
    assert answer.status_code == 401 and answer.headers["www-authenticate"] == 'Bearer realm="memlane"'
    assert answer.json()["error"]["message"].startswith("Unauthorized: a valid token is required")


# -- calling the tools a server offers ------------------------------------------------------------------------


def test_each_family_of_tools_answers_and_an_earlier_name_calls_its_tool(tmp_path: Path) -> None:
    import anyio

    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        server = build_server(lambda ctx: mem, "all")

        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            result = await server.call_tool(tool, arguments)
            assert isinstance(result, CallToolResult) and not result.is_error, (tool, result)
            return result.structured_content or {}

        async def main() -> None:
            assert (await call("memory_set", namespace="user/1", key="k", value=7))["item"]["value"] == 7
            assert (await call("memory_get", namespace="user/1", key="k"))["item"]["value"] == 7
            await call("memory_resolve_entity", name="nobody")
            assert (await call("memory_query", sql="SELECT count(*) AS n FROM memory_v1.items"))["rows"] == [[1]]

        anyio.run(main)
        assert mem.get("user/1", "k").value == 7  # type: ignore[union-attr]


def test_a_tool_call_on_the_service_runs_as_its_agent_earlier_names_too(service: tuple[TestClient, str]) -> None:
    http, _ = service
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    params = {"name": "memory_set", "arguments": {"namespace": "agent/a", "key": "k", "value": "v"}}
    answer = post(service, "?tools=default", call | {"params": params})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert not result.get("isError"), result
    item = result["structuredContent"]["item"]
    assert item["value"] == "v" and item["namespace"] == ["agent", "a"]
    read = post(service, "", call | {"params": {"name": "memory_history", "arguments": {"namespace": "agent/a",
        "key": "k"}}})  # fmt: skip
    assert not read.json()["result"].get("isError"), read.text
    outside = post(service, "?tools=get", call | {"params": params})  # memory_put is not offered: nor its old name
    assert outside.json()["result"]["isError"] and "Unknown tool: memory_put" in outside.text
    unknown = post(service, "", call | {"params": {"name": "memory_nope", "arguments": {}}})
    assert unknown.json()["result"]["isError"] and "Unknown tool: memory_nope" in unknown.text


def test_the_server_says_who_it_is(service: tuple[TestClient, str]) -> None:
    info = post(service, "", INIT).json()["result"]["serverInfo"]
    assert info["name"] == info["title"] == "memlane" and info["version"] == memlane.__version__
    assert info["description"] == "Durable memory for AI agents: exact keyed lookup and confirmed hybrid search."


def test_the_server_logs_only_warnings_so_a_stdio_clients_log_stays_quiet() -> None:
    """The SDK configures the root logger at the server's level (when nothing configured it before, as in
    ``memlane mcp``): at INFO it would log every request on stderr."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        build_server(lambda ctx: None)  # type: ignore[arg-type, return-value]
        assert root.level == logging.WARNING
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        root.handlers.extend(handlers)
        root.setLevel(level)
