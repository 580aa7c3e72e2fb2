"""The statement behind ``Memory.activity``: writes per namespace and time bucket, on either backend.

Every time memlane stores is fixed-width ISO-8601 UTC text (``2026-03-01T09:00:00.000000+00:00``) on both
backends, so a bucket is a prefix of it: the first 13 characters are the hour, the first 10 the day. The
counts come from what the store keeps:

- ``writes``: item versions written, by the time each was written (``updated_at``): the live rows (expired
  ones too) and every earlier version still in ``item_history`` (a history retention rule prunes old ones);
- ``deletes``: versions ended by ``delete`` or ``clear``, by ``changed_at``;
- ``facts``: records of the facts layer, by the time they were recorded: entities (``created_at``), fact
  versions, documents and claims (``recorded_at``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..values.model import Namespace
from ._common import SqlSession, within_filter

# (series, table, time column, extra condition)
_SOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("writes", "items", "updated_at", ""),
    ("writes", "item_history", "updated_at", ""),
    ("deletes", "item_history", "changed_at", "change IN ('delete', 'clear')"),
    ("facts", "entities", "created_at", ""),
    ("facts", "facts", "recorded_at", ""),
    ("facts", "documents", "recorded_at", ""),
    ("facts", "claims", "recorded_at", ""),
)


def counts(
    s: SqlSession, within: Sequence[Namespace], since: str, until: str, width: int
) -> list[tuple[str, str, str, int]]:
    """``(series, namespace, bucket, count)`` of every source with rows in ``[since, until)`` inside ``within``.

    ``width`` is how many leading characters of the ISO time make the bucket (13: the hour, 10: the day).
    """
    scope, scope_params = within_filter(within, "?", "namespace", s.dialect)
    parts: list[str] = []
    params: list[Any] = []
    for series, table, column, extra in _SOURCES:
        conditions = [f"{column} >= ?", f"{column} < ?"] + [c for c in (scope, extra) if c]
        parts.append(
            f"SELECT '{series}' AS series, namespace, substr({column}, 1, {width}) AS bucket, count(*) AS n "
            f"FROM {table} WHERE {' AND '.join(conditions)} GROUP BY namespace, substr({column}, 1, {width})"
        )
        params += [since, until, *scope_params]
    return [(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in s.rows(" UNION ALL ".join(parts), params)]
