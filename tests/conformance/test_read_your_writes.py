"""Read-your-writes for vectors and the semantics each surface keeps, on every backend.

With the default write-behind indexing a write never waits for the model, yet
a search right after it finds the item by vector: the search embeds its own
scope's waiting items first (through the store's lease, so no two embedders do
the same work), within a bound; beyond the bound its envelope says how many
still wait and never claims "nothing relevant". Translated from what the peers'
suites check: Parler, RememberStack and LangGraph find an item by vector right
after writing it, and a pure vector search answers the k nearest however far.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import memlane
from memlane.domain.search import relevance
from memlane.domain.search.embedders import FakeEmbedder

pytestmark = pytest.mark.background_indexing

WAIT_S = 30.0


def _vector(text: str) -> list[float]:
    return FakeEmbedder().embed_batch([text])[0]


def test_a_vector_search_right_after_a_write_finds_it(mem: Any) -> None:
    mem.put("notes", "n1", "orchid greenhouse humidity")
    env = mem.search("orchid greenhouse humidity", channels=["vector"])
    assert [h.key for h in env.hits] == ["n1"]
    assert env.hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    assert env.pending_vectors == 0 and env.status == "found"
    # and a replaced value is found at its new version, never through the old one's vector
    mem.put("notes", "n1", "harbour crane lifts containers")
    env = mem.search("harbour crane lifts containers", channels=["vector"])
    assert [(h.key, h.value) for h in env.hits] == [("n1", "harbour crane lifts containers")]
    assert env.hits[0].similarity == pytest.approx(1.0, abs=1e-5) and env.dropped_by_hydration == 0


def test_every_item_of_a_batch_is_found_by_the_next_search(mem: Any) -> None:
    mem.put_many([{"namespace": "batch", "key": f"k{i}", "value": f"note {i} about topic {i * 7}"} for i in range(40)])
    env = mem.search("note 17 about topic 119", channels=["vector"], namespace_prefix="batch")
    assert env.hits[0].key == "k17" and env.pending_vectors == 0


def test_a_pure_vector_search_answers_the_k_nearest_however_far(mem: Any) -> None:
    for i, text in enumerate(["alpine lake", "desert wind", "city traffic", "forest path", "ocean swell"]):
        mem.put("places", f"p{i}", text)
    far = _vector("quarterly tax paperwork")
    for env in (
        mem.search("", channels=["vector"], embedding=far, limit=3),
        mem.recall("", mode="vector", embedding=far, limit=3),  # a caller's vector: no decision by default
    ):
        assert len(env.hits) == 3
        got = [h.similarity for h in env.hits]
        assert got == sorted(got, reverse=True)
        assert env.params.get("floor") is False
    # the caller may still ask for the decision: it keeps exactly the hits it marks relevant
    judged = mem.recall("", mode="vector", embedding=far, limit=3, floor=True)
    assert judged.params["floor"] is True
    assert [h.key for h in judged.hits] == [h.key for h in env.hits if h.relevant]
    assert sum(not h.relevant for h in env.hits) <= judged.below_floor <= 5  # of every candidate, not the top 3


def test_search_returns_the_nearest_and_says_whether_they_answer(mem: Any) -> None:
    mem.put("prefs", "mode", "dark")
    env = mem.search("billing migration")
    assert [h.value for h in env.hits] == ["dark"]  # the k nearest, as every peer's search
    (hit,) = env.hits
    assert hit.relevant is False and 0 <= hit.relevance < 1 and hit.why.startswith("not relevant")
    assert env.status == "nothing_relevant" and env.below_floor == 0
    assert any(n.startswith("nothing relevant") for n in env.notes)
    as_wire = env.to_dict()
    assert as_wire["status"] == "nothing_relevant" and as_wire["hits"][0]["relevant"] is False
    dropped = mem.search("billing migration", floor=True)
    assert dropped.hits == [] and dropped.below_floor == 1 and dropped.status == "nothing_relevant"


def test_recall_of_a_question_in_words_applies_the_decision(mem: Any) -> None:
    mem.put("prefs", "mode", "dark")
    for mode in ("hybrid", "vector", "lexical"):
        env = mem.recall("billing migration", mode=mode)
        assert env.hits == [] and env.status == "nothing_relevant", mode
        assert env.params["floor"] is True
    assert [h.value for h in mem.recall("billing migration", floor=False).hits] == ["dark"]
    found = mem.recall("dark")
    assert [h.value for h in found.hits] == ["dark"] and found.status == "found" and found.hits[0].relevant


def test_a_keyed_recall_says_found_or_nothing(mem: Any) -> None:
    mem.put("prefs", "ui.theme", "dark")
    assert mem.recall("", key="ui.theme").status == "found"
    assert mem.recall("", key="ui.absent").status == "nothing_relevant"
    assert mem.recall("", key="ui.theme").hits[0].relevant is None  # keyed recall never judges


# -- beyond the bound -----------------------------------------------------------------------------


class GatedEmbedder(FakeEmbedder):
    """The fake embedder, holding each batch at a gate until the test opens it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.entered.release()
        if not self.gate.wait(WAIT_S):
            raise RuntimeError("the test never opened the gate")
        return super().embed_batch(texts)


@pytest.fixture
def held(backend: str, store_url: str) -> Any:
    """A memory (or a client of a service over one) whose indexer is stuck in a batch at the model's gate."""
    gated = GatedEmbedder()
    mem = memlane.open(store_url, embedder=gated)
    mem.catch_up = memlane.CatchUp(items=256, ms=50)
    if backend != "client":
        yield mem, gated, mem
    else:
        from live import LiveServer
        from memlane.core.access import Access
        from memlane.server import create_app

        _, token = Access(mem).create_agent("tester", admin=True)
        server = LiveServer(create_app(mem))
        client = memlane.Client(server.url, token)
        yield client, gated, mem
        client.close()
        server.stop()
    gated.gate.set()
    mem.close()


