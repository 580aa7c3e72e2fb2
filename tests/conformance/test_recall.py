"""Hybrid search, confirm, embedders and recall modes: on every backend."""

from __future__ import annotations

import pytest

import memlane
from memlane import EmbedderMismatchError, ValidationError
from memlane.domain.search import relevance
from memlane.domain.search.embedders import FakeEmbedder

from .indexed import indexed


class CountingEmbedder(FakeEmbedder):
    """The fake embedder, counting calls and optionally refusing to embed."""

    def __init__(self, name: str = "fake", dimension: int = 64) -> None:
        super().__init__(dimension)
        self._name = name
        self.calls: list[int] = []
        self.broken = False

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    def embed_batch(self, texts):  # type: ignore[no-untyped-def]
        if self.broken:
            raise AssertionError("the embedder must not be called")
        if tuple(texts) != relevance.CALIBRATION_TEXTS:  # the relevance scale's batch, once: not the items'
            self.calls.append(len(texts))
        return super().embed_batch(texts)


@pytest.fixture
def kb(mem):
    mem.put("kb/db", "choice", "We chose PostgreSQL for the billing service")
    mem.put("kb/db", "backups", "Nightly backups of the billing database")
    mem.put("kb/web", "cache", "Redis caches session tokens for the web tier")
    mem.put("kb/web", "lang", "The web tier is written in Python")
    indexed(mem)
    return mem


def test_hybrid_reports_both_channels(kb):
    env = kb.search("billing database")
    assert env.params["channels"] == ["lexical", "vector"]
    assert set(env.counts) == {"lexical", "vector"}
    top = env.hits[0]
    assert top.key == "backups"
    assert set(top.ranks) == {"lexical", "vector"}
    # the defaults: the vector channel weighs 0.5 times its embedder's trust, and `fake` (hashed words) is not trusted
    weights = env.params["weights"]
    assert weights == {"lexical": 1.0, "vector": 0.5 * relevance.FUSION_TRUST_FLOOR}
    expected = sum(weights[ch] / (10 + r) for ch, r in top.ranks.items())
    assert top.score == pytest.approx(expected)
    assert -1.0 <= top.channel_scores["vector"] <= 1.0


def test_single_channel_paths(kb):
    lexical = kb.search("python", channels=["lexical"])
    assert [h.key for h in lexical.hits] == ["lang"] and set(lexical.counts) == {"lexical"}
    vector = kb.search("python", channels=["vector"])
    assert set(vector.counts) == {"vector"} and vector.hits[0].key == "lang"
    assert all(set(h.ranks) == {"vector"} for h in vector.hits)


def test_bad_channels_and_weights_are_refused(kb):
    for bad in ([], ["bm25"], "nope"):
        with pytest.raises(ValidationError) as e:
            kb.search("x", channels=bad)
        assert e.value.field == "channels"
    with pytest.raises(ValidationError) as e:
        kb.search("x", weights={"vector": -1})
    assert e.value.field == "weights"


def test_weights_change_fusion(kb):
    env = kb.search("billing", weights={"lexical": 2.0, "vector": 0.5})
    top = env.hits[0]
    expected = 2.0 / (10 + top.ranks["lexical"]) + 0.5 / (10 + top.ranks.get("vector", 10**9))
    assert top.score == pytest.approx(expected, rel=1e-6)


def test_caller_embedding_is_used_instead_of_embedding_the_query(store_url, clock):
    emb = CountingEmbedder()
    with memlane.open(store_url, clock=clock, embedder=emb) as mem:
        mem.put("a", "cats", "cats purr")
        mem.put("a", "dogs", "dogs bark")
        vector = FakeEmbedder().embed_batch(["dogs bark"])[0]
        assert mem.wait_indexed()
        emb.broken = True
        env = mem.search("cats", channels=["vector"], embedding=vector)
        assert env.hits[0].key == "dogs" and env.params["embedding"] == "given"
        with pytest.raises(ValidationError) as e:
            mem.search("cats", embedding=[0.1] * 3)
        assert e.value.field == "embedding"
        with pytest.raises(ValidationError):
            mem.search("cats", embedding=[float("nan")] * 64)


