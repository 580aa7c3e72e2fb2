"""A store records its embedder in full (name, dimension, spec): on every backend.

An embedder of the same name and another dimension is refused at open, a store
opened without naming one uses the full recorded spec, and a vector channel
that finds nothing because the dimensions differ says so.
"""

from __future__ import annotations

import json

import pytest

import memlane
from memlane import EmbedderMismatchError
from memlane.domain.search.embedders import FakeEmbedder


def _store_at_384(url: str, clock) -> None:  # type: ignore[no-untyped-def]
    with memlane.open(url, clock=clock, embedder="fake:384", indexing="sync") as mem:
        mem.put("notes", "car", "I drive a blue hatchback to work")
        mem.put("notes", "food", "Lunch is usually a bowl of noodles")


def test_same_name_another_dimension_is_refused_naming_both(store_url, clock):
    _store_at_384(store_url, clock)
    with pytest.raises(EmbedderMismatchError) as refused:
        memlane.open(store_url, clock=clock, embedder="fake")
    message = str(refused.value)
    assert "'fake' (384 dimensions)" in message and "'fake' (64 dimensions)" in message
    assert "reindex" in message and "fake:384" in message  # what to do next: reindex, or the recorded spec
    with pytest.raises(EmbedderMismatchError, match="384 dimensions"):
        memlane.open(store_url, clock=clock, embedder=FakeEmbedder(32))


def test_open_without_an_embedder_uses_the_recorded_spec(store_url, clock):
    _store_at_384(store_url, clock)
    with memlane.open(store_url, clock=clock) as mem:
        assert mem.embedder is not None and (mem.embedder.name, mem.embedder.dimension) == ("fake", 384)
        env = mem.search("blue hatchback", channels=["vector"])
        assert env.counts["vector"] > 0 and env.hits[0].key == "car"
        assert not env.notes
    with memlane.open(store_url, clock=clock, embedder="fake:384") as mem:  # the same spec, named: accepted
        assert mem.search("noodles for lunch").counts["vector"] > 0


def test_the_record_holds_the_full_spec(store_url, clock):
    _store_at_384(store_url, clock)
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        recorded = json.loads(mem.store.get_meta("embedder") or "null")
    assert recorded == {"name": "fake", "dimension": 384, "spec": "fake:384"}


def test_a_record_of_name_only_opens_and_is_completed(store_url, clock):
    """A store recorded with a name only: its dimension comes from its vectors, and the record is completed."""
    _store_at_384(store_url, clock)
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        mem.store.set_meta("embedder", json.dumps({"name": "fake"}))
    with pytest.raises(EmbedderMismatchError, match="384 dimensions"):  # the vectors say 384, "fake" makes 64
        memlane.open(store_url, clock=clock, embedder="fake")
    with memlane.open(store_url, clock=clock, embedder="fake:384") as mem:
        assert mem.search("blue hatchback", channels=["vector"]).counts["vector"] > 0
        assert json.loads(mem.store.get_meta("embedder") or "null") == {
            "name": "fake",
            "dimension": 384,
            "spec": "fake:384",
        }
    with memlane.open(store_url, clock=clock) as mem:  # completed: the recorded spec is used from now on
        assert mem.embedder is not None and mem.embedder.dimension == 384


def test_a_search_whose_dimension_differs_from_the_stores_says_so(store_url, clock):
    """Another process may reindex after this memory opened; its searches then find nothing from vectors."""
    _store_at_384(store_url, clock)
    with memlane.open(store_url, clock=clock, embedder="fake:384") as mem:
        assert mem.search("blue hatchback", channels=["vector"]).counts["vector"] > 0
        with memlane.open(store_url, clock=clock, embedder=None) as other:
            other.reindex("fake:32")
        env = mem.search("blue hatchback", channels=["vector"])
        assert env.counts["vector"] == 0
        assert any("384 dimensions" in n and "32" in n for n in env.notes), env.notes
    with memlane.open(store_url, clock=clock, embedder=None) as mem:  # a caller's embedding of another size
        env = mem.search("blue hatchback", channels=["vector"], embedding=[1.0] * 64)
        assert env.counts["vector"] == 0
        assert any("query vector has 64 dimensions" in n for n in env.notes), env.notes


def test_a_record_of_name_and_dimension_from_before_specs_opens_with_that_dimension(store_url, clock):
    """The record a store of ``fake:384`` got before specs were recorded: ``memlane.open`` makes ``fake:384``."""
    _store_at_384(store_url, clock)
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        mem.store.set_meta("embedder", json.dumps({"name": "fake", "dimension": 384}))
    with memlane.open(store_url, clock=clock) as mem:
        assert mem.embedder is not None and mem.embedder.dimension == 384
        assert mem.search("blue hatchback", channels=["vector"]).counts["vector"] > 0
        assert json.loads(mem.store.get_meta("embedder") or "null")["spec"] == "fake:384"


class Versioned(FakeEmbedder):
    """A fake whose vectors change with its version under one name and dimension (a model revision)."""

    def __init__(self, version: str | None) -> None:
        super().__init__(64)
        self.version = version


def test_a_recorded_version_is_part_of_the_rule(store_url, clock):
    with memlane.open(store_url, clock=clock, embedder=Versioned("2024-05"), indexing="sync") as mem:
        mem.put("notes", "car", "I drive a blue hatchback")
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        assert json.loads(mem.store.get_meta("embedder") or "null")["version"] == "2024-05"
    for other in (Versioned("2025-01"), Versioned(None), FakeEmbedder()):
        with pytest.raises(EmbedderMismatchError, match="version 2024-05"):
            memlane.open(store_url, clock=clock, embedder=other)
    with memlane.open(store_url, clock=clock, embedder=Versioned("2024-05")) as mem:
        assert mem.search("blue hatchback", channels=["vector"]).counts["vector"] == 1