@pytest.fixture(params=["sqlite", "postgres", "client"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_beyond_the_bound_the_answer_says_not_yet_indexed_never_nothing(held: Any) -> None:
    mem, gated, owner = held
    mem.put("n", "k", "harbour crane lifts containers")
    assert gated.entered.acquire(timeout=WAIT_S)  # the background indexer holds the item at the model
    for env in (
        mem.search("harbour crane", channels=["vector"], embedding=_vector("harbour crane")),
        mem.recall("", mode="vector", embedding=_vector("harbour crane"), floor=True),
    ):
        assert env.hits == [] and env.pending_vectors == 1
        assert env.status == "not_yet_indexed"
        assert not any(n.startswith("nothing relevant") for n in env.notes)
        assert any(n.startswith("not yet indexed: 1 items") for n in env.notes)
    # found lexically meanwhile, and the answer then is found
    env = mem.search("harbour crane", embedding=_vector("harbour crane"))
    assert [h.key for h in env.hits] == ["k"] and env.hits[0].ranks == {"lexical": 1}
    gated.gate.set()
    assert owner.wait_indexed(WAIT_S)
    env = mem.search("harbour crane", channels=["vector"], embedding=_vector("harbour crane"))
    assert [h.key for h in env.hits] == ["k"] and env.pending_vectors == 0


# -- two embedders, one piece of work -------------------------------------------------------------


class CountingEmbedder(FakeEmbedder):
    """Counts every text it embeds, across threads."""

    def __init__(self, texts: list[str], lock: threading.Lock) -> None:
        super().__init__()
        self.texts, self.lock = texts, lock

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.texts.extend(texts)
        return super().embed_batch(texts)


def test_searches_of_two_memories_embed_each_waiting_item_once(backend: str, store_url: str) -> None:
    if backend == "client":
        pytest.skip("two memories over one database: the embedded backends")
    texts: list[str] = []
    lock = threading.Lock()
    with memlane.open(store_url, embedder=None) as plain:
        plain.put("seed", "k", "seed text")
    with (
        memlane.open(store_url, embedder=CountingEmbedder(texts, lock), indexing="sync") as one,
        memlane.open(store_url, embedder=CountingEmbedder(texts, lock), indexing="sync") as two,
    ):
        one.wait_indexed(WAIT_S)  # records the store's embedder: from now on every writer marks its items
        texts.clear()
        with memlane.open(store_url, embedder=None) as plain:  # a lexical-only writer: the items wait
            plain.put_many([{"namespace": "w", "key": f"k{i}", "value": f"waiting note {i}"} for i in range(60)])
        start = threading.Barrier(2)
        results: list[Any] = []

        def search(mem: Any) -> None:
            start.wait()
            # the query's words in another order: the fake embedder gives the same vector, the count tells them apart
            results.append(mem.search("7 note waiting", namespace_prefix="w", channels=["vector"]))

        threads = [threading.Thread(target=search, args=(m,)) for m in (one, two)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        assert all(env.hits[0].key == "k7" and env.pending_vectors == 0 for env in results)
        # (the embedder's relevance scale is measured once per memory on relevance.CALIBRATION_TEXTS: not items)
        stored = sorted(t for t in texts if t != "7 note waiting" and t not in relevance.CALIBRATION_TEXTS)
        assert stored == sorted(f"waiting note {i}" for i in range(60))  # each embedded exactly once


# -- what a search cannot or need not wait for ------------------------------------------------------


def test_a_read_only_store_searches_what_it_has_and_says_what_waits(tmp_path: Any) -> None:
    """Items written and not embedded yet, then the file opened read-only: the search cannot claim or embed
    them (both are writes), so it finds them by their words and says how many wait."""
    path = str(tmp_path / "ro.db")
    with memlane.open(path, embedder=FakeEmbedder(), indexing="external") as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"harbour crane {i}"} for i in range(3)])
    with memlane.open(path, embedder=FakeEmbedder(), read_only=True) as ro:
        env = ro.search("harbour crane")
    assert sorted(h.key for h in env.hits) == ["k0", "k1", "k2"]
    assert env.pending_vectors == 3
    assert any("could not embed" in n for n in env.notes)


def test_a_dead_indexers_lease_costs_one_search_its_wait_not_every_search(store_url: str) -> None:
    """Another indexer claimed the marks and died holding its lease: the first search waits its bound for them,
    the searches after it do not wait again while nothing of theirs moves."""
    mem = memlane.open(store_url, embedder=FakeEmbedder(), indexing="external")
    try:
        mem.catch_up = memlane.CatchUp(items=256, ms=400)
        mem.put("n", "k", "harbour crane lifts containers")
        assert len(mem.store.claim_pending(64, "a-dead-indexer", 120)) == 1
        first = mem.search("harbour crane")
        second = mem.search("harbour crane")
        assert first.pending_vectors == second.pending_vectors == 1
        assert first.timings["catch_up_ms"] >= 350  # waited its bound
        assert second.timings["catch_up_ms"] < 200  # did not wait again
    finally:
        mem.close()


def test_a_bad_catch_up_bound_in_the_environment_creates_no_database(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("MEMLANE_SEARCH_EMBED_MS", "soon")
    with pytest.raises(memlane.ValidationError, match="MEMLANE_SEARCH_EMBED"):
        memlane.open(str(tmp_path / "new.db"), embedder=None)
    assert not (tmp_path / "new.db").exists()
