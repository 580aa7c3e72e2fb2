"""The async twins (#35): ``AsyncMemory``'s exact reads and item writes answer as ``Memory``'s do.

``AsyncMemory.get``, ``put`` and the others run the steps their ``Memory``
method is declared as (``core/twins.py``), awaiting the store's async side
(native statements on PostgreSQL). A runner that drifts (a step left out, an
answer not sent back, another clock reading) answers differently: random sequences
of operations run through a ``Memory`` and through an ``AsyncMemory`` over a
second database of the same backend, on one fake clock, must give the same
answers step by step (ids aside: each database makes its own), refusals
included.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import memlane
from conftest import Blocking, FakeClock
from memlane.domain.search.embedders import FakeEmbedder

NAMESPACES = ["a", "a/b", "c"]
KEYS = ["k1", "k2", "k3.x"]
_roots = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pair(request: pytest.FixtureRequest, backend: str, tmp_path: Any) -> Iterator[tuple[Any, Any, FakeClock]]:
    """A Memory and an AsyncMemory (driven from this thread) over two fresh databases, one clock."""
    if backend == "sqlite":
        urls = [str(tmp_path / "sync.db"), str(tmp_path / "async.db")]
    else:
        server = request.getfixturevalue("postgres")
        urls = [server.create(), server.create()]
    clock = FakeClock()
    sync = memlane.open(urls[0], clock=clock, embedder=None)
    driven = Blocking(memlane.AsyncMemory(memlane.open(urls[1], clock=clock, embedder=None)))
    yield sync, driven, clock
    sync.close()
    driven.stop()
    if backend != "sqlite":
        for url in urls:
            server.drop(url)


def _plain(answer: Any) -> Any:
    """An answer as plain data without the ids each database makes for itself."""
    if isinstance(answer, list | tuple):
        return [_plain(a) for a in answer]
    if hasattr(answer, "to_dict"):
        answer = answer.to_dict()
    if isinstance(answer, dict):
        return {k: _plain(v) for k, v in answer.items() if k not in ("id", "item_id")}
    return answer


def _call(target: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return ("ok", _plain(getattr(target, name)(*args, **kwargs)))
    except memlane.MemlaneError as e:
        return ("refused", type(e).__name__, getattr(e, "field", None))


namespaces = st.sampled_from(NAMESPACES)
# a prefix or namespace the parser refuses: the refusal must name the same field
maybe_ns = st.one_of(namespaces, namespaces, namespaces, st.sampled_from(["bad//ns", "_memlane"]))
keys = st.sampled_from(KEYS)
values = st.one_of(st.integers(-3, 3), st.sampled_from(["x", "y z"]), st.fixed_dictionaries({"v": st.integers(0, 3)}))
ttls = st.sampled_from([None, 1, 2.5])
bad_keys = st.sampled_from(["", " ", "a" * 600, "x\x00y"])
# mostly valid, now and then refused: a twin must refuse what its synchronous method refuses
maybe_key = st.one_of(keys, keys, keys, bad_keys)
limits = st.sampled_from([1, 1, 2, 2, 3, 0])


def _op() -> st.SearchStrategy[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    put = st.tuples(
        st.just("put"),
        st.tuples(maybe_ns, maybe_key, values),
        st.fixed_dictionaries(
            {},
            optional={
                "ttl": ttls,
                "if_absent": st.booleans(),
                "index": st.booleans(),
                "metadata": st.sampled_from([{}, {"m": 1}]),
                "text": st.sampled_from([None, "some words"]),
            },
        ),
    )
    record = st.fixed_dictionaries(
        {"namespace": namespaces, "key": keys, "value": values}, optional={"ttl": ttls, "index": st.booleans()}
    )
    put_many = st.tuples(
        st.just("put_many"),
        st.tuples(st.lists(record, min_size=0, max_size=3)),
        st.fixed_dictionaries({}, optional={"if_absent": st.booleans()}),
    )
    address = st.tuples(maybe_ns, maybe_key)
    reads = st.one_of(
        st.tuples(st.sampled_from(["get", "exists", "history", "delete"]), address, st.just({})),
        st.tuples(st.just("get_many"), st.tuples(st.lists(address, max_size=3)), st.just({})),
        st.tuples(
            st.just("fetch"),
            st.tuples(maybe_key),
            st.fixed_dictionaries({}, optional={"limit": limits, "namespace_prefix": maybe_ns}),
        ),
        st.tuples(
            st.just("list"),
            st.tuples(st.sampled_from(["", "a", "c", "bad//ns"])),
            st.fixed_dictionaries(
                {},
                optional={
                    "limit": limits,
                    "key_prefix": st.sampled_from(["", "k", "k3.", "z", " bad"]),
                    "order": st.sampled_from(["address", "recent", "recent", "nope"]),
                },
            ),
        ),
        st.tuples(
            st.just("namespaces"),
            st.tuples(st.sampled_from(["", "a", "bad//ns"])),
            st.fixed_dictionaries({}, optional={"max_depth": st.sampled_from([None, 0, 1, 2, -1])}),
        ),
        st.tuples(
            st.just("select"),
            st.tuples(st.sampled_from(["", "a", "c", "bad//ns"])),
            st.fixed_dictionaries(
                {},
                optional={
                    "limit": limits,
                    "offset": st.sampled_from([0, 0, 1, 2, -1]),
                    "order": st.sampled_from(["updated_desc", "address", "address", "nope"]),
                    "where": st.sampled_from([None, {"v": 1}, {"v": {"$gt": 0}}]),
                },
            ),
        ),
    )
    tick = st.tuples(st.just("advance"), st.tuples(st.sampled_from([0.5, 1, 3])), st.just({}))
    return st.one_of(put, put, put, put_many, reads, reads, tick)


def _rooted(root: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Every namespace of a step under this example's own root (examples share the databases)."""

    def ns(n: str) -> str:
        if n in ("bad//ns", "_memlane"):
            return n  # refused as it is
        return f"{root}/{n}" if n else root

    if name in ("put", "get", "exists", "history", "delete"):
        args = (ns(args[0]), *args[1:])
    elif name == "get_many":
        args = ([(ns(n), k) for n, k in args[0]],)
    elif name == "put_many":
        args = ([{**r, "namespace": ns(r["namespace"])} for r in args[0]],)
    elif name in ("list", "namespaces", "select"):
        args = (ns(args[0]),)
    if name == "fetch":
        kwargs = {**kwargs, "namespace_prefix": ns(kwargs.get("namespace_prefix", ""))}
    return args, kwargs


