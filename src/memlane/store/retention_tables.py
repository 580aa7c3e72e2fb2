"""History retention rules in SQL (migration ``m007_retention``), shared by both backends.

``retention_rules`` holds one row per namespace prefix (its text form, ``''``
for every namespace). :func:`prune` applies them in one transaction, one
``DELETE`` per rule, most specific first, entirely inside the database: a
``ROW_NUMBER()`` over each address's history (``PARTITION BY namespace, key
ORDER BY seq DESC``, the order of ``history()``) picks the versions beyond
``keep_versions``, and ``changed_at <= now - keep_days`` (fixed-width UTC text,
so text order is time order) those past ``keep_days``. A rule's scope is its
prefix (:func:`~memlane.store._common.within_filter`, whole segments) minus the
prefixes of the more specific rules under it, so each namespace follows exactly
the longest rule that covers it and no statement reads rows into Python.

The statements are portable SQL with ``?`` placeholders, run through
:class:`~memlane.store._common.SqlSession` (rewritten for psycopg on PostgreSQL).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..values.model import Namespace
from ..values.retention import RetentionRule
from ._common import SqlSession, ns_tuple, ts, within_filter

_TABLE = """CREATE TABLE retention_rules (
    prefix TEXT{collate} PRIMARY KEY,
    keep_versions INTEGER CHECK (keep_versions >= 0),
    keep_days {real} CHECK (keep_days > 0),
    updated_at TEXT NOT NULL,
    updated_by TEXT,
    CHECK (keep_versions IS NOT NULL OR keep_days IS NOT NULL)
)"""

SQLITE = [_TABLE.format(collate="", real="REAL")]
POSTGRES = [_TABLE.format(collate=' COLLATE "C"', real="DOUBLE PRECISION")]

_COLUMNS = "prefix, keep_versions, keep_days, updated_at, updated_by"


def _prefix(text: str) -> Namespace:
    return ns_tuple(text) if text else ()


def _rule(row: Any) -> RetentionRule:
    return RetentionRule(
        _prefix(row[0]),
        None if row[1] is None else int(row[1]),
        None if row[2] is None else float(row[2]),
        datetime.fromisoformat(row[3]),
        row[4],
    )


def rules(s: SqlSession) -> list[RetentionRule]:
    """Every rule, by prefix text."""
    return [_rule(r) for r in s.rows(f"SELECT {_COLUMNS} FROM retention_rules ORDER BY prefix")]


def set_rule(
    s: SqlSession,
    prefix: Namespace,
    keep_versions: int | None,
    keep_days: float | None,
    now: datetime,
    author: str | None,
) -> RetentionRule:
    """Create or replace the rule at exactly ``prefix``."""
    row = ("/".join(prefix), keep_versions, keep_days, ts(now), author)
    s.run(
        f"INSERT INTO retention_rules ({_COLUMNS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT (prefix) DO UPDATE SET "
        "keep_versions = excluded.keep_versions, keep_days = excluded.keep_days, "
        "updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        row,
    )
    return _rule(row)


def clear_rule(s: SqlSession, prefix: Namespace) -> bool:
    """Remove the rule at exactly ``prefix``; ``False`` if there was none."""
    return s.changed("DELETE FROM retention_rules WHERE prefix = ?", ("/".join(prefix),)) > 0


def _nested(prefix: Namespace, others: list[Namespace]) -> list[Namespace]:
    """The prefixes of ``others`` strictly under ``prefix`` (more specific rules that take over there)."""
    return [o for o in others if len(o) > len(prefix) and o[: len(prefix)] == prefix]


def prune(s: SqlSession, now: datetime) -> dict[Namespace, int]:
    """Delete history versions beyond every rule; returns versions deleted per rule prefix."""
    found = rules(s)
    prefixes = [r.prefix for r in found]
    deleted: dict[Namespace, int] = {}
    # the scopes are disjoint (a rule excludes the rules under it), so the order is only for by_prefix
    for r in sorted(found, key=lambda r: (-len(r.prefix), r.prefix)):
        where: list[str] = []
        params: list[Any] = []
        inside, inside_params = within_filter([r.prefix], "?", dialect=s.dialect)
        if inside:
            where.append(inside)
            params.extend(inside_params)
        nested = _nested(r.prefix, prefixes)
        if nested:
            taken, taken_params = within_filter(nested, "?", dialect=s.dialect)
            where.append(f"NOT {taken}")
            params.extend(taken_params)
        scope = " AND ".join(where) or "1 = 1"
        cutoff = None if r.keep_days is None else ts(now - timedelta(days=r.keep_days))
        if r.keep_versions is None:
            # a time limit alone needs no ranking
            sql = f"DELETE FROM item_history WHERE {scope} AND changed_at <= ?"
            params.append(cutoff)
        else:
            beyond = ["ranked.n > ?"]
            limits: list[Any] = [r.keep_versions]
            if cutoff is not None:
                beyond.append("ranked.changed_at <= ?")
                limits.append(cutoff)
            sql = (
                "DELETE FROM item_history WHERE seq IN (SELECT ranked.seq FROM (SELECT seq, changed_at, "
                "ROW_NUMBER() OVER (PARTITION BY namespace, key ORDER BY seq DESC) AS n "
                f"FROM item_history WHERE {scope}) AS ranked WHERE {' OR '.join(beyond)})"
            )
            params.extend(limits)
        deleted[r.prefix] = s.changed(sql, params)
    return deleted
