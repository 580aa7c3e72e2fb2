"""Fusion and confirm arithmetic, on plain data."""

from __future__ import annotations

import pytest

from memlane.domain.search import rank
from memlane.values.model import Item


def test_rrf_arithmetic():
    fused = rank.fuse({"lexical": [(1, 9.0), (2, 5.0), (3, 1.0)], "vector": [(3, 0.9), (1, 0.8)]}, rrf_k=60)
    scores = {c.ref: c.score for c in fused}
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[2] == pytest.approx(1 / 62)
    assert [c.ref for c in fused] == [1, 3, 2]
    assert fused[0].ranks == {"lexical": 1, "vector": 2}
    assert fused[0].channel_scores == {"lexical": 9.0, "vector": 0.8}


def test_rrf_k_and_weights():
    fused = rank.fuse({"a": [(1, 0.0)], "b": [(2, 0.0)]}, rrf_k=0, weights={"a": 0.5})
    assert [(c.ref, c.score) for c in fused] == [(2, 1.0), (1, 0.5)]


def test_ties_break_by_ref_deterministically():
    fused = rank.fuse({"a": [(5, 0.0)], "b": [(3, 0.0)]})
    assert [c.ref for c in fused] == [3, 5]


def test_versions_travel_with_nominations():
    (cand,) = rank.fuse({"vector": [(7, 0.5, 3)]})
    assert cand.versions == {"vector": 3}


def _item(version: int) -> Item:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return Item("id", ("a",), "k", 1, "number", "1", {}, None, now, now, None, version)


def test_confirm_drops_missing_and_stale_and_reports_truncation():
    cands = rank.fuse({"vector": [(1, 0.9, 1), (2, 0.8, 1), (3, 0.7, 1), (4, 0.6, 2)]})
    live = {1: _item(1), 2: _item(2), 4: _item(2)}  # 2 changed since indexing, 3 gone
    hits, dropped, truncated = rank.confirm(cands, lambda refs: {r: live[r] for r in refs if r in live}, limit=1)
    assert len(hits) == 1 and dropped == 2 and truncated is True
    hits, dropped, truncated = rank.confirm(cands, lambda refs: {r: live[r] for r in refs if r in live}, limit=5)
    assert len(hits) == 2 and dropped == 2 and truncated is False


def test_terms_are_plain_words_without_stop_words():
    assert rank.terms('"billing" AND (NEAR* db) -x ü') == ["billing", "near", "db", "x", "ü"]
    assert rank.terms("What did Caroline do on the weekend?") == ["caroline", "weekend"]
    assert rank.terms("who is it") == ["who", "is", "it"]  # nothing but stop words: keep them
    assert rank.terms("!!! ???") == []