# no shrinking: a failing sequence is short enough to read, and a twin's mutant is then found in seconds
@settings(
    max_examples=60,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(_op(), min_size=5, max_size=30))
def test_async_twins_answer_as_the_synchronous_methods_do(pair: Any, steps: list[Any]) -> None:
    sync, driven, clock = pair
    root = f"r{next(_roots)}"
    for name, args, kwargs in steps:
        if name == "advance":
            clock.advance(args[0])
            continue
        args, kwargs = _rooted(root, name, args, kwargs)
        want = _call(sync, name, args, kwargs)
        got = _call(driven, name, args, kwargs)
        assert got == want, (name, args, kwargs)
        if name == "list" and want[0] == "ok":  # follow the pages to the end: the cursor is a twin's too
            cursor = want[1]["next_cursor"]
            while cursor is not None:
                more = {**kwargs, "cursor": cursor}
                want, got = _call(sync, name, args, more), _call(driven, name, args, more)
                assert got == want, (name, args, more)
                cursor = want[1]["next_cursor"]
    # and the stores agree on everything in the end (each item's whole state, its history included)
    for ns in NAMESPACES:
        for key in KEYS:
            address = (f"{root}/{ns}", key)
            assert _call(driven, "history", address, {}) == _call(sync, "history", address, {})


def test_the_twins_defaults_are_the_synchronous_methods_defaults(pair: Any) -> None:
    """Called with only what each requires, over more items than any default limit."""
    sync, driven, _ = pair
    records = [{"namespace": f"d/n{i:03}", "key": "same", "value": i} for i in range(105)]
    for target in (sync, driven):
        target.put_many(records)
        target.put("d/one", "k", "x")
    for name, args in (
        ("fetch", ("same",)),
        ("list", ()),
        ("list", ("d",)),
        ("namespaces", ()),
        ("select", ()),
        ("select", ("d",)),
        ("get_many", ([],)),
    ):
        want = _call(sync, name, args, {})
        assert want[0] == "ok"
        assert _call(driven, name, args, {}) == want, (name, args)
    assert len(_call(driven, "fetch", ("same",), {})[1]) == 10
    assert len(_call(driven, "list", (), {})[1]["items"]) == 100
    assert len(_call(driven, "select", (), {})[1]) == 10


