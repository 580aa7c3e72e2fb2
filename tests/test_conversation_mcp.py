"""memory_add_conversation over the service's MCP endpoint: turns stored, found with their neighbours, refused."""

from __future__ import annotations

from typing import Any

from mcp.client.session import ClientSession

from test_mcp import Service, call, http_session, run, service  # noqa: F401


async def add(s: ClientSession, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """memory_add_conversation (its ``session`` argument clashes with test_mcp.call's): (is_error, content)."""
    result = await s.call_tool("memory_add_conversation", arguments)
    assert result.structured_content is not None
    return result.is_error, result.structured_content


def test_mcp_add_conversation_stores_turns_an_agent_can_search(service: Service) -> None:  # noqa: F811
    async def main() -> None:
        async with http_session(service, "alice") as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            said = tools["memory_add_conversation"].description or ""
            assert "use" in said.lower() and "session" in said and "memory_search" in said
            messages = [
                {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday.", "id": "D1:1"},
                {"speaker": "Melanie", "text": "How did it feel?"},
            ]
            ns = "agent/alice"
            _, added = await add(s, namespace=ns, messages=messages, session="s1", at="2023-05-08")
            assert [i["key"] for i in added["items"]] == ["s1.t00001", "s1.t00002"]
            assert added["items"][0]["metadata"] == {"message_id": "D1:1"}
            assert added["items"][0]["author"] == "alice"
            _, more = await add(s, namespace=ns, messages=[{"role": "user", "text": "ok"}], session="s1")
            assert more["items"][0]["key"] == "s1.t00003"
            found = await call(s, "memory_search", query="support group", namespace_prefix=ns)
            hit = next(h for h in found["hits"] if h["key"] == "s1.t00001")
            assert hit["value"]["speaker"] == "Caroline" and hit["value"]["at"].startswith("2023-05-08")
            assert "s1.t00002" in [h["key"] for h in found["hits"]]
            failed, answer = await add(s, namespace=ns, messages=[{"speaker": "x"}], session="s1")
            err = answer["error"]
            assert failed and err["type"] == "validation_error" and err.get("field") == "messages[0].text", err
            failed, answer = await add(s, namespace="agent/bob", messages=messages)
            assert failed and answer["error"]["type"] == "forbidden"

    run(main)
    keys = [i.key for i in service.mem.list("agent/alice", key_prefix="s1").items]
    assert keys == ["s1.t00001", "s1.t00002", "s1.t00003"]
    assert service.mem.list("agent/bob", key_prefix="s1").items == []
