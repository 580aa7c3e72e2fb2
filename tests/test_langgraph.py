"""memlane as a LangGraph store: the behaviours LangGraph's own store tests pin, on SQLite, PostgreSQL and the Client.

Each test takes ``mem`` (conftest: a fresh memory on each backend driven by the fake clock, the ``client`` run
talking to a live service over loopback) and wraps it in :class:`memlane.langgraph.MemlaneStore`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langchain_core.embeddings import Embeddings  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)

import memlane  # noqa: E402
from memlane.langgraph import AsyncMemlaneStore, MemlaneSearchItem, MemlaneStore  # noqa: E402
from memlane.values.errors import ValidationError  # noqa: E402

FAKE_DIMS = 64


@pytest.fixture
def store(mem: Any) -> MemlaneStore:
    return MemlaneStore(mem)


def keys(results: list[Any]) -> list[str]:
    return [r.key for r in results]


def test_a_mixed_batch_runs_in_order_with_results_in_order(store: MemlaneStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "changed"}),
            SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(("test",), "key3"),
            GetOp(("test", "bar"), "key2"),  # sees the put before it
            PutOp(("test", "bar"), "key2", None),
            GetOp(("test", "bar"), "key2"),  # and the delete
        ]
    )
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[0].namespace == ("test", "foo") and results[0].key == "key1"
    assert results[1] is None
    assert keys(results[2]) == ["key1"]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None
    assert results[5].value == {"data": "changed"}
    assert results[6] is None and results[7] is None


def test_abatch_gives_the_same_answers(store: MemlaneStore) -> None:
    async def run() -> None:
        await store.aput(("a",), "k", {"n": 1})
        item = await store.aget(("a",), "k")
        assert item is not None and item.value == {"n": 1}
        assert keys(await store.asearch(("a",), filter={"n": 1})) == ["k"]
        assert await store.alist_namespaces() == [("a",)]
        await store.adelete(("a",), "k")
        assert await store.aget(("a",), "k") is None

    asyncio.run(run())


def test_put_none_deletes_and_a_replace_keeps_created_at(store: MemlaneStore, clock: Any) -> None:
    store.put(("u", "1"), "pref", {"theme": "dark"})
    first = store.get(("u", "1"), "pref")
    clock.advance(5)
    store.put(("u", "1"), "pref", {"theme": "light"})
    second = store.get(("u", "1"), "pref")
    assert first is not None and second is not None
    assert second.value == {"theme": "light"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.batch([PutOp(("u", "1"), "pref", None)])
    assert store.get(("u", "1"), "pref") is None
    store.delete(("u", "1"), "never-there")  # deleting nothing is no error


def test_the_last_put_to_an_address_in_one_batch_wins(store: MemlaneStore) -> None:
    store.batch([PutOp(("n",), "k", {"v": 1}), PutOp(("n",), "k", {"v": 2}), PutOp(("n",), "j", {"v": 3})])
    assert store.get(("n",), "k").value == {"v": 2}  # type: ignore[union-attr]
    store.batch([PutOp(("n",), "k", {"v": 4}), PutOp(("n",), "k", None)])
    assert store.get(("n",), "k") is None


def test_search_without_a_query_is_newest_first_and_pages(store: MemlaneStore, clock: Any) -> None:
    for i in range(7):
        store.put(("docs", "x" if i % 2 else "y"), f"d{i}", {"i": i})
        clock.advance(1)
    store.put(("docs", "y"), "d0", {"i": 0, "touched": True})  # an update makes it the newest
    assert keys(store.search(("docs",), limit=3)) == ["d0", "d6", "d5"]
    assert keys(store.search(("docs",), limit=3, offset=3)) == ["d4", "d3", "d2"]
    assert keys(store.search(("docs",), limit=3, offset=6)) == ["d1"]
    assert keys(store.search(("docs", "x"))) == ["d5", "d3", "d1"]
    assert all(isinstance(r, SearchItem) and r.score is None for r in store.search(("docs",)))
    assert len(store.search(())) == 7  # the empty prefix is everything


def test_search_prefixes_follow_label_boundaries(store: MemlaneStore) -> None:
    store.put(("tenant", "acme"), "k", {"v": 1})
    store.put(("tenant", "acme-corp"), "k", {"v": 2})
    store.put(("tenant", "ac%"), "k", {"v": 3})
    store.put(("Tenant", "acme"), "k", {"v": 4})
    assert [r.value["v"] for r in store.search(("tenant", "acme"))] == [1]
    assert [r.value["v"] for r in store.search(("tenant", "ac%"))] == [3]
    assert [r.value["v"] for r in store.search(("tenant", "ac*"))] == []  # wildcard characters are data
    assert sorted(r.value["v"] for r in store.search(("tenant",))) == [1, 2, 3]


DOCS = [
    ("a", {"author": "John Doe", "tags": ["important"], "score": 4.5, "meta": {"year": 2024, "lang": "en"}}),
    ("b", {"author": "Jane Smith", "tags": ["draft"], "score": 3, "meta": {"year": 2023, "lang": "fr"}}),
    ("c", {"author": "John Doe", "tags": ["final"], "score": 10, "meta": {"year": 2025}}),
    ("d", {"author": "Alice", "tags": ["draft"], "score": "high", "active": True}),
    ("e", {"author": "Bob", "tags": [], "score": None, "active": False}),
]


def test_filters_compare_by_type_on_nested_fields(store: MemlaneStore) -> None:
    for key, value in DOCS:
        store.put(("f",), key, value)

    def found(filter: dict[str, Any]) -> list[str]:
        return sorted(keys(store.search(("f",), filter=filter, limit=100)))

    assert found({"author": "John Doe"}) == ["a", "c"]
    assert found({"tags": ["draft"]}) == ["b", "d"]
    assert found({"score": {"$gt": 4}}) == ["a", "c"]  # numbers numerically: 10 > 4; "high" is not a number
    assert found({"score": {"$gte": 3, "$lt": 10}}) == ["a", "b"]
    assert found({"score": {"$lte": 3}}) == ["b"]
    assert found({"score": {"$gt": "a"}}) == ["d"]  # strings only against strings
    assert found({"score": {"$eq": 3.0}}) == ["b"]  # 3 == 3.0
    assert found({"score": "3"}) == []  # but not "3"
    assert found({"score": None}) == ["e"]
    assert found({"active": True}) == ["d"]  # true is not 1
    assert found({"active": {"$ne": True}}) == ["a", "b", "c", "e"]  # missing is not equal
    assert found({"meta.year": {"$gte": 2024}}) == ["a", "c"]
    assert found({"meta": {"lang": "en"}}) == ["a"]  # a nested object is a path
    assert found({"meta": {"$eq": {"year": 2025}}}) == ["c"]  # $eq with an object is exact
    assert found({"author": "John Doe", "meta.year": 2025}) == ["c"]
    assert found({"author": {"$ne": "John Doe"}, "tags": ["draft"]}) == ["b", "d"]


@pytest.mark.parametrize(
    "bad",
    [{"score": {"$regex": "x"}}, {"score": {"$gt": [1]}}, {"score": {"$gt": True}}, {"a..b": 1}, {"m": {}}],
)
def test_a_bad_filter_is_refused_naming_it(store: MemlaneStore, bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="filter|where"):
        store.search(("f",), filter=bad)


# LangGraph's own SqliteStore tests (test_numeric_filter_safety, test_sql_injection_*): a filter compares with any
# value a Python filter holds, and a malicious key is refused as an "Invalid filter key" ValueError.


def test_filters_with_infinity_nan_and_huge_numbers_compare_as_python_does(store: MemlaneStore, clock: Any) -> None:
    for key, price in (("a", 10), ("b", 20.5), ("c", -3)):
        store.put(("p",), key, {"price": price, "name": key})
        clock.advance(1)
    store.put(("p",), "words", {"price": "cheap", "name": "words"})

    def found(filter: dict[str, Any], query: str | None = None) -> list[str]:
        return sorted(keys(store.search(("p",), filter=filter, query=query, limit=50)))

    inf, nan = float("inf"), float("nan")
    assert found({"price": {"$lt": inf}}) == ["a", "b", "c"]  # every finite number, never a string
    assert found({"price": {"$gt": -inf}}) == ["a", "b", "c"]
    assert found({"price": {"$lte": -inf}}) == found({"price": {"$gte": inf}}) == []
    assert found({"price": nan}) == found({"price": {"$eq": inf}}) == found({"price": {"$lt": nan}}) == []
    assert found({"price": {"$ne": nan}}) == ["a", "b", "c", "words"]
    assert found({"price": {"$lt": 10**400}}) == ["a", "b", "c"]  # beyond a double: SQL cannot carry it
    assert found({"price": {"$gt": 0, "$lt": inf}}) == ["a", "b"]  # with a condition SQL decides
    assert found({"price": {"$lt": inf}, "name": {"$ne": "a"}}, query="a b c") in ([], ["b", "c"])
    assert keys(store.search(("p",), filter={"price": {"$lt": inf}}, limit=1, offset=2)) == ["a"]  # newest first


def test_filter_values_with_nul_or_quotes_match_nothing_but_themselves(store: MemlaneStore) -> None:
    store.put(("docs",), "public", {"access": "public"})
    store.put(("docs",), "quoted", {"access": "O'Brien's"})
    for value in ("public' OR '1'='1", "public'; --", "public\x00' OR '1'='1", "''''", "public\x00"):
        assert store.search(("docs",), filter={"access": value}) == [], value
    assert keys(store.search(("docs",), filter={"access": "O'Brien's"})) == ["quoted"]
    assert sorted(keys(store.search(("docs",), filter={"access": {"$ne": "public\x00"}}))) == ["public", "quoted"]
    assert store.search(("docs",), filter={"access": {"$gt": "public\x00"}}) == []  # "public" sorts first


@pytest.mark.parametrize(
    "key", ["access') = 'public' OR '1'='1' OR json_extract(value, '$.", "a..b", 'say "hi"', "tab\tkey", ""]
)
def test_a_filter_key_memlane_refuses_is_an_invalid_filter_key_value_error(store: MemlaneStore, key: str) -> None:
    with pytest.raises(ValueError, match="Invalid filter key") as refused:
        store.search(("docs",), filter={key: "dummy"})
    assert isinstance(refused.value, ValidationError) and refused.value.field == "filter"
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("docs",), filter={"meta": {key: 1}}, query="x")


def test_memlanes_own_select_still_refuses_what_its_sql_cannot_carry(mem: Any) -> None:
    # the adapter evaluates these itself; memlane's own where keeps refusing them, naming the field
    for where in ({"price": {"$lt": float("inf")}}, {"access": "a\x00b"}, {"price": float("nan")}):
        with pytest.raises(ValidationError, match="where"):
            mem.select((), where=where)


def test_filter_values_are_data_not_sql(store: MemlaneStore) -> None:
    store.put(("s",), "k", {"name": "x' OR '1'='1", "n": 1})
    assert keys(store.search(("s",), filter={"name": "x' OR '1'='1"})) == ["k"]
    assert store.search(("s",), filter={"name": "' OR 1=1 --"}) == []
    assert store.search(("s",), filter={"n') OR 1=1 --": 1}) == []


def test_list_namespaces_with_prefix_suffix_wildcards_depth_and_pages(store: MemlaneStore) -> None:
    spaces = [
        ("p", "test", "documents", "public", "p"),
        ("p", "test", "documents", "private", "p"),
        ("p", "test", "images", "public", "p"),
        ("p", "prod", "documents", "public", "p"),
        ("p", "prod", "documents", "some", "nesting", "public", "p"),
        ("p", "prod", "documents", "private", "p"),
        ("q", "other"),
    ]
    for ns in spaces:
        store.put(ns, "dummy", {"content": "dummy"})
    assert len(store.list_namespaces(prefix=("p", "test"))) == 3
    assert len(store.list_namespaces(prefix=("p", "prod", "documents"))) == 3
    assert len(store.list_namespaces(suffix=("public", "p"))) == 4
    assert len(store.list_namespaces(prefix=("p", "test"), suffix=("public", "p"))) == 2
    assert len(store.list_namespaces(prefix=("p", "*", "documents"))) == 5
    assert store.list_namespaces(suffix=("some", "*", "public", "p")) == [spaces[4]]
    assert store.list_namespaces(max_depth=2) == [("p", "prod"), ("p", "test"), ("q", "other")]
    assert len(store.list_namespaces(prefix=("p", "*", "documents"), max_depth=4)) == 5
    everything = store.list_namespaces(limit=100)
    assert everything == sorted(spaces)
    assert store.list_namespaces(limit=3) + store.list_namespaces(offset=3) == everything
    assert store.list_namespaces(prefix=("p",), offset=2, limit=2) == everything[2:4]
    store.put(("users", "alice\n"), "k", {"v": 2})
    store.put(("users", "alice"), "k", {"v": 1})
    assert store.list_namespaces(suffix=("alice",)) == [("users", "alice")]


NAMESPACES = [
    ("a/b", "c%d", "e\nf"),  # '/' and '%' inside labels, a control character
    tuple(f"l{i}" for i in range(12)),  # deeper than memlane's 8 segments
    ("_memlane", "x"),  # memlane's reserved root
    ("x", "%|", "%2F"),  # the encoding's own marks as data
]


@pytest.mark.parametrize("namespace", NAMESPACES, ids=["slash", "deep", "reserved", "marks"])
def test_what_langgraph_allows_round_trips_exactly(store: MemlaneStore, namespace: tuple[str, ...]) -> None:
    sibling = (*namespace[:-1], namespace[-1] + "x")
    for key in ["plain", "", "a..b", ".lead", "trail.", "%2E", "k/with/slash", "tab\tkey"]:
        store.put(namespace, key, {"v": key})
        store.put(sibling, key, {"v": "sibling"})
        item = store.get(namespace, key)
        assert item is not None and (item.namespace, item.key, item.value) == (namespace, key, {"v": key})
        assert [(r.namespace, r.key) for r in store.search(namespace, filter={"v": key})] == [(namespace, key)]
        assert [(r.namespace, r.key) for r in store.search(namespace[:-1], filter={"v": key})] == [(namespace, key)]
    assert {namespace, sibling} <= set(store.list_namespaces(limit=100))
    assert len(store.search(namespace, limit=100)) == 8
    store.delete(namespace, "")
    assert store.get(namespace, "") is None and len(store.search(namespace, limit=100)) == 7


@pytest.mark.parametrize(
    "namespace",
    [("",), ("a", ""), ("langgraph", "x"), ("a.b",), ("a\x00",), ()],
    # plain ids: mutmut passes each test's id back on a command line, which cannot carry some reprs
    ids=["empty-label", "empty-last-label", "reserved-root", "period", "nul", "no-labels"],
)
def test_what_langgraph_refuses_is_refused_the_same_way(store: MemlaneStore, namespace: tuple[str, ...]) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"v": 1})


def test_labels_are_checked_on_ops_given_to_batch_directly(store: MemlaneStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a.b",), "k")])
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("",))])
    with pytest.raises(InvalidNamespaceError):
        store.batch([ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a.b",)),))])


# -- semantic search --------------------------------------------------------------------------------


def test_semantic_search_scores_by_similarity_from_the_indexed_fields(mem: Any) -> None:
    store = MemlaneStore(mem, index={"dims": FAKE_DIMS, "fields": ["text"]})
    store.put(("m",), "cats", {"text": "cats purr and chase mice", "other": "rockets"})
    store.put(("m",), "rockets", {"text": "rockets fly to orbit", "other": "cats purr"})
    store.put(("m",), "hidden", {"text": "cats purr loudly"}, index=False)
    store.put(("m",), "by-other", {"text": "nothing", "other": "cats purr cats"}, index=["other"])
    results = store.search(("m",), query="cats purr")
    assert keys(results)[:2] in (["by-other", "cats"], ["cats", "by-other"])
    assert "hidden" not in keys(results)  # index=False: stored, not indexed
    # memlane's own opt-out: not even its key's words are searchable (before, only its vector was left out)
    assert "hidden" not in [h.key for h in mem.search("hidden", channels=["lexical"], floor=False).hits]
    scores = [r.score for r in results]
    assert all(isinstance(s, float) and -1.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert isinstance(results[0], MemlaneSearchItem) and results[0].ranks["vector"] == 1
    assert keys(store.search(("m",), filter={"text": "cats purr loudly"})) == ["hidden"]  # filters still find it
    assert keys(store.search(("m",), query="cats purr", filter={"other": "rockets"})) == ["cats"]
    page = store.search(("m",), query="cats purr", limit=1, offset=1)
    assert keys(page) == keys(results)[1:2]


class CountingEmbeddings(Embeddings):
    """A LangChain ``Embeddings``: 26 letter counts."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[t.count(chr(c)) + 0.001 for c in range(97, 123)] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def test_text_fields_each_make_a_text_and_an_item_scores_by_its_best_field(mem: Any) -> None:
    # LangGraph's test_embed_with_path: its SqliteStore names the fields text_fields, and scores the best field
    if isinstance(mem, memlane.Client):
        pytest.skip("a Client embeds on the service: no per-field vectors here")
    embeddings = CountingEmbeddings()
    store = MemlaneStore(mem, index={"dims": 26, "embed": embeddings, "text_fields": ["k0", "k1", "k3"]})
    assert store.index_config is not None and store.index_config["text_fields"] == ["k0", "k1", "k3"]
    store.put(("t",), "doc1", {"k1": "xxx", "k2": "yyy", "k3": "zzz"})
    store.put(("t",), "doc2", {"k0": "uuu", "k1": "vvv", "k2": "www", "k3": "xxx"})
    store.put(("t",), "own", {"k1": "qqq", "k2": "xxx", "k3": "ppp"}, index=["k2", "k3"])  # a put's own fields
    results = store.search(("t",), query="xxx")
    assert sorted(keys(results)) == ["doc1", "doc2", "own"]
    assert all(r.score == pytest.approx(1.0, abs=1e-3) for r in results)  # each has a field that is exactly "xxx"
    assert keys(store.search(("t",), query="uuu"))[0] == "doc2"
    assert keys(store.search(("t",), query="zzz"))[0] == "doc1"
    assert all(r.score < 0.9 for r in store.search(("t",), query="www"))  # k2 is not indexed
    single = MemlaneStore(mem, index={"dims": 26, "embed": embeddings, "fields": ["k1"]})
    assert single.search(("t",), query="vvv", limit=1)[0].key == "doc2"


