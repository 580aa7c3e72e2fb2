"""``where`` on search and recall, inside each channel's statement, and the condition language's parts of an
item beyond its value (metadata, author, times), for ``select`` too: on every backend (#37)."""

from __future__ import annotations

from typing import Any

import pytest

from memlane import ValidationError
from memlane.core.access import Access

CHANNELS = {"lexical": ["lexical"], "vector": ["vector"], "hybrid": ["lexical", "vector"]}


@pytest.fixture
def crowd(mem: Any) -> Any:
    """200 items, all about rockets; the 10 marked rare (every 20th) rank below the rest on both channels:
    their text is the query word among many others, the others' is the word alone."""
    filler = " ".join(f"w{j}" for j in range(40))
    mem.put_many(
        [
            {
                "namespace": ("crowd", f"n{i % 4}"),
                "key": f"k{i:03}",
                "value": {
                    "text": f"rocket {filler}" if i % 20 == 0 else "rocket",
                    "kind": "rare" if i % 20 == 0 else "common",
                },
                "metadata": {"source": "chat" if i % 20 == 0 else "mail"},
            }
            for i in range(200)
        ]
    )
    return mem


RARE = {f"k{i:03}" for i in range(0, 200, 20)}


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_filtered_search_returns_limit_matches_that_rank_low_without_it(crowd: Any, channel: str) -> None:
    unfiltered = crowd.search("rocket", limit=50, channels=CHANNELS[channel])
    assert not {h.key for h in unfiltered.hits} & RARE  # no window of the unfiltered ranking would reach them
    for where in ({"kind": "rare"}, {"metadata.source": "chat"}, {"value.kind": {"$ne": "common"}}):
        env = crowd.search("rocket", limit=10, channels=CHANNELS[channel], where=where)
        assert {h.key for h in env.hits} == RARE, (channel, where)
        assert env.params["where"] == where
        few = crowd.search("rocket", limit=3, channels=CHANNELS[channel], where=where)
        assert len(few.hits) == 3 and {h.key for h in few.hits} <= RARE


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_a_filtered_recall_returns_limit_matches(crowd: Any, mode: str) -> None:
    env = crowd.recall("rocket", mode=mode, limit=10, floor=False, where={"metadata.source": "chat"})
    assert {h.key for h in env.hits} == RARE
    keyed = crowd.recall("", key="k020", where={"kind": "rare"})
    assert [h.key for h in keyed.hits] == ["k020"]
    assert crowd.recall("", key="k021", where={"kind": "rare"}).hits == []


def test_a_filter_narrows_inside_the_prefix(crowd: Any) -> None:
    env = crowd.search("rocket", namespace_prefix="crowd/n0", limit=10, where={"kind": "rare"})
    assert {h.key for h in env.hits} == {k for k in RARE if int(k[1:]) % 4 == 0}


def test_metadata_and_time_conditions_on_select_and_search(mem: Any, clock: Any) -> None:
    mem.put("t", "old", {"text": "kettle note", "metadata": "in the value"}, metadata={"source": "chat", "n": 2})
    clock.advance(3 * 86400)
    mem.put("t", "new", {"text": "kettle note"}, metadata={"source": "mail", "n": 5})
    clock.advance(3600)

    def keys(where: dict[str, Any]) -> list[str]:
        selected = sorted(i.key for i in mem.select("t", where=where))
        searched = sorted(h.key for h in mem.search("kettle", namespace_prefix="t", where=where).hits)
        assert selected == searched, where
        return selected

    assert keys({"metadata.source": "chat"}) == ["old"]
    assert keys({"metadata": {"n": {"$gte": 3}}}) == ["new"]
    assert keys({"metadata.missing": None}) == ["new", "old"]
    assert keys({"value.metadata": "in the value"}) == ["old"]  # a value field named metadata
    assert keys({"created_at": {"$gte": "-1d"}}) == ["new"]
    assert keys({"created_at": {"$lt": "-2d"}}) == ["old"]
    assert keys({"created_at": {"$gte": "-72h", "$lte": "-30m"}}) == ["new"]
    assert keys({"updated_at": {"$gt": "2026-01-02"}}) == ["new"]  # a date, UTC
    assert keys({"updated_at": {"$lt": "2026-01-01T13:00:00+01:00"}}) == []  # 12:00 UTC: not before itself
    assert keys({"updated_at": {"$lte": "2026-01-01T13:00:00+01:00"}}) == ["old"]
    assert keys({"updated_at": {"$eq": mem.get("t", "new").updated_at.isoformat()}}) == ["new"]
    mem.put("t", "old", {"text": "kettle note"}, metadata={"source": "chat"})  # updated now, created then
    assert keys({"updated_at": {"$gte": "-1m"}, "created_at": {"$lt": "-2d"}}) == ["old"]


