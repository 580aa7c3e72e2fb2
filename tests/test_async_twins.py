"""The async twins (#35): ``AsyncMemory``'s exact reads and item writes answer as ``Memory``'s do.

``Memory._aget``, ``_aput`` and the others check their arguments with the
same helpers as their synchronous twins and then await the store's async side
(native statements on PostgreSQL). A twin that drifts (a check left out, a
limit off by one, another clock reading) answers differently: random sequences
of operations run through a ``Memory`` and through an ``AsyncMemory`` over a
second database of the same backend, on one fake clock, must give the same
answers step by step (ids aside: each database makes its own), refusals
included.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import memlane
from conftest import Blocking, FakeClock

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
            st.tuples(st.sampled_from(["", "a", "c"])),
            st.fixed_dictionaries({"limit": limits}, optional={"key_prefix": st.sampled_from(["", "k", "k3.", "z"])}),
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
