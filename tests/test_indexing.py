"""Write-behind indexing: writes never wait for the model, and vectors follow without loss or staleness.

The embedders here hold a batch at a gate the test opens, so every ordering a
test needs is made with events and pipes, never with sleeps. Several tests run
real child processes on one database: two indexers sharing the work, and an
indexer killed with SIGKILL in the middle of a batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import memlane
from memlane.domain.search import relevance
from memlane.domain.search.embedders import FakeEmbedder
from memlane.values.errors import ValidationError

WAIT_S = 30.0  # a bound on every wait below, so a regression fails instead of hanging


class GatedEmbedder(FakeEmbedder):
    """The fake embedder, holding each batch until the test lets it through, and recording every text."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.calls = 0
        self.entered = threading.Semaphore(0)  # released once per batch that reached the model
        self.permits = threading.Semaphore(0)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        if tuple(texts) == relevance.CALIBRATION_TEXTS:  # the relevance scale, measured once: not an item's
            return super().embed_batch(texts)
        self.calls += 1
        self.texts.extend(texts)
        self.entered.release()
        if not self.permits.acquire(timeout=WAIT_S):
            raise RuntimeError("the test never let this batch through")
        return super().embed_batch(texts)

    def let_through(self, batches: int = 1000) -> None:
        for _ in range(batches):
            self.permits.release()

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=WAIT_S), "no batch reached the embedder"


def _vector_of(query: str) -> list[float]:
    """The query's vector, made outside the gated embedder (a search would wait at its gate)."""
    return FakeEmbedder().embed_batch([query])[0]


def _indexer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "memlane-indexer" and t.is_alive()}


@pytest.fixture
def gated() -> GatedEmbedder:
    return GatedEmbedder()


@pytest.fixture
def url(store_url: str) -> str:
    return store_url


def test_a_write_returns_before_the_model_runs_and_is_found_lexically_at_once(url, gated):
    with memlane.open(url, embedder=gated) as mem:
        mem.put("n", "k", "harbour crane lifts containers")  # returns although the model is held
        env = mem.search("harbour crane", channels=["lexical", "vector"], embedding=_vector_of("harbour crane"))
        assert [h.key for h in env.hits] == ["k"] and env.hits[0].ranks == {"lexical": 1}
        assert env.counts["vector"] == 0 and env.pending_vectors == 1
        gated.let_through()
        assert mem.wait_indexed(WAIT_S)
        env = mem.search("harbour crane", channels=["vector"], embedding=_vector_of("harbour crane"))
        assert [h.key for h in env.hits] == ["k"] and env.pending_vectors == 0
        assert gated.texts == ["harbour crane lifts containers"]  # embedded once
        assert (mem.stats().vectors, mem.stats().vectors_missing) == (1, 0)


def test_pending_vectors_counts_the_items_in_scope_still_waiting(url, gated):
    with memlane.open(url, embedder=gated) as mem:
        mem.put_many(
            [
                {"namespace": "a/x", "key": "1", "value": "one"},
                {"namespace": "a/y", "key": "2", "value": "two"},
                {"namespace": "ab", "key": "3", "value": "three"},
                {"namespace": "a", "key": "empty", "value": ""},  # nothing to embed: never waits
            ]
        )
        assert (
            mem.search("one", namespace_prefix="a", channels=["vector"], embedding=_vector_of("one")).pending_vectors
            == 2
        )
        assert (
            mem.search("one", namespace_prefix="ab", channels=["vector"], embedding=_vector_of("one")).pending_vectors
            == 1
        )
        assert mem.search("one", channels=["vector", "lexical"], embedding=_vector_of("one")).pending_vectors == 3
        assert mem.search("one", channels=["lexical"]).pending_vectors is None  # the vector channel did not run
        assert mem.recall("one", namespace_prefix="a/x", embedding=_vector_of("one")).pending_vectors == 1
        assert mem.recall("one", key="1").pending_vectors is None
        gated.let_through()
        assert mem.wait_indexed(WAIT_S)
        assert mem.search("one", channels=["vector"], embedding=_vector_of("one")).pending_vectors == 0


def test_sync_indexing_embeds_before_the_write_returns_and_starts_no_thread(url):
    before = _indexer_threads()
    embedder = GatedEmbedder()
    embedder.let_through()
    with memlane.open(url, embedder=embedder, indexing="sync") as mem:
        mem.put("n", "k", "zebra quokka")
        assert embedder.calls == 1 and (mem.stats().vectors, mem.stats().vectors_missing) == (1, 0)
        env = mem.search("zebra", channels=["vector"], embedding=_vector_of("zebra"))
        assert [h.key for h in env.hits] == ["k"] and env.pending_vectors == 0
        assert _indexer_threads() == before


