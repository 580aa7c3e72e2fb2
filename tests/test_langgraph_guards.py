"""Behaviours of the LangGraph adapter that hand-made bugs showed no test guarded (#27), on every backend.

Each was a one-line bug that left every other test passing:

* a filtered search with a query returned fewer than ``limit`` items when the
  matches ranked below the items the filter refuses;
* a prefix of eight labels (the last one memlane stores as its own segment)
  also returned a sibling namespace, one whose eighth label differs;
* ``list_namespaces`` with a ``*`` in a prefix or suffix returned namespaces
  shorter than the pattern.

The tests below name them, and are the adapter's selection in ``make mutate``
together with ``test_langgraph.py``, ``test_langgraph_rules.py`` and
``test_langgraph_graph.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import ListNamespacesOp, MatchCondition, SearchOp  # noqa: E402

from memlane.langgraph import FILTER_OVERFETCH, AsyncMemlaneStore, MemlaneStore  # noqa: E402


@pytest.fixture
def store(mem: Any) -> MemlaneStore:
    return MemlaneStore(mem)


def keys(results: list[Any]) -> list[str]:
    return [r.key for r in results]


# -- a filtered search fills its page ---------------------------------------------------------------


def _ranked_above(store: MemlaneStore, many: int) -> None:
    """``many`` items the filter refuses that rank above twelve it accepts, for the query "orchid"."""
    for i in range(many):
        store.put(("docs",), f"loud{i:04d}", {"kind": "other", "text": "orchid orchid orchid"})
    filler = " ".join(f"word{j}" for j in range(40))
    for i in range(12):
        store.put(("docs",), f"quiet{i:02d}", {"kind": "wanted", "text": f"orchid {filler}"})


@pytest.mark.parametrize("many", [10, 60, 250], ids=["inside-the-first-window", "past-it", "far-past-it"])
def test_a_filtered_search_fills_its_page_when_the_matches_rank_low(store: MemlaneStore, many: int) -> None:
    _ranked_above(store, many)
    assert len(store.search(("docs",), query="orchid", limit=1000)) == many + 12  # every item matches the words
    found = store.search(("docs",), query="orchid", filter={"kind": "wanted"}, limit=10)
    assert len(found) == 10 and all(r.value["kind"] == "wanted" for r in found)
    rest = store.search(("docs",), query="orchid", filter={"kind": "wanted"}, limit=10, offset=10)
    assert len(rest) == 2 and not set(keys(found)) & set(keys(rest))
    assert sorted(keys(found) + keys(rest)) == [f"quiet{i:02d}" for i in range(12)]


def test_a_filtered_search_stops_when_nothing_more_matches(store: MemlaneStore) -> None:
    _ranked_above(store, FILTER_OVERFETCH * 10)
    assert keys(store.search(("docs",), query="orchid", filter={"kind": "absent"}, limit=10)) == []
    assert len(store.search(("docs",), query="orchid", filter={"kind": "wanted"}, limit=50)) == 12


# -- eight labels ---------------------------------------------------------------------------------------

EIGHT = tuple(f"l{i}" for i in range(8))


def _siblings(store: MemlaneStore) -> None:
    spaces = {
        "own": EIGHT,
        "child": (*EIGHT, "c"),
        "grandchild": (*EIGHT, "c", "d"),
        "sibling": (*EIGHT[:7], "l7x"),
        "sibling_child": (*EIGHT[:7], "l7x", "c"),
        "cousin": (*EIGHT[:7], "l7", "%|"),  # the packing mark as a label: data, not a separator
        "short": EIGHT[:7],
    }
    for key, ns in spaces.items():
        store.put(ns, key, {"word": "orchid", "key": key})


@pytest.mark.parametrize("query", [None, "orchid"], ids=["select", "search"])
def test_an_eight_label_prefix_returns_no_sibling_namespace(store: MemlaneStore, query: str | None) -> None:
    _siblings(store)
    assert sorted(keys(store.search(EIGHT, query=query, limit=100))) == ["child", "cousin", "grandchild", "own"]
    nine = (*EIGHT, "c")
    assert sorted(keys(store.search(nine, query=query, limit=100))) == ["child", "grandchild"]
    seven = EIGHT[:7]
    assert len(store.search(seven, query=query, limit=100)) == 7
    sibling = (*EIGHT[:7], "l7x")
    assert sorted(keys(store.search(sibling, query=query, limit=100))) == ["sibling", "sibling_child"]
    assert (
        keys(store.search(EIGHT, query=query, limit=2, offset=3))
        == keys(store.search(EIGHT, query=query, limit=100))[3:5]
    )


def test_an_eight_label_prefix_filters_and_pages_without_its_siblings(store: MemlaneStore) -> None:
    _siblings(store)
    found = store.search(EIGHT, filter={"word": "orchid"}, limit=100)
    assert sorted(keys(found)) == ["child", "cousin", "grandchild", "own"]
    pages = [keys(store.search(EIGHT, filter={"word": "orchid"}, limit=1, offset=i)) for i in range(5)]
    assert sorted(k for page in pages for k in page) == sorted(keys(found)) and pages[4] == []
    [result] = store.batch([SearchOp(EIGHT, filter={"key": "sibling"}, limit=10)])
    assert result == []


# -- list_namespaces with wildcards -----------------------------------------------------------------------

SPACES = [
    ("a",),
    ("a", "b"),
    ("a", "b", "c"),
    ("a", "x", "c"),
    ("a", "b", "c", "d"),
    ("z", "b", "c"),
    ("c",),
    ("b", "c"),
]


def _spaces(store: MemlaneStore) -> None:
    for ns in SPACES:
        store.put(ns, "k", {"v": 1})


@pytest.mark.parametrize(
    ("prefix", "suffix", "want"),
    [
        (("a", "*", "c"), None, [("a", "b", "c"), ("a", "b", "c", "d"), ("a", "x", "c")]),
        (("a", "*"), None, [("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d"), ("a", "x", "c")]),
        (("*", "*", "*"), None, [("a", "b", "c"), ("a", "b", "c", "d"), ("a", "x", "c"), ("z", "b", "c")]),
        (None, ("*", "c"), [("a", "b", "c"), ("a", "x", "c"), ("b", "c"), ("z", "b", "c")]),
        (None, ("*", "b", "c"), [("a", "b", "c"), ("z", "b", "c")]),
        (None, ("*", "*", "*", "*"), [("a", "b", "c", "d")]),
        (("a", "*"), ("*", "c"), [("a", "b", "c"), ("a", "x", "c")]),
    ],
)
def test_a_wildcard_pattern_never_matches_a_shorter_namespace(
    store: MemlaneStore, prefix: tuple[str, ...] | None, suffix: tuple[str, ...] | None, want: list[Any]
) -> None:
    _spaces(store)
    got = store.list_namespaces(prefix=prefix, suffix=suffix, limit=100)
    assert got == sorted(want)
    assert all(len(ns) >= len(prefix or ()) and len(ns) >= len(suffix or ()) for ns in got)


def test_a_wildcard_pattern_with_depth_and_pages(store: MemlaneStore) -> None:
    _spaces(store)
    assert store.list_namespaces(prefix=("a", "*", "c"), max_depth=3) == [("a", "b", "c"), ("a", "x", "c")]
    assert store.list_namespaces(prefix=("*", "*"), max_depth=1) == [("a",), ("b",), ("z",)]
    conditions = (MatchCondition("prefix", ("a", "*", "*")), MatchCondition("suffix", ("*", "d")))
    [result] = store.batch([ListNamespacesOp(conditions, None, 10, 0)])
    assert result == [("a", "b", "c", "d")]


def test_the_async_store_keeps_the_same_three_behaviours(mem: Any) -> None:
    import asyncio

    store = AsyncMemlaneStore(mem)
    sync = MemlaneStore(mem)
    _ranked_above(sync, 60)
    _siblings(sync)

    async def main() -> None:
        found = await store.asearch(("docs",), query="orchid", filter={"kind": "wanted"}, limit=10)
        assert len(found) == 10
        assert sorted(keys(await store.asearch(EIGHT, limit=100))) == ["child", "cousin", "grandchild", "own"]
        assert await store.alist_namespaces(prefix=("l0", "*", "*", "*", "*", "*", "*", "l7", "*", "*")) == [
            (*EIGHT, "c", "d")
        ]

    asyncio.run(main())


# -- what the adapter's first mutation run showed no test asked for ---------------------------------------


def test_an_embeddings_index_config_names_its_embedder_and_needs_dims() -> None:
    from langchain_core.embeddings import Embeddings

    from memlane.langgraph import embedder_for

    class Words(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(t)), 1.0] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return [float(len(text)), 1.0]

    def vectors(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    # the name is what the store records as its embedder: a later open with another one is refused
    named = embedder_for({"dims": 2, "embed": Words()})
    assert named is not None and named.name == "langgraph:Words:2" and named.embed_batch(["abc"]) == [[3.0, 1.0]]
    plain = embedder_for({"dims": 2, "embed": vectors})
    assert plain is not None and plain.name.startswith("langgraph:") and plain.name.endswith("vectors:2")
    with pytest.raises(ValueError) as e:
        embedder_for({"embed": vectors})  # type: ignore[typeddict-item]
    assert str(e.value) == "index config: give 'dims' with an Embeddings object or function"


class FailingSweep(MemlaneStore):
    """A store whose sweeps fail: the sweeper logs each failure and carries on."""

    def __init__(self, mem: Any, swept: Any) -> None:
        super().__init__(mem, ttl={"default_ttl": 1, "sweep_interval_minutes": 60})
        self.swept = swept

    def sweep_ttl(self) -> int:
        self.swept.set()
        raise RuntimeError("the disk is full")


def test_the_sweeper_thread_is_named_logs_a_failed_sweep_and_stops(mem: Any, caplog: Any) -> None:
    import threading

    swept = threading.Event()
    store = FailingSweep(mem, swept)
    assert store.stop_ttl_sweeper() is True  # nothing to stop yet
    with caplog.at_level("ERROR", logger="memlane.langgraph"):
        future = store.start_ttl_sweeper(sweep_interval_minutes=0.0005)  # 30 ms, not the config's hour
        assert swept.wait(10)
        assert "memlane-ttl-sweeper" in [t.name for t in threading.enumerate()]
        assert store.stop_ttl_sweeper(timeout=10) is True and future.result(timeout=10) is None
    assert "memlane TTL sweep failed" in [r.getMessage() for r in caplog.records]


def test_the_async_sweeper_is_a_named_task_on_its_own_interval(mem: Any, caplog: Any) -> None:
    import asyncio

    class Failing(AsyncMemlaneStore):
        async def sweep_ttl(self) -> int:
            self.swept.set()
            raise RuntimeError("the disk is full")

    async def main() -> None:
        idle = AsyncMemlaneStore(mem)  # no TTL config: a task already done, nothing to stop
        finished = await idle.start_ttl_sweeper()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert finished.done() and await idle.stop_ttl_sweeper() is True
        store = Failing(mem, ttl={"default_ttl": 1, "sweep_interval_minutes": 60})
        store.swept = asyncio.Event()  # type: ignore[attr-defined]
        assert await store.stop_ttl_sweeper() is True
        task = await store.start_ttl_sweeper(sweep_interval_minutes=0.0005)  # 30 ms, not the config's hour
        assert task.get_name() == "memlane-ttl-sweeper"
        await asyncio.wait_for(store.swept.wait(), 10)  # type: ignore[attr-defined]
        assert await store.stop_ttl_sweeper(timeout=10) is True and task.done()

    with caplog.at_level("ERROR", logger="memlane.langgraph"):
        asyncio.run(main())
    assert "memlane TTL sweep failed" in [r.getMessage() for r in caplog.records]


def test_the_sweeper_waits_its_interval_in_seconds_and_never_holds_the_process(mem: Any) -> None:
    import threading

    class Waits(threading.Event):
        """Records how long each wait asks for, and stops the loop at the second."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: list[float] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.asked.append(float(timeout or 0))
            return len(self.asked) > 1

    for given, configured, seconds in [(2, 60, 120.0), (None, 0.5, 30.0), (None, None, 300.0)]:
        ttl = {"default_ttl": 1} | ({"sweep_interval_minutes": configured} if configured else {})
        store = MemlaneStore(mem, ttl=ttl)  # type: ignore[arg-type]
        store.sweep_ttl = lambda: 0  # type: ignore[method-assign]
        store._stop = waits = Waits()
        future = store.start_ttl_sweeper(sweep_interval_minutes=given)
        thread = store._sweeper
        assert thread is not None and thread.daemon  # a store left open never keeps the interpreter alive
        assert future.result(timeout=10) is None
        assert waits.asked == [seconds, seconds], (given, configured)


