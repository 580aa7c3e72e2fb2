"""The embedder's relevance scale is kept with the store (issue #38): measured once per store and embedder, read
by every process that opens the store, measured anew when the embedder changes.

Real stores (SQLite, and PostgreSQL where the backend fixture gives one) and real processes; the embedders are
callers' own classes that count the reference texts they are asked to embed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import memlane
from memlane.domain.search import relevance
from memlane.domain.search.embedders import FakeEmbedder
from memlane.values.errors import StoreError

SRC = str(Path(memlane.__file__).resolve().parents[1])

# a process that opens the store with a caller's embedder, asks for its scale (through the function, or through a
# recall as an agent makes one), and says how many reference texts it embedded for it
_PROCESS = textwrap.dedent(
    """
    import json, sys
    import memlane
    from memlane.domain.search import relevance
    from memlane.domain.search.embedders import FakeEmbedder

    class Counting:
        def __init__(self, version):
            self.inner = FakeEmbedder(64)
            self.name, self.dimension, self.version = "counting", 64, version
            self.reference_texts = 0

        def embed_batch(self, texts):
            self.reference_texts += sum(t in relevance.CALIBRATION_TEXTS for t in texts)
            return self.inner.embed_batch(texts)

    url, how, version = sys.argv[1], sys.argv[2], sys.argv[3]
    embedder = Counting(version)
    mem = memlane.open(url, embedder=embedder, indexing="sync")
    if how == "recall":
        mem.put("notes", "car", "I drive a blue hatchback to work")
        mem.recall("which car do I drive?", namespace_prefix="notes")
        scale = mem._scale_for_relevance()
    else:
        scale = relevance.stored_scale(mem.store, embedder)
    print(json.dumps({"mean": scale.mean, "spread": scale.spread, "embedded": embedder.reference_texts}))
    mem.close()
    """
)


def _process(url: str, how: str = "function", version: str = "1") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", _PROCESS, url, how, version], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_two_processes_agree_and_the_second_measures_nothing(store_url: str) -> None:
    first = _process(store_url)
    second = _process(store_url)
    assert first["embedded"] == len(relevance.CALIBRATION_TEXTS)
    assert second["embedded"] == 0
    assert (second["mean"], second["spread"]) == (first["mean"], first["spread"])


def test_an_embedder_of_another_version_is_measured_anew(store_url: str) -> None:
    _process(store_url, version="1")
    assert _process(store_url, version="2")["embedded"] == len(relevance.CALIBRATION_TEXTS)
    assert _process(store_url, version="2")["embedded"] == 0
    assert _process(store_url, version="1")["embedded"] == 0  # each version's scale is kept under its own key


def test_a_recall_in_a_second_process_reads_the_scale_the_first_stored(tmp_path: Path) -> None:
    url = str(tmp_path / "m.db")
    first = _process(url, "recall")
    second = _process(url, "recall")
    assert first["embedded"] == len(relevance.CALIBRATION_TEXTS)
    assert second["embedded"] == 0 and (second["mean"], second["spread"]) == (first["mean"], first["spread"])


class _Meta:
    """A store's meta table as a dict; ``writable=False`` refuses writes as a read-only role's store does."""

    def __init__(self, writable: bool = True) -> None:
        self.values: dict[str, str] = {}
        self.writable = writable

    def get_meta(self, name: str) -> str | None:
        return self.values.get(name)

    def set_meta(self, name: str, value: str) -> None:
        if not self.writable:
            raise StoreError("permission denied for table meta")
        self.values[name] = value


class _Counting:
    def __init__(self, inner: Any, **attributes: Any) -> None:
        self.inner, self.calls = inner, 0
        self.name, self.dimension = inner.name, inner.dimension
        for name, value in attributes.items():
            setattr(self, name, value)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return self.inner.embed_batch(texts)  # type: ignore[no-any-return]


def test_a_spec_or_dimension_of_its_own_has_its_own_scale() -> None:
    meta = _Meta()
    small, large = _Counting(FakeEmbedder(64)), _Counting(FakeEmbedder(384), spec="fake:384")
    assert relevance.scale_key(small) != relevance.scale_key(large)
    assert relevance.stored_scale(meta, small) == relevance.calibrate(FakeEmbedder(64))
    relevance.stored_scale(meta, large)
    assert (small.calls, large.calls) == (1, 1) and len(meta.values) == 2
    again = _Counting(FakeEmbedder(64))
    assert relevance.stored_scale(meta, again) == relevance.calibrate(FakeEmbedder(64))  # read back whole
    assert again.calls == 0
    relevance.stored_scale(meta, large)
    assert large.calls == 1


def test_a_scale_kept_from_other_reference_texts_or_unreadable_is_measured_again() -> None:
    meta = _Meta()
    embedder = _Counting(FakeEmbedder(64))
    key = relevance.scale_key(embedder)
    for kept in ('{"reference": "older", "mean": 0.9, "spread": 0.01}', "not json", '{"mean": 0.9}'):
        meta.values[key] = kept
        scale = relevance.stored_scale(meta, embedder)
        assert scale is not None and scale.mean < 0.5
        assert json.loads(meta.values[key])["mean"] == scale.mean
    assert embedder.calls == 3


def test_a_store_that_may_not_be_written_still_gets_the_scale() -> None:
    embedder = _Counting(FakeEmbedder(64))
    scale = relevance.stored_scale(_Meta(writable=False), embedder)
    assert scale == relevance.calibrate(FakeEmbedder(64))


def test_an_embedder_that_fails_has_no_scale_and_nothing_is_kept() -> None:
    class Broken:
        name, dimension = "broken", 8

        def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
            raise ConnectionError("the embedding service is down")

    meta = _Meta()
    assert relevance.stored_scale(meta, Broken()) is None and meta.values == {}
