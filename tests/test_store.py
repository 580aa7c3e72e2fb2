"""The storage backends (SQLite and PostgreSQL) against one reference model.

What this file guards, the same way on every backend (``mem`` / ``store_url`` run it on
``sqlite`` and ``postgres``):

* writes: an upsert keeps ``id`` and ``created_at`` and bumps ``version``; the replaced,
  deleted, cleared or expired version goes to history with its author and the time and
  author of the change; repeated addresses in one batch apply in order;
* exact reads: ``get``, ``get_many`` (input order), ``list`` (address order, paging,
  segment-boundary prefixes), ``namespaces``, ``fetch`` (newest first), ``summarize``,
  ``stats`` counts;
* expiry at the exact instant on every read and write path, and ``cleanup``;
* ranked reads: lexical and vector channels nominate, hydrate drops expired, deleted
  and stale candidates;
* vectors: backlog, ``reindex``, counts;
* export -> import round trips every field; a re-import changes nothing;
* plumbing: migrations, URLs, clear errors, closed stores, threads.

The model-based test drives random sequences of put / put_many / delete / clear /
clock / cleanup against a dict and compares every read verb with it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import memlane
from conformance.indexed import indexed
from memlane.values import validate
from memlane.values.errors import BackendUnavailableError, SchemaVersionError, StoreError
from memlane.values.model import Item, Version

# -- the reference model ----------------------------------------------------

WORDS = ("zebra", "quokka", "lynx")
# segment-boundary neighbours: "a" must never match "a-b" or "a0" ('-' < '/' < '0')
SUBSPACES = (("a",), ("a", "b"), ("a", "b", "c"), ("a-b",), ("a0",), ("b",))
KEYS = ("k", "k.x", "k.x.y", "k-x", "kx", "k/x")
AUTHORS = (None, "alice", "bob")
TTLS = (None, 5, 10)


@dataclass
class Row:
    item: Item
    vector_version: int | None  # the item version the stored vector was made from


@dataclass
class Model:
    """What a store must hold: live and expired rows, history, per address."""

    rows: dict[tuple[tuple[str, ...], str], Row] = field(default_factory=dict)
    history: dict[tuple[tuple[str, ...], str], list[Version]] = field(default_factory=dict)
    versions: int = 0

    def live(self, now: Any) -> dict[tuple[tuple[str, ...], str], Item]:
        return {a: r.item for a, r in self.rows.items() if r.item.expires_at is None or r.item.expires_at > now}

    def expired(self, now: Any) -> dict[tuple[tuple[str, ...], str], Item]:
        live = self.live(now)
        return {a: r.item for a, r in self.rows.items() if a not in live}

    def archive(self, item: Item, change: str, at: Any, by: str | None) -> None:
        fields = {f: getattr(item, f) for f in Item.FIELDS if f != "id"}
        self.history.setdefault((item.namespace, item.key), []).append(
            Version(item_id=item.id, **fields, change=change, changed_at=at, changed_by=by)
        )
        self.versions += 1

    def put(self, addr, value, text, metadata, ttl, author, now, returned: Item) -> Item:  # noqa: ANN001
        value_json, value_type = validate.value(value)
        if text is None:
            text = value if value_type == "string" else value_json
        old = self.rows.get(addr)
        expires = None if ttl is None else now + timedelta(seconds=ttl)
        if old is not None and old.item.expires_at is not None and old.item.expires_at <= now:
            self.archive(old.item, "expire", now, author)
            assert returned.id != old.item.id, "an expired item overwritten must start a new item"
            item_id, created, version = returned.id, now, 1
        elif old is not None:
            self.archive(old.item, "replace", now, author)
            item_id, created, version = old.item.id, old.item.created_at, old.item.version + 1
        else:
            item_id, created, version = returned.id, now, 1
        item = Item(
            item_id,
            addr[0],
            addr[1],
            json.loads(value_json),
            value_type,
            text,
            metadata or {},
            author,
            created,
            now,
            expires,
            version,
        )
        # a write without text keeps the item's vector; a new item at an expired address starts without one
        vector = version if text else (old.vector_version if old and version > 1 else None)
        self.rows[addr] = Row(item, vector)
        return item

    def delete(self, addr, now, author) -> bool:  # noqa: ANN001
        if addr not in self.live(now):
            return False
        self.archive(self.rows.pop(addr).item, "delete", now, author)
        return True

    def clear(self, prefix, now, author) -> int:  # noqa: ANN001
        live = self.live(now)
        gone = [a for a in self.rows if a[0][: len(prefix)] == prefix]
        for a in gone:
            row = self.rows.pop(a)
            if a in live:
                self.archive(row.item, "clear", now, author)
        return sum(a in live for a in gone)

    def cleanup(self, now) -> int:  # noqa: ANN001
        gone = list(self.expired(now))
        for a in gone:
            del self.rows[a]
        return len(gone)


def _under(addr, prefix, key_prefix: str = "") -> bool:  # noqa: ANN001
    ns, key = addr
    in_ns = ns[: len(prefix)] == prefix
    return in_ns and (not key_prefix or key == key_prefix or key.startswith(key_prefix + "."))


def _order(addr) -> tuple[str, str]:  # noqa: ANN001
    return "/".join(addr[0]), addr[1]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


values = st.one_of(
    st.sampled_from(WORDS).map(lambda w: f"{w} note"),
    st.sampled_from(["3.12", "true", "null"]),  # strings that look like other types stay strings
    st.integers(-3, 3),
    st.sampled_from([3.12, -0.5, 1e20]),
    st.booleans(),
    st.none(),
    st.lists(st.sampled_from(WORDS), max_size=2),
    st.fixed_dictionaries({"w": st.sampled_from(WORDS), "n": st.integers(0, 2)}),
)
addresses = st.tuples(st.sampled_from(SUBSPACES), st.sampled_from(KEYS))
writes = st.fixed_dictionaries(
    {
        "addr": addresses,
        "value": values,
        "ttl": st.sampled_from(TTLS),
        "text": st.one_of(st.none(), st.sampled_from(WORDS).map(lambda w: f"about {w}")),
        "metadata": st.one_of(st.none(), st.fixed_dictionaries({"m": st.integers(0, 2)})),
    }
)
operations = st.one_of(
    st.tuples(st.just("put"), writes, st.sampled_from(AUTHORS)),
    st.tuples(st.just("put_many"), st.lists(writes, min_size=1, max_size=4), st.sampled_from(AUTHORS)),
    st.tuples(st.just("delete"), addresses, st.sampled_from(AUTHORS)),
    st.tuples(st.just("clear"), st.sampled_from([("a",), ("a", "b"), ("a-b",), ("b",)]), st.sampled_from(AUTHORS)),
    st.tuples(st.just("advance"), st.sampled_from([1, 4, 5])),
    st.tuples(st.just("cleanup")),
)

# under mutation testing a failure needs no minimal example, only to be noticed quickly
_PHASES = (
    (Phase.explicit, Phase.reuse, Phase.generate)
    if os.environ.get("MUTANT_UNDER_TEST")
    else (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)
)
_MODEL_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    phases=_PHASES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Checker:
    """Compares every read verb of a memory with the model, under one root namespace."""

    def __init__(self, mem: Any, clock: Any, root: str) -> None:
        self.mem, self.clock, self.root = mem, clock, (root,)
        self.model = Model()
        self.universe = [(self.ns(s), k) for s in SUBSPACES for k in KEYS]
        self.base_history = mem.stats().history_versions

    def ns(self, sub: tuple[str, ...]) -> tuple[str, ...]:
        return self.root + sub

    def apply(self, op: tuple[Any, ...]) -> None:
        mem, model, now = self.mem, self.model, self.clock.now
        kind = op[0]
        if kind in ("put", "put_many", "delete", "clear"):
            mem.author = op[2]
        if kind == "put":
            w = op[1]
            addr = (self.ns(w["addr"][0]), w["addr"][1])
            got = mem.put(*addr, w["value"], text=w["text"], metadata=w["metadata"], ttl=w["ttl"])
            assert got == model.put(addr, w["value"], w["text"], w["metadata"], w["ttl"], op[2], now, got)
        elif kind == "put_many":
            records = [
                {
                    "namespace": self.ns(w["addr"][0]),
                    "key": w["addr"][1],
                    "value": w["value"],
                    "ttl": w["ttl"],
                    "text": w["text"],
                    "metadata": w["metadata"],
                }
                for w in op[1]
            ]
            got = mem.put_many(records)
            assert len(got) == len(records)
            for rec, item in zip(records, got, strict=True):
                addr = (rec["namespace"], rec["key"])
                want = model.put(addr, rec["value"], rec["text"], rec["metadata"], rec["ttl"], op[2], now, item)
                assert item == want
        elif kind == "delete":
            addr = (self.ns(op[1][0]), op[1][1])
            assert mem.delete(*addr) is model.delete(addr, now, op[2])
        elif kind == "clear":
            prefix = self.ns(op[1])
            assert mem.clear(prefix) == model.clear(prefix, now, op[2])
        elif kind == "advance":
            self.clock.advance(op[1])
        else:
            assert mem.cleanup() == model.cleanup(now)

    def check_quick(self) -> None:
        """After every step: every address in one batch (shuffled, one repeated), and the counts."""
        now = self.clock.now
        live = self.model.live(now)
        asked = self.universe[1::2] + self.universe[::2] + self.universe[:1]
        assert self.mem.get_many(asked) == [live.get(a) for a in asked]
        stats = self.mem.stats()
        assert (stats.active_items, stats.expired_items, stats.namespaces, stats.history_versions) == (
            len(live),
            len(self.model.rows) - len(live),
            len({a[0] for a in live}),
            self.base_history + self.model.versions,
        )

    def _page_through(self, prefix: tuple[str, ...], key_prefix: str, limit: int) -> list[Item]:
        out: list[Item] = []
        cursor = None
        for _ in range(50):
            page = self.mem.list(prefix, key_prefix=key_prefix, limit=limit, cursor=cursor)
            assert len(page.items) <= limit
            out += page.items
            cursor = page.next_cursor
            if cursor is None:
                return out
            assert len(page.items) == limit
        raise AssertionError("list never reached its last page")

    def check_all(self) -> None:
        """At the end of a sequence: every read verb against the model."""
        mem, model, now = self.mem, self.model, self.clock.now
        live = model.live(now)
        for addr in self.universe:
            assert mem.get(*addr) == live.get(addr)
        for sub, key_prefix, limit in (((), "", 2), (("a",), "", 3), ((), "k", 2), (("a", "b"), "k.x", 100)):
            prefix = self.ns(sub)
            want = [live[a] for a in sorted(live, key=_order) if _under(a, prefix, key_prefix)]
            assert self._page_through(prefix, key_prefix, limit) == want
        for sub in ((), ("a",), ("a", "b"), ("a-b",)):
            prefix = self.ns(sub)
            assert mem.namespaces(prefix) == sorted({a[0] for a in live if _under(a, prefix)})
        for key in KEYS:
            for sub, limit in (((), 3), (("a",), 10)):
                prefix = self.ns(sub)
                found = [i for a, i in live.items() if a[1] == key and _under(a, prefix)]
                found.sort(key=lambda i: "/".join(i.namespace))
                found.sort(key=lambda i: i.updated_at, reverse=True)
                assert mem.fetch(key, namespace_prefix=prefix, limit=limit) == found[:limit]
        summary: dict[str, dict[str, int]] = {}
        for ns, key in live:
            path = key.split(".", 1)[0]
            bucket = summary.setdefault("/".join(ns), {})
            bucket[path] = bucket.get(path, 0) + 1
        assert mem.summarize(self.root, depth=1) == summary
        for addr in self.universe:
            assert mem.history(*addr) == list(reversed(model.history.get(addr, [])))
        self.check_search()

    def check_search(self) -> None:
        """Both channels nominate every stored row (expired ones too); confirm keeps the live, current ones."""
        mem, now = self.mem, self.clock.now
        live = self.model.live(now)
        for word in WORDS:
            env = mem.search(
                word, namespace_prefix=self.root, channels=["lexical"], limit=50, candidate_k=100, floor=False
            )
            stored = {a for a, r in self.model.rows.items() if word in _words(r.item.text)}
            assert {(h.namespace, h.key) for h in env.hits} == stored & set(live)
            assert all(h.item == live[(h.namespace, h.key)] for h in env.hits)
            assert (env.counts["lexical"], env.dropped_by_hydration) == (len(stored), len(stored - set(live)))
        indexed(mem)
        env = mem.search(
            WORDS[0], namespace_prefix=self.root, channels=["vector"], limit=50, candidate_k=100, floor=False
        )
        embedded = {a for a, r in self.model.rows.items() if r.vector_version is not None}
        current = {a for a in embedded if a in live and self.model.rows[a].vector_version == live[a].version}
        assert {(h.namespace, h.key) for h in env.hits} == current
        assert (env.counts["vector"], env.dropped_by_hydration) == (len(embedded), len(embedded - current))

    def finish(self) -> None:
        """Leave nothing behind for the next example: expired rows, then everything under the root."""
        now = self.clock.now
        assert self.mem.cleanup() == self.model.cleanup(now)
        assert self.mem.clear(self.root) == self.model.clear(self.root, now, self.mem.author)
        stats = self.mem.stats()
        assert (stats.active_items, stats.expired_items, stats.namespaces) == (0, 0, 0)
        self.clock.advance(1)


@pytest.mark.embedded  # sets the author of each write
def test_random_write_sequences_match_the_model_on_every_read_verb(mem, clock):
    roots = itertools.count()

    @_MODEL_SETTINGS
    @given(steps=st.lists(operations, min_size=1, max_size=12))
    def run(steps: list[tuple[Any, ...]]) -> None:
        checker = Checker(mem, clock, f"ex{next(roots)}")
        for op in steps:
            checker.apply(op)
            checker.check_quick()
        checker.check_all()
        checker.finish()

    run()


# -- expiry at the exact instant ---------------------------------------------


@pytest.mark.parametrize("at_expiry", [False, True], ids=["one-microsecond-before", "at-the-instant"])
def test_expiry_is_exact_on_every_read_and_write_path(mem, clock, at_expiry):
    """An item with ``expires_at = T`` is live at ``T - 1us`` and missing from ``T`` on, on every path."""
    for ns in ("t/read", "t/delete", "t/clear", "t/put", "t/absent"):
        mem.put(ns, "k", "zebra " + ns, ttl=10)
    durable = mem.put("t/durable", "k", "zebra durable")
    indexed(mem)
    started = clock.now
    clock.advance(10 - (1e-6 if not at_expiry else 0))
    assert clock.now == started + timedelta(seconds=10) - (timedelta() if at_expiry else timedelta(microseconds=1))
    live = not at_expiry
    spaces = ["t/absent", "t/clear", "t/delete", "t/durable", "t/put", "t/read"]
    visible = spaces if live else ["t/durable"]

    read = mem.get("t/read", "k")
    assert (read is not None) is live
    assert [i is not None for i in mem.get_many([("t/read", "k"), ("t/durable", "k")])] == [live, True]
    assert ["/".join(i.namespace) for i in mem.fetch("k", limit=100)] == visible  # one instant: by namespace
    assert ["/".join(i.namespace) for i in mem.list("t").items] == visible
    assert mem.namespaces("t") == [tuple(s.split("/")) for s in visible]
    assert mem.summarize("t") == {s: {"k": 1} for s in visible}
    stats = mem.stats()
    assert (stats.active_items, stats.expired_items, stats.namespaces) == (len(visible), 6 - len(visible), len(visible))
    for channel in ("lexical", "vector"):
        env = mem.search("zebra", channels=[channel], limit=20)
        assert sorted("/".join(h.namespace) for h in env.hits) == visible
        assert env.dropped_by_hydration == 6 - len(visible)

    # writes: an expired item is gone for delete, clear and if_absent, and a put over it starts afresh
    assert mem.delete("t/delete", "k") is live
    assert mem.clear("t/clear") == int(live)
    assert [h.change for h in mem.history("t/clear", "k")] == (["clear"] if live else [])
    again = mem.put("t/put", "k", "zebra again")
    assert again.version == (2 if live else 1)
    assert mem.history("t/put", "k")[0].change == ("replace" if live else "expire")
    if live:
        with pytest.raises(memlane.ConflictError):
            mem.put("t/absent", "k", "taken", if_absent=True)
    else:
        assert mem.put("t/absent", "k", "taken", if_absent=True).version == 1
    expected_cleanup = 0 if live else 2  # t/read and t/delete were still there, expired
    assert mem.cleanup() == expected_cleanup
    assert mem.get("t/durable", "k") == durable


def test_writing_over_an_expired_item_archives_it_as_expired(mem, clock):
    old = mem.put("u", "k", {"v": 1}, metadata={"m": 1}, ttl=5)
    clock.advance(5)
    new = mem.put("u", "k", "fresh")
    assert (new.id != old.id, new.version, new.created_at, new.updated_at) == (True, 1, clock.now, clock.now)
    assert mem.get("u", "k") == new
    (version,) = mem.history("u", "k")
    assert version.item_id == old.id and version.value == {"v": 1} and version.value_type == "object"
    assert (version.created_at, version.updated_at, version.expires_at) == (old.created_at, old.updated_at, clock.now)
    assert (version.change, version.changed_at, version.metadata, version.version) == ("expire", clock.now, {"m": 1}, 1)


# -- history -------------------------------------------------------------------


@pytest.mark.embedded  # sets the author
def test_history_keeps_every_field_of_each_version_newest_first(mem, clock):
    mem.author = "alice"
    first = mem.put("h", "k", 1, text="first text", metadata={"n": 1}, ttl=100)
    clock.advance(1)
    mem.author = "bob"
    second = mem.put("h", "k", [1, "two"], metadata={"n": 2})
    clock.advance(1)
    mem.author = "carol"
    assert mem.delete("h", "k") is True
    clock.advance(1)
    mem.author = None
    third = mem.put("h", "k", "x")
    clock.advance(1)
    assert mem.clear("h") == 1
    history = mem.history("h", "k")
    assert [(v.change, v.changed_by, v.author, v.value_type) for v in history] == [
        ("clear", None, None, "string"),
        ("delete", "carol", "bob", "list"),
        ("replace", "bob", "alice", "number"),
    ]
    oldest = history[-1]
    assert oldest == Version(
        item_id=first.id,
        namespace=("h",),
        key="k",
        value=1,
        value_type="number",
        text="first text",
        metadata={"n": 1},
        author="alice",
        created_at=first.created_at,
        updated_at=first.updated_at,
        expires_at=first.expires_at,
        version=1,
        change="replace",
        changed_at=second.updated_at,
        changed_by="bob",
    )
    assert history[1].item_id == second.id == first.id and history[1].version == 2
    assert history[1].created_at == first.created_at and history[1].updated_at == second.updated_at
    assert history[0].item_id == third.id != first.id and history[0].changed_at == clock.now
    assert mem.stats().history_versions == 3


def test_repeated_addresses_in_one_batch_replace_in_order_with_history(mem, clock):
    before = mem.put("b", "x", "before")
    items = mem.put_many(
        [
            {"namespace": "b", "key": "x", "value": "one"},
            {"namespace": "b", "key": "y", "value": "new"},
            {"namespace": "b", "key": "x", "value": "two"},
            {"namespace": "b", "key": "y", "value": "newer"},
            {"namespace": "b", "key": "x", "value": "three"},
        ]
    )
    assert [(i.key, i.value, i.version) for i in items] == [
        ("x", "one", 2),
        ("y", "new", 1),
        ("x", "two", 3),
        ("y", "newer", 2),
        ("x", "three", 4),
    ]
    assert {i.id for i in items if i.key == "x"} == {before.id}
    assert len({i.id for i in items if i.key == "y"}) == 1
    assert [v.value for v in mem.history("b", "x")] == ["two", "one", "before"]
    assert [v.value for v in mem.history("b", "y")] == ["new"]
    assert [h.key for h in mem.search("newer", channels=["lexical"]).hits] == ["y"]
    assert mem.search("new", channels=["lexical"]).hits == []  # "new" and "newer" stem apart
    assert [h.key for h in mem.search("three", channels=["lexical"]).hits] == ["x"]
    assert mem.search("two", channels=["lexical"]).hits == []


# -- stats ----------------------------------------------------------------------


def test_stats_count_rows_history_schema_and_size(mem, clock, backend, store_url):
    from memlane.store.postgres import redact

    empty = mem.stats()
    assert (empty.active_items, empty.expired_items, empty.namespaces, empty.history_versions) == (0, 0, 0, 0)
    from memlane.store.sqlite import MIGRATIONS

    assert empty.schema_version == len(MIGRATIONS)  # migrations applied (m001_initial ... the last one)
    assert empty.location == (redact(store_url) if backend == "postgres" else store_url)
    assert isinstance(empty.size_bytes, int) and empty.size_bytes > 0
    mem.put("s/a", "k", 1)
    mem.put("s/a", "k", 2)
    mem.put("s/b", "k", 3, ttl=1)
    mem.put("s/c", "k", 4, ttl=100)
    clock.advance(1)
    stats = mem.stats()
    assert (stats.active_items, stats.expired_items, stats.namespaces, stats.history_versions) == (2, 1, 2, 1)
    assert stats.backend in ("sqlite", "postgres")


def test_sqlite_size_is_pages_times_page_size(tmp_path):
    store_url = str(tmp_path / "size.db")
    with memlane.open(store_url, embedder=None) as m:
        m.put("a", "k", "x" * 10_000)
        size = m.stats().size_bytes
    conn = sqlite3.connect(store_url)
    pages, page_size = conn.execute("PRAGMA page_count").fetchone()[0], conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    assert size == pages * page_size and size % page_size == 0


# -- hydrate and the vector channel -------------------------------------------


@pytest.mark.embedded
def test_hydrate_rereads_candidates_and_drops_expired_and_deleted(mem, clock):
    store = mem.store
    mem.put("y", "stay", "zebra stays")
    mem.put("y", "expire", "zebra expires", ttl=5)
    mem.put("y", "delete", "zebra deleted")
    mem.put("y", "replace", "zebra replaced")
    refs = {ref for ref, _, _ in store.lexical(["zebra"], [("y",)], 10)}
    assert len(refs) == 4
    assert store.hydrate([], [()], clock.now) == {}
    mem.delete("y", "delete")
    replaced = mem.put("y", "replace", "zebra again")
    clock.advance(5)
    missing = "f" * 32
    got = store.hydrate([*refs, missing], [()], clock.now)
    assert sorted(i.key for i in got.values()) == ["replace", "stay"]
    assert got[next(r for r, i in got.items() if i.key == "replace")] == replaced
    assert all(ref in refs for ref in got)
    # the re-read applies the scope in the same statement: nothing outside it comes back
    assert store.hydrate([*refs], [("y-other",)], clock.now) == {}
    assert store.hydrate([*refs], [], clock.now) == {}
    assert len(store.hydrate([*refs], [("y",), ("z",)], clock.now)) == 2
    # the lexical channel sees the rows of the table (expiry is the confirm step's job), scoped by prefix
    assert len(store.lexical(["zebra"], [("y",)], 10)) == 3
    assert store.lexical(["zebra"], [("y-other",)], 10) == []
    assert store.lexical(["zebra"], [], 10) == []
    assert store.lexical([], [("y",)], 10) == []
    assert len(store.lexical(["zebra"], [()], 2)) == 2


@pytest.mark.embedded
def test_lexical_scores_best_first_and_scoped(mem):
    mem.put("l/a", "many", "zebra zebra zebra quokka")
    mem.put("l/a", "one", "zebra and a long tail of other words here to dilute the match")
    mem.put("l/b", "one", "zebra")
    mem.put("l-x", "other", "zebra")
    ranked = mem.store.lexical(["zebra"], [("l",)], 10)
    scores = [s for _, s, _ in ranked]
    assert len(ranked) == 3 and scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)  # higher is better on every backend
    hits = mem.search("zebra", namespace_prefix="l", channels=["lexical"]).hits
    assert [h.key for h in hits][-1] == "one" and hits[-1].namespace == ("l", "a")


def test_vectors_backlog_reindex_and_stale_vectors(store_url, clock):
    with memlane.open(store_url, clock=clock, embedder=None) as plain:
        for i, word in enumerate(WORDS):
            plain.put("v", f"k{i}", f"{word} vector text")
        plain.put("v", "empty", "")  # nothing to embed
    # reindex and stale vectors, with no indexer thread to make vectors behind the test's back
    mem = memlane.open(store_url, clock=clock, embedder="fake", indexing="sync")
    try:
        stats = mem.stats()
        assert (stats.vectors, stats.vectors_missing) == (0, 3)
        assert mem.search("zebra", channels=["vector"]).hits == []
        store = mem.store
        backlog = store.vector_backlog(100)  # from the first item on
        assert [(version, text) for _, version, text in backlog] == [(1, f"{w} vector text") for w in WORDS]
        assert [ref for ref, _, _ in store.vector_backlog(100, after=backlog[0][0])] == [r for r, _, _ in backlog[1:]]
        assert store.vector_backlog(1) == backlog[:1]
        # a vector made from another version than the item's is not stored
        from memlane.domain.search.embedders import FakeEmbedder
        from memlane.values.vectors import normalise, to_blob

        blob = to_blob(normalise(FakeEmbedder().embed_batch(["zebra vector text"])[0]))
        assert store.put_vectors([(backlog[0][0], 2, blob)]) == 0
        assert mem.stats().vectors == 0
        done = []
        assert mem.reindex(batch_size=2, progress=lambda d, t: done.append((d, t))) == 3
        assert done == [(0, 3), (2, 3), (3, 3)]
        stats = mem.stats()
        assert (stats.vectors, stats.vectors_missing) == (3, 0)
        env = mem.search("zebra vector text", channels=["vector"], limit=10)
        assert env.hits[0].key == "k0" and len(env.hits) == 3 and env.dropped_by_hydration == 0
        assert mem.reindex() == 0
        # a write without a vector leaves the old one stale: counted missing, never confirmed (the search's
        # catch-up is off here: with it the search would embed the new version first)
        mem.catch_up = memlane.CatchUp(items=0)
        with memlane.open(store_url, clock=clock, embedder=None) as plain:
            plain.put("v", "k0", "zebra rewritten without a vector")
        stats = mem.stats()
        assert (stats.vectors, stats.vectors_missing) == (2, 1)
        env = mem.search("zebra vector text", channels=["vector"], limit=10)
        assert sorted(h.key for h in env.hits) == ["k1", "k2"] and env.dropped_by_hydration == 1
        assert mem.reindex() == 1
        env = mem.search("zebra rewritten", channels=["vector"], limit=10)
        assert env.hits[0].key == "k0" and env.hits[0].item.version == 2 and env.dropped_by_hydration == 0
        # deleting an item deletes its vector
        mem.delete("v", "k1")
        stats = mem.stats()
        assert (stats.vectors, stats.vectors_missing) == (2, 0)
        env = mem.search("quokka vector text", channels=["vector"], limit=10)
        assert sorted(h.key for h in env.hits) == ["k0", "k2"] and env.dropped_by_hydration == 0
        # dropping the vectors forgets them (and any index made for them); a reindex brings them back
        store.drop_vectors()
        stats = mem.stats()
        assert (stats.vectors, stats.vectors_missing) == (0, 2)
        assert mem.search("lynx vector text", channels=["vector"], limit=10).hits == []
        assert mem.reindex() == 2
        env = mem.search("lynx vector text", channels=["vector"], limit=10)
        assert [h.key for h in env.hits] == ["k2", "k0"] and env.dropped_by_hydration == 0
        mem.put("v", "k3", "lynx written after the rebuild")
        assert mem.search("lynx written after", channels=["vector"], limit=10).hits[0].key == "k3"
        # what another connection writes or deletes is seen by the next search
        with memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as other:
            other.put("v", "k4", "quokka from another connection")
            assert mem.search("quokka from another", channels=["vector"], limit=10).hits[0].key == "k4"
            other.delete("v", "k3")
            env = mem.search("lynx written after", channels=["vector"], limit=10)
            assert "k3" not in [h.key for h in env.hits] and env.counts["vector"] == 3
    finally:
        mem.close()


def test_vector_channel_scopes_to_the_prefix_and_ranks_by_similarity(mem):
    mem.put("w/a", "zebra", "zebra zebra")
    mem.put("w/a", "mixed", "zebra quokka lynx")
    mem.put("w/b", "zebra", "zebra")
    mem.put("w-c", "zebra", "zebra")
    indexed(mem)
    env = mem.search("zebra", namespace_prefix="w", channels=["vector"], limit=10)
    assert [h.namespace[1] for h in env.hits[:2]] == ["a", "b"] or {h.namespace for h in env.hits[:2]} == {
        ("w", "a"),
        ("w", "b"),
    }
    assert {(h.namespace, h.key) for h in env.hits} == {
        (("w", "a"), "zebra"),
        (("w", "a"), "mixed"),
        (("w", "b"), "zebra"),
    }
    assert env.hits[-1].key == "mixed"
    scores = [h.channel_scores["vector"] for h in env.hits]
    assert scores == sorted(scores, reverse=True) and abs(scores[0] - 1.0) < 1e-5
    everywhere = mem.search("zebra", channels=["vector"], limit=10)
    assert len(everywhere.hits) == 4


def test_an_expired_items_vector_never_surfaces_for_its_successor(mem, clock):
    mem.put("e", "k", "zebra secret", ttl=5)
    indexed(mem)
    clock.advance(5)
    mem.put("e", "k", "", metadata={"access": "record"})  # a new item, version 1, nothing to embed
    assert mem.search("zebra secret", channels=["vector"]).hits == []
    stats = mem.stats()
    assert (stats.vectors, stats.vectors_missing) == (0, 0)


# -- export / import --------------------------------------------------------------


def _fill_every_kind(mem, clock) -> None:  # noqa: ANN001
    mem.author = "alice"
    mem.put("x/1", "typed.string", "3.12", metadata={"m": [1, {"deep": None}]})
    mem.put("x/1", "typed.number", 3.12, text="explicit text")
    mem.put("x/1", "typed.bool", False)
    mem.put("x/1", "typed.null", None)
    mem.put("x/1", "typed.list", [1, "two", [3]])
    mem.put("x/2", "typed.object", {"b": 1, "a": {"c": "zebra"}}, ttl=1000)
    mem.put("x/2", "replaced", "v1 zebra")
    clock.advance(1)
    mem.author = "bob"
    mem.put("x/2", "replaced", "v2 quokka")
    mem.put("x/2", "deleted", "gone")
    mem.delete("x/2", "deleted")
    mem.put("x/3", "cleared", "cleared")
    mem.clear("x/3")
    mem.put("x/2", "expired", "old", ttl=1)
    clock.advance(1)
    mem.put("x/2", "expired", "successor")  # history: expire
    mem.put("x/2", "lapsed", "lapsed zebra", ttl=1)
    clock.advance(2)  # x/2 lapsed: expired, not cleaned up
    mem.author = None


def _second_store(request, backend, tmp_path):  # noqa: ANN001
    if backend == "postgres":
        server = request.getfixturevalue("postgres")
        url = server.create()
        request.addfinalizer(lambda: server.drop(url))
        return url
    return str(tmp_path / "copy.db")


@pytest.mark.embedded
def test_export_import_round_trips_every_field_and_history(mem, clock, request, backend, tmp_path):
    _fill_every_kind(mem, clock)
    exported = list(mem.export_records())
    items = [r for r in exported if r["record"] == "item"]
    versions = [r for r in exported if r["record"] == "version"]
    assert exported == items + versions  # items first
    assert [("/".join(r["namespace"]), r["key"]) for r in items] == sorted(
        ("/".join(r["namespace"]), r["key"]) for r in items
    )
    assert [r["change"] for r in versions] == ["replace", "delete", "clear", "expire"]  # oldest first
    lapsed = next(r for r in items if r["key"] == "lapsed")
    assert lapsed["expires_at"] is not None and mem.get("x/2", "lapsed") is None  # exported although expired
    assert set(items[0]) == {
        "record", "id", "namespace", "key", "value", "value_type", "text", "metadata", "author",
        "created_at", "updated_at", "expires_at", "version",
    }  # fmt: skip
    assert set(versions[0]) == set(items[0]) - {"id"} | {"item_id", "change", "changed_at", "changed_by"}
    string = next(r for r in items if r["key"] == "typed.string")
    assert (string["value"], string["value_type"], string["metadata"], string["author"]) == (
        "3.12", "string", {"m": [1, {"deep": None}]}, "alice",
    )  # fmt: skip
    deleted = next(r for r in versions if r["change"] == "delete")
    assert (deleted["value"], deleted["author"], deleted["changed_by"], deleted["version"]) == ("gone", "bob", "bob", 1)

    url = _second_store(request, backend, tmp_path)
    indexed(mem)
    with memlane.open(url, clock=clock, embedder="fake") as copy:
        assert copy.import_records(exported) == len(exported)
        indexed(copy)
        assert list(copy.export_records()) == exported
        for r in items:
            assert copy.get(r["namespace"], r["key"]) == mem.get(r["namespace"], r["key"])
            assert copy.history(r["namespace"], r["key"]) == mem.history(r["namespace"], r["key"])
        for ns, key in (("x/2", "deleted"), ("x/3", "cleared")):
            assert copy.history(ns, key) == mem.history(ns, key) != []
        a, b = copy.stats(), mem.stats()
        assert (a.active_items, a.expired_items, a.namespaces, a.history_versions, a.vectors) == (
            b.active_items, b.expired_items, b.namespaces, b.history_versions, b.vectors,
        )  # fmt: skip
        assert copy.list("x").items == mem.list("x").items
        for word in ("zebra", "quokka", "explicit"):
            env = copy.search(word, channels=["lexical"])
            assert sorted(h.key for h in env.hits) == sorted(h.key for h in mem.search(word, channels=["lexical"]).hits)
            assert env.hits, word
        assert copy.search("lapsed", channels=["lexical"]).dropped_by_hydration == 1
        assert copy.import_records(exported) == 0  # idempotent
        assert list(copy.export_records()) == exported


@pytest.mark.embedded
def test_import_skips_rows_present_exactly_and_writes_the_rest(mem, clock):
    mem.put("i", "a", "alpha zebra")
    mem.put("i", "a", "alpha two")
    mem.put("i", "b", "beta")
    exported = list(mem.export_records())
    item_a, item_b, version_a = exported
    fresh = dict(item_b, key="c", id="id-c", value="gamma quokka", text="gamma quokka")
    other_version = dict(version_a, version=7, changed_at=clock.now.isoformat())
    # present rows first: skipping one must not end the import
    assert mem.import_records([item_a, version_a, fresh, other_version, item_b]) == 2
    assert mem.get("i", "c").value == "gamma quokka" and mem.get("i", "c").id == "id-c"
    assert [v.version for v in mem.history("i", "a")] == [7, 1]  # by insertion, newest first
    assert [h.key for h in mem.search("quokka", channels=["lexical"]).hits] == ["c"]
    assert mem.stats().history_versions == 2


@pytest.mark.embedded
def test_import_over_an_expired_row_replaces_it_and_keeps_it_as_import(mem, clock):
    mem.put("i", "k", "original zebra")
    exported = list(mem.export_records())
    mem.put("i", "k", "successor quokka", ttl=1)
    clock.advance(1)
    assert mem.import_records(exported) == 1
    assert mem.get("i", "k").value == "original zebra"
    assert [(v.value, v.change, v.changed_by) for v in mem.history("i", "k")][0] == ("successor quokka", "import", None)
    assert mem.search("quokka", channels=["lexical"]).counts["lexical"] == 0
    assert [h.key for h in mem.search("zebra", channels=["lexical"]).hits] == ["k"]


# -- plumbing: migrations, opening, closing, threads -----------------------------


@pytest.fixture
def empty_url(request, backend, tmp_path):  # noqa: ANN001
    """A database with no memlane schema at all."""
    if backend == "sqlite":
        return str(tmp_path / "empty.db")
    server = request.getfixturevalue("postgres")
    name = f"memlane_empty_{os.getpid()}_{next(_EMPTY)}"
    server.execute(f'CREATE DATABASE "{name}"')
    url = server._url_for(name)
    request.addfinalizer(lambda: server.drop(url))
    return url


_EMPTY = itertools.count()


def _store_class(backend: str):  # noqa: ANN202
    if backend == "sqlite":
        from memlane.store.sqlite import SqliteStore

        return SqliteStore
    from memlane.store.postgres import PostgresStore

    return PostgresStore


def _record_migration(url: str, backend: str, name: str) -> None:
    if backend == "sqlite":
        conn = sqlite3.connect(url)
        conn.execute("INSERT INTO _memlane_migrations (name, applied_at) VALUES (?, 'later')", (name,))
        conn.commit()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO _memlane_migrations (name, applied_at) VALUES (%s, 'later')", (name,))


def test_migrations_apply_in_order_once_and_a_newer_schema_is_refused(empty_url, backend):
    cls = _store_class(backend)
    store = cls(empty_url, migrate=False)
    try:
        assert store.migrations() == []
        assert store.migrate() == list(cls.migration_names)
        applied = store.migrations()
        assert [name for name, _ in applied] == sorted(cls.migration_names) and all(at for _, at in applied)
        assert store.migrate() == []
        assert store.migrations() == applied
    finally:
        store.close()
    with memlane.open(empty_url, embedder=None) as m:
        status = m.migration_status()
        assert [s["name"] for s in status] == list(cls.migration_names) and all(s["applied_at"] for s in status)
        assert m.migrate() == []
        m.put("a", "k", "kept")
    _record_migration(empty_url, backend, "m999_from_the_future")
    with pytest.raises(SchemaVersionError, match=r"m999_from_the_future.*does not know; upgrade memlane"):
        memlane.open(empty_url, embedder=None)


def test_a_closed_memory_refuses_every_verb_and_closing_twice_is_fine(store_url):
    m = memlane.open(store_url, embedder=None)
    m.put("c", "k", 1)
    m.close()
    for verb in (
        lambda: m.get("c", "k"),
        lambda: m.put("c", "k", 2),
        lambda: m.get_many([("c", "k")]),
        lambda: m.list("c"),
        lambda: m.history("c", "k"),
        lambda: m.stats(),
    ):
        with pytest.raises(StoreError, match=r"^this memory is closed; open it again with memlane\.open\(\)$"):
            verb()
    m.close()
    with memlane.open(store_url, embedder=None) as again:
        assert again.get("c", "k").value == 1


def test_one_memory_serves_several_threads(store_url):
    m = memlane.open(store_url, embedder=None)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                m.put(("th", str(n)), f"k{i}", i)
                assert m.get(("th", str(n)), f"k{i}").value == i
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert m.stats().active_items == 30
        assert m.query("SELECT count(*) FROM items").rows == [[30]]
        result: list[Any] = []
        t = threading.Thread(target=lambda: result.append(m.query("SELECT count(*) FROM items").rows))
        t.start()
        t.join()
        assert result == [[[30]]]
    finally:
        m.close()


def _open_fds_on(path: str) -> int:
    real = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.path.realpath(os.readlink(f"/proc/self/fd/{fd}")).startswith(real):
                count += 1
        except OSError:
            continue
    return count


class _ServerConnections:
    """Counts the other backends of a database through one connection kept open: a connection per count
    would leave its own backend ending on the server as the next count looks, and count it."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=True)

    def __call__(self, url: str) -> int:
        return self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]

    def close(self) -> None:
        self._conn.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_close_releases_every_connection_including_the_query_space(store_url, backend):
    handles = _open_fds_on if backend == "sqlite" else _ServerConnections(store_url)
    try:
        m = memlane.open(store_url, embedder=None)
        m.put("q", "k", "v")
        assert m.get("q", "k").value == "v"  # the point-read connection too
        assert m.query("SELECT key FROM items").rows == [["k"]]
        assert handles(store_url) > 0
        m.close()
        # PostgreSQL ends a backend a moment after its client hangs up, so its row can outlive close() briefly:
        # wait for the server's own state (bounded), never for a fixed time
        deadline = time.monotonic() + 30
        while handles(store_url) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert handles(store_url) == 0
    finally:
        if isinstance(handles, _ServerConnections):
            handles.close()