def test_from_conn_string_writes_to_the_store_it_names(tmp_path: Any) -> None:
    import memlane

    path = tmp_path / "named.db"
    with MemlaneStore.from_conn_string(str(path)) as store:
        store.put(("m",), "k", {"v": 1})
    with memlane.open(str(path), embedder=None) as mem:
        assert mem.get(("m",), "k") is not None


def test_cancelling_the_sweepers_future_stops_it(mem: Any) -> None:
    import threading

    store = MemlaneStore(mem, ttl={"default_ttl": 1, "sweep_interval_minutes": 60})
    future = store.start_ttl_sweeper()
    thread = store._sweeper
    assert thread is not None and future.cancel()
    thread.join(10)
    assert not thread.is_alive() and store._stop.is_set()
    assert store.stop_ttl_sweeper(timeout=1) is True
    assert "memlane-ttl-sweeper" not in [t.name for t in threading.enumerate()]


def test_the_async_sweeper_says_when_it_did_not_stop_in_time(mem: Any) -> None:
    import asyncio

    class Stuck(AsyncMemlaneStore):
        async def sweep_ttl(self) -> int:
            self.started.set()
            await self.release.wait()
            return 0

    async def main() -> None:
        idle = AsyncMemlaneStore(mem)
        assert await (await idle.start_ttl_sweeper()) is None  # no TTL config: a finished task, no error
        store = Stuck(mem, ttl={"default_ttl": 1})
        store.started, store.release = asyncio.Event(), asyncio.Event()  # type: ignore[attr-defined]
        task = await store.start_ttl_sweeper(sweep_interval_minutes=0.0005)
        await asyncio.wait_for(store.started.wait(), 10)  # type: ignore[attr-defined]
        assert await store.stop_ttl_sweeper(timeout=0.05) is False  # mid-sweep: not stopped in time
        assert not task.done()
        store.release.set()  # type: ignore[attr-defined]
        assert await store.stop_ttl_sweeper(timeout=10) is True and task.done()

    asyncio.run(main())
