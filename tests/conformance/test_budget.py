"""One depth and size budget: whatever the boundary accepts, every later layer carries (#27).

A value nested 28 levels deep was stored, but a ``select`` asking for it by
equality answered a 500: SQLite's parser overflowed on SQL that nested as
deeply as the value. The class is any input whose depth or size the boundary
accepts and a later layer (the filter compiler, SQLite's or PostgreSQL's
parser, the JSON encoders, the service and its clients) cannot carry. So
each budget below is tried at its limit, where the input must be stored and
matched, and one step past it, where it must be refused with a
``ValidationError`` naming the field and nothing written; never a 5xx, a
``StoreError`` or Python's ``RecursionError``.

| budget | at the limit | past it |
| --- | --- | --- |
| value nesting | 100 levels: stored, read back, matched by ``select`` equality | 101: ``value`` |
| ``where`` operand nesting | 100 levels: matches the stored value | 101 (and 5,000): ``where`` |
| ``where`` values | 1,000 in all the operands: matched | 1,001: ``where`` |
| ``where`` conditions | 64 | 65: ``where`` |
| ``where`` field path | 16 segments | 17: ``where`` |

The table runs on every backend (``mem``: SQLite, PostgreSQL, and the Client
over HTTP). ``test_mcp_budget.py`` sends the same inputs through the MCP
tools, and ``test_budget_values`` generates values of every shape and depth up
to the limit, each matched exactly by equality on every backend.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import ValidationError

# the documented numbers (docs/python-api.md), written out: a changed constant fails here
DEPTH = 100
VALUES = 1000
CONDITIONS = 64
PATH = 16
EXAMPLES = int(os.environ.get("LIMITS_EXAMPLES", "12"))


def nested(depth: int, leaf: Any = "deep", shape: str = "list") -> Any:
    """``leaf`` inside ``depth`` lists, objects, or both by turns (``shape``: list, object, mixed)."""
    value = leaf
    for level in range(depth):
        as_object = shape == "object" or (shape == "mixed" and level % 2 == 0)
        value = {"in": value} if as_object else [value]
    return value


def keys(mem: Any, where: Any, prefix: str = "budget") -> list[str]:
    return [i.key for i in mem.select(prefix, where=where, order="address", limit=1000)]


def refused(mem: Any, field: str, where: Any, fragment: str) -> None:
    before = [(i.key, i.version) for i in mem.list("budget", limit=1000).items]
    with pytest.raises(ValidationError) as e:
        mem.select("budget", where=where)
    assert e.value.field == field and fragment in str(e.value), e.value
    assert [(i.key, i.version) for i in mem.list("budget", limit=1000).items] == before


@pytest.mark.parametrize("shape", ["list", "object", "mixed"])
def test_a_value_at_every_depth_up_to_the_limit_is_matched_by_equality(mem: Any, shape: str) -> None:
    depths = [1, 2, 27, 28, 29, 50, 99, DEPTH]
    for d in depths:
        mem.put("budget", f"d{d:03d}", {"v": nested(d - 1, shape=shape)})
    # the item at depth d holds {"v": nested(d - 1)}: the operand under "v" is d - 1 deep, the value d deep
    for d in depths:
        operand = nested(d - 1, shape=shape)
        if not isinstance(operand, dict):  # a plain object would be read as field paths, 16 at most
            assert keys(mem, {"v": operand}) == [f"d{d:03d}"], d
        assert keys(mem, {"v": {"$eq": operand}}) == [f"d{d:03d}"], d
        assert f"d{d:03d}" not in keys(mem, {"v": {"$ne": operand}}), d
    # the deepest operand the budget allows matches a value stored at the top
    mem.put("budget", "top", nested(DEPTH, shape=shape))
    whole = mem.select("budget", where={"v": {"$eq": None}}, order="address", limit=1000)
    assert "top" in [i.key for i in whole]  # a list or an object without "v": v is missing, which equals null


def test_an_operand_past_the_depth_budget_is_refused_naming_where(mem: Any) -> None:
    mem.put("budget", "k", {"v": nested(DEPTH - 1)})
    assert keys(mem, {"v": nested(DEPTH - 1)}) == ["k"]
    assert keys(mem, {"v": nested(DEPTH)}) == []  # 100 deep: allowed, and nothing stored under v is that deep
    for depth in (DEPTH + 1, 300, 5000):  # 5,000: deeper than Python's own stack would follow
        refused(mem, "where", {"v": nested(depth)}, f"nested more than {DEPTH} levels")
        refused(mem, "where", {"v": {"$ne": nested(depth, shape="object")}}, f"nested more than {DEPTH} levels")
        refused(mem, "where", {"v": {"$eq": nested(depth, shape="mixed")}}, f"nested more than {DEPTH} levels")


def test_the_values_budget_is_the_sum_over_every_operand(mem: Any) -> None:
    flat = list(range(VALUES - 1))  # the list and its 999 numbers: 1,000 values
    wide = {f"f{i:03d}": i for i in range(VALUES - 1)}
    mem.put("budget", "flat", {"v": flat})
    mem.put("budget", "wide", {"v": wide, "w": 1})
    assert keys(mem, {"v": flat}) == ["flat"]
    assert keys(mem, {"v": {"$eq": wide}}) == ["wide"]
    assert keys(mem, {"v": {"$ne": flat}}) == ["wide"]
    # split over conditions: 62 operands of 16 values and one of 8 make 1,000
    mem.put("budget", "split", {f"c{i}": list(range(15)) for i in range(62)} | {"last": list(range(7))})
    split = {f"c{i}": list(range(15)) for i in range(62)} | {"last": list(range(7))}
    assert keys(mem, split) == ["split"]
    refused(mem, "where", {"v": [*flat, 1]}, f"more than {VALUES:,} values")
    refused(mem, "where", {"v": {"$eq": wide}, "w": 1}, f"more than {VALUES:,} values")
    refused(mem, "where", {**split, "one": 1}, f"more than {VALUES:,} values")


def test_conditions_and_field_paths_at_and_past_their_limits(mem: Any) -> None:
    record = {f"f{i}": i for i in range(CONDITIONS)}
    deep_path = ".".join(f"p{i}" for i in range(PATH))
    value: Any = 1
    for i in reversed(range(PATH)):
        value = {f"p{i}": value}
    mem.put("budget", "many", record)
    mem.put("budget", "path", value)
    assert keys(mem, {f"f{i}": {"$gte": i} for i in range(CONDITIONS)}) == ["many"]
    assert keys(mem, {deep_path: 1}) == ["path"]
    refused(mem, "where", {**{f"f{i}": i for i in range(CONDITIONS)}, "g": 1}, f"at most {CONDITIONS}")
    refused(mem, "where", {deep_path + ".p16": 1}, f"deeper than {PATH}")


def test_equal_numbers_written_differently_match_at_depth(mem: Any) -> None:
    """Equality is JSON's, not the text's: 1 and 1.0 are one number at every depth."""
    mem.put("budget", "ints", {"v": nested(60, leaf=[1, 2.5, {"n": 3}])})
    assert keys(mem, {"v": nested(60, leaf=[1.0, 2.5, {"n": 3.0}])}) == ["ints"]
    assert keys(mem, {"v": nested(60, leaf=[True, 2.5, {"n": 3}])}) == []  # true is not 1
    assert keys(mem, {"v": {"$eq": nested(60, leaf={"n": 3.0, "m": [1]}, shape="object")}}) == []
    mem.put("budget", "objs", {"v": nested(60, leaf={"n": 3, "m": [1.0]}, shape="object")})
    assert keys(mem, {"v": {"$eq": nested(60, leaf={"n": 3.0, "m": [1]}, shape="object")}}) == ["objs"]


# -- generated ------------------------------------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
SCALARS |= st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=6)  # NUL: no operand
# can hold it; a lone surrogate is not text (refused: tests/conformance/test_limits_property.py)


# what a field path may name: no quote, no control character (each object key of an operand is a path step)
KEY_CHARACTERS = st.characters(exclude_characters='"', exclude_categories=["Cc", "Cs"])


def _tall(depth: int) -> st.SearchStrategy[Any]:
    """Values exactly ``depth`` deep: a spine of lists and objects with scalars and small branches beside it."""

    def grow(inner: Any, level: int, draw: Any) -> Any:
        beside = draw(st.lists(SCALARS, max_size=2))
        if draw(st.booleans()):
            key = draw(st.text(KEY_CHARACTERS, min_size=1, max_size=4))
            return {key: inner, **{f"s{i}{key}": x for i, x in enumerate(beside)}}
        return [*beside, inner] if draw(st.booleans()) else [inner, *beside]

    @st.composite
    def build(draw: Any) -> Any:
        value = draw(SCALARS)
        for level in range(depth):
            value = grow(value, level, draw)
        return value

    return build()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_budget_values_of_any_shape_up_to_the_limit_are_stored_and_matched(mem: Any, data: Any) -> None:
    depth = data.draw(st.sampled_from([26, 27, 28, 29, 64, DEPTH - 1, DEPTH]))
    value = data.draw(_tall(depth))
    key = f"gen{data.draw(st.integers(0, 10**9))}"
    item = mem.put("gen", key, value)
    assert mem.get("gen", key).value == item.value == value
    if depth < DEPTH:  # under a field "v" the operand keeps one level for the object around it
        mem.put("gen", key + ".wrapped", {"v": value})
        assert key + ".wrapped" in keys(mem, {"v": {"$eq": value}}, "gen")
        assert key + ".wrapped" not in keys(mem, {"v": {"$ne": value}}, "gen")
    with pytest.raises(ValidationError) as e:
        mem.put("gen", key + ".deeper", [value] if depth == DEPTH else nested(DEPTH - depth + 1, value))
    assert e.value.field == "value"


def test_a_field_name_with_a_backslash_is_matched_like_any_other(mem: Any) -> None:
    """A backslash is an escape inside SQLite's quoted JSON path step: a field holding one was never found."""
    value = {"a\\b": 1, "o": {"x\\\\y": [1, "c:\\temp"]}}
    mem.put("slashes", "k", value)
    mem.put("slashes", "other", {"ab": 1, "a\\c": 1})
    for where in ({"a\\b": 1}, {"o.x\\\\y": {"$eq": [1, "c:\\temp"]}}, {"o": {"$eq": value["o"]}}):
        assert [i.key for i in mem.select("slashes", where=where)] == ["k"], where