def test_each_twin_passes_on_every_argument(pair: Any) -> None:
    """One scenario where every argument of every twin changes the answer: refusals of if_absent, a key prefix,
    a cursor, an offset, a where, an order, a depth, a TTL, index=False."""
    sync, driven, clock = pair
    steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("put", ("t/a", "k1", 1), {}),
        ("put", ("t/a", "k1", 2), {"if_absent": True}),
        ("put_many", ([{"namespace": "t/a", "key": "k1", "value": 3}],), {"if_absent": True}),
        ("put_many", ([{"namespace": "t/a", "key": "k2", "value": {"v": 1}}],), {"if_absent": True}),
        (
            "put",
            (
                "t/a",
                "k3.x",
                "short",
            ),
            {"ttl": 5, "metadata": {"m": 1}, "text": "words", "index": False},
        ),
        ("put", ("t/b/c", "k1", {"v": 2}), {}),
        ("list", ("t",), {"key_prefix": "k3."}),
        ("list", ("t",), {"limit": 1}),
        ("list", ("t",), {"limit": 1, "cursor": None}),
        ("list", ("t",), {"limit": 1, "order": "recent"}),
        ("list", ("t/a",), {"order": "recent"}),
        ("list", ("t",), {"order": "recent", "key_prefix": "k"}),
        ("fetch", ("k1",), {"namespace_prefix": "t/b", "limit": 1}),
        ("fetch", ("k1",), {"limit": 1}),
        ("select", ("t",), {"where": {"v": 2}}),
        ("select", ("t",), {"order": "address", "limit": 2, "offset": 1}),
        ("namespaces", ("t",), {"max_depth": 2}),
        ("namespaces", ("t/b",), {}),
        ("get_many", ([("t/a", "k1"), ("t/b/c", "k1"), ("t/a", "nope")],), {}),
        ("exists", ("t/a", "k3.x"), {}),
        ("delete", ("t/a", "k2"), {}),
        ("history", ("t/a", "k2"), {}),
        ("history", ("t/a", "k1"), {}),
    ]
    for name, args, kwargs in steps:
        want = _call(sync, name, args, kwargs)
        got = _call(driven, name, args, kwargs)
        assert got == want, (name, args, kwargs)
        if name == "list" and kwargs.get("limit") == 1:
            assert want[1]["next_cursor"] is not None
            more = {**kwargs, "cursor": want[1]["next_cursor"]}
            assert _call(driven, name, args, more) == _call(sync, name, args, more) != want
    assert _call(sync, "put", ("t/a", "k1", 2), {"if_absent": True})[:2] == ("refused", "ConflictError")
    clock.advance(5)
    for name, args in (("exists", ("t/a", "k3.x")), ("get", ("t/a", "k3.x")), ("list", ("t",))):
        assert _call(driven, name, args, {}) == _call(sync, name, args, {}), name


class _Threads(FakeEmbedder):
    """The fake embedder, noting the thread of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.threads.append(threading.get_ident())
        return super().embed_batch(texts)


@pytest.mark.parametrize("indexing", ["sync", "background"])
def test_an_async_write_embeds_off_the_event_loop_and_marks_only_what_waits(tmp_path: Any, indexing: str) -> None:
    """The embedder's work (CPU, or a remote call) never runs on the loop; a write whose vectors are made at
    once leaves nothing marked for the indexer, a write-behind one leaves its items marked."""
    from memlane.store.base import EVERYTHING

    embedder = _Threads()
    mem = memlane.open(str(tmp_path / "m.db"), embedder=embedder, indexing=indexing)
    recorded: list[int] = []  # the thread that records the store's embedder (a write of its own) at the first put
    record = mem._record_embedder

    def noting(chosen: Any) -> None:
        recorded.append(threading.get_ident())
        record(chosen)

    mem._record_embedder = noting  # type: ignore[method-assign]

    async def main() -> int:
        amem = memlane.AsyncMemory(mem)
        await amem.put("n", "first", "harbour crane")  # records the store's embedder (a write of its own)
        await amem.put("n", "second", "dock crane")
        await amem.put_many([{"namespace": "n", "key": "third", "value": "quay crane"}])
        return threading.get_ident()

    try:
        loop_thread = asyncio.run(main())
        assert len(recorded) == 1 and loop_thread not in recorded
        if indexing == "sync":
            assert len(embedder.threads) == 3 and loop_thread not in embedder.threads
            assert mem.store.count_pending(EVERYTHING) == 0
        else:
            assert loop_thread not in embedder.threads  # the indexer's thread, if any, so far
            assert mem.wait_indexed(30) and mem.store.count_pending(EVERYTHING) == 0
        assert len(mem.search("crane", channels=["vector"], limit=3).hits) == 3
    finally:
        mem.close()
