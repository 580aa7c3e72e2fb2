"""Items written with ``index=False``: every keyed read finds them, no search ever does.

Runs on every backend and through the HTTP client (the ``mem`` fixture).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane import ValidationError

from .indexed import indexed

WORD = "quokka"  # a word no other item holds: any hit is the item itself


def _keys(envelope) -> list[str]:  # noqa: ANN001
    return [h.key for h in envelope.hits]


def _searches(mem, query: str = WORD) -> dict[str, list[str]]:  # noqa: ANN001
    """What every ranked read returns for ``query`` (and for the words of the key), by the way it was asked."""
    return {
        "lexical": _keys(mem.search(query, channels=["lexical"], floor=False)),
        "vector": _keys(mem.search(query, channels=["vector"], floor=False)),
        "hybrid": _keys(mem.search(query, floor=False)),
        "recall": _keys(mem.recall(query, floor=False)),
        "recall lexical": _keys(mem.recall(query, mode="lexical", floor=False)),
        "recall vector": _keys(mem.recall(query, mode="vector", floor=False)),
        "by its key's words": _keys(mem.search("cache entry", floor=False)),
    }


def _found(mem, key: str) -> list[str]:  # noqa: ANN001
    """The ranked reads whose answer holds ``key``."""
    return [how for how, keys in _searches(mem).items() if key in keys]


ALL = ["lexical", "vector", "hybrid", "recall", "recall lexical", "recall vector"]  # every way but the key's words


def test_an_unindexed_item_is_read_by_address_and_never_searched(mem, clock):
    item = mem.put("cache/web", "cache.entry", f"page about the {WORD}", index=False, metadata={"etag": "x1"})
    assert item.indexed is False and item.version == 1
    assert item.to_dict()["indexed"] is False
    mem.put("notes", "other", "a note about nothing in particular")
    got = mem.get("cache/web", "cache.entry")
    assert got == item and got.indexed is False
    assert got.value == f"page about the {WORD}" and got.text == got.value and got.metadata == {"etag": "x1"}
    assert mem.get_many([("cache/web", "cache.entry")]) == [item]
    assert mem.fetch("cache.entry") == [item]
    assert [i.key for i in mem.list("cache").items] == ["cache.entry"]
    assert mem.namespaces() == [("cache", "web"), ("notes",)]
    assert mem.summarize("cache") == {"cache/web": {"cache.entry": 1}}
    assert [i.key for i in mem.select("cache", where={})] == ["cache.entry"]
    recalled = mem.recall("", key="cache.entry")
    assert _keys(recalled) == ["cache.entry"]
    assert _found(mem, "cache.entry") == []
    # an indexed item with the same words is found first: the query works, the item is simply not in the index
    mem.put("notes", "indexed.twin", f"page about the {WORD}")
    assert _found(mem, "cache.entry") == []
    found = _searches(mem)
    assert [how for how in ALL if found[how][:1] == ["indexed.twin"]] == ALL


def test_indexed_is_the_default_and_round_trips_on_the_wire(mem):
    item = mem.put("n", "k", "plain")
    assert item.indexed is True and "indexed" not in item.to_dict()
    assert mem.get("n", "k").indexed is True
    assert memlane.Item.from_dict(mem.put("n", "u", "x", index=False).to_dict()).indexed is False


def test_put_many_takes_index_per_record(mem):
    items = mem.put_many(
        [
            {"namespace": "bulk", "key": "a", "value": f"{WORD} one", "index": False},
            {"namespace": "bulk", "key": "b", "value": f"{WORD} two"},
            {"namespace": "bulk", "key": "c", "value": {"w": WORD}, "index": True},
        ]
    )
    assert [(i.key, i.indexed, i.version) for i in items] == [("a", False, 1), ("b", True, 1), ("c", True, 1)]
    assert [i.value for i in items] == [f"{WORD} one", f"{WORD} two", {"w": WORD}]
    lexical = mem.search(WORD, channels=["lexical"])
    assert sorted(_keys(lexical)) == ["b", "c"]
    assert lexical.dropped_by_hydration == 0  # "a" never entered the full-text index to be dropped later
    assert sorted(_keys(mem.search(WORD, channels=["vector"], floor=False))) == ["b", "c"]
    assert [i.indexed for i in mem.get_many([("bulk", "a"), ("bulk", "b")])] == [False, True]


def test_rewriting_moves_an_item_in_and_out_of_the_index(mem, clock):
    mem.put("n", "cache.entry", f"the {WORD} note", index=False)
    mem.put("n", "other", "something else entirely")
    assert _found(mem, "cache.entry") == []
    clock.advance(1)
    mem.put("n", "cache.entry", f"the {WORD} note")  # the same value, now indexed
    assert _found(mem, "cache.entry") == [*ALL, "by its key's words"]
    clock.advance(1)
    back = mem.put("n", "cache.entry", f"the {WORD} note again", index=False)
    assert back.version == 3 and back.indexed is False
    assert _found(mem, "cache.entry") == []
    assert [v.version for v in mem.history("n", "cache.entry")] == [2, 1]
    stats = mem.stats()
    assert (stats.vectors, stats.vectors_missing) == (1, 0)  # the other item's


def test_ttl_and_history_treat_an_unindexed_item_as_any_item(mem, clock):
    mem.put("t", "k", "first", index=False, ttl=10)
    mem.put("t", "k", "second", index=False, ttl=10)
    assert [v.value for v in mem.history("t", "k")] == ["first"]
    clock.advance(10)
    assert mem.get("t", "k") is None and mem.fetch("k") == [] and mem.list("t").items == []
    assert mem.cleanup() == 1
    assert mem.put("t", "k", f"third {WORD}", index=False).version == 1  # a new item at a cleaned address
    assert mem.delete("t", "k") is True
    assert [v.change for v in mem.history("t", "k")] == ["delete", "replace"]
    assert _found(mem, "k") == []


def test_index_must_be_a_boolean(mem):
    for bad in ("false", 0, None, [False]):
        with pytest.raises(ValidationError) as err:
            mem.put("n", "k", "v", index=bad)
        assert err.value.field == "index"
        with pytest.raises(ValidationError) as err:
            mem.put_many([{"namespace": "n", "key": "k", "value": "v", "index": bad}])
        assert err.value.field == "index"
    assert mem.get("n", "k") is None


def test_clear_and_delete_of_unindexed_items_leave_search_consistent(mem):
    mem.put_many([{"namespace": "c/x", "key": f"k{i}", "value": f"{WORD} {i}", "index": i % 2 == 0} for i in range(6)])
    assert sorted(_keys(mem.search(WORD, channels=["lexical"], limit=10))) == ["k0", "k2", "k4"]
    assert mem.delete("c/x", "k1") and mem.delete("c/x", "k2")
    assert sorted(_keys(mem.search(WORD, channels=["lexical"], limit=10))) == ["k0", "k4"]
    assert mem.clear("c") == 4
    assert _keys(mem.search(WORD, channels=["lexical"], limit=10)) == []


@pytest.mark.background_indexing
def test_background_indexing_never_waits_for_an_unindexed_item(mem):
    mem.put_many([{"namespace": "b", "key": f"k{i}", "value": f"{WORD} {i}", "index": i < 3} for i in range(6)])
    indexed(mem)
    assert sorted(_keys(mem.search(WORD, channels=["vector"], limit=10, floor=False))) == ["k0", "k1", "k2"]
    envelope = mem.search(WORD, channels=["vector"], limit=10, floor=False)
    assert not envelope.pending_vectors
    stats = mem.stats()
    assert (stats.vectors, stats.vectors_missing) == (3, 0)


@pytest.mark.embedded
def test_export_import_keeps_the_flag(mem, clock, tmp_path):
    mem.put("e", "hidden", f"{WORD} hidden", index=False)
    mem.put("e", "shown", f"{WORD} shown")
    mem.put("e", "shown", f"{WORD} shown again")
    exported = list(mem.export_records())
    hidden = next(r for r in exported if r["record"] == "item" and r["key"] == "hidden")
    assert hidden["indexed"] is False
    assert all("indexed" not in r for r in exported if r["key"] != "hidden")
    with memlane.open(str(tmp_path / "copy.db"), clock=clock, embedder="fake", indexing="sync") as copy:
        assert copy.import_records(exported) == len(exported)
        assert list(copy.export_records()) == exported
        assert copy.get("e", "hidden").indexed is False
        assert _keys(copy.search(WORD, limit=10, floor=False)) == ["shown"]
        assert copy.import_records(exported) == 0  # idempotent, flag included
        flipped = [dict(r, indexed=True) if r.get("key") == "hidden" else r for r in exported]
        assert copy.import_records(flipped) == 1  # the flag is part of the row
        assert sorted(_keys(copy.search(WORD, limit=10, floor=False))) == ["hidden", "shown"]
    with pytest.raises(ValidationError, match="indexed"):
        mem.import_records([dict(hidden, indexed="no")])


# -- a model of the index ----------------------------------------------------------------------------

_ADDRESSES = [("m", "a"), ("m", "b"), ("m/x", "a")]
_steps = st.lists(
    st.tuples(st.sampled_from(["put", "put_many", "delete"]), st.sampled_from(_ADDRESSES), st.booleans()),
    min_size=1,
    max_size=10,
)


@pytest.mark.embedded
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_search_finds_exactly_the_live_indexed_items(mem, steps):
    model: dict[tuple[str, str], bool] = {}
    mem.clear("m")
    for n, (verb, (ns, key), index) in enumerate(steps):
        if verb == "delete":
            mem.delete(ns, key)
            model.pop((ns, key), None)
            continue
        value = f"{WORD} step {n}"
        if verb == "put":
            mem.put(ns, key, value, index=index)
        else:
            mem.put_many([{"namespace": ns, "key": key, "value": value, "index": index}])
        model[(ns, key)] = index
    for channels in (["lexical"], ["vector"]):
        env = mem.search(WORD, channels=channels, limit=10, floor=False)
        hits = env.hits
        assert sorted((namespace_text(h.namespace), h.key) for h in hits) == sorted(a for a, i in model.items() if i)
        assert env.dropped_by_hydration == 0  # each index holds indexed items only: none nominated, then dropped
    # and the confirm step alone refuses an unindexed item, should an index ever nominate one
    unindexed = [i.id for i in mem.list("m").items if not i.indexed]
    assert mem.store.hydrate(unindexed, [()], datetime.now(UTC)) == {}
    assert {(namespace_text(i.namespace), i.key): i.indexed for i in mem.list("m").items} == model
    with mem.store.session() as s:  # every vector is an indexed item's: un-indexing dropped it
        assert s.rows("SELECT count(*) FROM item_vectors")[0][0] == sum(model.values())
    if mem.store.backend == "sqlite":
        with mem.store.session(write=True) as s:
            s.run("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")


def namespace_text(namespace: tuple[str, ...]) -> str:
    return "/".join(namespace)


# -- a store from before m013_index_opt_out ----------------------------------------------------------


def _before_m013(backend: str) -> list[str]:
    """SQL that takes a store back to its schema before ``m013_index_opt_out`` (m010's index, no flag)."""
    from memlane.store import postgres, sqlite

    if backend == "sqlite":
        m010 = dict(sqlite.MIGRATIONS)["m010_text_once"]
        again = [
            s
            for s in m010
            if isinstance(s, str) and s.startswith(("CREATE VIEW items_lexical", "CREATE TRIGGER items_fts"))
        ]
        undo = ["DROP TRIGGER items_unindexed", "DROP TRIGGER items_fts_delete", "DROP TRIGGER items_fts_update"]
        undo += ["DROP VIEW items_lexical", "ALTER TABLE items DROP COLUMN indexed"]
    else:
        m010 = dict(postgres.MIGRATIONS)["m010_text_once"]
        again = [s for s in m010 if s.startswith(("ALTER TABLE items ADD COLUMN tsv", "CREATE INDEX items_tsv"))]
        undo = ["DROP TRIGGER items_unindexed ON items", "DROP FUNCTION memlane_items_unindexed()"]
        undo += ["DROP INDEX items_tsv", "ALTER TABLE items DROP COLUMN tsv", "ALTER TABLE items DROP COLUMN indexed"]
    assert len(again) == (3 if backend == "sqlite" else 2)
    ids = "CREATE UNIQUE INDEX items_id ON items (id)"
    return [
        "DROP INDEX items_id",
        *undo,
        *again,
        ids,
        "DELETE FROM _memlane_migrations WHERE name = 'm013_index_opt_out'",
    ]


def test_a_store_from_before_the_migration_reads_and_searches_the_same(backend, store_url, clock):
    with memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as before:
        before.put_many([{"namespace": "old", "key": f"k{i}", "value": f"{WORD} old {i}"} for i in range(5)])
        before.put("old", "k0", {"now": f"{WORD} object"})
        before.delete("old", "k4")
        with before.store.session(write=True) as s:
            for statement in _before_m013(backend):
                s.run(statement)
        assert "m013_index_opt_out" not in [m["name"] for m in before.migration_status() if m["applied_at"]]
    with memlane.open(store_url, clock=clock, embedder="fake", indexing="sync") as after:
        assert "m013_index_opt_out" in [m["name"] for m in after.migration_status() if m["applied_at"]]
        assert [i.indexed for i in after.list("old").items] == [True] * 4
        assert sorted(_keys(after.search(WORD, channels=["lexical"], limit=10))) == ["k0", "k1", "k2", "k3"]
        assert [v.version for v in after.history("old", "k0")] == [1]
        assert after.stats().vectors == 4
        after.put("old", "k1", f"{WORD} hidden now", index=False)
        after.delete("old", "k2")
        after.put("old", "k9", f"{WORD} never shown", index=False)
        assert sorted(_keys(after.search(WORD, channels=["lexical"], limit=10))) == ["k0", "k3"]
        assert sorted(_keys(after.search(WORD, channels=["vector"], limit=10, floor=False))) == ["k0", "k3"]
        if backend == "sqlite":
            with after.store.session(write=True) as s:
                s.run("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