def test_sqlite_urls_name_the_same_file(tmp_path):
    from memlane.store.sqlite import parse_url

    path = str(tmp_path / "url.db")
    assert parse_url("sqlite:///" + path.lstrip("/")) == path.lstrip("/")
    assert parse_url("sqlite:////abs/x.db") == "/abs/x.db"
    assert parse_url("sqlite://rel.db") == "rel.db"
    assert parse_url("sqlite:///") == parse_url("sqlite://") == ":memory:"
    assert parse_url(path) == path
    with memlane.open("sqlite:///" + path, embedder=None) as m:
        m.put("u", "k", "persisted")
    with memlane.open(path, embedder=None) as m:
        assert m.get("u", "k").value == "persisted"
        assert m.stats().location == path


def test_sqlite_in_memory_store_works_but_has_no_query_space():
    with memlane.open(":memory:", embedder=None) as m:
        m.put("m", "k", "zebra")
        assert m.get("m", "k").value == "zebra"
        assert [h.key for h in m.search("zebra").hits] == ["k"]
        with pytest.raises(BackendUnavailableError, match="in-memory SQLite store cannot have; open a file instead"):
            m.query("SELECT key FROM items")


def test_sqlite_missing_directory_is_named_in_the_error(tmp_path):
    target = tmp_path / "no-such-dir" / "x.db"
    with pytest.raises(StoreError, match=r"no-such-dir.*does not exist; create it first"):
        memlane.open(str(target), embedder=None)


