"""The rules under the LangGraph adapter, tested as classes of input: the filter evaluated in SQL agrees with its
Python model on every backend, and the namespace/key encoding is reversible and keeps what memlane refuses out."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.store.base")

from memlane.langgraph import (  # noqa: E402
    AsyncMemlaneStore,
    MemlaneStore,
    decode_key,
    decode_namespace,
    encode_key,
    encode_namespace,
)
from memlane.values import validate as v  # noqa: E402
from memlane.values import where as w  # noqa: E402

# -- the filter: SQL against its Python model -------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=4),
)
SMALL_STRINGS = st.sampled_from(["", "a", "b", "B", "ab", "é", "😀", "10", "9", "true"])
SMALL_NUMBERS = st.sampled_from([-1, 0, 0.0, 1, 1.0, 1.5, 2, 9, 10, 1e16, 10**16 + 1, -0.5])
OPERAND = st.one_of(SMALL_STRINGS, SMALL_NUMBERS, st.none(), st.booleans())
JSON = st.recursive(
    st.one_of(SMALL_STRINGS, SMALL_NUMBERS, st.none(), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)),
    max_leaves=6,
)
PATHS = st.sampled_from(["a", "b", "n.x", "n.y", "n", "missing", "n.x.deep"])


@st.composite
def conditions(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in draw(st.lists(PATHS, min_size=1, max_size=3, unique=True)):
        op = draw(st.sampled_from(["plain", *w.OPERATORS]))
        if op == "plain":
            out[path] = draw(st.one_of(OPERAND, JSON))
        elif op in w.ORDERING:
            out[path] = {op: draw(st.one_of(SMALL_STRINGS, SMALL_NUMBERS))}
        else:
            out[path] = {op: draw(st.one_of(OPERAND, JSON))}
    return out


def stored_values() -> list[dict[str, Any]]:
    """A fixed corpus with every JSON type at the filtered paths, including near-misses across types."""
    leaves: list[Any] = [None, True, False, 0, 1, 1.0, 1.5, 2, 9, 10, -1, 1e16, 10**16 + 1, "", "a", "B", "ab"]
    leaves += ["é", "😀", "10", "9", "true", [], [1], ["a", 1], [1, "a"], {}, {"x": 1}, {"x": 1, "y": "a"}]
    values: list[dict[str, Any]] = []
    for i, leaf in enumerate(leaves):
        values.append({"a": leaf, "b": leaves[(i * 7) % len(leaves)], "n": {"x": leaf, "y": leaves[i // 2]}})
        values.append({"a": leaf, "n": leaf})
    values.append({})
    return values


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_select_agrees_with_the_python_model(mem: Any, data: st.DataObject) -> None:
    if not mem_has_corpus(mem):
        mem.put_many([{"namespace": ("f",), "key": f"k{i:03}", "value": val} for i, val in enumerate(stored_values())])
    values = {f"k{i:03}": val for i, val in enumerate(stored_values())}
    where = data.draw(conditions())
    try:
        model = w.conditions(where)
    except w.ValidationError:  # e.g. an empty object as a plain value: refused the same way by the core
        with pytest.raises(w.ValidationError):
            mem.select(("f",), where=where)
        return
    expected = sorted(k for k, val in values.items() if w.matches(val, model))
    got = [i.key for i in mem.select(("f",), where=where, order="address", limit=1000)]
    assert got == expected, where


def mem_has_corpus(mem: Any) -> bool:
    return bool(mem.select(("f",), limit=1))


@given(st.dictionaries(st.text(max_size=3), SCALARS, max_size=3))
def test_conditions_accept_every_json_scalar_or_name_the_problem(raw: dict[str, Any]) -> None:
    try:
        found = w.conditions(raw)
    except w.ValidationError as e:
        assert e.field == "where"
        return
    assert len(found) == len(raw)


# -- the encoding ------------------------------------------------------------------------------------

LABEL = st.text(st.characters(exclude_characters=".\x00"), min_size=1, max_size=12)
KEY = st.text(max_size=40)


@given(st.lists(LABEL, min_size=1, max_size=14).map(tuple), KEY)
def test_encoding_round_trips_and_gives_what_memlane_accepts(namespace: tuple[str, ...], key: str) -> None:
    segments = encode_namespace(namespace)
    assert decode_namespace(segments) == namespace
    assert decode_key(encode_key(key)) == key
    if all(len(s) <= 20 for s in segments):  # memlane bounds a segment's length; the encoding expands rare chars
        assert v.namespace(segments) == segments
    assert v.key(encode_key(key)) == encode_key(key)


@given(st.lists(LABEL, min_size=1, max_size=12).map(tuple), st.lists(LABEL, min_size=1, max_size=12).map(tuple))
def test_encoding_keeps_label_boundaries(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    """Different namespaces never share an encoding; a prefix stays a segment prefix up to seven labels."""
    assert (encode_namespace(a) == encode_namespace(b)) == (a == b)
    if len(a) <= 7 and b[: len(a)] == a:
        assert encode_namespace(b)[: len(a)] == encode_namespace(a)


def test_ordinary_names_are_stored_as_they_are() -> None:
    assert encode_namespace(("user", "123", "prefs")) == ("user", "123", "prefs")
    assert encode_key("preferences.ui.theme") == "preferences.ui.theme"
    assert encode_key("3f2c-uuid") == "3f2c-uuid"


# -- the adapter asks the database, not Python, to filter ---------------------------------------------


class Spy:
    """A memory that records which core methods the adapter called, with their arguments."""

    def __init__(self, mem: Any) -> None:
        self._mem = mem
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._mem, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return method(*args, **kwargs)

        return call


def test_a_filtered_search_is_one_select_for_exactly_the_page(tmp_path: Any) -> None:
    import memlane

    with memlane.open(tmp_path / "spy.db", embedder=None) as mem:
        mem.put_many([{"namespace": ("s",), "key": f"k{i}", "value": {"i": i}} for i in range(300)])
        spy = Spy(mem)
        found = MemlaneStore(spy).search(("s",), filter={"i": {"$gte": 100}}, limit=5, offset=10)
        assert [r.value["i"] for r in found] == [110, 111, 112, 113, 114]  # one write time: ties by address
        # the filter is on the value: value.<path>, so a field named author or created_at stays the value's
        assert spy.calls == [("select", {"where": {"value.i": {"$gte": 100}}, "limit": 5, "offset": 10})]


def test_a_filtered_ranked_search_passes_its_filter_down_in_one_search(tmp_path: Any) -> None:
    """A selective filter over many better-ranked items: one search, the filter in memlane's statement, a full
    page (the adapter no longer ranks windows and filters them in Python). A value field named like an item
    column (author, created_at) is the value's."""
    import memlane

    with memlane.open(tmp_path / "spy.db", embedder=None) as mem:
        mem.put_many(
            [
                {
                    "namespace": ("s",),
                    "key": f"k{i:04}",
                    "value": {"text": "rocket " * (1 + (i % 3 == 0) * 20), "author": "kim" if i % 100 == 0 else "x"},
                }
                for i in range(3000)
            ]
        )
        spy = Spy(mem)
        found = MemlaneStore(spy).search(("s",), query="rocket", filter={"author": "kim"}, limit=10)
        assert len(found) == 10 and all(r.value["author"] == "kim" for r in found)
        assert [name for name, _ in spy.calls] == ["search"]
        assert spy.calls[0][1]["where"] == {"value.author": {"$eq": "kim"}}


