"""The query space's MCP tools (memory_query, memory_query_space), over stdio and the service's /mcp."""

from __future__ import annotations

from pathlib import Path

import memlane
from test_mcp import Service, call, fail, http_session, run, service, stdio_session  # noqa: F401


def test_stdio_query_tools_describe_run_explain_and_refuse(tmp_path: Path) -> None:
    with memlane.open(str(tmp_path / "memory.db"), embedder="fake") as mem:
        mem.put("user/1", "preferences.ui.theme", "dark")
        mem.put("user/2", "preferences.ui.theme", "light")
        mem.save_query("themes", "SELECT namespace, value FROM items WHERE key = :key ORDER BY namespace")

    async def main() -> None:
        async with stdio_session(tmp_path) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            said = tools["memory_query"].description or ""
            assert "memory_query_space" in said and "SELECT" in said and "use" in said.lower()
            assert tools["memory_query"].annotations and tools["memory_query"].annotations.read_only_hint
            space = await call(s, "memory_query_space")
            assert "claims_live" in [v["name"] for v in space["views"]]
            assert [q["name"] for q in space["saved_queries"]] == ["themes"]
            found = await call(s, "memory_query_space", search="who said it")
            assert found["matches"][0]["view"] == "claims"
            result = await call(s, "memory_query", sql="SELECT namespace, count(*) AS n FROM items GROUP BY 1")
            assert result["columns"] == ["namespace", "n"] and result["rows"] == [["user/1", 1], ["user/2", 1]]
            assert result["limits"]["max_rows"] == 1000  # the core's default
            cut = await call(s, "memory_query", sql="SELECT key FROM items", max_rows=1)
            assert cut["truncated"] and cut["truncated_by"] == "max_rows"
            saved = await call(s, "memory_query", saved="themes", params={"key": "preferences.ui.theme"})
            assert saved["rows"] == [["user/1", '"dark"'], ["user/2", '"light"']]
            plan = await call(s, "memory_query", sql="SELECT * FROM items WHERE key = ?", explain=True)
            assert plan["valid"] and plan["views"] == ["items"] and plan["plan"]
            text, err = await fail(s, "memory_query", sql="DELETE FROM items")
            assert err["type"] == "query_refused" and "DELETE" in err["message"] and "Query refused" in text
            text, err = await fail(s, "memory_query", sql="SELECT 1", saved="themes")
            assert err["type"] == "validation_error"

    run(main)
    with memlane.open(str(tmp_path / "memory.db"), embedder="fake") as mem:
        assert len(mem.list().items) == 2  # nothing changed


def test_http_query_tool_sees_only_the_agents_rows(service: Service) -> None:  # noqa: F811
    async def main() -> None:
        async with http_session(service, "alice") as s:
            result = await call(s, "memory_query", sql="SELECT namespace, key FROM items ORDER BY namespace")
            assert result["rows"] == [["agent/alice", "plans.launch"], ["room/eng", "release.date"]]
            joined = await call(
                s,
                "memory_query",
                sql="SELECT count(*) FROM items a, items b WHERE a.text LIKE '%secret%' OR b.namespace = 'agent/bob'",
            )
            assert joined["rows"] == [[0]]

    run(main)
