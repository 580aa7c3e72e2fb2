"""A null in the caller's own JSON is data: every read gives it back, on every backend and over HTTP.

The service leaves unset optional fields of its answers out (``author``, ``expires_at``, ``why``, ...). A
value or metadata whose own keys have those names, holding ``null``, once lost them over HTTP. The
strategy draws objects keyed by the answers' field names as well as other text, nested, with nulls.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# the answer fields the service may leave out, and the names of the fields around them
FIELD_NAMES = [
    "author", "expires_at", "changed_by", "next_cursor", "embedding", "pending_vectors", "relevant",
    "relevance", "why", "value", "metadata", "params", "rows", "text", "key", "id", "status",
]  # fmt: skip
KEYS = st.one_of(st.sampled_from(FIELD_NAMES), st.text(min_size=1, max_size=8))
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
JSON = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, JSON, min_size=1, max_size=6)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=OBJECTS, metadata=st.dictionaries(KEYS, JSON, max_size=4), n=st.integers(0, 10**9))
def test_nulls_in_values_and_metadata_survive_every_read(mem: Any, value: Any, metadata: Any, n: int) -> None:
    key = f"null.k{n}"
    put = mem.put("nulls", key, value, metadata=metadata, text=f"marker{n} nullfields")
    assert (put.value, put.metadata) == (value, metadata)
    assert (mem.get("nulls", key).value, mem.get("nulls", key).metadata) == (value, metadata)
    [got] = mem.get_many([("nulls", key)])
    assert (got.value, got.metadata) == (value, metadata)
    listed = {i.key: i for i in mem.list("nulls", limit=1000).items}
    assert (listed[key].value, listed[key].metadata) == (value, metadata)
    hits = [h for h in mem.search(f"marker{n}", namespace_prefix="nulls", limit=5).hits if h.key == key]
    assert hits and (hits[0].value, hits[0].item.metadata) == (value, metadata)
    mem.put("nulls", key, "replaced")  # the value becomes a version of the history
    kept = max(mem.history("nulls", key), key=lambda v: v.version)
    assert (kept.value, kept.metadata) == (value, metadata)


def test_a_null_named_like_an_answer_field_is_kept(mem: Any) -> None:
    value = {"author": None, "why": None, "expires_at": None, "nested": [{"relevance": None}], "x": 1}
    mem.put("nulls", "plain", value, metadata={"changed_by": None})
    got = mem.get("nulls", "plain")
    assert got.value == value and got.metadata == {"changed_by": None}
    assert [i.value for i in mem.select("nulls", where={"x": 1})] == [value]