def test_a_write_runs_while_another_transaction_of_the_memory_is_open(store_url, backend):
    if backend != "postgres":
        pytest.skip("SQLite has one writer at a time by design")
    with memlane.open(store_url, embedder=None) as m:
        done = threading.Event()
        with m.store.session(write=True) as s:
            s.run("SELECT 1")
            t = threading.Thread(target=lambda: (m.put("p", "k", 1), done.set()))
            t.start()
            assert done.wait(5), "a put waited for an unrelated open transaction: the pool has one connection"
        t.join()
        assert m.get("p", "k").value == 1


def test_without_pgvector_the_vector_channel_names_the_fix(backend, request):
    if backend != "postgres":
        pytest.skip("pgvector is a PostgreSQL extension")
    from urllib.parse import urlsplit, urlunsplit

    server = request.getfixturevalue("postgres")
    server.execute("DO $$ BEGIN CREATE ROLE memlane_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    url = server.create(owner="memlane_plain")
    request.addfinalizer(lambda: server.drop(url))
    parts = urlsplit(url)
    plain = urlunsplit(parts._replace(netloc=parts.netloc.replace("postgres:", "memlane_plain:", 1)))
    with memlane.open(plain, embedder="fake") as m:
        m.put("a", "k", "zebra")
        with pytest.raises(BackendUnavailableError) as e:
            m.search("zebra", channels=["vector"])
        assert str(e.value) == (
            "the vector channel needs the PostgreSQL extension 'vector' (pgvector), which this database does not "
            "have; install pgvector and run CREATE EXTENSION vector, or search with channels=['lexical']"
        )
        assert [h.key for h in m.search("zebra", channels=["lexical"]).hits] == ["k"]


def test_store_metadata_is_set_read_and_overwritten(store_url):
    with memlane.open(store_url, embedder=None) as m:
        store = m.store
        assert store.get_meta("test.setting") is None
        store.set_meta("test.setting", "one")
        store.set_meta("test.other", "x")
        store.set_meta("test.setting", "two")
        assert (store.get_meta("test.setting"), store.get_meta("test.other")) == ("two", "x")
    with memlane.open(store_url, embedder=None) as m:
        assert m.store.get_meta("test.setting") == "two"


def test_a_session_is_a_transaction_and_its_errors_are_store_errors(store_url, backend):
    word = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[backend]
    with memlane.open(store_url, embedder=None) as m:
        store = m.store
        with pytest.raises(StoreError, match=f"{word} error"):
            with store.session() as s:
                s.rows("SELECT * FROM no_such_table")
        with pytest.raises(RuntimeError, match="abandon"):
            with store.session(write=True) as s:
                s.run("INSERT INTO meta (name, value) VALUES (?, ?)", ("test.rolled", "back"))
                assert s.rows("SELECT value FROM meta WHERE name = ?", ["test.rolled"]) == [("back",)]
                raise RuntimeError("abandon")
        assert store.get_meta("test.rolled") is None
        with store.session(write=True) as s:
            s.many("INSERT INTO meta (name, value) VALUES (?, ?)", [("test.a", "1"), ("test.b", "2")])
            s.many("INSERT INTO meta (name, value) VALUES (?, ?)", [])
        assert (store.get_meta("test.a"), store.get_meta("test.b")) == ("1", "2")
        m.put("s", "k", "still works after the errors")
        assert m.get("s", "k").value == "still works after the errors"


def test_a_read_session_sees_one_snapshot(store_url):
    with memlane.open(store_url, embedder=None) as m, memlane.open(store_url, embedder=None) as writer:
        m.put("r", "k0", 0)
        with m.store.session() as s:
            count = "SELECT count(*) FROM items WHERE namespace = ?"
            assert s.rows(count, ["r"])[0][0] == 1
            writer.put("r", "k1", 1)
            assert s.rows(count, ["r"])[0][0] == 1
        assert m.stats().active_items == 2


def test_sqlite_connection_settings_and_clear_errors(tmp_path):
    path = str(tmp_path / "settings.db")
    with memlane.open(path, embedder="fake") as m:
        conn = m.store.connection
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        m.put("a", "k", "zebra")
        indexed(m)
        assert m.search("zebra", channels=["vector"]).hits and m.store.vector_cache_bytes() > 0
    from memlane.store.sqlite import SqliteStore

    store = SqliteStore(path, busy_timeout=0.05)
    try:
        assert store.connection.execute("PRAGMA busy_timeout").fetchone()[0] == 50
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match=r"could not start a write on .*settings\.db.*; retry"):
                store.set_meta("x", "y")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        store.set_meta("x", "y")
        assert store.get_meta("x") == "y"
    finally:
        store.close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"cannot open .*junk\.db.* as a memlane SQLite database"):
        memlane.open(str(junk), embedder=None)


