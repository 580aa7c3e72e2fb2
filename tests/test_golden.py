"""The wire as users see it, kept in golden files: ``GET /v1/operations`` and MCP ``tools/list``.

A change to either shows here as a diff of JSON. When the change is meant,
regenerate with ``MEMLANE_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and
review the diff of ``tests/golden/`` in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import memlane
from memlane.mcp import build_server
from memlane.server import create_app

GOLDEN = Path(__file__).with_name("golden")


def _check(name: str, actual: Any) -> None:
    path = GOLDEN / name
    text = json.dumps(actual, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("MEMLANE_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    assert json.loads(text) == json.loads(expected), f"{name} changed: rerun with MEMLANE_UPDATE_GOLDEN=1 if meant"


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    with memlane.open(tmp_path / "golden.db", embedder=None) as m:
        yield m


def test_http_operations_match_the_golden_file(mem: Any) -> None:
    with TestClient(create_app(mem)) as http:
        answer = http.get("/v1/operations")
    assert answer.status_code == 200
    _check("operations.json", answer.json())


def test_mcp_tools_match_the_golden_file(mem: Any) -> None:
    server = build_server(lambda ctx: mem, "all")
    tools = anyio.run(server.list_tools)
    _check("mcp_tools.json", [tool.model_dump(mode="json", exclude_none=True) for tool in tools])