def test_the_store_has_langgraphs_embeddings_attribute(mem: Any) -> None:
    assert MemlaneStore(mem).embeddings is None  # no index config, as LangGraph's stores
    embeddings = CountingEmbeddings()
    assert MemlaneStore(mem, index={"dims": 26, "embed": embeddings}).embeddings is embeddings

    def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0, float(len(t))] for t in texts]

    wrapped = MemlaneStore(mem, index={"dims": 2, "embed": embed}).embeddings
    assert wrapped is not None and wrapped.embed_documents(["ab"]) == [[1.0, 2.0]]
    named = MemlaneStore(mem, index={"dims": FAKE_DIMS, "embed": "fake"}).embeddings
    assert len(named.embed_query("cats")) == FAKE_DIMS
    assert asyncio.run(named.aembed_documents(["a", "b"])) == named.embed_documents(["a", "b"])


@pytest.mark.embedded
def test_on_sqlite_the_store_shows_its_connection_and_schema_statements(mem: Any, backend: str) -> None:
    store = MemlaneStore(mem)
    if backend != "sqlite":
        with pytest.raises(AttributeError, match="conn"):
            store.conn  # noqa: B018
        return
    tables = {row[0] for row in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"items", "item_vectors"} <= tables
    assert MemlaneStore.MIGRATIONS and all(sql.split() for sql in MemlaneStore.MIGRATIONS)