@pytest.mark.embedded
def test_import_refuses_malformed_records_by_number_and_normalises_times(mem):
    item = {
        "record": "item",
        "id": "id-1",
        "namespace": ["imp"],
        "key": "k",
        "value": "zebra",
        "value_type": "string",
        "text": "zebra",
        "metadata": {},
        "author": "alice",
        "created_at": "2026-01-01T14:00:00+02:00",
        "updated_at": "2026-01-01T14:00:00+02:00",
        "expires_at": None,
        "version": 1,
    }
    version = dict(item, record="version", item_id="id-1", change="replace", changed_at=item["updated_at"])
    del version["id"]
    version["changed_by"] = None
    for bad, message in (
        (dict(item, created_at=5), "is not an ISO 8601 string"),
        (dict(item, expires_at="2026-01-02T00:00:00"), "has no timezone"),
        (dict(item, author=7), "author is not a string"),
        (dict(item, id=""), "id '' is not 1 to 100 letters, digits"),
        (dict(item, id="a" * 101), "is not 1 to 100 letters, digits"),
        (dict(item, id="has space"), "id 'has space' is not 1 to 100 letters, digits"),
        (dict(item, version=True), "is not a positive integer"),
        (dict(version, change="teleport"), "is not one of replace, delete, clear, expire, import"),
    ):
        with pytest.raises(memlane.ValidationError, match=f"record 2: .*{message}.*nothing was imported"):
            mem.import_records([dict(item, key="first"), bad])
        assert mem.stats().active_items == 0 and mem.stats().history_versions == 0
    # the optional fields may be left out; the store numbers records from 1 when the caller does not
    minimal = {k: v for k, v in item.items() if k not in ("metadata", "author", "expires_at")}
    with pytest.raises(memlane.ValidationError, match=r"record 2: has no 'value' field"):
        mem.store.import_records([minimal, {"record": "item"}], datetime.now(UTC))
    assert mem.stats().active_items == 0
    assert mem.store.import_records([minimal], datetime.now(UTC)) == 1
    got = mem.get("imp", "k")
    assert (got.metadata, got.author, got.expires_at) == ({}, None, None)
    mem.delete("imp", "k")
    assert mem.import_records([item, version]) == 2
    exported = [r for r in mem.export_records() if r["record"] == "item" or r["change"] == "replace"]
    assert [(r["created_at"], r["updated_at"]) for r in exported] == [("2026-01-01T12:00:00.000000+00:00",) * 2] * 2
    assert exported[1]["changed_at"] == "2026-01-01T12:00:00.000000+00:00"
    assert mem.get("imp", "k").created_at.isoformat() == "2026-01-01T12:00:00+00:00"


