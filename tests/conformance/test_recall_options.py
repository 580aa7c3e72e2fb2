"""``recall``'s options reach the search on every surface: what the envelope says was asked, and what it found,
are the same on the embedded memory, over HTTP and on PostgreSQL (the client sends only the options given, so a
false or zero one must still be sent)."""

from __future__ import annotations

import pytest

from .indexed import indexed


@pytest.fixture
def kb(mem):
    mem.put("kb/db", "choice", "We chose PostgreSQL for the billing service", metadata={"source": "chat"})
    mem.put("kb/db", "backups", "Nightly backups of the billing database", metadata={"source": "wiki"})
    indexed(mem)
    return mem


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({}, {"floor": True, "min_score": None}),
        ({"floor": False}, {"floor": False, "min_score": None}),
        ({"floor": True, "min_score": 0.0}, {"floor": True, "min_score": 0.0}),
        ({"floor": False, "min_score": 0.25}, {"floor": False, "min_score": 0.25}),
        ({"where": {"metadata.source": "chat"}}, {"where": {"metadata.source": "chat"}}),
    ],
)
def test_recall_passes_each_option_given(kb, options, said):
    env = kb.recall("billing", **options)
    assert {name: env.params.get(name) for name in said} == said
    if "where" in options:
        assert [h.key for h in env.hits] == ["choice"]


def test_recall_with_an_embedding_ranks_by_it_alone(kb):
    env = kb.recall("", mode="vector", embedding=[1.0] + [0.0] * 63, floor=False)  # the fake embedder's 64
    assert env.params["embedding"] == "given" and env.params["floor"] is False and env.hits


def test_recall_with_a_key_is_the_keyed_recall(kb):
    env = kb.recall("", key="backups", namespace_prefix="kb")
    assert env.params["mode"] == "keyed" and [h.key for h in env.hits] == ["backups"]