@pytest.mark.parametrize("indexing", ["background", "sync"])
def test_put_many_embeds_once_per_batch(store_url, clock, indexing):
    emb = CountingEmbedder()
    with memlane.open(store_url, clock=clock, embedder=emb, indexing=indexing) as mem:
        mem.put_many([{"namespace": "a", "key": f"k{i}", "value": f"text {i % 3}"} for i in range(30)])
        assert mem.wait_indexed()
        assert emb.calls == [3]  # one call, each distinct text once
        assert mem.stats().vectors == 30


def test_confirm_drops_expired_deleted_and_replaced(store_url, clock):
    # sync, and no catch-up: neither the indexer thread nor the search repairs the stale vector
    with memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as mem:
        mem.catch_up = memlane.CatchUp(items=0)
        mem.put("a", "expires", "orchid greenhouse notes", ttl=5)
        mem.put("a", "deleted", "orchid greenhouse watering")
        mem.put("a", "replaced", "orchid greenhouse humidity")
        mem.put("a", "kept", "orchid greenhouse light")
        assert len(mem.search("orchid greenhouse", channels=["vector"]).hits) == 4
        clock.advance(10)
        mem.delete("a", "deleted")
        # a writer without an embedder replaces the text: its vector is now stale
        with memlane.open(store_url, clock=clock, embedder=None) as plain:
            plain.put("a", "replaced", "completely different words")
        env = mem.search("orchid greenhouse", channels=["vector"])
        assert [h.key for h in env.hits] == ["kept"]
        assert env.dropped_by_hydration == 2  # expired + stale; the deleted vector is gone with its item
        env = mem.search("orchid greenhouse")
        assert [h.key for h in env.hits][0] == "kept"
        assert all(h.key != "replaced" or "vector" not in h.ranks for h in env.hits)


def test_stale_vector_never_surfaces_and_reindex_repairs(store_url, clock):
    with memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as mem:
        mem.catch_up = memlane.CatchUp(items=0)  # the search leaves the waiting item alone
        mem.put("a", "k", "volcano eruption report")
        with memlane.open(store_url, clock=clock, embedder=None) as plain:
            plain.put("a", "k", "gardening tips")
        assert mem.stats().vectors_missing == 1
        env = mem.search("volcano eruption report", channels=["vector"])
        assert env.hits == [] and env.dropped_by_hydration == 1
        assert env.pending_vectors == 1 and env.status == "not_yet_indexed"
        assert mem.reindex() == 1
        assert mem.stats().vectors_missing == 0
        assert mem.search("gardening tips", channels=["vector"]).hits[0].key == "k"


def test_a_search_embeds_the_new_version_first_and_never_serves_the_old_vector(store_url, clock):
    with memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as mem:
        mem.put("a", "k", "volcano eruption report")
        with memlane.open(store_url, clock=clock, embedder=None) as plain:
            plain.put("a", "k", "gardening tips")  # marked: the store records an embedder
        env = mem.search("gardening tips", channels=["vector"])
        (hit,) = env.hits
        assert hit.value == "gardening tips" and hit.item.version == 2
        assert hit.similarity == pytest.approx(1.0)  # the vector of the new text, made by the search
        assert env.pending_vectors == 0 and env.dropped_by_hydration == 0
        assert mem.stats().vectors_missing == 0


def test_vector_cache_follows_other_writers(store_url, clock):
    with (
        memlane.open(store_url, clock=clock, embedder="fake") as reader,
        memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as writer,
    ):
        writer.put("a", "one", "first note about rivers")
        assert [h.key for h in reader.search("rivers", channels=["vector"]).hits] == ["one"]
        writer.put("a", "two", "second note about rivers")
        assert {h.key for h in reader.search("rivers", channels=["vector"]).hits} == {"one", "two"}
        writer.delete("a", "one")
        env = reader.search("rivers", channels=["vector"])
        assert [h.key for h in env.hits] == ["two"]
        writer.put("a", "two", "mountains instead")
        assert reader.search("mountains instead", channels=["vector"]).hits[0].value == "mountains instead"


def test_embedder_is_recorded_and_a_different_one_refused(store_url, clock):
    with memlane.open(store_url, clock=clock, embedder="fake") as mem:
        mem.put("a", "k", "hello world")
        assert mem.stats().embedder == "fake"
    with memlane.open(store_url, clock=clock) as mem:  # no embedder=: the recorded one
        assert mem.embedder is not None and mem.embedder.name == "fake"
    other = CountingEmbedder(name="other", dimension=32)
    with pytest.raises(EmbedderMismatchError, match="reindex"):
        memlane.open(store_url, clock=clock, embedder=other)
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        assert mem.stats().embedder is None
        assert mem.reindex(other) == 1
    with memlane.open(store_url, clock=clock, embedder=other) as mem:
        assert mem.stats().embedder == "other" and mem.stats().vectors == 1
        assert mem.search("hello", channels=["vector"]).hits[0].key == "k"


