"""Addresses, typed values, upsert, history, delete and clear: on every backend."""

from __future__ import annotations

import pytest

import memlane
from memlane import ValidationError


def test_put_get_roundtrip_and_persistence(mem, store_url, clock):
    item = mem.put(("user", "123"), "preferences.ui.theme", "dark", metadata={"source": "chat"})
    assert item.namespace == ("user", "123")
    assert item.value == "dark" and item.value_type == "string" and item.text == "dark"
    assert item.version == 1 and item.created_at == item.updated_at == clock.now
    assert item.metadata == {"source": "chat"}
    mem.close()
    with memlane.open(store_url, clock=clock) as again:
        got = again.get("user/123", "preferences.ui.theme")
    assert got == item


def test_text_form_and_tuple_namespaces_are_the_same_address(mem):
    mem.put("a/b", "k", 1)
    assert mem.get(("a", "b"), "k").value == 1
    assert mem.get(["a", "b"], "k").value == 1


def test_missing_is_none(mem):
    assert mem.get("a", "nope") is None


def test_upsert_keeps_id_and_created_at_and_bumps_version(mem, clock):
    first = mem.put("u/1", "k", "one")
    clock.advance(5)
    second = mem.put("u/1", "k", "two")
    assert second.id == first.id
    assert second.created_at == first.created_at
    assert second.updated_at == clock.now > first.updated_at
    assert second.version == 2
    assert mem.get("u/1", "k") == second


@pytest.mark.parametrize(
    ("value", "value_type"),
    [
        ("3.12", "string"),
        (3.12, "number"),
        (3, "number"),
        (True, "boolean"),
        (False, "boolean"),
        (None, "null"),
        ([1, "two", None, [3.5]], "list"),
        ({"b": 1, "a": {"nested": [True]}}, "object"),
        ("ünïcødé 🧠 中文", "string"),
        ("", "string"),
        (-0.0, "number"),
        (10**30, "number"),
    ],
)
def test_typed_values_roundtrip_exactly(mem, value, value_type):
    mem.put("t", "v", value)
    got = mem.get("t", "v")
    assert got.value_type == value_type
    assert got.value == value and type(got.value) is type(value)


def test_tuple_value_is_stored_as_list(mem):
    assert mem.put("t", "v", (1, 2)).value == [1, 2]
    assert mem.get("t", "v").value == [1, 2]


def test_one_megabyte_value_roundtrips(mem):
    big = "x" * 1_000_000 + "end"
    mem.put("t", "big", big)
    assert mem.get("t", "big").value == big
    obj = {"rows": [{"i": i, "s": "y" * 100} for i in range(8000)]}
    mem.put("t", "bigobj", obj)
    assert mem.get("t", "bigobj").value == obj


def test_text_defaults_and_explicit_text(mem):
    assert mem.put("t", "a", {"x": 1, "a": [2]}).text == '{"a":[2],"x":1}'
    assert mem.put("t", "b", 5, text="five").text == "five"


def test_generated_key_when_key_is_none(mem):
    note = mem.put("notes", None, "remember the milk")
    assert note.key == note.id and len(note.key) == 32
    assert mem.get("notes", note.key).value == "remember the milk"
    assert [h.key for h in mem.search("milk", channels=["lexical"]).hits] == [note.key]


def test_namespace_isolation(mem):
    mem.put("user/1", "k", "one")
    mem.put("user/2", "k", "two")
    assert mem.get("user/1", "k").value == "one"
    assert mem.get("user/2", "k").value == "two"
    assert mem.delete("user/1", "k")
    assert mem.get("user/2", "k").value == "two"


@pytest.mark.parametrize(
    "evil",
    [
        "'; DROP TABLE items; --",
        'x" OR 1=1 --',
        "Robert'); DELETE FROM items WHERE ('1'='1",
        "%",
        "_",
        "*",
        "?",
        "[a-z]",
    ],
)
def test_injection_like_strings_are_data(mem, evil):
    mem.put(("tenant", evil), evil, evil)
    assert mem.get(("tenant", evil), evil).value == evil
    mem.put("tenant/other", "k", 1)
    assert mem.get("tenant/other", "k").value == 1
    assert len(mem.list(("tenant",)).items) == 2


@pytest.mark.embedded
def test_history_on_replace_and_delete(mem, clock):
    mem.author = "alice"
    mem.put("u", "k", "v1")
    clock.advance(1)
    mem.author = "bob"
    mem.put("u", "k", "v2")
    clock.advance(1)
    mem.author = "carol"
    assert mem.delete("u", "k") is True
    assert mem.get("u", "k") is None
    history = mem.history("u", "k")
    assert [(h.value, h.version, h.change, h.author, h.changed_by) for h in history] == [
        ("v2", 2, "delete", "bob", "carol"),
        ("v1", 1, "replace", "alice", "bob"),
    ]
    assert history[0].changed_at == clock.now
    assert mem.delete("u", "k") is False