def test_indexing_accepts_only_its_two_modes(url):
    with pytest.raises(ValidationError, match="indexing"):
        memlane.open(url, embedder="fake", indexing="later")


def test_wait_indexed_takes_none_or_a_finite_number_of_seconds(url):
    with memlane.open(url, embedder="fake") as mem:
        mem.put("a", "k", "one two")
        for bad in ("5", -1, float("nan"), float("inf"), True):
            with pytest.raises(ValidationError, match="timeout") as e:
                mem.wait_indexed(bad)
            assert e.value.field == "timeout", bad
        mem.wait_indexed(0)  # zero is a timeout too: look once, do not wait
        assert mem.wait_indexed(None) is True


def test_close_stops_the_indexer_thread(url, gated):
    before = _indexer_threads()
    mem = memlane.open(url, embedder=gated)
    mem.put("n", "k", "zebra")
    gated.wait_entered()  # the thread is in the middle of a batch
    (thread,) = _indexer_threads() - before
    gated.let_through()
    mem.close()
    assert not thread.is_alive()
    with memlane.open(url, embedder="fake", indexing="sync") as again:
        assert (again.stats().vectors, again.stats().vectors_missing) == (1, 0)  # the batch was finished


def test_a_version_replaced_while_it_is_embedded_is_never_served(url, gated):
    with memlane.open(url, embedder=gated) as mem:
        mem.put("n", "k", "alpha words first")
        gated.wait_entered()  # the indexer holds version 1's text
        mem.put("n", "k", "beta words second")  # the write does not wait for it
        gated.let_through(1)
        gated.wait_entered()  # version 1's batch is done; version 2's is at the model
        assert (mem.stats().vectors, mem.stats().vectors_missing) == (0, 1)  # version 1's vector was not kept
        env = mem.search("alpha words first", channels=["vector"], embedding=_vector_of("alpha words first"))
        assert env.hits == [] and env.counts["vector"] == 0 and env.pending_vectors == 1
        gated.let_through()
        assert mem.wait_indexed(WAIT_S)
        env = mem.search("beta words second", channels=["vector"], embedding=_vector_of("beta words second"))
        assert [(h.key, h.item.version) for h in env.hits] == [("k", 2)]
        assert env.hits[0].channel_scores["vector"] == pytest.approx(1.0, abs=1e-5)  # made from version 2
        assert gated.texts == ["alpha words first", "beta words second"]


def test_items_written_without_an_embedder_are_picked_up_without_a_reindex(url):
    with memlane.open(url, embedder=None) as plain:  # a store that never had an embedder: nothing is marked
        plain.put_many([{"namespace": "old", "key": str(i), "value": f"old note {i}"} for i in range(5)])
    with memlane.open(url, embedder="fake") as mem:
        assert mem.stats().vectors_missing == 5
        assert mem.wait_indexed(WAIT_S)
        assert (mem.stats().vectors, mem.stats().vectors_missing) == (5, 0)
        # a lexical-only writer on a store with an embedder marks what it writes, for the indexers
        with memlane.open(url, embedder=None) as plain:
            plain.put("new", "k", "new note from a lexical writer")
        mem.catch_up = memlane.CatchUp(items=0)
        env = mem.search("new note", channels=["vector"], embedding=_vector_of("new note"))
        assert env.pending_vectors == 1 and env.status == "not_yet_indexed"
        assert mem.wait_indexed(WAIT_S)
        assert (
            mem.search("lexical writer", channels=["vector"], embedding=_vector_of("lexical writer")).hits[0].key == "k"
        )


def test_the_background_thread_embeds_a_backlog_it_finds_at_start(url):
    with memlane.open(url, embedder=None) as plain:
        plain.put_many([{"namespace": "old", "key": str(i), "value": f"old note {i}"} for i in range(3)])
    embedder = GatedEmbedder()
    with memlane.open(url, embedder=embedder) as mem:
        mem.start_indexing()  # as the service does at startup: no write, no wait_indexed
        embedder.wait_entered()
        assert sorted(embedder.texts) == [f"old note {i}" for i in range(3)]
        embedder.let_through()