def test_without_an_index_a_query_searches_the_words(store: MemlaneStore) -> None:
    store.put(("w",), "a", {"note": "the deploy failed on tuesday"})
    store.put(("w",), "b", {"note": "lunch was good"})
    assert keys(store.search(("w",), query="deploy")) == ["a"]


# -- TTL ----------------------------------------------------------------------------------------------


def test_ttl_expires_items_and_a_read_refreshes_them(mem: Any, clock: Any) -> None:
    store = MemlaneStore(mem, ttl={"default_ttl": 1, "refresh_on_read": True})
    store.put(("t",), "k", {"v": 1})
    store.put(("t",), "short", {"v": 2}, ttl=0.5)
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    clock.advance(40)
    assert store.get(("t",), "short") is None  # 30 s
    assert store.get(("t",), "k") is not None  # refreshed: one more minute from now
    clock.advance(40)
    assert store.get(("t",), "k", refresh_ttl=False) is not None  # 80 s since the put, 40 since the read
    clock.advance(30)
    assert store.get(("t",), "k") is None  # that read did not refresh
    assert keys(store.search(("t",))) == ["forever"]


def test_search_refreshes_what_it_returns(mem: Any, clock: Any) -> None:
    store = MemlaneStore(mem, ttl={"default_ttl": 1, "refresh_on_read": True})
    store.put(("t",), "a", {"v": 1})
    store.put(("t",), "b", {"v": 2})
    clock.advance(40)
    assert keys(store.search(("t",), filter={"v": 1})) == ["a"]
    clock.advance(40)
    assert keys(store.search(("t",), refresh_ttl=False)) == ["a"]
    assert store.search(("t",), filter={"v": 1}, refresh_ttl=False)[0].key == "a"


