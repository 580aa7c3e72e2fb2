"""Ids that sort by creation time: the one place memlane makes them."""

from __future__ import annotations

import secrets
from datetime import datetime


def new_ids(now: datetime, count: int) -> list[str]:
    """``count`` 32-hex-digit ids that sort by creation time (48-bit ms + 80 random bits)."""
    prefix = f"{int(now.timestamp() * 1000) & 0xFFFFFFFFFFFF:012x}"
    rand = secrets.token_hex(10 * count)
    return [prefix + rand[i : i + 20] for i in range(0, 20 * count, 20)]
