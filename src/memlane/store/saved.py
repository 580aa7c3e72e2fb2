"""Every statement over the saved queries' table (``saved_queries``), on either backend.

:mod:`memlane.domain.query.run` holds the rules (names, the fence, who may replace a
query) and calls these inside its transactions.
"""

from __future__ import annotations

from typing import Any

from ._common import SqlSession

_COLUMNS = "name, sql, description, author, created_at, updated_at"


def owner(s: SqlSession, name: str) -> tuple[str | None, str] | None:
    """``(author, created_at)`` of the query saved under ``name``, or ``None`` if there is none."""
    rows = s.rows("SELECT author, created_at FROM saved_queries WHERE name = ?", (name,))
    return (rows[0][0], rows[0][1]) if rows else None


def insert(s: SqlSession, name: str, sql: str, description: str, author: str | None, now: str) -> None:
    s.run(
        f"INSERT INTO saved_queries ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        (name, sql, description, author, now, now),
    )


def update(s: SqlSession, name: str, sql: str, description: str, author: str | None, now: str) -> None:
    s.run(
        "UPDATE saved_queries SET sql = ?, description = ?, author = ?, updated_at = ? WHERE name = ?",
        (sql, description, author, now, name),
    )


def rows(s: SqlSession, name: str | None = None) -> list[tuple[Any, ...]]:
    """Every saved query's row by name, or the one saved under ``name``."""
    if name is None:
        return s.rows(f"SELECT {_COLUMNS} FROM saved_queries ORDER BY name")
    return s.rows(f"SELECT {_COLUMNS} FROM saved_queries WHERE name = ?", (name,))


def delete(s: SqlSession, name: str) -> None:
    s.run("DELETE FROM saved_queries WHERE name = ?", (name,))