def test_recreated_item_after_delete_is_a_new_item(mem):
    first = mem.put("u", "k", 1)
    mem.delete("u", "k")
    again = mem.put("u", "k", 2)
    assert again.id != first.id and again.version == 1


def test_clear_is_scoped_on_segment_boundaries(mem):
    mem.put(("tenant", "acme"), "a", 1)
    mem.put(("tenant", "acme", "team"), "b", 2)
    mem.put(("tenant", "acme-corp"), "c", 3)
    mem.put(("tenant", "acmeX"), "d", 4)
    assert mem.clear(("tenant", "acme")) == 2
    assert mem.get("tenant/acme-corp", "c").value == 3
    assert mem.get("tenant/acmeX", "d").value == 4
    assert mem.get("tenant/acme", "a") is None
    assert mem.history("tenant/acme/team", "b")[0].change == "clear"


def test_clear_refuses_empty_prefix(mem):
    mem.put("a", "k", 1)
    for empty in ((), "", []):
        with pytest.raises(ValidationError) as e:
            mem.clear(empty)
        assert e.value.field == "namespace_prefix"
    assert mem.get("a", "k").value == 1


def test_put_many_is_one_transaction_and_returns_items(mem):
    items = mem.put_many(
        [
            {"namespace": "a", "key": "x", "value": 1},
            {"namespace": "a", "key": "y", "value": "two", "metadata": {"m": 1}},
            {"namespace": ("b", "c"), "value": "a note"},
        ]
    )
    assert [i.value for i in items] == [1, "two", "a note"]
    assert mem.get("a", "y").metadata == {"m": 1}
    assert mem.get("b/c", items[2].key).value == "a note"


def test_put_many_with_repeated_address_applies_in_order(mem):
    items = mem.put_many(
        [
            {"namespace": "a", "key": "x", "value": 1},
            {"namespace": "a", "key": "x", "value": 2},
            {"namespace": "a", "key": "x", "value": 3},
        ]
    )
    assert [i.version for i in items] == [1, 2, 3]
    assert mem.get("a", "x").value == 3
    assert [v.value for v in mem.history("a", "x")] == [2, 1]


def test_put_many_mixing_new_and_existing(mem):
    old = mem.put("a", "x", "old")
    items = mem.put_many([{"namespace": "a", "key": "x", "value": "new"}, {"namespace": "a", "key": "y", "value": 1}])
    assert items[0].id == old.id and items[0].version == 2
    assert mem.search("new", channels=["lexical"]).hits[0].key == "x"
    assert mem.search("old", channels=["lexical"]).hits == []


def test_put_many_refuses_a_bad_record_and_writes_nothing(mem):
    with pytest.raises(ValidationError) as e:
        mem.put_many(
            [
                {"namespace": "a", "key": "ok", "value": 1},
                {"namespace": "a", "key": "bad", "value": float("nan")},
            ]
        )
    assert e.value.field == "value" and "record 1" in str(e.value)
    assert mem.get("a", "ok") is None
    with pytest.raises(ValidationError, match="unknown fields"):
        mem.put_many([{"namespace": "a", "key": "ok", "value": 1, "vaule": 2}])
    with pytest.raises(ValidationError, match="needs 'namespace' and 'value'"):
        mem.put_many([{"namespace": "a", "key": "ok"}])


def test_get_many_in_input_order_with_missing(mem):
    mem.put("a", "1", 1)
    mem.put("b", "2", 2)
    got = mem.get_many([("b", "2"), ("a", "missing"), ("a", "1"), ("b", "2")])
    assert [g.value if g else None for g in got] == [2, None, 1, 2]
    assert mem.get_many([]) == []


def test_get_many_large_batch(mem):
    mem.put_many([{"namespace": ("n", str(i % 7)), "key": f"k{i}", "value": i} for i in range(1500)])
    addrs = [(("n", str(i % 7)), f"k{i}") for i in reversed(range(1500))]
    assert [g.value for g in mem.get_many(addrs)] == list(reversed(range(1500)))


def test_if_absent_creates_only_once(mem, clock):
    from memlane import ConflictError

    first = mem.put("claims", "job.42", "agent-a", if_absent=True)
    with pytest.raises(ConflictError, match="already exists"):
        mem.put("claims", "job.42", "agent-b", if_absent=True)
    assert mem.get("claims", "job.42") == first
    with pytest.raises(ConflictError):
        mem.put_many(
            [
                {"namespace": "claims", "key": "job.43", "value": 1},
                {"namespace": "claims", "key": "job.42", "value": 2},
            ],
            if_absent=True,
        )
    assert mem.get("claims", "job.43") is None  # all or nothing
    mem.put("claims", "lease", "a", ttl=5, if_absent=True)
    clock.advance(10)
    assert mem.put("claims", "lease", "b", if_absent=True).value == "b"  # expired: free again


def test_shared_substructures_are_fine(mem):
    shared = {"x": [1, 2]}
    mem.put("t", "dag", [shared, shared])
    assert mem.get("t", "dag").value == [{"x": [1, 2]}, {"x": [1, 2]}]