def test_wait_indexed_without_an_embedder_answers_at_once(url):
    with memlane.open(url, embedder="fake", indexing="sync") as mem:
        mem.put("n", "k", "zebra")
    with memlane.open(url, embedder=None) as plain:
        assert plain.wait_indexed() is True
        plain.put("n", "k2", "quokka")  # marked for an indexer this memory cannot be
        assert plain.wait_indexed() is False


# -- several processes on one database ---------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys
    import memlane
    from memlane.domain.search.embedders import FakeEmbedder
    from memlane.domain.search.relevance import CALIBRATION_TEXTS

    class Counting(FakeEmbedder):
        texts = []

        def embed_batch(self, texts):
            if tuple(texts) == CALIBRATION_TEXTS:  # the relevance scale, measured once: not an item's
                return super().embed_batch(texts)
            Counting.texts.extend(texts)
            if mode == "hang":
                print("entered", flush=True)
                sys.stdin.readline()  # held here until the parent kills this process
            return super().embed_batch(texts)

    url, mode = sys.argv[1], sys.argv[2]
    with memlane.open(url, embedder=Counting(), indexing="sync") as mem:
        print("ready", flush=True)
        sys.stdin.readline()  # every child starts draining at once
        mem.index(batch_size=8, lease=float(sys.argv[3]))
    print(json.dumps(Counting.texts), flush=True)
    """
)


def _child(url: str, mode: str, lease: float = 120.0) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(memlane.__file__).parents[1]), *sys.path]))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, mode, str(lease)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _marked_store(url: str, count: int) -> list[str]:
    with memlane.open(url, embedder="fake", indexing="sync") as mem:
        mem.put("seed", "k", "seed text")  # records the store's embedder
    texts = [f"note number {i} about topic {i % 7}" for i in range(count)]
    with memlane.open(url, embedder=None) as plain:  # marks every item for the indexers
        plain.put_many([{"namespace": "n", "key": str(i), "value": t} for i, t in enumerate(texts)])
    return texts


def test_two_processes_share_the_backlog_without_embedding_an_item_twice(url):
    texts = _marked_store(url, 240)
    children = [_child(url, "count"), _child(url, "count")]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    embedded = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        embedded.append(json.loads(out.strip().splitlines()[-1]))
    everything = embedded[0] + embedded[1]
    assert sorted(everything) == sorted(texts) and len(everything) == len(set(everything))
    with memlane.open(url, embedder="fake", indexing="sync") as mem:
        assert (mem.stats().vectors, mem.stats().vectors_missing) == (241, 0)
        assert mem.search("note", channels=["vector"], embedding=_vector_of("note")).pending_vectors == 0


def test_an_indexer_killed_in_the_middle_of_a_batch_is_resumed_by_the_next(url):
    texts = _marked_store(url, 20)
    child = _child(url, "hang", lease=1.0)
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "entered"  # it holds a claimed batch at the model
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=WAIT_S)
    with memlane.open(url, embedder="fake", indexing="sync") as mem:
        mem.catch_up = memlane.CatchUp(items=0)
        assert mem.search("note", channels=["vector"], embedding=_vector_of("note")).pending_vectors == len(
            texts
        )  # nothing was lost
        # the killed indexer's batch comes back when its lease runs out
        assert mem.wait_indexed(WAIT_S)
        assert (mem.stats().vectors, mem.stats().vectors_missing) == (len(texts) + 1, 0)
        assert (
            mem.search("note number 3 about", channels=["vector"], embedding=_vector_of("note number 3 about"))
            .hits[0]
            .key
            == "3"
        )


def test_index_watch_embeds_what_other_writers_mark_until_the_memory_closes(url):
    _marked_store(url, 0)
    watcher = memlane.open(url, embedder="fake", indexing="sync")
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(watcher.index(watch=True, batch_size=4)))
    thread.start()
    with memlane.open(url, embedder=None) as plain:  # another writer, with no embedder
        plain.put_many([{"namespace": "w", "key": str(i), "value": f"watched note {i}"} for i in range(6)])
        deadline = time.monotonic() + WAIT_S
        while plain.stats().vectors < 7:  # the seed and the six: polling the watcher's progress
            assert time.monotonic() < deadline, "the watcher never embedded the new items"
            time.sleep(0.01)
    watcher.close()
    thread.join(WAIT_S)
    assert not thread.is_alive() and done == [6]


def test_memlane_index_drains_from_the_shell(url, backend, monkeypatch):
    if backend != "sqlite":
        pytest.skip("the command line is the same on every backend")
    from typer.testing import CliRunner

    from memlane.cli import app

    _marked_store(url, 10)
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")
    result = CliRunner().invoke(app, ["index", "--db", url, "--json", "--batch-size", "4"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"embedded": 10, "vectors": 11, "vectors_missing": 0}
    again = CliRunner().invoke(app, ["index", "--db", url])
    assert again.exit_code == 0 and again.stdout.startswith("Embedded 0 items; 11 vectors, 0 missing")


def test_wait_indexed_is_not_a_wire_operation_but_pending_vectors_travels(tmp_path: Any) -> None:
    from live import LiveServer
    from memlane.core.access import Access
    from memlane.server import create_app

    with memlane.open(str(tmp_path / "s.db"), embedder="fake") as mem:
        _, token = Access(mem).create_agent("tester", admin=True)
        server = LiveServer(create_app(mem))
        try:
            with memlane.Client(server.url, token) as client:
                client.put("n", "k", "zebra quokka")
                assert client.search("zebra", channels=["lexical"]).hits[0].key == "k"
                assert mem.wait_indexed(WAIT_S)  # the service's memory: the service's own indexer
                env = client.search("zebra", channels=["vector"])
                assert [h.key for h in env.hits] == ["k"] and env.pending_vectors == 0
        finally:
            server.stop()


def test_the_search_catch_up_bound_is_checked_and_read_from_the_environment(monkeypatch):
    assert memlane.CatchUp() == memlane.CatchUp(items=256, ms=1000.0)
    for bad in ({"items": -1}, {"items": 1.5}, {"items": True}, {"ms": -1}, {"ms": float("inf")}, {"ms": "fast"}):
        with pytest.raises(ValidationError):
            memlane.CatchUp(**bad)
    monkeypatch.setenv("MEMLANE_SEARCH_EMBED_ITEMS", "0")
    monkeypatch.setenv("MEMLANE_SEARCH_EMBED_MS", "250")
    assert memlane.CatchUp.from_env() == memlane.CatchUp(items=0, ms=250.0)
    with memlane.open(":memory:", embedder="fake") as mem:
        assert mem.catch_up == memlane.CatchUp(items=0, ms=250.0)
    monkeypatch.setenv("MEMLANE_SEARCH_EMBED_MS", "soon")
    with pytest.raises(ValidationError, match="MEMLANE_SEARCH_EMBED_MS"):
        memlane.CatchUp.from_env()


# -- the indexer keeps the SQLite store's shared vector index folded ---------------------------------------------


def _generation(path: Path, seconds: float = 10.0) -> str | None:
    """The shared vector index's current generation of the store at ``path``, waiting up to ``seconds`` for one
    (the indexer folds after its batch, in its own thread)."""
    from memlane.store.vector_index import current_name, directory_for

    deadline = time.monotonic() + seconds
    while (name := current_name(directory_for(str(path)))) is None and time.monotonic() < deadline:
        time.sleep(0.02)  # polling another thread's file, not ordering events
    return name


def test_the_indexer_folds_vectors_stored_before_it_started(tmp_path: Path) -> None:
    """A store whose vectors were all written before (synchronously, with no indexer): the background indexer's
    first batch finds no marks, yet folds what waits into the shared index."""
    from memlane.store.vector_index import FOLD_MIN

    path = tmp_path / "behind.db"
    with memlane.open(str(path), embedder="fake", indexing="sync") as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"apple {i}"} for i in range(FOLD_MIN + 10)])
    assert _generation(path, 0) is None
    with memlane.open(str(path), embedder="fake", indexing="background") as mem:
        mem.start_indexing()
        assert _generation(path) is not None


def test_the_indexer_folds_once_enough_vectors_wait_whatever_batch_brings_them(tmp_path: Path) -> None:
    """Writes indexed behind, many batches of them: the fold that publishes a generation comes after a later
    batch (the first one brings too few vectors to fold)."""
    from memlane.store.vector_index import FOLD_MIN

    path = tmp_path / "written.db"
    with memlane.open(str(path), embedder="fake", indexing="background") as mem:
        mem.start_indexing()
        for chunk in range(FOLD_MIN // 100 + 1):
            mem.put_many([{"namespace": "n", "key": f"k{chunk}.{i}", "value": f"apple {i}"} for i in range(100)])
        assert mem.wait_indexed(60)
        assert _generation(path) is not None