def test_the_vector_index_is_made_with_the_first_vectors_before_any_search(store_url, backend):
    if backend != "postgres":
        pytest.skip("the HNSW index is PostgreSQL's")
    import psycopg

    def indexes() -> list[str]:
        with psycopg.connect(store_url, autocommit=True) as conn:
            return [r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'item_vectors'")]

    with memlane.open(store_url, embedder="fake") as m:
        assert "item_vectors_hnsw_64" not in indexes()
        m.put("h", "k", "zebra")  # a write, then its vector, no search yet
        assert m.wait_indexed(60)
        assert "item_vectors_hnsw_64" in indexes()
        assert m.stats().vectors == 1


def test_if_absent_conflict_names_the_address_and_writes_nothing(mem):
    mem.put("claims/jobs", "job.42", "agent-a")
    with pytest.raises(memlane.ConflictError) as e:
        mem.put_many(
            [
                {"namespace": "claims/jobs", "key": "job.43", "value": "agent-b"},
                {"namespace": "claims/jobs", "key": "job.42", "value": "agent-b"},
            ],
            if_absent=True,
        )
    assert "an item already exists at claims/jobs key 'job.42'" in str(e.value)
    assert mem.get("claims/jobs", "job.43") is None and mem.get("claims/jobs", "job.42").value == "agent-a"
    assert mem.history("claims/jobs", "job.42") == []


def test_portable_sql_sessions_speak_both_dialects(tmp_path, request):
    """The facts layer's ``?`` SQL runs unchanged on SQLite and on PostgreSQL (``%`` stays a literal)."""
    server = request.getfixturevalue("postgres")
    url = server.create()
    request.addfinalizer(lambda: server.drop(url))
    for target in (str(tmp_path / "dialect.db"), url):
        with memlane.open(target, embedder=None) as m:
            with m.store.session(write=True) as s:
                s.many("INSERT INTO meta (name, value) VALUES (?, ?)", [("d.1", "50%"), ("d.2", "x"), ("e.3", "y")])
                s.many("INSERT INTO meta (name, value) VALUES (?, ?)", [])
                s.run("UPDATE meta SET value = ? WHERE name = ?", ("z", "d.2"))
            with m.store.session() as s:
                rows = s.rows("SELECT name, value FROM meta WHERE name LIKE 'd.%' AND value <> ? ORDER BY name", ["?"])
            assert [tuple(r) for r in rows] == [("d.1", "50%"), ("d.2", "z")]
            assert m.store.get_meta("e.3") == "y"


def test_if_absent_waits_for_a_concurrent_creator_of_the_same_address(store_url, backend):
    """Check-then-write is atomic: a creator that has not committed yet still makes ``if_absent`` fail."""
    if backend != "postgres":
        pytest.skip("SQLite serialises every writer with BEGIN IMMEDIATE")
    with memlane.open(store_url, embedder=None) as m, memlane.open(store_url, embedder=None) as other:
        outcome: list[Any] = []
        with m.store.session(write=True) as s:
            # another writer creating claims/job.1 holds the address lock, as put_many(if_absent=True) does
            s.run("SELECT pg_advisory_xact_lock(hashtext(? || '/' || ?))", ("claims", "job.1"))
            s.run(
                "INSERT INTO items (id, namespace, key, value, value_type, text, metadata, created_at, updated_at, "
                "version) VALUES ('first', 'claims', 'job.1', '\"a\"', 'string', 'a', '{}', ?, ?, 1)",
                ("2026-01-01T00:00:00.000000+00:00",) * 2,
            )

            def second() -> None:
                try:
                    outcome.append(other.put("claims", "job.1", "b", if_absent=True))
                except memlane.ConflictError as e:
                    outcome.append(e)

            t = threading.Thread(target=second)
            t.start()
            t.join(0.5)
            assert t.is_alive(), "if_absent did not wait for the other writer of the address"
        t.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], memlane.ConflictError)
        assert m.get("claims", "job.1").value == "a"