# -- from_conn_string, index configs, the sweeper --------------------------------------------------------


class WordEmbeddings:
    """A LangChain-shaped Embeddings: one dimension per word of a tiny vocabulary."""

    VOCAB = ["cat", "dog", "rocket", "orbit", "purr", "bark"]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(t.lower().count(word)) + 0.01 for word in self.VOCAB] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def word_vectors(texts: list[str]) -> list[list[float]]:
    return WordEmbeddings().embed_documents(texts)


@pytest.mark.parametrize("embed", [WordEmbeddings(), word_vectors], ids=["embeddings", "function"])
def test_from_conn_string_embeds_with_the_index_config(tmp_path: Any, embed: Any) -> None:
    from langchain_core.embeddings import Embeddings

    if not callable(embed):  # a real LangChain Embeddings subclass, as users pass
        embed = type("Words", (WordEmbeddings, Embeddings), {})()
    index = {"dims": 6, "embed": embed, "fields": ["text"]}
    with MemlaneStore.from_conn_string(str(tmp_path / "lg.db"), index=index) as store:
        store.setup()
        store.put(("m",), "c", {"text": "the cat will purr"})
        store.put(("m",), "r", {"text": "a rocket in orbit"})
        store.put(("m",), "d", {"text": "the dog will bark"})
        results = store.search(("m",), query="purr cat")
        assert [r.key for r in results][0] == "c"
        assert results[0].score is not None and results[0].score > results[1].score  # type: ignore[operator]
        assert store.index_config == index
    # reopened: the same file, the same vectors
    with MemlaneStore.from_conn_string(str(tmp_path / "lg.db"), index=index) as store:
        assert store.search(("m",), query="orbit rocket")[0].key == "r"


def test_from_conn_string_in_memory_with_a_memlane_embedder_name() -> None:
    with MemlaneStore.from_conn_string(":memory:", index={"dims": 64, "embed": "fake"}) as store:
        store.put(("m",), "a", {"text": "alpha beta"})
        store.put(("m",), "b", {"text": "gamma delta"})
        assert store.search(("m",), query="gamma")[0].key == "b"
    with pytest.raises(ValueError, match="dims"):
        with MemlaneStore.from_conn_string(":memory:", index={"dims": 3, "embed": "fake"}):
            pass


