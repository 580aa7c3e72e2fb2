"""The memory's life over time: writes, deletes, facts and recalls per namespace and hour (or day).

Writes, deletes and the facts layer's records are counted from what the store keeps (see
:mod:`memlane.store.activity`). Recalls are not stored anywhere (a read writes nothing), so each
:class:`~memlane.core.memory.Memory` counts the ones it answers, in memory, from the moment it was
opened: a search (a recall without ``key`` is one) or a keyed recall counts once for each namespace it
returned hits from. A service with several worker processes has one count per worker; the answer says
since when its count runs (``recalls_since``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..store import activity as sql
from ..store.base import Store
from ..values.errors import ValidationError
from ..values.model import Namespace, namespace_text

BUCKETS = {"hour": 13, "day": 10}  # leading characters of an ISO-8601 time
SERIES = ("writes", "deletes", "facts", "recalls")
MAX_DAYS = 366
# at most this many (namespace, hour) counts are kept; the oldest go first
MAX_KEPT = 100_000


class RecallCounts:
    """Recalls answered by one memory (and the agents' copies of it), per namespace and hour, in memory."""

    def __init__(self, since: datetime) -> None:
        self.since = since
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def count(self, namespaces: Iterable[Namespace], at: datetime) -> None:
        """One recall answered at ``at`` with hits from ``namespaces``."""
        hour = at.isoformat()[: BUCKETS["hour"]]
        with self._lock:
            for ns in set(namespaces):
                key = (namespace_text(ns), hour)
                self._counts[key] = self._counts.get(key, 0) + 1
            if len(self._counts) > MAX_KEPT:  # down to nine tenths at once, so this sort is rare
                for old in sorted(self._counts, key=lambda k: k[1])[: len(self._counts) - MAX_KEPT * 9 // 10]:
                    del self._counts[old]

    def snapshot(self) -> list[tuple[str, str, int]]:
        """``(namespace, hour, count)`` of every count kept."""
        with self._lock:
            return [(ns, hour, n) for (ns, hour), n in self._counts.items()]


def _under(ns: str, within: Sequence[Namespace]) -> bool:
    parts = tuple(ns.split("/"))
    return any(parts[: len(p)] == tuple(p) for p in within)


def window(bucket: Any, days: Any) -> tuple[str, int]:
    """The checked ``bucket`` and ``days``."""
    if bucket not in BUCKETS:
        raise ValidationError("bucket", f"{bucket!r} is not one of {', '.join(BUCKETS)}")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise ValidationError("days", f"must be an integer from 1 to {MAX_DAYS}")
    return bucket, days


def timeline(
    store: Store,
    recalls: RecallCounts,
    within: Sequence[Namespace],
    prefix: Namespace,
    bucket: str,
    days: int,
    now: datetime,
) -> dict[str, Any]:
    """The answer of ``Memory.activity``: a row per namespace and bucket with any count in the window."""
    width = BUCKETS[bucket]
    # the window starts at a bucket's start, so its first bucket is whole
    start = now - timedelta(days=days)
    start = start.replace(minute=0, second=0, microsecond=0)
    if bucket == "day":
        start = start.replace(hour=0)
    since, until = (
        start.isoformat(timespec="microseconds"),
        (now + timedelta(microseconds=1)).isoformat(timespec="microseconds"),
    )
    rows: dict[tuple[str, str], dict[str, int]] = {}

    def add(series: str, ns: str, at: str, n: int) -> None:
        row = rows.setdefault((ns, at[:width]), dict.fromkeys(SERIES, 0))
        row[series] += n

    with store.session() as s:
        for series, ns, at, n in sql.counts(s, within, since, until, width):
            add(series, ns, at, n)
    for ns, hour, n in recalls.snapshot():
        if since[: BUCKETS["hour"]] <= hour <= until[: BUCKETS["hour"]] and _under(ns, within):
            add("recalls", ns, hour, n)
    start_of = ":00:00+00:00" if bucket == "hour" else "T00:00:00+00:00"
    return {
        "namespace_prefix": namespace_text(prefix),
        "bucket": bucket,
        "since": since,
        "until": now.isoformat(timespec="microseconds"),
        "recalls_since": recalls.since.isoformat(timespec="microseconds"),
        "series": list(SERIES),
        "rows": [{"namespace": ns, "at": at + start_of, **counts} for (ns, at), counts in sorted(rows.items())],
    }
