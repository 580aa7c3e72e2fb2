"""Read-your-writes' catch-up (#35): what a search embeds before it answers, counted at the embedder.

A search whose scope holds items written but not embedded yet embeds them
first (``Indexer.catch_up``), at most ``CatchUp.items`` of them and only those
of its own scope; an item written with ``index=False`` never reaches the
embedder (it may be a remote one) on any path: a write with vectors made at
once, a batch, a search's catch-up, the background indexer, the scan that marks
missing vectors, ``index`` and ``reindex``. Real stores on SQLite and
PostgreSQL (``store_url``), a counting embedder.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import memlane
from memlane.domain.search.embedders import FakeEmbedder

WAIT_S = 30.0


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Counting(FakeEmbedder):
    """The fake embedder, keeping every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        from memlane.domain.search.relevance import CALIBRATION_TEXTS

        mine = [t for t in texts if t not in CALIBRATION_TEXTS]  # the embedder's scale, measured once, is not an item
        with self.lock:
            if mine or not texts:
                self.texts.extend(mine)
                self.batches.append(mine)
        return super().embed_batch(texts)

    def stored(self, query: str) -> list[str]:
        """What it embedded other than the query."""
        with self.lock:
            return [t for t in self.texts if t != query]


def _waiting(mem: Any, namespace: str, n: int, word: str = "note") -> list[str]:
    texts = [f"waiting {word} {namespace} {i}" for i in range(n)]
    mem.put_many([{"namespace": namespace, "key": f"k{i}", "value": t} for i, t in enumerate(texts)])
    return texts


# -- the bound ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("bound", "expected"), [(0, 0), (1, 1), (5, 5), (9, 9), (60, 40)])
def test_a_search_embeds_at_most_its_bound_of_waiting_items(store_url: str, bound: int, expected: int) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as mem:
        texts = _waiting(mem, "w", 40)
        assert counting.texts == []  # written behind: nothing embedded yet
        mem.catch_up = memlane.CatchUp(items=bound, ms=WAIT_S * 1000)
        env = mem.search("waiting note", namespace_prefix="w", channels=["vector"])
        embedded = counting.stored("waiting note")
        assert len(embedded) == expected and set(embedded) <= set(texts)
        assert len(set(embedded)) == len(embedded)  # none twice
        assert env.pending_vectors == 40 - expected
        assert mem.stats().vectors_missing == 40 - expected


