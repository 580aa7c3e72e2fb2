"""Write-behind indexing, the same on every backend: found lexically at once, by vector once indexed, never stale."""

from __future__ import annotations

import numpy as np
import pytest

from memlane.domain.search.embedders import FakeEmbedder

from .indexed import indexed

# these tests are about the default: vectors made behind the write
pytestmark = pytest.mark.background_indexing


def _cosine(a: str, b: str) -> float:
    va, vb = FakeEmbedder().embed_batch([a, b])
    return float(np.dot(np.asarray(va), np.asarray(vb)))


def test_a_write_is_found_lexically_at_once_and_by_vector_once_indexed(mem):
    mem.put("ix", "a", "harbour crane lifts containers")
    mem.put_many([{"namespace": "ix", "key": "b", "value": "orchid greenhouse memo"}])
    assert [h.key for h in mem.search("harbour crane", channels=["lexical"]).hits] == ["a"]
    assert [h.key for h in mem.search("orchid memo", channels=["lexical"]).hits] == ["b"]
    indexed(mem)
    env = mem.search("harbour crane lifts containers", namespace_prefix="ix", channels=["vector"])
    assert env.hits[0].key == "a" and env.counts["vector"] == 2 and env.pending_vectors == 0
    assert env.hits[0].channel_scores["vector"] == pytest.approx(1.0, abs=1e-5)


def test_pending_vectors_is_a_count_on_every_ranked_envelope(mem):
    mem.put("ix", "k", "quokka")
    searched = mem.search("quokka", channels=["vector"])
    assert isinstance(searched.pending_vectors, int) and 0 <= searched.pending_vectors <= 1
    assert mem.recall("quokka", key="k").pending_vectors is None  # keyed: no index involved
    assert mem.search("quokka", channels=["lexical"]).pending_vectors is None  # no vector channel: not said
    indexed(mem)
    assert mem.recall("quokka").pending_vectors == 0


def test_a_vector_is_only_ever_served_for_the_text_it_was_made_from(mem):
    mem.put("ix", "k", "alpha words first")
    mem.put("ix", "other", "words elsewhere")
    indexed(mem)
    mem.put("ix", "k", "beta words second")  # its old vector is stale from this instant
    for _ in range(2):
        for query in ("alpha words first", "beta words second"):
            for hit in mem.search(query, channels=["vector"]).hits:
                # the score is the cosine with the text served: a vector of another version never gets through
                assert hit.channel_scores["vector"] == pytest.approx(_cosine(query, hit.text), abs=1e-5)
        indexed(mem)
    env = mem.search("beta words second", channels=["vector"])
    assert (env.hits[0].key, env.hits[0].item.version) == ("k", 2) and env.pending_vectors == 0
