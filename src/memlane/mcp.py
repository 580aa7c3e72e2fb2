"""memlane's MCP server (to be built)."""

from __future__ import annotations

from typing import Any


def mount_mcp(app: Any, mem: Any, access: Any) -> None:
    """Mount the streamable-HTTP MCP endpoint at ``/mcp`` on the service."""