@pytest.mark.embedded
def test_author_conditions_and_a_filter_never_reaches_another_agents_items(mem: Any) -> None:
    access = Access(mem)
    access.create_agent("alice")
    access.create_agent("bob")
    access.create_room("eng")
    access.add_member("eng", "alice")
    access.add_member("eng", "bob")
    alice, bob = access.view(access.agent("alice")), access.view(access.agent("bob"))
    bob.put("agent/bob", "secret", {"text": "launch codes rocket", "tag": "secret"}, metadata={"source": "vault"})
    bob.put("room/eng", "shared", {"text": "rocket review", "tag": "shared"})
    alice.put("agent/alice", "mine", {"text": "rocket notes", "tag": "mine"})
    mem.put("room/eng", "unsigned", {"text": "rocket unsigned", "author": "bob"})  # no author; a value field
    for where in ({"tag": "secret"}, {"metadata.source": "vault"}):
        assert alice.search("rocket", where=where).hits == []
        assert alice.recall("rocket", where=where, floor=False).hits == []
        assert alice.select(where=where) == []
        assert alice.recall("", key="secret", where=where).hits == []
    by_bob = alice.search("rocket", where={"author": "bob"}, limit=10)
    assert [h.key for h in by_bob.hits] == ["shared"]  # bob's own namespace stays out of reach
    assert sorted(i.key for i in alice.select(where={"author": None})) == ["unsigned"]
    assert sorted(i.key for i in alice.select(where={"author": {"$ne": "bob"}})) == ["mine", "unsigned"]
    assert [i.key for i in alice.select(where={"value.author": "bob"})] == ["unsigned"]
    assert [h.key for h in bob.search("rocket", where={"tag": "secret"}).hits] == ["secret"]


BAD = {
    "unknown operator": {"kind": {"$like": "r%"}},
    "path too deep": {".".join(["a"] * 17): 1},
    "ordering a list": {"kind": {"$gt": [1]}},
    "ordering a boolean": {"kind": {"$lt": True}},
    "author compared with a number": {"author": 3},
    "ordering author against null": {"author": {"$gt": None}},
    "a time that does not parse": {"created_at": {"$gte": "last tuesday"}},
    "a time as a number": {"updated_at": {"$gte": 1700000000}},
    "a relative time without a unit": {"created_at": {"$gte": "-7"}},
    "a field below a time": {"created_at.year": 2026},
    "a field below author": {"author.name": "x"},
    "not a mapping": ["kind", "rare"],
}


@pytest.mark.parametrize("where", BAD.values(), ids=BAD.keys())
def test_a_bad_filter_is_one_validation_error_naming_where(mem: Any, where: Any) -> None:
    mem.put("b", "k", {"text": "rocket", "kind": "rare"})
    for call in (
        lambda: mem.search("rocket", where=where),
        lambda: mem.recall("rocket", where=where),
        lambda: mem.recall("", key="k", where=where),
        lambda: mem.select("b", where=where),
    ):
        with pytest.raises(ValidationError) as e:
            call()
        assert e.value.field == "where", e.value


def test_a_filtered_vector_search_ranks_exactly_among_the_matches_in_a_large_store(mem: Any, backend: str) -> None:
    """More vectors than the window a filtered vector search tests first: a common filter is answered from the
    window, a rare one from the matches alone; both give the exact order of the matches (PostgreSQL's HNSW
    index is approximate by design, so there only the filter is held)."""
    mem.put_many(
        [
            {
                "namespace": "big",
                "key": f"k{i:04}",
                "value": f"item {i} about {i % 37} and {i % 11}",
                "metadata": {"m": i % 2, "r": i % 300},
            }
            for i in range(1500)
        ]
    )
    ranked = [h.key for h in mem.search("item about 5", channels=["vector"], limit=1000, candidate_k=1500).hits]
    for where, keep in (
        ({"metadata.m": 1}, lambda k: int(k[1:]) % 2 == 1),
        ({"metadata.r": 7}, lambda k: int(k[1:]) % 300 == 7),
    ):
        env = mem.search("item about 5", channels=["vector"], limit=5, where=where)
        assert len(env.hits) == 5 and all(keep(h.key) for h in env.hits), where
        if backend not in ("postgres", "async_postgres"):
            expected = [k for k in ranked if keep(k)][:5] if len([k for k in ranked if keep(k)]) >= 5 else None
            if expected is not None:
                assert [h.key for h in env.hits] == expected, where