def test_an_items_own_ttl_overrides_the_default_and_reads_refresh_only_when_the_config_says(
    mem: Any, clock: Any
) -> None:
    # LangGraph's test_ttl_override_default: as its SqliteStore, a read restarts a TTL only with refresh_on_read
    store = MemlaneStore(mem, ttl={"default_ttl": 5 / 60})
    store.put(("t",), "short", {"v": 1}, ttl=1 / 60)
    store.put(("t",), "default", {"v": 2})
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    clock.advance(2)
    assert store.get(("t",), "short") is None
    assert store.get(("t",), "default") is not None  # read, but not refreshed
    assert sorted(keys(store.search(("t",)))) == ["default", "forever"]
    clock.advance(4)
    assert store.get(("t",), "default") is None
    assert keys(store.search(("t",))) == ["forever"]


def test_sweep_deletes_expired_rows(mem: Any, clock: Any) -> None:
    store = MemlaneStore(mem, ttl={"default_ttl": 1})
    store.put(("t",), "a", {"v": 1})
    store.put(("t",), "b", {"v": 2}, ttl=None)
    assert store.sweep_ttl() == 0
    clock.advance(61)
    assert store.sweep_ttl() == 1
    assert store.sweep_ttl() == 0


def test_without_ttl_config_the_sweeper_is_a_finished_future(store: MemlaneStore) -> None:
    assert store.start_ttl_sweeper().done()
    assert store.stop_ttl_sweeper()


