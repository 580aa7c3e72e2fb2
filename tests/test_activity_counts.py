"""The in-memory recall counts behind ``Memory.activity``: bounded, oldest hours dropped first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memlane.domain import activity


def test_recall_counts_keep_at_most_max_kept_dropping_the_oldest_hours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "MAX_KEPT", 10)
    start = datetime(2026, 3, 1, tzinfo=UTC)
    counts = activity.RecallCounts(start)
    for h in range(11):
        counts.count([("team", "a"), ("team", "a")], start + timedelta(hours=h))  # a namespace counts once
    kept = sorted(counts.snapshot(), key=lambda r: r[1])
    assert len(kept) == 9 and all(n == 1 for _, _, n in kept)
    assert kept[0][1] == "2026-03-01T02" and kept[-1][1] == "2026-03-01T10"