def test_lexical_only_memory_skips_vector_channel_with_a_note(store_url, clock):
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        mem.put("a", "k", "plain words")
        env = mem.search("plain")
        assert [h.key for h in env.hits] == ["k"]
        assert "vector" not in env.counts
        assert any("vector channel skipped" in n for n in env.notes)


@pytest.mark.embedded
def test_keyed_recall_is_exact_and_touches_no_index(mem, clock):
    mem.put("room/a", "session-digest", "older digest")
    clock.advance(1)
    mem.put("room/b", "session-digest", "newer digest")

    def broken(*args, **kwargs):
        raise AssertionError("keyed recall must not touch an index")

    mem.store.lexical = broken  # type: ignore[method-assign]
    mem.store.vector = broken  # type: ignore[method-assign]
    env = mem.recall("what did we decide?", key="session-digest")
    assert env.operation == "recall" and env.params["mode"] == "keyed"
    assert [h.value for h in env.hits] == ["newer digest", "older digest"]
    assert {h.score for h in env.hits} == {0.0}
    assert env.counts == {"keyed": 2}
    assert mem.recall("x", key="session-digest", limit=1).truncated is True
    assert mem.recall("x", key="nothing-here").hits == []


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_recall_search_modes(kb, mode):
    env = kb.recall("billing service", mode=mode)
    assert env.operation == "recall" and env.params["mode"] == mode
    assert env.hits and env.hits[0].namespace == ("kb", "db")


@pytest.mark.parametrize("mode", ["single", "tiered"])
def test_chooser_modes_fall_back_to_lexical_without_a_chooser(kb, mode):
    env = kb.recall("billing", mode=mode)
    assert env.params["channels"] == ["lexical"]
    assert f"mode {mode!r} needs a chooser; fell back to lexical" in env.notes


def test_unknown_mode_is_refused(kb):
    with pytest.raises(ValidationError) as e:
        kb.recall("x", mode="magic")
    assert e.value.field == "mode"


class ScriptedChooser:
    """Picks options whose last path segment is one of the given words; records each map."""

    def __init__(self, *words: str) -> None:
        self.words = words
        self.maps: list[dict[str, int]] = []

    def choose(self, query, options, *, limit):  # type: ignore[no-untyped-def]
        self.maps.append(dict(options))
        picked = [o for o in options if o.rsplit(".", 1)[-1].rsplit(":", 1)[-1] in self.words]
        return picked[:limit] + ["not/offered:x"]


def test_single_mode_reads_exactly_what_the_chooser_picks(mem):
    mem.put("user/1", "preferences.ui.theme", "dark")
    mem.put("user/1", "preferences.editor", "helix")
    mem.put("user/1", "projects.memlane", "active")
    chooser = ScriptedChooser("editor", "theme")
    env = mem.recall("which editor?", mode="single", chooser=chooser)
    assert [h.key for h in env.hits] == ["preferences.editor", "preferences.ui.theme"]
    assert len(chooser.maps) == 1 and len(chooser.maps[0]) == 3
    assert any("not offered" in n for n in env.notes)


def test_tiered_mode_drills_one_level_at_a_time(mem):
    for i in range(30):
        mem.put("user/1", f"projects.p{i}.status", "ok")
    mem.put("user/1", "preferences.ui.theme", "dark")
    mem.put("user/1", "preferences.ui.font", "mono")
    mem.put("user/1", "preferences.editor", "helix")
    chooser = ScriptedChooser("preferences", "ui", "theme")
    env = mem.recall("what theme?", mode="tiered", chooser=chooser, limit=5)
    assert [h.key for h in env.hits] == ["preferences.ui.theme"]
    first, second, third = chooser.maps
    assert first == {"user/1:preferences": 3, "user/1:projects": 30}
    assert second == {"user/1:preferences.ui": 2, "user/1:preferences.editor": 1}
    assert third == {"user/1:preferences.ui.theme": 1, "user/1:preferences.ui.font": 1}