def test_no_time_to_embed_embeds_nothing_and_says_what_waits(store_url: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as mem:
        _waiting(mem, "w", 3)
        mem.catch_up = memlane.CatchUp(items=256, ms=0)
        env = mem.search("waiting note", namespace_prefix="w", channels=["vector"])
        assert counting.stored("waiting note") == [] and env.pending_vectors == 3
        assert env.status == "not_yet_indexed"


def test_searches_one_after_another_each_embed_their_bound_until_nothing_waits(store_url: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as mem:
        texts = _waiting(mem, "w", 12)
        mem.catch_up = memlane.CatchUp(items=5, ms=WAIT_S * 1000)
        pending = [mem.search("waiting note", namespace_prefix="w").pending_vectors for _ in range(4)]
        assert pending == [7, 2, 0, 0]
        assert sorted(counting.stored("waiting note")) == sorted(texts)


# -- the scope ------------------------------------------------------------------------------------------


def test_a_scoped_search_embeds_only_its_own_scopes_waiting_items(store_url: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as mem:
        mine = _waiting(mem, "team/a", 10)
        theirs = _waiting(mem, "team/b", 10) + _waiting(mem, "other", 10)
        mem.catch_up = memlane.CatchUp(items=256, ms=WAIT_S * 1000)
        env = mem.search("waiting note", namespace_prefix="team/a", channels=["vector"])
        assert sorted(counting.stored("waiting note")) == sorted(mine)
        assert env.pending_vectors == 0 and mem.stats().vectors_missing == 20
        # the others' marks are still free to claim: nobody took them and left them leased
        assert mem.store.count_pending(mem._within(("team", "b"))) == 10
        claimed = mem.store.claim_pending(64, "another-indexer", 60.0)
        assert sorted(text for _, _, text, _ in claimed) == sorted(theirs)


def test_a_prefix_scope_covers_its_namespaces_below_and_not_a_sibling_with_a_longer_name(store_url: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as mem:
        below = _waiting(mem, "team/a", 3) + _waiting(mem, "team/a/x", 3)
        _waiting(mem, "team/ab", 3)
        mem.catch_up = memlane.CatchUp(items=256, ms=WAIT_S * 1000)
        env = mem.search("waiting note", namespace_prefix="team/a", channels=["vector"])
        assert sorted(counting.stored("waiting note")) == sorted(below)
        assert env.pending_vectors == 0 and mem.stats().vectors_missing == 3


def test_an_agents_search_embeds_only_what_it_may_read(store_url: str) -> None:
    from memlane.core.access import Access

    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as owner:
        access = Access(owner)
        access.create_agent("ann")
        access.create_room("eng")
        access.add_member("eng", "ann")
        mine = _waiting(owner, "agent/ann", 4) + _waiting(owner, "room/eng", 4)
        _waiting(owner, "agent/bob", 4)
        _waiting(owner, "room/ops", 4)
        owner.catch_up = memlane.CatchUp(items=256, ms=WAIT_S * 1000)
        env = access.view(access.agent("ann")).search("waiting note", channels=["vector"])
        assert sorted(counting.stored("waiting note")) == sorted(mine)
        assert env.pending_vectors == 0 and owner.stats().vectors_missing == 8


# -- index=False never reaches the embedder ------------------------------------------------------------

SECRET = "zebra private cache entry"


def _never_embedded(counting: Counting) -> None:
    leaked = [t for t in counting.texts if "zebra" in t]
    assert leaked == [], leaked
    assert [] not in counting.batches  # nor an empty call in its place (a remote embedder's wasted request)


@pytest.mark.parametrize("indexing", ["sync", "background"])
def test_a_write_with_nothing_to_embed_never_calls_the_embedder(store_url: str, indexing: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing=indexing) as mem:
        mem.put("n", "cached", SECRET, index=False)
        mem.put_many([{"namespace": "n", "key": f"c{i}", "value": SECRET, "index": False} for i in range(3)])
        mem.put("n", "empty", "")
        assert mem.wait_indexed(WAIT_S)
        assert counting.batches == []


@pytest.mark.parametrize("indexing", ["sync", "background", "external"])
def test_text_written_with_index_false_never_reaches_the_embedder(store_url: str, indexing: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing=indexing) as mem:
        mem.put("n", "cached", SECRET, index=False)
        mem.put("n", "meta", {"v": 1}, text=SECRET + " two", index=False)
        mem.put_many(
            [
                {"namespace": "n", "key": "batch", "value": SECRET + " three", "index": False},
                {"namespace": "n", "key": "shown", "value": "a harbour crane"},
            ]
        )
        # an indexed item rewritten unindexed before its vector was made: its mark goes with it
        mem.put("n", "turned", "old harbour words")
        mem.put("n", "turned", SECRET + " four", index=False)
        env = mem.search("harbour crane")  # the catch-up
        assert [h.key for h in env.hits] == ["shown"] or "shown" in [h.key for h in env.hits]
        assert mem.wait_indexed(WAIT_S)  # the background indexer, or this thread
        if indexing == "external":
            mem.index()
        mem.reindex()
        _never_embedded(counting)
        assert counting.stored("harbour crane") != []  # it did embed the indexed ones
        assert mem.stats().vectors_missing == 0


def test_an_async_write_with_index_false_never_reaches_the_embedder(store_url: str) -> None:
    counting = Counting()
    mem = memlane.open(store_url, embedder=counting, indexing="sync")

    async def main() -> None:
        amem = memlane.AsyncMemory(mem)
        try:
            await amem.put("n", "cached", SECRET, index=False)
            await amem.put_many([{"namespace": "n", "key": "batch", "value": SECRET, "index": False}])
            await amem.put("n", "shown", "a harbour crane")
            await amem.search("harbour crane")
        finally:
            await amem.close()

    asyncio.run(main())
    _never_embedded(counting)
    assert counting.stored("harbour crane") == ["a harbour crane"]


def test_unindexed_items_written_before_an_embedder_are_not_marked_by_the_scan(store_url: str) -> None:
    with memlane.open(store_url, embedder=None) as plain:
        plain.put("n", "cached", SECRET, index=False)
        plain.put("n", "shown", "a harbour crane")
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="background") as mem:
        env = mem.search("harbour crane", channels=["vector"])  # the indexer's first scan, then the catch-up
        assert mem.wait_indexed(WAIT_S)
        assert [h.key for h in env.hits] == ["shown"] or mem.search("harbour crane", channels=["vector"]).hits
        mem.index()
        mem.reindex(FakeEmbedder(32))  # a new embedder: every vector made again
        _never_embedded(counting)
    counting2 = Counting()
    with memlane.open(store_url, embedder=None) as plain:
        plain.reindex(counting2)
        _never_embedded(counting2)
        assert counting2.texts == ["a harbour crane"]


@pytest.mark.parametrize("lease", [0, -1, float("inf"), float("nan"), True, "5", None])
def test_index_refuses_a_lease_that_is_not_a_positive_number_of_seconds(tmp_path: Any, lease: Any) -> None:
    with memlane.open(str(tmp_path / "m.db"), embedder=Counting(), indexing="external") as mem:
        mem.put("n", "k", "harbour crane")
        with pytest.raises(memlane.ValidationError, match="positive number of seconds") as refused:
            mem.index(lease=lease)
        assert refused.value.field == "lease"
        assert mem.stats().vectors_missing == 1  # nothing claimed


def test_index_takes_a_lease_under_a_second_and_needs_an_embedder(store_url: str) -> None:
    counting = Counting()
    with memlane.open(store_url, embedder=counting, indexing="external") as mem:
        mem.put("n", "k", "harbour crane")
        assert mem.index(lease=0.5) == 1 and counting.texts == ["harbour crane"]
    with (
        memlane.open(store_url, embedder=None) as plain,
        pytest.raises(memlane.EmbedderError, match="^no embedder to index with; open the store with one"),
    ):
        plain.index()


# -- when the embedder fails ------------------------------------------------------------------------------


class Flaky(Counting):
    """Fails its first ``failures`` calls (a remote embedder down), then works."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                raise RuntimeError("the embedding service is down")
        return super().embed_batch(texts)


def test_a_failed_catch_up_gives_its_claims_back_at_once(tmp_path: Any) -> None:
    flaky = Flaky(1)
    with memlane.open(str(tmp_path / "m.db"), embedder=flaky, indexing="external") as mem:
        _waiting(mem, "w", 3)
        env = mem.search("waiting note", namespace_prefix="w", channels=["lexical", "vector"], embedding=[0.1] * 64)
        assert env.pending_vectors == 3 and any("could not embed" in n for n in env.notes)
        # not leased until the lease runs out: another indexer claims them now
        assert len(mem.store.claim_pending(64, "another-indexer", 60.0)) == 3


def test_the_background_indexer_retries_after_a_failed_batch(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from memlane.domain import indexer

    monkeypatch.setattr(indexer, "RETRY_S", 0.05)
    flaky = Flaky(1)
    with memlane.open(str(tmp_path / "m.db"), embedder=flaky, indexing="background") as mem:
        mem.put("n", "k", "harbour crane")
        assert mem._indexer.running
        deadline = time.monotonic() + WAIT_S
        while (mem.stats().vectors_missing or mem._indexer.error is not None) and time.monotonic() < deadline:
            time.sleep(0.02)  # the thread alone: it failed, waited RETRY_S and embedded the item
        assert flaky.texts == ["harbour crane"] and mem._indexer.error is None
        assert mem.stats().vectors_missing == 0
    assert not mem._indexer.running


def test_wait_indexed_gives_up_on_marks_another_indexer_holds(tmp_path: Any) -> None:
    with memlane.open(str(tmp_path / "m.db"), embedder=Counting(), indexing="external") as mem:
        mem.put("n", "k", "harbour crane")
        assert len(mem.store.claim_pending(64, "another-indexer", 60.0)) == 1
        assert mem.wait_indexed(0.1) is False
        assert mem.stats().vectors_missing == 1


@pytest.mark.parametrize("batch_size", [0, 4097, True, 2.5])
def test_index_refuses_a_batch_size_outside_1_to_4096_naming_it(tmp_path: Any, batch_size: Any) -> None:
    with memlane.open(str(tmp_path / "m.db"), embedder=Counting(), indexing="external") as mem:
        with pytest.raises(memlane.ValidationError) as refused:
            mem.index(batch_size=batch_size)
        assert refused.value.field == "batch_size"


def test_index_embeds_in_batches_of_its_size_and_reports_progress(tmp_path: Any) -> None:
    counting = Counting()
    with memlane.open(str(tmp_path / "m.db"), embedder=counting, indexing="external") as mem:
        _waiting(mem, "w", 5)
        done: list[int] = []
        assert mem.index(batch_size=2, progress=done.append) == 5
        assert done == [2, 4, 5] and [len(b) for b in counting.batches] == [2, 2, 1]
        _waiting(mem, "x", 3)
        assert mem.index(batch_size=4096) == 3
