"""The MCP server, driven with the official SDK's own client over both transports.

* stdio: ``memlane mcp --db FILE --embedder fake`` spawned as an MCP client would.
* streamable HTTP: the real service on loopback (``/mcp``), with agent tokens.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from typer.testing import CliRunner

import memlane
from memlane import cli
from memlane.core.access import Access
from memlane.server import create_app

TOOLS = {
    "memory_get",
    "memory_get_many",
    "memory_put",
    "memory_add_conversation",
    "memory_delete",
    "memory_list",
    "memory_summarize",
    "memory_search",
    "memory_recall",
    "memory_history",
}
FACT_TOOLS = {
    "memory_resolve_entity",
    "memory_facts_context",
    "memory_claims_and_sources_context",
    "memory_combined_context",
    "memory_traverse",
    "memory_lookup",
    "memory_hydrate",
    "memory_neighbours",
    "memory_add_entity",
    "memory_add_alias",
    "memory_merge_entities",
    "memory_assert_fact",
    "memory_retract_fact",
    "memory_end_fact",
    "memory_add_document",
    "memory_add_claim",
    "memory_add_claims",
    "memory_supersede_claim",
}
TOOLS |= FACT_TOOLS
QUERY_TOOLS = {"memory_query", "memory_query_space"}
TOOLS |= QUERY_TOOLS
ID_TOOLS = {"memory_get_by_id", "memory_delete_by_id"}
TOOLS |= ID_TOOLS

# The console script installed beside the interpreter running the tests.
MEMLANE = Path(sys.executable).with_name("memlane")
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured content (the JSON text says the same)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content)
    assert result.structured_content is not None
    assert isinstance(result.content[0], TextContent)
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def fail(session: ClientSession, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """Call a tool that must fail with a tool error; its text and structured error."""
    result: CallToolResult = await session.call_tool(tool, arguments)
    assert result.is_error, (tool, result.structured_content)
    assert isinstance(result.content[0], TextContent)
    text = result.content[0].text
    assert "Traceback" not in text
    assert result.structured_content is not None
    return text, result.structured_content["error"]


# -- stdio: the single owner ----------------------------------------------------------


@asynccontextmanager
async def stdio_session(tmp_path: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=str(MEMLANE),
        args=["mcp", "--db", str(tmp_path / "memory.db"), "--embedder", "fake", "--tools", "all"],
        cwd=str(tmp_path),
    )
    with open(tmp_path / "server.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def test_stdio_lists_every_tool_with_guidance(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as session:
            info = session.initialize_result
            assert info is not None and info.server_info.name == "memlane"
            assert info.instructions and "memory_summarize" in info.instructions
            tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        said = {name: tool.description or "" for name, tool in tools.items()}
        for name, tool in tools.items():
            assert "use" in said[name].lower(), name  # each says when to use it
            # answers are JSON objects in structured content; a schema saying only that would cost context
            assert tool.output_schema is None
        # the get / search / summarize guidance
        assert "know the address" in said["memory_get"] and "memory_search" in said["memory_get"]
        assert "topic" in said["memory_search"] and "memory_get" in said["memory_search"]
        assert "FIRST" in said["memory_summarize"] and "memory_get" in said["memory_summarize"]
        assert "with key" in said["memory_get"] and "keyed" in said["memory_recall"]
        assert "key" in tools["memory_recall"].input_schema["properties"]
        assert tools["memory_get"].annotations and tools["memory_get"].annotations.read_only_hint
        assert tools["memory_delete"].annotations and tools["memory_delete"].annotations.destructive_hint

    run(main)


def test_stdio_every_tool_round_trips(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            # typed values come back exactly: a number stays a number, "3.12" stays a string
            cases = [(3.12, "number"), ("3.12", "string"), ("true", "string"), ('{"a": 1}', "string"),
                     ({"a": [1, None]}, "object"), ([1, "x"], "list"), (True, "boolean"), (None, "null")]  # fmt: skip
            for n, (value, value_type) in enumerate(cases):
                item = (await call(s, "memory_put", namespace="types", key=f"v.k{n}", value=value))["item"]
                assert (item["value"], item["value_type"]) == (value, value_type)
                got = await call(s, "memory_get", namespace=["types"], key=f"v.k{n}")
                assert got["found"] is True
                assert (got["item"]["value"], got["item"]["value_type"]) == (value, value_type)
                assert got["item"]["author"] is None  # single owner

            await call(s, "memory_put", namespace="user/123", key="preferences.ui.theme", value="dark")
            await call(s, "memory_put", namespace="user/123", key="preferences.ui.font", value="Fira Code 13")
            await call(s, "memory_put", namespace="user/123", key="preferences.editor.tabs", value=4)
            await call(
                s, "memory_set", namespace="user/123", value="The user is planning a trip to Lisbon in May",
                metadata={"source": "chat"},
            )  # fmt: skip
            await call(s, "memory_put", namespace="user/456", key="preferences.ui.theme", value="light")

            missing = await call(s, "memory_get", namespace="user/123", key="preferences.ui.color")
            assert missing["found"] is False and missing["item"] is None
            assert "memory_search" in missing["message"]

            # summarize: the taxonomy map with counts
            summary = (await call(s, "memory_summarize", namespace="user/123", depth=2))["summary"]
            assert summary["user/123"]["preferences.ui"] == 2
            assert summary["user/123"]["preferences.editor"] == 1
            top = (await call(s, "memory_summarize", depth=1))["summary"]
            assert set(top) == {"types", "user/123", "user/456"}
            assert top["user/456"] == {"preferences": 1}

            # search: by topic
            found = await call(s, "memory_search", query="trip to Lisbon", namespace="user")
            assert found["operation"] == "search"
            assert found["hits"][0]["value"] == "The user is planning a trip to Lisbon in May"
            assert found["hits"][0]["metadata"] == {"source": "chat"}
            lexical = await call(s, "memory_search", query="Fira", channels=["lexical"])
            assert [h["key"] for h in lexical["hits"]] == ["preferences.ui.font"]

            # recall: with a key it is the keyed fetch, newest first, mode keyed
            keyed = await call(s, "memory_recall", query="what theme?", key="preferences.ui.theme")
            assert keyed["params"]["mode"] == "keyed"
            assert [(h["namespace"], h["value"], h["score"]) for h in keyed["hits"]] == [
                (["user", "456"], "light", 0.0),
                (["user", "123"], "dark", 0.0),
            ]
            scoped = await call(s, "memory_recall", key="preferences.ui.theme", namespace="user/123")
            assert [h["value"] for h in scoped["hits"]] == ["dark"]
            searched = await call(s, "memory_recall", query="Lisbon trip", mode="lexical")
            assert searched["operation"] == "recall" and searched["params"]["mode"] == "lexical"
            assert "Lisbon" in searched["hits"][0]["value"]

            # history after a replace
            replaced = await call(s, "memory_put", namespace="user/123", key="preferences.ui.theme", value="solarized")
            assert replaced["item"]["version"] == 2
            versions = (await call(s, "memory_history", namespace="user/123", key="preferences.ui.theme"))["versions"]
            assert [(v["value"], v["change"], v["version"]) for v in versions] == [("dark", "replace", 1)]

            # get_many: input order, null where missing, objects or pairs
            many = await call(
                s,
                "memory_get_many",
                addresses=[
                    {"namespace": "user/456", "key": "preferences.ui.theme"},
                    ["user/123", "nope"],
                    [["user", "123"], "preferences.editor.tabs"],
                ],
            )
            assert [None if i is None else i["value"] for i in many["items"]] == ["light", None, 4]

            # list: address order, paged with the cursor
            page = await call(s, "memory_list", namespace="user/123", key_prefix="preferences", limit=2)
            assert [i["key"] for i in page["items"]] == ["preferences.editor.tabs", "preferences.ui.font"]
            rest = await call(
                s, "memory_list", namespace="user/123", key_prefix="preferences", cursor=page["next_cursor"]
            )
            assert [i["key"] for i in rest["items"]] == ["preferences.ui.theme"] and rest["next_cursor"] is None

            # delete: gone from reads, kept in history; deleting again says so
            assert (await call(s, "memory_delete", namespace="user/456", key="preferences.ui.theme"))["deleted"] is True
            assert (await call(s, "memory_get", namespace="user/456", key="preferences.ui.theme"))["found"] is False
            again = await call(s, "memory_delete", namespace="user/456", key="preferences.ui.theme")
            assert again["deleted"] is False
            history = await call(s, "memory_history", namespace="user/456", key="preferences.ui.theme")
            assert [v["change"] for v in history["versions"]] == ["delete"]

    run(main)


def test_stdio_errors_are_tool_errors_naming_the_field(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            text, error = await fail(s, "memory_put", namespace="a//b", key="k", value=1)
            assert error == {"type": "validation_error", "field": "namespace", "message": "has an empty segment"}
            assert text == "Invalid input: namespace: has an empty segment"

            text, error = await fail(s, "memory_put", namespace="a/b", key="k", value=1, ttl=-1)
            assert error["type"] == "validation_error" and error["field"] == "ttl"
            assert text.startswith("Invalid input: ttl: ")

            _, error = await fail(s, "memory_get", namespace="a/b", key="bad..key")
            assert error["field"] == "key"
            _, error = await fail(s, "memory_recall")
            assert error["field"] == "query"
            _, error = await fail(s, "memory_search", query="x", channels=["telepathy"])
            assert error["field"] == "channels"
            _, error = await fail(s, "memory_list", cursor="not-a-cursor")
            assert error["field"] == "cursor"

            # arguments of the wrong JSON type are refused by the schema, naming the field
            result = await s.call_tool("memory_put", {"namespace": "a", "key": "k", "value": 1, "ttl": "soon"})
            assert result.is_error
            assert isinstance(result.content[0], TextContent) and "ttl" in result.content[0].text
            # nothing was written by any of the refused calls
            assert (await call(s, "memory_list"))["items"] == []

    run(main)
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def test_mcp_command_that_cannot_open_the_store_fails_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, ["mcp", "--db", str(tmp_path / "m.db"), "--embedder", "bogus"])
    assert result.exit_code == 1
    assert result.stdout == ""  # stdout is the protocol channel
    assert result.stderr.startswith("Error: unknown embedder 'bogus'") and result.stderr.count("\n") == 1


# -- streamable HTTP: agents, tokens, visibility --------------------------------------


@dataclass
class Service:
    url: str
    tokens: dict[str, str]
    mem: memlane.Memory
    access: Access


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    from live import LiveServer

    mem = memlane.open(str(tmp_path / "shared.db"), embedder="fake")
    access = Access(mem)
    tokens = {name: access.create_agent(name)[1] for name in ("alice", "bob", "carol")}
    tokens["root"] = access.create_agent("root", admin=True)[1]
    access.create_room("eng")
    access.add_member("eng", "alice")
    access.add_member("eng", "bob")
    mem.put(("agent", "bob"), "plans.launch", "bob's secret rocket launch plan")
    mem.put(("agent", "alice"), "plans.launch", "alice's rocket launch checklist")
    mem.put(("room", "eng"), "release.date", "the rocket release is on March 1")
    mem.put(("project", "x"), "plans.launch", "project x rocket launch, hidden from agents")
    server = LiveServer(create_app(mem))
    yield Service(server.url, tokens, mem, access)
    server.stop()
    mem.close()


@asynccontextmanager
async def http_session(service: Service, agent: str | None, token: str | None = None) -> AsyncIterator[ClientSession]:
    token = service.tokens[agent] if agent else token
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(service.url + "/mcp?tools=all", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def test_http_agent_works_in_its_own_namespace_and_rooms_as_author(service: Service) -> None:
    async def main() -> None:
        async with http_session(service, "alice") as s:
            assert {t.name for t in (await s.list_tools()).tools} == TOOLS
            item = (await call(s, "memory_put", namespace="agent/alice", key="prefs.theme", value=3.12))["item"]
            assert (item["value"], item["value_type"], item["author"]) == (3.12, "number", "alice")
            got = await call(s, "memory_get", namespace=["agent", "alice"], key="prefs.theme")
            assert got["item"]["value"] == 3.12
            await call(s, "memory_put", namespace="room/eng", key="release.date", value="the release is on March 8")
            versions = (await call(s, "memory_history", namespace="room/eng", key="release.date"))["versions"]
            assert versions[0]["changed_by"] == "alice"
            assert (await call(s, "memory_delete", namespace="agent/alice", key="prefs.theme"))["deleted"] is True
        stored = service.mem.get(("room", "eng"), "release.date")
        assert stored is not None and stored.author == "alice" and stored.value == "the release is on March 8"
        # bob, a room member, sees alice's write
        async with http_session(service, "bob") as s:
            got = await call(s, "memory_get", namespace="room/eng", key="release.date")
            assert got["item"]["author"] == "alice"

    run(main)


def test_http_other_namespaces_are_forbidden(service: Service) -> None:
    async def main() -> None:
        async with http_session(service, "alice") as s:
            text, error = await fail(s, "memory_get", namespace="agent/bob", key="plans.launch")
            assert error["type"] == "forbidden"
            assert text == "Forbidden: namespace 'agent/bob' is outside what this agent may read"
            _, error = await fail(s, "memory_put", namespace="agent/bob", key="plans.launch", value="overwritten")
            assert error["type"] == "forbidden" and "outside" in error["message"]
            refused: list[tuple[str, dict[str, Any]]] = [
                ("memory_delete", {"namespace": "agent/bob", "key": "plans.launch"}),
                ("memory_history", {"namespace": "agent/bob", "key": "plans.launch"}),
                ("memory_get_many", {"addresses": [["agent/alice", "plans.launch"], ["agent/bob", "plans.launch"]]}),
                ("memory_list", {"namespace": "agent/bob"}),
                ("memory_summarize", {"namespace": "project"}),
                ("memory_search", {"query": "rocket", "namespace": "agent/bob"}),
                ("memory_recall", {"key": "plans.launch", "namespace": "agent/bob"}),
            ]
            for tool, args in refused:
                _, error = await fail(s, tool, **args)
                assert error["type"] == "forbidden", tool
            # access records are no items: the reserved root is refused, and says why
            for tool, args in [
                ("memory_get", {"namespace": "_memlane/agents", "key": "alice"}),
                ("memory_set", {"namespace": "_memlane/agents", "key": "alice", "value": {"admin": True}}),
            ]:
                _, error = await fail(s, tool, **args)
                assert error["type"] == "validation_error" and "reserved" in error["message"], tool
        untouched = service.mem.get(("agent", "bob"), "plans.launch")
        assert untouched is not None and untouched.value == "bob's secret rocket launch plan"
        # carol is in no room
        async with http_session(service, "carol") as s:
            _, error = await fail(s, "memory_get", namespace="room/eng", key="release.date")
            assert error["type"] == "forbidden"

    run(main)


def test_http_broad_reads_show_only_what_the_agent_may_see(service: Service) -> None:
    async def main() -> None:
        async with http_session(service, "alice") as s:
            found = await call(s, "memory_search", query="rocket launch release")
            seen = {"/".join(h["namespace"]) for h in found["hits"]}
            assert seen == {"agent/alice", "room/eng"}
            listed = await call(s, "memory_list")
            assert [("/".join(i["namespace"]), i["key"]) for i in listed["items"]] == [
                ("agent/alice", "plans.launch"),
                ("room/eng", "release.date"),
            ]
            summary = (await call(s, "memory_summarize"))["summary"]
            assert summary == {"agent/alice": {"plans.launch": 1}, "room/eng": {"release.date": 1}}
            keyed = await call(s, "memory_recall", key="plans.launch")
            assert keyed["params"]["mode"] == "keyed"
            assert [h["namespace"] for h in keyed["hits"]] == [["agent", "alice"]]
        async with http_session(service, "carol") as s:
            assert (await call(s, "memory_search", query="rocket"))["hits"] == []
            assert (await call(s, "memory_list"))["items"] == []
            assert (await call(s, "memory_summarize"))["summary"] == {}
        # an admin sees every namespace, but never the access records
        async with http_session(service, "root") as s:
            summary = (await call(s, "memory_summarize"))["summary"]
            assert set(summary) == {"agent/alice", "agent/bob", "room/eng", "project/x"}

    run(main)


def test_http_visibility_is_checked_on_every_call(service: Service) -> None:
    async def main() -> None:
        async with http_session(service, "alice") as s:
            await call(s, "memory_get", namespace="room/eng", key="release.date")
            service.access.remove_member("eng", "alice")
            _, error = await fail(s, "memory_get", namespace="room/eng", key="release.date")
            assert error["type"] == "forbidden"

    run(main)


def test_http_without_a_valid_token_is_refused(service: Service) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in [accept, accept | {"Authorization": "Bearer ml_wrong"}, accept | {"Authorization": "ml_wrong"}]:
        response = httpx.post(service.url + "/mcp", json=init, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer <token>" in response.json()["error"]["message"]
        assert "ml_wrong" not in response.text
    # a valid token gets through to MCP
    ok = httpx.post(
        service.url + "/mcp", json=init, headers=accept | {"Authorization": f"Bearer {service.tokens['bob']}"}
    )
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "memlane"
    # stateless: no session streams; still 401 before anything else
    assert httpx.get(service.url + "/mcp", headers=accept).status_code == 401
    bob = accept | {"Authorization": f"Bearer {service.tokens['bob']}"}
    for method in ("GET", "DELETE"):
        refused = httpx.request(method, service.url + "/mcp", headers=bob, timeout=5)
        assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    # the /v1 API is unaffected by the mount
    assert httpx.get(service.url + "/v1/operations").status_code == 200

    async def main() -> None:
        # the SDK's client reports the refusal with memlane's message
        for token in (None, "ml_wrong", service.tokens["alice"] + "x"):
            refused = pytest.RaisesExc(MCPError, match="^Unauthorized: a valid token is required")
            with pytest.RaisesGroup(refused, flatten_subgroups=True, allow_unwrapped=True):
                async with http_session(service, None, token):
                    pass

    run(main)


def test_stdio_facts_tools_round_trip(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            ns = "team/acme"
            ravi = await call(s, "memory_add_entity", namespace=ns, name="Ravi", kind="person", aliases=["RK"])
            other = await call(s, "memory_add_entity", namespace=ns, name="Ravi", profile="the designer")
            proj = await call(s, "memory_add_entity", namespace=["team", "acme"], name="Billing migration")
            assert (await call(s, "memory_add_alias", entity_id=proj["id"], alias="billing-v2"))["aliases"] == [
                "billing-v2"
            ]
            ambiguous = await call(s, "memory_resolve_entity", name="Ravi")
            assert ambiguous["status"] == "ambiguous" and len(ambiguous["sections"]["entities"]) == 2
            works = await call(s, "memory_assert_fact", namespace=ns, subject=ravi["id"], predicate="works on",
                               object=proj["id"], source="note:1")  # fmt: skip
            again = await call(s, "memory_assert_fact", namespace=ns, subject=ravi["id"], predicate="works on",
                               object=proj["id"], source="note:2")  # fmt: skip
            assert again["id"] == works["id"] and again["evidence_count"] == 2
            date = await call(s, "memory_assert_fact", namespace=ns, subject=proj["id"], predicate="cutover date",
                              object="2026-03-01")  # fmt: skip
            ctx = await call(s, "memory_facts_context", query="what is Ravi working on", entity_ids=[ravi["id"]])
            assert {f["id"] for f in ctx["sections"]["facts"]} == {works["id"], date["id"]}
            doc = await call(s, "memory_add_document", namespace=ns, title="standup",
                             text=["Ravi: cutover moves to April.", "Dana: ok."])  # fmt: skip
            claim = await call(s, "memory_add_claim", namespace=ns, text="The cutover moves to April",
                               speaker="Ravi", chunk=doc["chunk_ids"][0], about=[proj["id"]])  # fmt: skip
            said = await call(s, "memory_claims_and_sources_context", query="cutover", entity_ids=[proj["id"]])
            assert said["sections"]["claims"][0]["corroboration"] == 1
            assert said["sections"]["passages"][0]["id"] == doc["chunk_ids"][0]
            both = await call(s, "memory_combined_context", query="cutover", entity_ids=[proj["id"]])
            assert set(both["sections"]) == {"facts", "claims", "passages"}
            paths = await call(s, "memory_traverse", entity_ids=[ravi["id"]], hops=1)
            assert paths["sections"]["paths"][0]["names"] == ["Ravi", "Billing migration"]
            near = await call(s, "memory_neighbours", chunk_id=doc["chunk_ids"][1])
            assert [c["position"] for c in near["chunks"]] == [0, 1]
            ended = await call(s, "memory_end_fact", fact_id=works["id"], valid_to="2026-01-01T00:00:00Z")
            assert ended["valid_to"].startswith("2026-01-01")
            assert (await call(s, "memory_retract_fact", fact_id=date["id"]))["retracted_at"] is not None
            assert (await call(s, "memory_hydrate", ids=[date["id"]]))["records"] == [None]
            looked = await call(s, "memory_lookup", ids=[claim["id"], "ent_" + "0" * 32])
            assert looked["records"][0]["text"] == "The cutover moves to April" and looked["records"][1] is None
            many = await call(s, "memory_add_claims", namespace=ns, claims=[
                {"text": "Dana agrees", "speaker": "Dana", "chunk": doc["chunk_ids"][1]}, {"text": "Ravi confirms"},
            ])  # fmt: skip
            assert [c["text"] for c in many["claims"]] == ["Dana agrees", "Ravi confirms"]
            superseded = await call(s, "memory_supersede_claim", claim_id=claim["id"])
            assert superseded["superseded_at"] is not None
            merged = await call(s, "memory_merge_entities", survivor=ravi["id"], merged=other["id"])
            assert merged["id"] == ravi["id"]
            _, error = await fail(s, "memory_facts_context", query="x", hops=9)
            assert error["type"] == "validation_error" and error["field"] == "hops"

    run(main)


def test_http_facts_tools_see_only_the_agents_scope(service: Service) -> None:
    bob_kim = service.mem.add_entity("agent/bob", "Kim", profile="bob's contact")
    service.mem.assert_fact("agent/bob", bob_kim.id, "phone", "555-0100")

    async def main() -> None:
        async with http_session(service, "alice") as s:
            kim = await call(s, "memory_add_entity", namespace="room/eng", name="Kim", profile="eng lead")
            assert kim["namespace"] == ["room", "eng"]
            resolved = await call(s, "memory_resolve_entity", name="Kim")
            assert resolved["status"] == "resolved" and resolved["sections"]["entities"][0]["entity"]["id"] == kim["id"]
            assert (await call(s, "memory_facts_context", query="phone"))["sections"]["facts"] == []
            assert (await call(s, "memory_lookup", ids=[bob_kim.id]))["records"] == [None]
            _, error = await fail(s, "memory_add_entity", namespace="agent/bob", name="Planted")
            assert error["type"] == "forbidden"
            _, error = await fail(s, "memory_traverse", entity_ids=[bob_kim.id])
            assert error["type"] == "not_found"

    run(main)


def test_memory_set_with_index_false_is_read_by_address_and_never_searched(tmp_path: Path) -> None:
    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            item = await call(s, "memory_set", namespace="cache", key="blob", value="quokka blob", index=False)
            assert item["item"]["indexed"] is False
            await call(s, "memory_set", namespace="notes", key="seen", value="quokka seen")
            found = await call(s, "memory_search", query="quokka")
            assert [h["key"] for h in found["hits"]] == ["seen"]
            got = await call(s, "memory_get", namespace="cache", key="blob")
            assert got["found"] is True and got["item"]["indexed"] is False

    anyio.run(main)


def test_an_id_an_agent_cannot_see_answers_exactly_as_an_id_never_written_on_every_surface(service: Service) -> None:
    """HTTP, the Client and MCP: bob's item id, asked by alice, is a 404 / None / found false, byte for byte
    what an id never written gets; bob's item stays. The owner's id reads and deletes work for their agent."""
    bobs = service.mem.get(("agent", "bob"), "plans.launch")
    assert bobs is not None
    never = "0" * 32
    mine = service.mem.put(("agent", "alice"), "scratch", "alice's scratch note")
    headers = {"Authorization": f"Bearer {service.tokens['alice']}"}
    with httpx.Client(base_url=service.url, headers=headers) as http:
        for op in ("get_by_id", "delete_by_id"):
            hidden = http.post(f"/v1/{op}", json={"item_id": bobs.id})
            absent = http.post(f"/v1/{op}", json={"item_id": never})
            assert hidden.status_code == absent.status_code == 404, op
            assert hidden.text.replace(bobs.id, never) == absent.text, op
            assert dict(hidden.headers).keys() == dict(absent.headers).keys(), op
        assert http.post("/v1/get_by_id", json={"item_id": mine.id}).json()["value"] == "alice's scratch note"
        assert http.post("/v1/import_records", json={"records": []}).status_code == 403  # an owner operation
    with memlane.Client(service.url, service.tokens["alice"]) as client:
        assert client.get_by_id(bobs.id) is None and client.get_by_id(never) is None
        assert client.delete_by_id(bobs.id) is False and client.delete_by_id(never) is False

    async def main() -> None:
        async with http_session(service, "alice") as s:
            for tool in ("memory_get_by_id", "memory_delete_by_id"):
                hidden = await call(s, tool, item_id=bobs.id)
                absent = await call(s, tool, item_id=never)
                assert json.loads(json.dumps(hidden).replace(bobs.id, never)) == absent, tool
            assert (await call(s, "memory_get_by_id", item_id=mine.id))["item"]["key"] == "scratch"
            assert (await call(s, "memory_delete_by_id", item_id=mine.id))["deleted"] is True

    run(main)
    assert service.mem.get_by_id(bobs.id) == bobs
    assert service.mem.get_by_id(mine.id) is None
    assert service.mem.history(("agent", "alice"), "scratch")[0].changed_by == "alice"
