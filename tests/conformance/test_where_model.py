"""``where`` in SQL against ``values.where.matches`` (#37): numbers past 64 bits, nulls inside operands, and a model
test over random documents and conditions, on every backend."""

from __future__ import annotations

import itertools
import math
import sys
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import ValidationError
from memlane.values import where as where_rules

_EXAMPLE = itertools.count()


def _both(mem: Any, namespace: tuple[str, ...], where: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The keys the store selects and the keys the Python rule matches, each sorted."""
    conditions = where_rules.conditions(where)
    items = mem.list(namespace, limit=100).items
    model = sorted(item.key for item in items if where_rules.matches(item.value, conditions, item))
    return sorted(item.key for item in mem.select(namespace, where=where, limit=1000)), model


_NUMBERS = {
    "2^64+1": 2**64 + 1,
    "2^64": 2**64,
    "2^63": 2**63,
    "2^63-1": 2**63 - 1,
    "-2^63": -(2**63),
    "-2^63-1": -(2**63) - 1,
    "-2^64": -(2**64),
    "2^60": 2**60,
    "2.0^60": 2.0**60,  # written 1.152921504606847e+18: the decimal JSON holds is 1152921504606847000
    "1e20": 1e20,
    "10^20+1": 10**20 + 1,
    "10^400": 10**400,
    "0.1": 0.1,
}


def test_numbers_past_64_bits_compare_by_the_decimal_their_json_writes(mem: Any) -> None:
    # SQLite read integers past 64 bits as doubles and bound such operands as doubles: 2^64 + 1 equalled 2^64
    namespace = ("numbers", str(next(_EXAMPLE)))
    mem.put_many([{"namespace": namespace, "key": k, "value": {"n": v}} for k, v in _NUMBERS.items()])
    cases = {
        "eq 2^64+1": ({"n": 2**64 + 1}, ["2^64+1"]),
        "eq 2^64": ({"n": {"$eq": 2**64}}, ["2^64"]),
        "eq -2^63-1": ({"n": -(2**63) - 1}, ["-2^63-1"]),
        "eq -2^63": ({"n": -(2**63)}, ["-2^63"]),
        "eq 2^63-1": ({"n": 2**63 - 1}, ["2^63-1"]),
        "eq float 2^64": ({"n": 2.0**64}, []),  # its JSON is 1.8446744073709552e+19, not 18446744073709551616
        "eq 2^60": ({"n": 2**60}, ["2^60"]),
        "eq 1152921504606847000": ({"n": 1152921504606847000}, ["2.0^60"]),
        "eq 10^20": ({"n": 10**20}, ["1e20"]),
        "eq 10^400": ({"n": 10**400}, ["10^400"]),
        "gt 2^64": ({"n": {"$gt": 2**64}}, ["10^20+1", "10^400", "1e20", "2^64+1"]),
        "gte 2^63": ({"n": {"$gte": 2**63}}, ["10^20+1", "10^400", "1e20", "2^63", "2^64", "2^64+1"]),
        "lt -2^63": ({"n": {"$lt": -(2**63)}}, ["-2^63-1", "-2^64"]),
        "lte -2^63-1": ({"n": {"$lte": -(2**63) - 1}}, ["-2^63-1", "-2^64"]),
        "gt 1e20": ({"n": {"$gt": 1e20}}, ["10^20+1", "10^400"]),
        "lt 10^20+1": ({"n": {"$lt": 10**20 + 1}}, [k for k in _NUMBERS if k not in ("10^20+1", "10^400")]),
        "gt 2^60": ({"n": {"$gt": 2**60}}, ["10^20+1", "10^400", "1e20", "2.0^60", "2^63", "2^63-1", "2^64", "2^64+1"]),
        "lte 1152921504606847000": (
            {"n": {"$lte": 1152921504606847000}},
            ["-2^63", "-2^63-1", "-2^64", "0.1", "2.0^60", "2^60"],
        ),
        "gt 0": ({"n": {"$gt": 0}}, [k for k in _NUMBERS if not k.startswith("-")]),
        "ne 2^64": ({"n": {"$ne": 2**64}}, [k for k in _NUMBERS if k != "2^64"]),
        "in a list": ({"n": {"$eq": [2**64 + 1]}}, []),
    }
    for name, (where, want) in cases.items():
        got, model = _both(mem, namespace, where)
        assert (name, got) == (name, sorted(want)) == (name, model)


def test_a_number_deep_in_an_operand_compares_exactly(mem: Any) -> None:
    namespace = ("deep numbers", str(next(_EXAMPLE)))
    rows = {"big": [2**64, {"x": -(2**70)}], "near": [2**64 + 1, {"x": -(2**70)}], "small": [1, {"x": 1.0}]}
    mem.put_many([{"namespace": namespace, "key": k, "value": {"v": v}} for k, v in rows.items()])
    for operand, want in (([2**64, {"x": -(2**70)}], ["big"]), ([1.0, {"x": 1}], ["small"])):
        got, model = _both(mem, namespace, {"v": {"$eq": operand}})
        assert got == want == model
        got, model = _both(mem, namespace, {"v": {"$ne": operand}})
        assert got == sorted(set(rows) - set(want)) == model


def test_a_null_inside_an_object_or_list_operand_is_a_member_that_is_null(mem: Any) -> None:
    # SQLite read {"x": None} inside an operand as "x missing or null": {"a": {"y": 1}} matched {"a": {"$eq": {"x":
    # None}}} (one member each), while Python compares the member exactly
    namespace = ("nulls", str(next(_EXAMPLE)))
    rows = {
        "x null": {"a": {"x": None}},
        "y one": {"a": {"y": 1}},
        "x one": {"a": {"x": 1}},
        "empty": {"a": {}},
        "list null": {"a": [None]},
        "list one": {"a": [1]},
        "missing": {"b": 1},
        "a null": {"a": None},
    }
    mem.put_many([{"namespace": namespace, "key": k, "value": v} for k, v in rows.items()])
    cases = {
        "eq object": ({"a": {"$eq": {"x": None}}}, ["x null"]),
        "ne object": ({"a": {"$ne": {"x": None}}}, sorted(set(rows) - {"x null"})),
        "value.a eq": ({"value.a": {"$eq": {"x": None}}}, ["x null"]),
        "eq list": ({"a": [None]}, ["list null"]),
        "ne list": ({"a": {"$ne": [None]}}, sorted(set(rows) - {"list null"})),
        "a.x null": ({"a.x": None}, sorted(set(rows) - {"x one"})),  # a path's null: missing or null
        "a null": ({"a": None}, ["a null", "missing"]),
    }
    for name, (where, want) in cases.items():
        got, model = _both(mem, namespace, where)
        assert (name, got) == (name, want) == (name, model)


# Keys a stored value or an operand's object may hold; a path's segment holds no "." and is not empty
_SEGMENTS = ["a", "b", "0", "é", "\\", "[0]", "$x", " "]
_KEYS = st.sampled_from([*_SEGMENTS, "", "a.b"])
_EDGE_NUMBERS = [
    0, -0.0, 1, 1.0, 0.1, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 2**53, 2**53 + 1, 2.0**53,
    2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2.0**63, -(2.0**63), 2**64 + 1, 2.0**60, 2**60, 1152921504606847000,
    1e20, 10**20, 10**20 + 1, 2**64, 2.0**64, 10**400, -(10**400),
]  # fmt: skip
_NUMBER = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(_EDGE_NUMBERS)
)
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=3)  # NUL: jsonb, documented
_SCALAR = st.one_of(st.none(), st.booleans(), _NUMBER, _TEXT, st.sampled_from(["", "1", "a", "é", "\\"]))
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=8,
)
_DOCUMENT = st.dictionaries(st.sampled_from(_SEGMENTS), _VALUE, max_size=4)


def _fields(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every (path, value) a condition could name in a stored value: its objects' members, at any depth."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k and "." not in k:
                out.append(((*path, k), v))
                out.extend(_fields(v, (*path, k)))
    return out


@st.composite
def _condition(draw: st.DrawFn, rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[str, str, Any]:
    """A condition on a random path, or on a path some row has, with an operand drawn at random or from a row."""
    seen = [(("metadata.",) if i else ("",), f) for value_meta in rows for i, part in enumerate(value_meta) for f in
            _fields(part)]  # fmt: skip
    if seen and draw(st.integers(0, 3)):
        (head,), (path, there) = draw(st.sampled_from(seen))
        name = head + ".".join(path)
    else:
        name = draw(st.sampled_from(["", "metadata.", "value."])) + ".".join(
            draw(st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=3))
        )
        there = draw(_VALUE)
    op = draw(st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]))
    if op in ("$eq", "$ne"):
        return name, op, draw(_near(there)) if draw(st.integers(0, 3)) else draw(_VALUE)
    if (_number(there) or isinstance(there, str)) and draw(st.integers(0, 3)):
        return name, op, draw(_near(there))
    return name, op, draw(st.one_of(_NUMBER, _TEXT))


@st.composite
def _near(draw: st.DrawFn, x: Any) -> Any:
    """``x`` or a value next to it: a number one unit or one float away, or in the other type; a member made null,
    added as null or left out; where a rule that is almost right goes wrong."""
    if _number(x):
        nearby = [x, x + 1, x - 1, -x]
        if isinstance(x, float):
            nearby += [math.nextafter(x, math.inf), math.nextafter(x, -math.inf)]
            nearby += [int(x), int(Decimal(repr(x)))] if x == int(x) else []
        elif abs(x) < 2**1000:
            nearby.append(float(x))
        # the float next to the largest is infinity, which no operand may be (refused, as JSON cannot write it)
        return draw(st.sampled_from([n for n in nearby if not isinstance(n, float) or math.isfinite(n)]))
    if isinstance(x, dict) and x:
        k = draw(st.sampled_from(sorted(x)))
        rest = {j: v for j, v in x.items() if j != k}
        other = draw(st.sampled_from([j for j in _SEGMENTS if j not in x] or [k]))
        return draw(st.sampled_from([x, {**x, k: None}, rest, {**rest, other: None}, {**x, other: None}]))
    if isinstance(x, list) and x:
        i = draw(st.integers(0, len(x) - 1))
        return draw(st.sampled_from([x, [*x[:i], None, *x[i + 1 :]], x[:i], [*x, None]]))
    return x


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_select_is_the_python_rule_over_random_documents_and_conditions(mem: Any, data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.tuples(_DOCUMENT, _DOCUMENT), min_size=1, max_size=6), "rows")
    raw = data.draw(st.lists(_condition(rows), min_size=1, max_size=3), "conditions")
    namespace = ("random", str(next(_EXAMPLE)))
    mem.put_many([{"namespace": namespace, "key": f"k{i}", "value": v, "metadata": m} for i, (v, m) in enumerate(rows)])
    where: dict[str, Any] = {}
    for name, op, operand in raw:
        where.setdefault(name, {})[op] = operand
    got, model = _both(mem, namespace, where)
    assert got == model


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_search_and_recall_with_where_find_exactly_the_matching_items(mem: Any, data: st.DataObject) -> None:
    """The ranking statements carry the same conditions (PostgreSQL's with named parameters): every item holds
    the searched word, so the hits are exactly the items the Python rule matches."""
    rows = data.draw(st.lists(st.tuples(_DOCUMENT, _DOCUMENT), min_size=1, max_size=5), "rows")
    raw = data.draw(st.lists(_condition(rows), min_size=1, max_size=2), "conditions")
    namespace = ("ranked", str(next(_EXAMPLE)))
    mem.put_many(
        [
            {"namespace": namespace, "key": f"k{i}", "value": v, "metadata": m, "text": "rocket"}
            for i, (v, m) in enumerate(rows)
        ]
    )
    where: dict[str, Any] = {}
    for name, op, operand in raw:
        where.setdefault(name, {})[op] = operand
    _, model = _both(mem, namespace, where)
    searched = mem.search("rocket", namespace_prefix=namespace, where=where, limit=50, channels=["lexical"])
    recalled = mem.recall("rocket", namespace_prefix=namespace, where=where, limit=50, mode="lexical", floor=False)
    assert sorted(h.item.key for h in searched.hits) == model == sorted(h.item.key for h in recalled.hits)


def test_an_integer_operand_past_a_double_is_compared_and_one_json_cannot_write_is_refused() -> None:
    assert where_rules.conditions({"n": {"$lt": 10**400}}) == [(("value", "n"), "$lt", 10**400)]
    digits = sys.get_int_max_str_digits()
    with pytest.raises(ValidationError, match=f"more than {digits:,} digits") as e:
        where_rules.conditions({"n": 10**digits})
    assert e.value.field == "where"