def swept(memory: Any, timeout: float = 10) -> bool:
    """Wait until one live row is left and no expired one: the sweep deleted it (expiry alone only hides it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = memory.stats()
        if (stats.active_items, stats.expired_items) == (1, 0):
            return True
        time.sleep(0.05)
    return False


def test_the_sweeper_thread_deletes_expired_rows(tmp_path: Any) -> None:
    ttl = {"default_ttl": 0.002, "sweep_interval_minutes": 0.002}  # 0.12 s
    with MemlaneStore.from_conn_string(str(tmp_path / "ttl.db"), ttl=ttl) as store:  # type: ignore[arg-type]
        store.put(("t",), "gone", {"v": 1})
        store.put(("t",), "kept", {"v": 2}, ttl=None)
        store.start_ttl_sweeper()
        assert swept(store.memory)
        assert store.stop_ttl_sweeper(timeout=5)
        assert [r.key for r in store.search(("t",))] == ["kept"]


def test_the_async_twin_from_conn_string_and_its_sweeper(tmp_path: Any) -> None:
    async def run() -> None:
        ttl = {"default_ttl": 0.002, "sweep_interval_minutes": 0.002}
        async with AsyncMemlaneStore.from_conn_string(str(tmp_path / "a.db"), ttl=ttl) as store:  # type: ignore[arg-type]
            await store.setup()
            await store.aput(("a", "b"), "k", {"n": 1})
            await store.aput(("a", "b"), "kept", {"n": 2}, ttl=None)
            task = await store.start_ttl_sweeper()
            assert await store.start_ttl_sweeper() is task
            assert await asyncio.to_thread(swept, store.memory)
            assert [r.key for r in await store.asearch(("a",))] == ["kept"]
            assert await store.stop_ttl_sweeper(timeout=5)
            assert await store.sweep_ttl() == 0

    asyncio.run(run())


def test_an_agent_selects_only_what_it_may_read(tmp_path: Any) -> None:
    """Through the service, an agent's store sees its own namespaces and its grants, in the one select."""
    import memlane
    from live import LiveServer
    from memlane.core.access import Access
    from memlane.server import create_app

    with memlane.open(tmp_path / "agents.db", embedder=None) as mem:
        access = Access(mem)
        agent, token = access.create_agent("ada")
        access.grant("ada", ("shared",), "read")
        mem.put(("shared", "team"), "k", {"n": 1})
        mem.put(("secret",), "k", {"n": 1})
        mem.put((*agent.namespace, "notes"), "mine", {"n": 1})
        server = LiveServer(create_app(mem))
        try:
            with memlane.Client(server.url, token) as client:
                store = MemlaneStore(client)
                found = {(r.namespace, r.key) for r in store.search((), filter={"n": 1})}
                assert found == {(("shared", "team"), "k"), ((*agent.namespace, "notes"), "mine")}
                with pytest.raises(memlane.values.errors.ForbiddenError):
                    store.search(("secret",), filter={"n": 1})
        finally:
            server.stop()


@pytest.mark.parametrize("query", ["cat", "purr cat", "rocket", "nothing known"])
def test_the_score_is_the_cosine_similarity_of_query_and_indexed_text(query: str) -> None:
    index = {"dims": 6, "embed": word_vectors, "fields": ["a"]}
    with MemlaneStore.from_conn_string(":memory:", index=index) as store:
        store.put(("s",), "doc", {"a": "cat purr", "b": "rocket"}, index=["a", "missing"])
        (found,) = store.search((), query=query)
        doc, asked = word_vectors(["cat purr", query])
        dot = sum(x * y for x, y in zip(doc, asked, strict=True))
        cosine = dot / (sum(x * x for x in doc) ** 0.5 * sum(y * y for y in asked) ** 0.5)
        assert found.score == pytest.approx(cosine, abs=1e-3)


def test_without_an_index_config_the_index_argument_is_ignored(tmp_path: Any) -> None:
    import memlane

    with memlane.open(tmp_path / "plain.db", embedder=None) as mem:
        store = MemlaneStore(mem)
        store.put(("p",), "k", {"note": "walrus"}, index=False)
        assert [r.key for r in store.search(("p",), query="walrus")] == ["k"]


def test_a_stored_nul_never_breaks_a_select_and_a_nul_operand_is_refused(mem: Any) -> None:
    """PostgreSQL's jsonb cannot hold NUL; a value holding one must not fail the statement for its neighbours."""
    mem.put("z", "nul", {"s": "a\x00b", "n": 1})
    mem.put("z", "plain", {"s": "ab", "n": 1})
    assert [i.key for i in mem.select("z", where={"s": "ab"})] == ["plain"]
    assert "plain" in [i.key for i in mem.select("z", where={"n": 1})]
    with pytest.raises(w.ValidationError, match="NUL"):
        mem.select("z", where={"s": "a\x00b"})