def _hnsw_indexes(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'item\\_vectors\\_hnsw\\_%'")
        return sorted(r[0] for r in rows)


def test_drop_vectors_forgets_every_vector_and_its_index(store_url, backend):
    with memlane.open(store_url, embedder="fake", indexing="sync") as m:
        m.put("d", "k", "zebra")
        m.search("zebra", channels=["vector"])
        if backend == "postgres":
            assert _hnsw_indexes(store_url) == ["item_vectors_hnsw_64"]
        m.store.drop_vectors()
        assert m.store.count_vectors() == (0, 1)
        if backend == "postgres":
            assert _hnsw_indexes(store_url) == []
        assert m.reindex() == 1 and m.store.count_vectors() == (1, 0)


def test_reindex_with_an_embedder_of_another_dimension_rebuilds_every_vector(store_url, backend, request):
    from memlane.domain.search.embedders import FakeEmbedder

    with memlane.open(store_url, embedder="fake", indexing="sync") as m:
        for i, word in enumerate(WORDS):
            m.put("r", f"k{i}", f"{word} vector text")
        reader = None
        if backend == "postgres":  # as on any busy server: another connection is in the middle of a transaction
            import psycopg

            reader = psycopg.connect(store_url)
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT 1").fetchone()  # holds a snapshot, locks nothing
        try:
            assert m.reindex(FakeEmbedder(dimension=32)) == 3
        finally:
            if reader is not None:
                reader.close()
        assert (m.stats().vectors, m.stats().vectors_missing) == (3, 0)
        env = m.search("lynx vector text", channels=["vector"], limit=10)
        assert env.hits[0].key == "k2" and len(env.hits) == 3


# -- a scope of several prefixes, inside one statement ---------------------------------------------

SCOPE_PLACES = [
    ("room", "a"), ("room", "a", "x"), ("room", "ab"), ("room", "b"), ("room", "b", "deep", "er"),
    ("agent", "al"), ("agent", "alice"), ("proj", "x"), ("proj", "x", "y"), ("proj", "xy"), ("other",),
]  # fmt: skip
SCOPE_PREFIXES = [
    ("room", "a"),
    ("room", "b"),
    ("agent", "al"),
    ("proj", "x"),
    ("proj", "xy"),
    ("room",),
    ("room", "b", "deep"),
]


def _inside_scope(ns: tuple[str, ...], within: list[tuple[str, ...]]) -> bool:
    return any(ns[: len(p)] == p for p in within)


def _scope_reads_match_brute_force(url: str) -> None:
    """Every read that takes a scope returns exactly the rows under its prefixes, for many scopes."""
    import random

    with memlane.open(url, embedder="fake") as mem:
        for n, ns in enumerate(SCOPE_PLACES):
            mem.put(ns, "k", f"orchid note {n}")
        assert mem.wait_indexed(60)
        ids = {ns: mem.get(ns, "k").id for ns in SCOPE_PLACES}  # type: ignore[union-attr]
        now = datetime.now(UTC)
        store = mem.store
        rng = random.Random(5)
        scopes = [[p] for p in SCOPE_PREFIXES] + [rng.sample(SCOPE_PREFIXES, k) for k in (2, 3, 4) for _ in range(4)]
        for within in scopes:
            # narrowing never hands the store nested prefixes
            within = [p for p in within if not any(q != p and p[: len(q)] == q for q in within)]
            want = {ns for ns in SCOPE_PLACES if _inside_scope(ns, within)}
            assert set(store.namespaces(within, now)) == want, within
            assert {i.namespace for i in store.list(within, "", 100, None, now)} == want, within
            assert {i.namespace for i in store.fetch("k", within, 100, now)} == want, within
            assert {ns for ns, _ in store.addresses(within, "", now)} == want, within
            assert {i.namespace for i in store.hydrate(list(ids.values()), within, now).values()} == want, within
            lexical = {i for i, _, _ in store.lexical(["orchid"], within, 100)}
            assert lexical == {ids[ns] for ns in want}, within
            vector = {i for i, _, _ in store.vector(mem.embedder.embed_batch(["orchid note"])[0], within, 100)}
            assert vector == {ids[ns] for ns in want}, within


def test_a_scope_of_several_prefixes_reads_exactly_their_rows(tmp_path, request):
    """On SQLite, and in the same test on PostgreSQL: each dialect's filter, and nothing outside it."""
    _scope_reads_match_brute_force(str(tmp_path / "scope.db"))
    server = request.getfixturevalue("postgres")
    url = server.create()
    try:
        _scope_reads_match_brute_force(url)
    finally:
        server.drop(url)


def test_a_scope_of_several_prefixes_reads_exactly_their_rows_on_postgres(request):
    server = request.getfixturevalue("postgres")
    url = server.create()
    try:
        _scope_reads_match_brute_force(url)
    finally:
        server.drop(url)


@pytest.mark.parametrize(("stored", "imported"), [(True, True), (False, True), (True, False), (False, False)])
def test_an_imported_id_that_names_another_item_is_refused_and_nothing_is_imported(store_url, stored, imported):
    # the unique index on ids covers indexed rows only: an id shared with an index=False item is refused too
    with memlane.open(store_url, embedder=None) as mem:
        first = mem.put("a", "k", "first", index=stored)
        record = {"record": "item", **first.to_dict()} | {"namespace": ["b"], "key": "elsewhere", "indexed": imported}
        with pytest.raises(memlane.ConflictError, match=f"{first.id}.*b/elsewhere.*nothing was imported"):
            fine = {"record": "item", **first.to_dict()} | {"id": "f" * 32, "namespace": ["c"], "key": "new"}
            mem.import_records([fine, record])
        assert mem.get("b", "elsewhere") is None and mem.get("c", "new") is None


def test_an_import_error_names_the_record_by_its_number_in_the_input(store_url):
    with memlane.open(store_url, embedder=None) as mem:
        good = {"record": "item", **mem.put("a", "k", "v").to_dict()} | {"id": "e" * 32, "key": "other"}
        bad = good | {"id": "d" * 32, "key": "third", "created_at": "not a time"}
        with pytest.raises(memlane.ValidationError, match="record 3") as refused:
            mem.import_records([good, good | {"id": "c" * 32, "key": "second"}, bad])
        assert refused.value.record == 3 and mem.get("a", "other") is None


def test_put_vectors_counts_only_the_vectors_written_at_the_items_version(tmp_path):
    """SQLite: the count is of this call's rows, whatever the connection changed before it."""
    import sqlite3 as _sqlite3

    from memlane.store import _common
    from memlane.store.sqlite import SqliteStore
    from memlane.values.vectors import to_blob

    with memlane.open(str(tmp_path / "v.db"), embedder=None) as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"text {i}"} for i in range(3)])
        store = mem.store
        assert isinstance(store, SqliteStore)
        rows = store._conn.execute("SELECT rowid, version FROM items ORDER BY rowid").fetchall()
        blob = to_blob([1.0, 0.0])
        assert store.put_vectors([(r, v, blob) for r, v in rows]) == 3
        assert store.put_vectors([(rows[0][0], rows[0][1] + 1, blob)]) == 0  # the item is not at that version
        assert store.put_vectors([(rows[1][0], rows[1][1], blob)]) == 1  # rewritten: counted again

    conn = _sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    session = _common.SqlSession(conn, "sqlite")
    session.many("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    assert session.changed("UPDATE t SET x = x + 1 WHERE x >= ?", (2,)) == 2
    assert session.changed("DELETE FROM t WHERE x > 100") == 0
    assert _common.ns_text(("a", "b", "c")) == "a/b/c"


@pytest.mark.embedded
def test_a_write_in_a_read_session_is_refused_on_every_backend(mem):
    """A read session (``write=False``) refuses a write on SQLite as PostgreSQL's READ ONLY snapshot does, so a
    write that slipped into one fails in the tests of either backend; the session after it writes as before."""
    statement = "INSERT INTO meta (name, value) VALUES (?, ?)"
    with pytest.raises(Exception, match=r"(?i)read.?only"):  # noqa: B017 - each driver's own error
        with mem.store.session() as s:
            s.run(statement, ("read-session-probe", "x"))
    with mem.store.session(write=True) as s:
        s.run(statement, ("write-session-probe", "y"))
    with mem.store.session() as s:
        names = {r[0] for r in s.rows("SELECT name FROM meta WHERE name LIKE '%-probe'")}
    assert names == {"write-session-probe"}
    assert mem.put("ns", "k", 1).value == 1  # the connection is writable again after the read session
