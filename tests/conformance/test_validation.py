"""Every rule of DESIGN section 1 is refused with a ValidationError naming the field."""

from __future__ import annotations

import pytest

from memlane import MemlaneError, ValidationError

BAD_PUTS = [
    ({"namespace": ()}, "namespace"),
    ({"namespace": ""}, "namespace"),
    ({"namespace": ("a", "")}, "namespace"),
    ({"namespace": "a//b"}, "namespace"),
    ({"namespace": ("a/b",)}, "namespace"),
    ({"namespace": ("a\x00",)}, "namespace"),
    ({"namespace": ("a\n",)}, "namespace"),
    ({"namespace": ("x" * 129,)}, "namespace"),
    ({"namespace": tuple("abcdefghi")}, "namespace"),
    ({"namespace": ("a", 1)}, "namespace"),
    ({"namespace": 5}, "namespace"),
    ({"key": ""}, "key"),
    ({"key": "k" * 257}, "key"),
    ({"key": "a\tb"}, "key"),
    ({"key": ".lead"}, "key"),
    ({"key": "trail."}, "key"),
    ({"key": "a..b"}, "key"),
    ({"key": 7}, "key"),
    ({"value": float("nan")}, "value"),
    ({"value": float("inf")}, "value"),
    ({"value": {"x": [1, float("-inf")]}}, "value"),
    ({"value": {1: "int key"}}, "value"),
    ({"value": {"a": {2: "nested int key"}}}, "value"),
    ({"value": {"s": {1, 2}}}, "value"),
    ({"value": b"bytes"}, "value"),
    ({"value": object()}, "value"),
    ({"value": "x" * (16 * 1024 * 1024 + 1)}, "value"),
    ({"value": (lambda a: (a.append(a), a)[1])([])}, "value"),
    ({"value": (lambda d: (d.update(me=d), d)[1])({})}, "value"),
    ({"metadata": ["not", "an", "object"]}, "metadata"),
    ({"metadata": {"x": float("nan")}}, "metadata"),
    ({"metadata": {"x": "y" * 70_000}}, "metadata"),
    ({"text": 5}, "text"),
    ({"ttl": 0}, "ttl"),
    ({"ttl": -1}, "ttl"),
    ({"ttl": float("nan")}, "ttl"),
    ({"ttl": float("inf")}, "ttl"),
    ({"ttl": "60"}, "ttl"),
    ({"ttl": True}, "ttl"),
    ({"ttl": 1e12}, "ttl"),
]


@pytest.mark.parametrize(("override", "field"), BAD_PUTS)
def test_bad_put_is_refused_naming_the_field_and_writes_nothing(mem, override, field):
    args = {"namespace": ("ok",), "key": "ok", "value": "ok"} | override
    kwargs = {k: args.pop(k) for k in ("metadata", "text", "ttl") if k in args}
    with pytest.raises(ValidationError) as e:
        mem.put(args["namespace"], args["key"], args["value"], **kwargs)
    assert e.value.field == field
    assert str(e.value).startswith(field + ":")
    assert isinstance(e.value, MemlaneError) and isinstance(e.value, ValueError)
    assert mem.stats().active_items == 0
    assert mem.list().items == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda m: m.get("a", ""), "key"),
        (lambda m: m.get("", "k"), "namespace"),
        (lambda m: m.fetch("k", limit=0), "limit"),
        (lambda m: m.fetch("k", limit=True), "limit"),
        (lambda m: m.list(limit=-1), "limit"),
        (lambda m: m.list(key_prefix="a..b"), "key_prefix"),
        (lambda m: m.search("q", limit=0), "limit"),
        (lambda m: m.search(None), "query"),
        (lambda m: m.search("x" * 5000), "query"),
        (lambda m: m.summarize(depth=0), "depth"),
        (lambda m: m.namespaces(max_depth=0), "max_depth"),
        (lambda m: m.get_many([("a",)]), "addresses"),
        (lambda m: m.put_many(["not a mapping"]), "records"),
        (lambda m: m.history("a", "b\x00"), "key"),
    ],
)
def test_bad_reads_are_refused(mem, call, field):
    with pytest.raises(ValidationError) as e:
        call(mem)
    assert e.value.field == field


def test_naive_clock_is_refused(store_url):
    from datetime import datetime

    import memlane

    with memlane.open(store_url, clock=lambda: datetime(2026, 1, 1)) as m:
        with pytest.raises(ValidationError, match="naive"):
            m.put("a", "k", 1)