def test_async_store_over_a_memory(mem: Any) -> None:
    async def run() -> list[Any]:
        store = AsyncMemlaneStore(mem)
        await store.setup()
        await store.aput(("a", "b"), "k", {"n": 1})
        results = await store.abatch([GetOp(("a", "b"), "k"), SearchOp(("a",), filter={"n": {"$gte": 1}})])
        return [results, await store.alist_namespaces(prefix=("a",))]

    (got, found), namespaces = asyncio.run(run())
    assert got.value == {"n": 1} and keys(found) == ["k"] and namespaces == [("a", "b")]


def test_a_store_closes_the_memory_only_when_it_opened_it(tmp_path: Any) -> None:
    """``MemlaneStore(memory)`` and its async twin leave the caller's memory open when they close;
    ``from_conn_string`` opened its memory, so its store closes it on exit (both stores)."""
    with memlane.open(str(tmp_path / "given.db"), embedder=None) as mem:
        for kind in (MemlaneStore, AsyncMemlaneStore):
            kind(mem).close()
            mem.put("still", "open", kind.__name__)  # the memory is the caller's: still usable
    with MemlaneStore.from_conn_string(str(tmp_path / "opened.db")) as store:
        opened = store.memory
        store.put(("a",), "k", {"v": 1})
    with pytest.raises(memlane.MemlaneError):
        opened.put("a", "k", "after the store closed")

    async def run() -> Any:
        async with AsyncMemlaneStore.from_conn_string(str(tmp_path / "opened-async.db")) as store:
            await store.aput(("a",), "k", {"v": 1})
            return store.memory

    with pytest.raises(memlane.MemlaneError):
        asyncio.run(run()).put("a", "k", "after the store closed")
