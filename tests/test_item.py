"""``Item``: a stored row decoded field by field on first access, indistinguishable from a decoded item."""

from __future__ import annotations

import copy
import json
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.values.model import Item

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _own_text(value: Any) -> str:
    """The search text of a value written without one: the string itself (NUL as a space), or its JSON."""
    if isinstance(value, str):
        return value.replace("\x00", " ")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _decoded(item: Item) -> Item:
    """The same item built field by field, as a client decodes it from JSON."""
    return Item.from_dict(item.to_dict())


@pytest.fixture
def mem(tmp_path):
    with memlane.open(str(tmp_path / "items.db"), embedder=None) as m:
        yield m


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=_values,
    text=st.none() | st.text(max_size=10).filter(lambda t: "\x00" not in t),
    metadata=st.none() | st.dictionaries(st.text(max_size=4), _values, max_size=2),
    ttl=st.none() | st.floats(1, 1e6),
    index=st.booleans(),
)
def test_a_written_and_a_read_item_equal_the_decoded_one_on_every_field(mem, value, text, metadata, ttl, index):
    written = mem.put("a/b", "k", value, text=text, metadata=metadata, ttl=ttl, index=index)
    many = mem.put_many([{"namespace": "a/c", "key": "k", "value": value, "text": text, "metadata": metadata}])[0]
    read = mem.get("a/b", "k")
    listed = mem.list("a/b").items[0]
    assert written == read == listed == _decoded(read)
    assert many == _decoded(mem.get("a/c", "k"))
    for item in (written, read):
        assert item.value == value if not isinstance(value, float) else item.value == pytest.approx(value)
        assert item.text == (text if text is not None else _own_text(value))
        assert item.metadata == (metadata or {})
        assert item.indexed is index
        assert (item.expires_at is None) == (ttl is None)
        assert item.created_at.tzinfo is not None and item.updated_at >= item.created_at
    assert pickle.loads(pickle.dumps(read)) == read
    assert copy.deepcopy(read) == read and copy.copy(read) == read
    assert repr(read).startswith("Item(id=") and f"indexed={index}" in repr(read)


def test_fields_decode_once_and_can_be_assigned(mem):
    item = mem.put("n", "k", {"a": [1, 2]}, metadata={"m": 1})
    read = mem.get("n", "k")
    assert read.value is read.value  # decoded once, then the same object
    read.value["a"].append(3)
    assert read.value == {"a": [1, 2, 3]}
    assert read.text == '{"a":[1,2]}'  # the text was the stored value's, kept when the value changes
    read.metadata = {"m": 2}
    read.version = 9
    read.key = "other"
    assert (read.metadata, read.version, read.key, read.id) == ({"m": 2}, 9, "other", item.id)
    assert mem.get("n", "k").value == {"a": [1, 2]}  # a snapshot: the store did not change


def test_items_differ_when_any_field_does():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fields = ("i", ("n",), "k", 1, "number", "1", {}, None, now, now, None, 1)
    base: dict[str, Any] = dict(zip(Item.FIELDS, fields, strict=True))
    item = Item(**base)
    assert item == Item(**base) and item != Item(**base, indexed=False)
    for name in Item.FIELDS:
        other = Item(**base)
        setattr(other, name, now.replace(year=2027) if name.endswith("_at") else "changed")
        assert other != item, name
    assert item != base and (item == object()) is False
    with pytest.raises(TypeError):
        hash(item)


def test_every_field_of_an_item_is_documented_and_assigned_in_place():
    """Each of ``Item.FIELDS`` is a documented property (help() and the API reference read it); assigning one
    changes that field only, and a time assigned as a datetime reads back as that datetime."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fields = ("i", ("n",), "k", 1, "number", "1", {}, None, now, now, None, 1)
    for name in Item.FIELDS:
        doc = getattr(Item, name).__doc__
        assert isinstance(getattr(Item, name), property) and doc and doc.strip(), name
    for name in Item.FIELDS:
        item = Item(**dict(zip(Item.FIELDS, fields, strict=True)))
        new = now.replace(year=2027) if name.endswith("_at") else ("m",) if name == "namespace" else "changed"
        setattr(item, name, new)
        assert {n: getattr(item, n) for n in Item.FIELDS} == dict(zip(Item.FIELDS, fields, strict=True)) | {name: new}
