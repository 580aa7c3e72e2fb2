"""Every statement of export and import over the facts layer's and the access tables, on either backend.

A table is named by its caller's table of record kinds
(:data:`memlane.domain.facts.transfer.TABLES`: the table, its columns, its key, the
stamps an import may add), never by a record. :mod:`memlane.domain.facts.transfer`
holds the rules (the records' shape and checks, the order, which stamps an
existing row gains) and calls these inside the import's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ._common import SqlSession

# ids asked about in one statement: its parameters stay far below every backend's limit
_BATCH = 500


def _key(key: Sequence[str], values: Sequence[Any], nullable: bool) -> tuple[str, list[Any]]:
    """``WHERE`` text and parameters matching a row by its key; ``nullable`` matches a missing value to NULL."""
    if nullable:
        where = " AND ".join(f"({k} = ? OR ({k} IS NULL AND ? IS NULL))" for k in key)
        return where, [x for value in values for x in (value, value)]
    return " AND ".join(f"{k} = ?" for k in key), list(values)


def rows(s: SqlSession, table: str, columns: Sequence[str], key: Sequence[str]) -> list[tuple[Any, ...]]:
    """Every row of a table, by its key."""
    return s.rows(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {', '.join(key)}")


def present(s: SqlSession, table: str, column: str, values: Sequence[Any]) -> set[Any]:
    """The ``values`` that a row of the table holds in ``column``."""
    found: set[Any] = set()
    for i in range(0, len(values), _BATCH):
        part = values[i : i + _BATCH]
        found.update(
            r[0] for r in s.rows(f"SELECT {column} FROM {table} WHERE {column} IN ({','.join('?' * len(part))})", part)
        )
    return found


def token_holders(s: SqlSession) -> dict[str, str]:
    """The agent holding each token hash."""
    return dict(s.rows("SELECT token_hash, name FROM access_agents"))


def existing(
    s: SqlSession, table: str, key: Sequence[str], values: Sequence[Any], stamps: Sequence[str], nullable: bool
) -> tuple[Any, ...] | None:
    """The row with this key: its ``stamps`` (``(1,)`` when none are asked), or ``None`` if there is none."""
    where, params = _key(key, values, nullable)
    found = s.rows(f"SELECT {', '.join(stamps) or '1'} FROM {table} WHERE {where}", params)
    return found[0] if found else None


def set_stamp(
    s: SqlSession, table: str, key: Sequence[str], values: Sequence[Any], nullable: bool, stamp: str, value: Any
) -> None:
    """Set one stamp of the row with this key."""
    where, params = _key(key, values, nullable)
    s.run(f"UPDATE {table} SET {stamp} = ? WHERE {where}", [value, *params])


def insert(s: SqlSession, table: str, columns: Sequence[str], row: Iterable[Any]) -> None:
    s.run(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", list(row))


def set_reference(s: SqlSession, table: str, column: str, value: Any, row_id: str) -> None:
    """Set a reference of the row ``row_id`` that has none (one that may point forwards, set after every row)."""
    s.run(f"UPDATE {table} SET {column} = ? WHERE id = ? AND {column} IS NULL", (value, row_id))
