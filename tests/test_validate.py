"""Guards memlane.values.validate, the boundary every argument crosses before storage.

What is pinned here: every refusal the module can make (the exact ``.field``, a message
that says what is wrong, anchored so that nothing is prepended or appended, and that
nothing was written when it came through the public API); every documented limit,
accepted exactly at the limit and refused one past it; the control-character ranges;
the canonical JSON form of stored values (sorted keys, compact, non-ASCII kept, tuples
as lists) and the ``value_type`` each JSON type maps to, subclasses included; that
every object key at any depth is checked, however the containers nest or share; and
the normalisations (``a/b`` namespaces, list segments, a key prefix's trailing ``.``,
``None`` metadata and ttl); and that the namespace parse cache never changes an answer.
One known bug is pinned as a strict xfail: text that cannot be hashed is not split on ``/``.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections import OrderedDict, namedtuple
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memlane
from memlane import ValidationError
from memlane.values import validate as v

MiB = 1024 * 1024
MAX_VALUE = 16 * MiB
MAX_TEXT = 16 * MiB
MAX_METADATA = 64 * 1024
MAX_TTL = 100 * 365.25 * 86400


@pytest.fixture(autouse=True)
def _fresh_namespace_cache():
    # namespace parsing is memoised: start each test from an empty cache so that an accepted
    # namespace is judged by the rules, not answered from an earlier test's parse
    v._cached_namespace.cache_clear()
    yield
    v._cached_namespace.cache_clear()


@pytest.fixture
def memory(tmp_path):
    with memlane.open(str(tmp_path / "memory.db"), embedder=None) as m:
        yield m


def assert_refusal(error: ValidationError, field: str, fragments: tuple[str, ...]) -> None:
    """The error names ``field``, and its message is ``field: `` + the fragments, in order, end to end."""
    assert error.field == field
    message = str(error)
    assert message.startswith(f"{field}: {fragments[0]}"), message
    assert message.endswith(fragments[-1]), message
    at = 0
    for fragment in fragments:
        found = message.find(fragment, at)
        assert found >= 0, f"{fragment!r} not in order in {message!r}"
        at = found + len(fragment)


def _cycle_list() -> list[Any]:
    a: list[Any] = []
    a.append(a)
    return a


def _cycle_dict() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["me"] = d
    return d


def _nested_lists(depth: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(depth):
        out = [out]
    return out


# ---------------------------------------------------------------------------
# every refusal of every checker, called directly: (checker, raw, extra kwargs, message fragments)

DEFAULT_FIELD = {
    v.namespace: "namespace",
    v.key: "key",
    v.key_prefix: "key_prefix",
    v.value: "value",
    v.text: "text",
    v.metadata: "metadata",
    v.ttl: "ttl",
    v.limit: "limit",
    v.query: "query",
}

REFUSALS: list[tuple[Any, Any, dict[str, Any], tuple[str, ...]]] = [
    # namespace
    (v.namespace, (), {}, ("is empty", "give 1 to 8 segments, e.g. ('user', '123')")),
    (v.namespace, [], {}, ("is empty", "e.g. ('user', '123')")),
    (v.namespace, "", {}, ("is empty", "e.g. ('user', '123')")),
    (v.namespace, tuple("abcdefghi"), {}, ("has 9 segments", "at most 8")),
    (v.namespace, "a/b/c/d/e/f/g/h/i/j", {}, ("has 10 segments", "at most 8")),
    (v.namespace, tuple("abcdefghi"), {"allow_empty": True}, ("has 9 segments", "at most 8")),
    (v.namespace, ("a", 1), {}, ("segment 1 is not a string",)),
    (v.namespace, ("a", None), {}, ("segment None is not a string",)),
    (v.namespace, ("a", ["b"]), {}, ("segment ['b'] is not a string",)),  # unhashable: not cached
    (v.namespace, [["a"], "b"], {"allow_empty": True}, ("segment ['a'] is not a string",)),
    (v.namespace, ("a", ""), {}, ("has an empty segment",)),
    (v.namespace, "a//b", {}, ("has an empty segment",)),
    (v.namespace, "a/", {}, ("has an empty segment", "no leading or trailing '/'", "write 'a', not 'a/'")),
    (v.namespace, "/a", {"allow_empty": True}, ("has an empty segment", "no leading", "write 'a', not '/a'")),
    (v.namespace, ("x" * 129,), {}, ("segment is 129 characters", "at most 128")),
    (v.namespace, ("ok", "y" * 200), {}, ("segment is 200 characters", "at most 128")),
    (v.namespace, ("a/b",), {}, ("segment 'a/b' contains '/'", "pass a tuple of segments")),
    (v.namespace, ("a\x00",), {}, ("segment 'a\\x00' contains a control character", "or a lone surrogate")),
    (v.namespace, "a/b\nc", {}, ("segment 'b\\nc' contains a control character", "or a lone surrogate")),
    (v.namespace, ("\ud800",), {}, ("segment '\\ud800' contains a control character", "or a lone surrogate")),
    (v.namespace, ("€" * 100,), {}, ("segment is 300 bytes in UTF-8", "at most 256 (128 characters", "shorten it")),
    (
        v.namespace,
        ("_memlane", "x"),
        {},
        ("'_memlane' is reserved for memlane's own records and holds no items", "choose another first segment"),
    ),
    (v.namespace, 5, {}, ("must be a tuple of strings or 'a/b' text", "not int")),
    (v.namespace, None, {"allow_empty": True}, ("must be a tuple of strings or 'a/b' text", "not NoneType")),
    (v.namespace, {"a": 1}, {}, ("must be a tuple of strings or 'a/b' text", "not dict")),
    (v.namespace, b"a/b", {}, ("must be a tuple of strings or 'a/b' text", "not bytes")),
    # key
    (v.key, 7, {}, ("must be a string", "not int")),
    (v.key, None, {}, ("must be a string", "not NoneType")),
    (v.key, "", {}, ("is empty",)),
    (v.key, "k" * 257, {}, ("is 257 characters", "at most 256")),
    (v.key, "k" * 1000, {}, ("is 1000 characters", "at most 256")),
    (v.key, "€" * 200, {}, ("is 600 bytes in UTF-8", "at most 512 (256 characters, two bytes each", "shorten it")),
    (v.key, "a\tb", {}, ("contains a control character or a lone surrogate",)),
    (v.key, "a\ud800", {}, ("contains a control character or a lone surrogate",)),
    (v.key, ".", {}, ("'.' has an empty taxonomy segment", "(leading, trailing or doubled '.')")),
    (v.key, ".lead", {}, ("'.lead' has an empty taxonomy segment", "(leading, trailing or doubled '.')")),
    (v.key, "trail.", {}, ("'trail.' has an empty taxonomy segment", "(leading, trailing or doubled '.')")),
    (v.key, "a..b", {}, ("'a..b' has an empty taxonomy segment", "(leading, trailing or doubled '.')")),
    (v.key, "a.b..c.d", {}, ("'a.b..c.d' has an empty taxonomy segment", "(leading, trailing or doubled '.')")),
    # key prefix: one trailing '.' is dropped, the rest are key rules
    (v.key_prefix, 7, {}, ("must be a string", "not int")),
    (v.key_prefix, ".", {}, ("'.' has an empty taxonomy segment", "doubled '.')")),
    (v.key_prefix, "a..", {}, ("'a.' has an empty taxonomy segment", "doubled '.')")),
    (v.key_prefix, ".a", {}, ("'.a' has an empty taxonomy segment", "doubled '.')")),
    (v.key_prefix, "a..b", {}, ("'a..b' has an empty taxonomy segment", "doubled '.')")),
    (v.key_prefix, "k" * 258 + ".", {}, ("is 258 characters", "at most 256")),
    (v.key_prefix, "a\x1f.", {}, ("contains a control character or a lone surrogate",)),
    # value
    (v.value, float("nan"), {}, ("must be finite; NaN and Infinity are not JSON",)),
    (v.value, float("inf"), {}, ("must be finite; NaN and Infinity are not JSON",)),
    (v.value, float("-inf"), {}, ("must be finite; NaN and Infinity are not JSON",)),
    (v.value, [1, float("nan")], {}, ("contains NaN or Infinity", "JSON numbers must be finite")),
    (v.value, {"x": [1, float("-inf")]}, {}, ("contains NaN or Infinity", "JSON numbers must be finite")),
    (v.value, {1: "int key"}, {}, ("object key 1 is not a string",)),
    (v.value, {"a": {2: "nested"}}, {}, ("object key 2 is not a string",)),
    (v.value, [{"ok": 1}, {None: 1}], {}, ("object key None is not a string",)),
    (v.value, ({(1, 2): "tuple key"},), {}, ("object key (1, 2) is not a string",)),
    (v.value, {"s": {1, 2}}, {}, ("is not JSON-serialisable (", "is not JSON serializable)")),
    (v.value, [b"bytes"], {}, ("is not JSON-serialisable (", "bytes is not JSON serializable)")),
    (v.value, b"bytes", {}, ("bytes is not a JSON value",)),
    (v.value, object(), {}, ("object is not a JSON value",)),
    (v.value, {1, 2}, {}, ("set is not a JSON value",)),
    (v.value, _cycle_list(), {}, ("contains itself (a reference cycle)", "JSON values are trees")),
    (v.value, _cycle_dict(), {}, ("contains itself (a reference cycle)", "JSON values are trees")),
    (v.value, [10**5000], {}, ("cannot be stored as JSON (", "integer string conversion", ")")),
    (v.value, 10**5000, {}, ("cannot be stored as JSON (", "integer string conversion", ")")),
    (
        v.value,
        _nested_lists(100_000),
        {},
        ("is nested more than 100 levels deep (lists and objects inside one another)",),
    ),
    (
        v.value,
        _nested_lists(100),
        {},
        ("is nested more than 100 levels deep (lists and objects inside one another)",),
    ),  # 101 lists deep
    (
        v.metadata,
        {"m": _nested_lists(99)},
        {},
        ("is nested more than 100 levels deep (lists and objects inside one another)",),
    ),
    (v.value, "a\ud800", {}, ("contains a lone UTF-16 surrogate, which is not valid Unicode text",)),
    (v.value, ["a\udfff"], {}, ("contains a lone UTF-16 surrogate, which is not valid Unicode text",)),
    (v.value, {"k\udc00": 1}, {}, ("contains a lone UTF-16 surrogate, which is not valid Unicode text",)),
    # text
    (v.text, 5, {}, ("must be a string", "not int")),
    (v.text, None, {}, ("must be a string", "not NoneType")),
    (v.text, b"bytes", {}, ("must be a string", "not bytes")),
    (v.text, "a\ud800b", {}, ("contains a lone UTF-16 surrogate, which is not valid Unicode text",)),
    # metadata
    (v.metadata, ["not", "an", "object"], {}, ("must be a JSON object (dict)", "not list")),
    (v.metadata, "text", {}, ("must be a JSON object (dict)", "not str")),
    (v.metadata, {"x": float("nan")}, {}, ("contains NaN or Infinity", "JSON numbers must be finite")),
    (v.metadata, {"x": {3: "y"}}, {}, ("object key 3 is not a string",)),
    (v.metadata, {"x": object()}, {}, ("is not JSON-serialisable (", "is not JSON serializable)")),
    (v.metadata, _cycle_dict(), {}, ("contains itself (a reference cycle)", "JSON values are trees")),
    (v.metadata, {"x": "\ud800"}, {}, ("contains a lone UTF-16 surrogate, which is not valid Unicode text",)),
    # ttl
    (v.ttl, "60", {}, ("must be a number of seconds", "not str")),
    (v.ttl, True, {}, ("must be a number of seconds", "not bool")),
    (v.ttl, False, {}, ("must be a number of seconds", "not bool")),
    (v.ttl, [60], {}, ("must be a number of seconds", "not list")),
    (v.ttl, 0, {}, ("must be positive and finite seconds", "got 0")),
    (v.ttl, 0.0, {}, ("must be positive and finite seconds", "got 0.0")),
    (v.ttl, -1, {}, ("must be positive and finite seconds", "got -1")),
    (v.ttl, -5e-324, {}, ("must be positive and finite seconds", "got -5e-324")),
    (v.ttl, float("nan"), {}, ("must be positive and finite seconds", "got nan")),
    (v.ttl, float("inf"), {}, ("must be positive and finite seconds", "got inf")),
    (v.ttl, float("-inf"), {}, ("must be positive and finite seconds", "got -inf")),
    (v.ttl, 1e12, {}, ("is longer than 100 years (1000000000000.0 s)", "omit ttl to keep forever")),
    (v.ttl, 10**10, {}, ("is longer than 100 years (10000000000 s)", "omit ttl to keep forever")),
    # limit
    (v.limit, True, {}, ("must be an integer", "not bool")),
    (v.limit, 1.0, {}, ("must be an integer", "not float")),
    (v.limit, "10", {}, ("must be an integer", "not str")),
    (v.limit, None, {}, ("must be an integer", "not NoneType")),
    (v.limit, 0, {}, ("must be between 1 and 10000", "got 0")),
    (v.limit, -1, {}, ("must be between 1 and 10000", "got -1")),
    (v.limit, 10_001, {}, ("must be between 1 and 10000", "got 10001")),
    (v.limit, 9, {"maximum": 8}, ("must be between 1 and 8", "got 9")),
    (v.limit, 0, {"maximum": 8}, ("must be between 1 and 8", "got 0")),
    # query
    (v.query, None, {}, ("must be a string", "not NoneType")),
    (v.query, 42, {}, ("must be a string", "not int")),
    (v.query, "x" * 4097, {}, ("is 4,097 characters", "at most 4,096")),
    (v.query, "x" * 5000, {}, ("is 5,000 characters", "at most 4,096")),
    (v.query, "a\x00b\x00", {}, ("contains a NUL character (U+0000) at position 1", "JSON escapes it)")),
    (v.query, "caf\udce9", {}, ("contains a lone UTF-16 surrogate, which is not valid Unicode text",)),
]


def _slug(raw: Any) -> str:
    """A test id of letters, digits and ``_`` only (mutmut passes node ids on a command line)."""
    try:
        shown = re.sub(r" at 0x[0-9a-f]+", "", repr(raw))  # an address differs per process (pytest-xdist's workers)
    except (ValueError, RecursionError):  # a 5000-digit int, a very deep list
        shown = type(raw).__name__
    return re.sub(r"[^A-Za-z0-9]+", "_", shown).strip("_")[:32] or "empty"


def _id(row: tuple[Any, Any, dict[str, Any], tuple[str, ...]]) -> str:
    fn, raw, kwargs, _ = row
    return f"{fn.__name__}-{_slug(raw)}{'-allow_empty' if kwargs.get('allow_empty') else ''}" + (
        f"-max{kwargs['maximum']}" if "maximum" in kwargs else ""
    )


@pytest.mark.parametrize(("checker", "raw", "kwargs", "fragments"), REFUSALS, ids=[_id(r) for r in REFUSALS])
def test_every_refusal_names_its_default_field_and_says_what_is_wrong(checker, raw, kwargs, fragments):
    with pytest.raises(ValidationError) as e:
        checker(raw, **kwargs)
    assert_refusal(e.value, DEFAULT_FIELD[checker], fragments)


@pytest.mark.parametrize(("checker", "raw", "kwargs", "fragments"), REFUSALS, ids=[_id(r) for r in REFUSALS])
def test_every_refusal_names_the_field_the_caller_gave(checker, raw, kwargs, fragments):
    # callers reuse the checkers for other arguments (cursor, prefix, depth...): the error names theirs
    with pytest.raises(ValidationError) as e:
        checker(raw, "the_argument", **kwargs)
    assert_refusal(e.value, "the_argument", fragments)


def test_the_same_bad_namespace_names_each_callers_field():
    # namespace parsing is cached; a refusal must still name the field of each call
    for field in ("namespace", "namespace_prefix", "cursor", "namespace"):
        with pytest.raises(ValidationError) as e:
            v.namespace("a//b", field)
        assert e.value.field == field
        with pytest.raises(ValidationError) as e:
            v.namespace((), field)
        assert e.value.field == field
    assert v.namespace("", "p", allow_empty=True) == ()
    with pytest.raises(ValidationError) as e:
        v.namespace("", "p")
    assert_refusal(e.value, "p", ("is empty", "e.g. ('user', '123')"))


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        (tuple("abcdefghi"), ("has 9 segments", "at most 8")),
        (("a", ["b"]), ("segment ['b'] is not a string",)),
        ("a\x7fb", ("segment 'a\\x7fb' contains a control character or a lone surrogate",)),
    ],
)
def test_namespace_refusals_are_memlane_errors_and_value_errors(raw, fragments):
    with pytest.raises(ValidationError) as e:
        v.namespace(raw)
    assert isinstance(e.value, memlane.MemlaneError) and isinstance(e.value, ValueError)
    assert_refusal(e.value, "namespace", fragments)


# ---------------------------------------------------------------------------
# limits: accepted at the limit, refused one past it


def test_namespace_segment_count_limit_is_8():
    assert v.namespace(tuple("abcdefgh")) == tuple("abcdefgh")
    assert v.namespace("a/b/c/d/e/f/g/h") == tuple("abcdefgh")
    with pytest.raises(ValidationError) as e:
        v.namespace(tuple("abcdefghi"))
    assert_refusal(e.value, "namespace", ("has 9 segments", "at most 8"))


def test_namespace_segment_length_limit_is_128():
    assert v.namespace(("x" * 128,)) == ("x" * 128,)
    assert v.namespace("a/" + "y" * 128) == ("a", "y" * 128)
    with pytest.raises(ValidationError) as e:
        v.namespace(("a", "x" * 129))
    assert_refusal(e.value, "namespace", ("segment is 129 characters", "at most 128"))


def test_key_length_limit_is_256():
    assert v.key("k" * 256) == "k" * 256
    with pytest.raises(ValidationError) as e:
        v.key("k" * 257)
    assert_refusal(e.value, "key", ("is 257 characters", "at most 256"))


def test_key_prefix_length_limit_is_256_after_the_trailing_dot_is_dropped():
    assert v.key_prefix("k" * 256 + ".") == "k" * 256
    assert v.key_prefix("k" * 256) == "k" * 256
    with pytest.raises(ValidationError) as e:
        v.key_prefix("k" * 257)
    assert_refusal(e.value, "key_prefix", ("is 257 characters", "at most 256"))


def test_query_length_limit_is_4096():
    assert v.query("q" * 4096) == "q" * 4096
    with pytest.raises(ValidationError) as e:
        v.query("q" * 4097)
    assert_refusal(e.value, "query", ("is 4,097 characters", "at most 4,096"))


def test_text_length_limit_is_16_mib():
    at_limit = "t" * MAX_TEXT
    assert v.text(at_limit) is at_limit
    with pytest.raises(ValidationError) as e:
        v.text(at_limit + "t")
    assert_refusal(e.value, "text", ("is 16,777,217 characters", "at most 16,777,216"))


def test_metadata_limit_is_64_kib_of_json():
    # {"x":"…"} is 8 characters around the string
    at_limit = {"x": "y" * (MAX_METADATA - 8)}
    assert len(v.metadata(at_limit)) == MAX_METADATA
    with pytest.raises(ValidationError) as e:
        v.metadata({"x": "y" * (MAX_METADATA - 7)})
    assert_refusal(e.value, "metadata", ("is 65,537 characters as JSON", "at most 65,536"))


@pytest.mark.parametrize(
    ("make", "json_overhead"),
    [
        (lambda s: s, 2),  # a string: "…"
        (lambda s: [s], 4),  # ["…"]
        (lambda s: {"k": s}, 8),  # {"k":"…"}
    ],
    ids=["string", "list", "object"],
)
def test_value_limit_is_16_mib_of_json(make, json_overhead):
    at_limit = make("v" * (MAX_VALUE - json_overhead))
    out, _ = v.value(at_limit)
    assert len(out) == MAX_VALUE
    with pytest.raises(ValidationError) as e:
        v.value(make("v" * (MAX_VALUE - json_overhead + 1)))
    assert_refusal(e.value, "value", ("is 16,777,217 characters as JSON", "at most 16,777,216"))


BACKSLASHES = "\\" * (MAX_VALUE // 4 - 2)  # 2 characters each as JSON


@pytest.mark.parametrize(
    ("at_limit", "past_limit"),
    [
        # short strings whose escapes more than double them: '"' is 2 characters as JSON
        ('"' * (MAX_VALUE // 2 - 1), '"' * (MAX_VALUE // 2 - 1) + "a"),
        # a control character is 6: \u0000
        ("\x00" * ((MAX_VALUE - 2) // 6) + "ab", "\x00" * ((MAX_VALUE - 2) // 6) + "abc"),
        # a long string (over half the cap) of mixed escapes
        ("a" * (MAX_VALUE // 2 + 2) + BACKSLASHES, "a" * (MAX_VALUE // 2 + 3) + BACKSLASHES),
    ],
    ids=["quotes", "control", "long-with-escapes"],
)
def test_value_limit_counts_the_json_escapes_of_a_string(at_limit, past_limit):
    out, vtype = v.value(at_limit)
    assert (len(out), vtype) == (MAX_VALUE, "string")
    assert json.loads(out) == at_limit
    with pytest.raises(ValidationError) as e:
        v.value(past_limit)
    assert_refusal(e.value, "value", ("is 16,777,217 characters as JSON", "at most 16,777,216"))


def test_ttl_limit_is_100_years():
    assert v.ttl(MAX_TTL) == MAX_TTL
    past = math.nextafter(MAX_TTL, math.inf)
    with pytest.raises(ValidationError) as e:
        v.ttl(past)
    assert_refusal(e.value, "ttl", (f"is longer than 100 years ({past!r} s)", "omit ttl to keep forever"))
    assert v.ttl(3155760000) == 3155760000.0  # 100 years, as an int
    with pytest.raises(ValidationError):
        v.ttl(3155760001)


def test_ttl_smallest_positive_is_accepted_and_returned_as_float():
    assert v.ttl(5e-324) == 5e-324
    result = v.ttl(60)
    assert result == 60.0 and type(result) is float
    assert v.ttl(None) is None
    assert v.ttl(0.5) == 0.5


def test_limit_is_accepted_from_1_to_the_maximum():
    assert v.limit(1) == 1
    assert v.limit(10_000) == 10_000
    assert v.limit(8, maximum=8) == 8
    assert v.limit(1, maximum=1) == 1
    for bad in (0, 10_001):
        with pytest.raises(ValidationError):
            v.limit(bad)
    with pytest.raises(ValidationError) as e:
        v.limit(2, maximum=1)
    assert_refusal(e.value, "limit", ("must be between 1 and 1", "got 2"))


# ---------------------------------------------------------------------------
# control characters: C0, DEL and C1, and lone surrogates; the characters either side pass

REFUSED_CHARS = ["\x00", "\x01", "\x1f", "\x7f", "\x80", "\x9f", "\ud800", "\udbff", "\udc00", "\udfff"]
ACCEPTED_CHARS = [" ", "~", "\xa0", "é", "\ud7ff", "\ue000", "\U0001f600", "\u2028"]


@pytest.mark.parametrize("ch", REFUSED_CHARS, ids=[f"U+{ord(c):04X}" for c in REFUSED_CHARS])
def test_control_characters_and_lone_surrogates_are_refused_in_namespaces_and_keys(ch):
    with pytest.raises(ValidationError) as e:
        v.namespace(("a", f"b{ch}c"))
    assert_refusal(e.value, "namespace", ("segment", "contains a control character or a lone surrogate"))
    with pytest.raises(ValidationError) as e:
        v.key(f"k{ch}")
    assert_refusal(e.value, "key", ("contains a control character or a lone surrogate",))
    with pytest.raises(ValidationError) as e:
        v.key_prefix(f"{ch}k.")
    assert_refusal(e.value, "key_prefix", ("contains a control character or a lone surrogate",))


@pytest.mark.parametrize("ch", ACCEPTED_CHARS, ids=[f"U+{ord(c):04X}" for c in ACCEPTED_CHARS])
def test_printable_characters_next_to_the_refused_ranges_are_accepted(ch):
    assert v.namespace(("a", f"b{ch}c")) == ("a", f"b{ch}c")
    assert v.key(f"k{ch}") == f"k{ch}"
    assert v.text(f"t{ch}") == f"t{ch}"
    assert v.query(f"q{ch}") == f"q{ch}"


def test_text_and_values_may_hold_control_characters_but_not_lone_surrogates():
    assert v.text("line\nnext\x01\x7f") == "line\nnext\x01\x7f"
    assert v.query("tab\there") == "tab\there"
    assert v.value("a\nb") == ('"a\\nb"', "string")
    assert v.value("a\x00b") == ('"a\\u0000b"', "string")  # JSON escapes NUL: a value may hold it
    for checker in (v.text, v.query):  # text is stored as it is, and PostgreSQL's text cannot hold NUL
        with pytest.raises(ValidationError) as e:
            checker("ab\x00")
        assert_refusal(
            e.value,
            DEFAULT_FIELD[checker],
            ("contains a NUL character (U+0000) at position 2", "PostgreSQL", "JSON escapes it)"),
        )
    for checker in (v.text, v.query, v.value):
        with pytest.raises(ValidationError) as e:
            checker("\udfff")
        assert_refusal(e.value, DEFAULT_FIELD[checker], ("contains a lone UTF-16 surrogate", "not valid Unicode text"))


# ---------------------------------------------------------------------------
# what the checkers return


@pytest.mark.parametrize(
    ("raw", "allow_empty", "expected"),
    [
        (("user", "123"), False, ("user", "123")),
        (["user", "123"], False, ("user", "123")),
        ("user/123", False, ("user", "123")),
        ("solo", False, ("solo",)),
        ((), True, ()),
        ([], True, ()),
        ("", True, ()),
        ("a b/c.d", False, ("a b", "c.d")),
    ],
)
def test_namespace_is_returned_as_a_tuple_of_segments(raw, allow_empty, expected):
    result = v.namespace(raw, allow_empty=allow_empty)
    assert result == expected and type(result) is tuple


def test_namespace_given_with_a_list_inside_is_refused_not_crashing():
    # an unhashable segment bypasses the cache but meets the same rules
    with pytest.raises(ValidationError) as e:
        v.namespace(("a", {"b": 1}))
    assert_refusal(e.value, "namespace", ("segment {'b': 1} is not a string",))
    with pytest.raises(ValidationError) as e:
        v.namespace((["x"],) * 9)
    assert_refusal(e.value, "namespace", ("has 9 segments", "at most 8"))
    with pytest.raises(ValidationError) as e:
        v.namespace((), allow_empty=False)
    assert_refusal(e.value, "namespace", ("is empty", "e.g. ('user', '123')"))


def test_a_remembered_namespace_gets_the_same_answer_as_a_fresh_one():
    for _ in range(3):
        assert v.namespace("user/123") == ("user", "123")
        assert v.namespace(["user", "123"]) == ("user", "123")
        assert v.namespace("", allow_empty=True) == ()
        with pytest.raises(ValidationError) as e:
            v.namespace(("user", "x" * 129))
        assert_refusal(e.value, "namespace", ("segment is 129 characters", "at most 128"))
        with pytest.raises(ValidationError) as e:
            v.namespace("")
        assert_refusal(e.value, "namespace", ("is empty", "e.g. ('user', '123')"))


class UnhashableText(str):
    __hash__ = None  # type: ignore[assignment]


def test_segments_given_as_str_subclasses_come_back_as_plain_text():
    # every segment a subclass (none plain): each must still be read as its plain text
    got = v.namespace((UnhashableText("a"), UnhashableText("b")))
    assert got == ("a", "b")
    assert [type(seg) for seg in got] == [str, str]


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        ("yesterday", ("is not an ISO-8601 time ('yesterday')", "write e.g. 2026-03-01T09:00:00Z")),
        ("2026-13-01", ("is not an ISO-8601 time ('2026-13-01')", "write e.g. 2026-03-01T09:00:00Z")),
        (1_700_000_000, ("must be a datetime or ISO-8601 text", "not int")),
        ([2026, 1, 1], ("must be a datetime or ISO-8601 text", "not list")),
        ("0001-01-01T00:00+01:00", ("0001-01-01T00:00:00+01:00 falls outside the years 1 to 9999", "inside them")),
    ],
    ids=["word", "month13", "int", "list", "year0"],
)
def test_time_refusals_name_the_callers_field(raw, fragments):
    with pytest.raises(ValidationError) as e:
        v.time(raw, "valid_from")
    assert_refusal(e.value, "valid_from", fragments)


def test_time_without_a_zone_is_utc_and_with_one_is_converted_to_utc():
    from datetime import UTC, datetime, timedelta, timezone

    assert v.time(None, "at") is None
    naive = v.time("2026-03-01T09:00:00", "at")
    assert naive == datetime(2026, 3, 1, 9, tzinfo=UTC) and naive.tzinfo is UTC
    assert v.time(datetime(2026, 3, 1, 9), "at").tzinfo is UTC
    shifted = v.time(datetime(2026, 3, 1, 9, tzinfo=timezone(timedelta(hours=2))), "at")
    assert shifted == datetime(2026, 3, 1, 7, tzinfo=UTC) and shifted.tzinfo is UTC


def test_unhashable_text_namespace_is_one_segment_not_its_characters():
    assert v.namespace(UnhashableText("ab")) == ("ab",)
    assert v.namespace(UnhashableText("abc"), allow_empty=True) == ("abc",)


@pytest.mark.parametrize(("raw", "expected"), [("user/1", ("user", "1")), ("", ())], ids=["split", "empty"])
def test_unhashable_text_namespace_is_parsed_like_text(raw, expected):
    assert v.namespace(UnhashableText(raw), allow_empty=True) == expected


@pytest.mark.parametrize("raw", ["a", "a.b", "a.b.c", "user-1_x", "a" * 256, "é.ü"])
def test_well_formed_keys_are_returned_unchanged(raw):
    assert v.key(raw) == raw


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, ""), ("", ""), ("a", "a"), ("a.", "a"), ("a.b.", "a.b"), ("a.b", "a.b"), ("x", "x")],
)
def test_key_prefix_drops_one_trailing_dot_and_means_every_key_when_empty(raw, expected):
    assert v.key_prefix(raw) == expected


def test_metadata_none_means_an_empty_object():
    assert v.metadata(None) == "{}"
    assert v.metadata({}) == "{}"
    assert v.metadata({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}'


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


class Ratio(float):
    pass


Point = namedtuple("Point", "x y")


@pytest.mark.parametrize(
    ("raw", "canonical", "vtype"),
    [
        ("hello", '"hello"', "string"),
        ("", '""', "string"),
        ('say "hi"\n', '"say \\"hi\\"\\n"', "string"),
        ("café ☕", '"café ☕"', "string"),
        (True, "true", "boolean"),
        (False, "false", "boolean"),
        (0, "0", "number"),
        (-12, "-12", "number"),
        (1.5, "1.5", "number"),
        (None, "null", "null"),
        ([], "[]", "list"),
        ([1, "a", None], '[1,"a",null]', "list"),
        ((1, 2), "[1,2]", "list"),
        ({}, "{}", "object"),
        ({"b": 1, "a": {"d": [], "c": "é"}}, '{"a":{"c":"é","d":[]},"b":1}', "object"),
        # subclasses of the JSON types are accepted by their base
        (Colour.RED, "1", "number"),
        (Name("n"), '"n"', "string"),
        (Ratio(0.25), "0.25", "number"),
        (OrderedDict([("z", 1), ("y", 2)]), '{"y":2,"z":1}', "object"),
        (Point(1, 2), "[1,2]", "list"),
    ],
    ids=_slug,
)
def test_value_is_canonical_json_with_its_type(raw, canonical, vtype):
    assert v.value(raw) == (canonical, vtype)


def test_long_strings_are_typed_string_too():
    raw = "s" * (MAX_VALUE // 2 + 1)
    out, vtype = v.value(raw)
    assert vtype == "string" and out == f'"{raw}"'


def test_ratio_subclass_still_must_be_finite():
    with pytest.raises(ValidationError) as e:
        v.value(Ratio("nan"))
    assert_refusal(e.value, "value", ("must be finite; NaN and Infinity are not JSON",))


def test_canonical_json_is_sorted_compact_and_keeps_non_ascii():
    assert v.canonical_json({"b": [1, 2], "a": "ü"}, "f", 100) == '{"a":"ü","b":[1,2]}'
    assert v.canonical_json("x" * 10, "f", 12) == '"' + "x" * 10 + '"'
    with pytest.raises(ValidationError) as e:
        v.canonical_json("x" * 11, "f", 12)
    assert_refusal(e.value, "f", ("is 13 characters as JSON", "at most 12"))
    with pytest.raises(ValidationError) as e:
        v.canonical_json([float("inf")], "f", 100)
    assert_refusal(e.value, "f", ("contains NaN or Infinity", "JSON numbers must be finite"))


# ---------------------------------------------------------------------------
# every object key, at any depth, is a string: json would silently stringify it otherwise


def _shared() -> dict[str, Any]:
    return {"fine": 1}


NON_STRING_KEYS = {
    "top": {1: "x"},
    "dict-in-dict": {"a": {2: "x"}},
    "dict-in-list": [0, {3: "x"}],
    "dict-in-tuple": ("a", {4: "x"}),
    "dict-in-tuple-in-dict": {"a": ({5: "x"},)},
    "dict-in-list-in-dict": {"a": [{6: "x"}]},
    "dict-in-dict-in-list": [{"a": {7: "x"}}],
    "deep": {"a": [[{"b": ({"c": {8: "x"}},)}]]},
    "after-a-shared-object": (lambda s: [{9: "x"}, s, s])(_shared()),
    "after-a-shared-list": (lambda s: [{10: "x"}, s, s])([1, 2]),
    "beside-a-shared-object": (lambda s: {"a": s, "b": s, "c": {11: "x"}})(_shared()),
    "float-key": {"a": {1.5: "x"}},
    "bool-key": [{True: "x"}],
    "none-key": {None: "x"},
}


@pytest.mark.parametrize("raw", NON_STRING_KEYS.values(), ids=NON_STRING_KEYS.keys())
def test_every_non_string_object_key_is_refused(raw):
    with pytest.raises(ValidationError) as e:
        v.value(raw)
    assert_refusal(e.value, "value", ("object key", "is not a string"))
    with pytest.raises(ValidationError) as e:
        v.metadata({"m": raw})
    assert_refusal(e.value, "metadata", ("object key", "is not a string"))


def test_shared_subobjects_are_accepted_and_written_once_each_place():
    shared = {"x": [1, 2]}
    out, vtype = v.value({"a": shared, "b": [shared, shared], "c": (shared,)})
    assert vtype == "object"
    assert json.loads(out) == {"a": {"x": [1, 2]}, "b": [{"x": [1, 2]}] * 2, "c": [{"x": [1, 2]}]}


def test_nesting_up_to_the_documented_depth_is_accepted():
    out, vtype = v.value(_nested_lists(99))  # 100 lists deep
    assert vtype == "list" and out == "[" * 100 + "]" * 100
    assert v.metadata({"m": _nested_lists(98)}) == '{"m":' + "[" * 99 + "]" * 99 + "}"


# ---------------------------------------------------------------------------
# through the public API: the argument's own name, and nothing written


BAD_PUTS: list[tuple[dict[str, Any], str, tuple[str, ...]]] = [
    ({"namespace": ()}, "namespace", ("is empty", "e.g. ('user', '123')")),
    ({"namespace": "a//b"}, "namespace", ("has an empty segment",)),
    ({"namespace": tuple("abcdefghi")}, "namespace", ("has 9 segments", "at most 8")),
    ({"namespace": ("x" * 129,)}, "namespace", ("segment is 129 characters", "at most 128")),
    ({"namespace": ("a/b",)}, "namespace", ("segment 'a/b' contains '/'", "pass a tuple of segments")),
    ({"namespace": ("a\x85",)}, "namespace", ("segment 'a\\x85' contains a control character", "or a lone surrogate")),
    ({"namespace": ("a", 1)}, "namespace", ("segment 1 is not a string",)),
    ({"namespace": 5}, "namespace", ("must be a tuple of strings", "not int")),
    ({"key": ""}, "key", ("is empty",)),
    ({"key": 7}, "key", ("must be a string", "not int")),
    ({"key": "k" * 257}, "key", ("is 257 characters", "at most 256")),
    ({"key": "a\x7f"}, "key", ("contains a control character or a lone surrogate",)),
    ({"key": "a..b"}, "key", ("'a..b' has an empty taxonomy segment", "doubled '.')")),
    ({"value": float("nan")}, "value", ("must be finite", "not JSON")),
    ({"value": {"x": float("inf")}}, "value", ("contains NaN or Infinity", "must be finite")),
    ({"value": {"a": [{1: "x"}]}}, "value", ("object key 1 is not a string",)),
    ({"value": {"s": {1}}}, "value", ("is not JSON-serialisable (", ")")),
    ({"value": b"x"}, "value", ("bytes is not a JSON value",)),
    ({"value": _cycle_list()}, "value", ("contains itself (a reference cycle)", "JSON values are trees")),
    ({"value": [10**5000]}, "value", ("cannot be stored as JSON (", ")")),
    ({"value": "\ud800"}, "value", ("contains a lone UTF-16 surrogate", "not valid Unicode text")),
    ({"value": '"' * (MAX_VALUE // 2)}, "value", ("is 16,777,218 characters as JSON", "at most 16,777,216")),
    ({"text": 5}, "text", ("must be a string", "not int")),
    ({"text": "\udc80"}, "text", ("contains a lone UTF-16 surrogate", "not valid Unicode text")),
    ({"metadata": ["list"]}, "metadata", ("must be a JSON object (dict)", "not list")),
    ({"metadata": {"x": "y" * MAX_METADATA}}, "metadata", ("is 65,544 characters as JSON", "at most 65,536")),
    ({"metadata": {"x": float("nan")}}, "metadata", ("contains NaN or Infinity", "must be finite")),
    ({"ttl": 0}, "ttl", ("must be positive and finite seconds", "got 0")),
    ({"ttl": float("nan")}, "ttl", ("must be positive and finite seconds", "got nan")),
    ({"ttl": "60"}, "ttl", ("must be a number of seconds", "not str")),
    ({"ttl": True}, "ttl", ("must be a number of seconds", "not bool")),
    ({"ttl": MAX_TTL + 1}, "ttl", ("is longer than 100 years", "omit ttl to keep forever")),
]


@pytest.mark.parametrize(("override", "field", "fragments"), BAD_PUTS, ids=[f for _, f, _ in BAD_PUTS])
def test_bad_put_names_the_argument_says_why_and_writes_nothing(memory, override, field, fragments):
    args = {"namespace": ("ok",), "key": "ok", "value": "ok"} | override
    kwargs = {k: args.pop(k) for k in ("metadata", "text", "ttl") if k in args}
    with pytest.raises(ValidationError) as e:
        memory.put(args["namespace"], args["key"], args["value"], **kwargs)
    assert_refusal(e.value, field, fragments)
    assert memory.stats().active_items == 0
    assert memory.list().items == []


BAD_READS: list[tuple[Any, str, tuple[str, ...]]] = [
    (lambda m: m.get("a", "b..c"), "key", ("'b..c' has an empty taxonomy segment", "doubled '.')")),
    (lambda m: m.get("", "k"), "namespace", ("is empty", "e.g. ('user', '123')")),
    (lambda m: m.list(key_prefix="a..b"), "key_prefix", ("'a..b' has an empty taxonomy segment", "doubled '.')")),
    (lambda m: m.list(key_prefix=5), "key_prefix", ("must be a string", "not int")),
    (lambda m: m.list(limit=0), "limit", ("must be between 1 and 10000", "got 0")),
    (lambda m: m.list(limit=10_001), "limit", ("must be between 1 and 10000", "got 10001")),
    (lambda m: m.list(limit=2.0), "limit", ("must be an integer", "not float")),
    (lambda m: m.list(namespace_prefix="a//b"), "namespace_prefix", ("has an empty segment",)),
    (lambda m: m.search(None), "query", ("must be a string", "not NoneType")),
    (lambda m: m.search("x" * 4097), "query", ("is 4,097 characters", "at most 4,096")),
    (lambda m: m.search("\ud800"), "query", ("contains a lone UTF-16 surrogate", "not valid Unicode text")),
    (lambda m: m.fetch("k", limit=1001), "limit", ("must be between 1 and 1000", "got 1001")),
    (lambda m: m.summarize(depth=65), "depth", ("must be between 1 and 64", "got 65")),
    (lambda m: m.namespaces(max_depth=9), "max_depth", ("must be between 1 and 8", "got 9")),
    (lambda m: m.history("a", "b\x00"), "key", ("contains a control character or a lone surrogate",)),
]


@pytest.mark.parametrize(("call", "field", "fragments"), BAD_READS, ids=[f for _, f, _ in BAD_READS])
def test_bad_read_names_the_argument_and_says_why(memory, call, field, fragments):
    with pytest.raises(ValidationError) as e:
        call(memory)
    assert_refusal(e.value, field, fragments)


def test_values_round_trip_exactly_and_limits_are_inclusive_through_the_api(memory):
    value = {"b": (1, 2), "a": {"ü": [True, None, 1.5]}, "c": Colour.RED}
    item = memory.put(("user", "1"), "prefs.ui", value, metadata={"z": 1, "a": "x"}, ttl=MAX_TTL)
    assert item.value == {"a": {"ü": [True, None, 1.5]}, "b": [1, 2], "c": 1}
    assert item.value_type == "object" and item.metadata == {"a": "x", "z": 1}
    assert item.expires_at is not None
    memory.put(tuple("abcdefgh"), "k" * 256, "v", text="t" * 100, metadata={"x": "y" * (MAX_METADATA - 8)})
    memory.put("a/" + "s" * 128, "x.y", None, ttl=3600)
    got = memory.get(tuple("abcdefgh"), "k" * 256)
    assert got is not None and got.value == "v" and got.text == "t" * 100
    assert memory.get(("a", "s" * 128), "x.y").value_type == "null"
    assert len(memory.list(limit=10_000).items) == 3
    assert [i.key for i in memory.list(key_prefix="prefs.").items] == ["prefs.ui"]
    assert len(memory.fetch("x.y", limit=1000)) == 1
    assert memory.search("q" * 4096).hits == []


class _Text(str):
    """A plain-behaving str subclass: it takes validation's general path, never the fast one."""


def _outcome(check: Any, raw: Any) -> Any:
    try:
        return ("ok", check(raw))
    except ValidationError as e:
        return ("refused", e.field, str(e))


_KEYISH = st.text(
    alphabet=st.sampled_from("ab.Z9 -_/~\x00\x1f\x7f\x80\x9f\u00e9\u4e16\ud800\U0001f600"), max_size=12
) | (st.integers(250, 520).map(lambda n: "k" * n))


@settings(max_examples=400, deadline=None)
@given(_KEYISH)
def test_a_keys_fast_path_answers_exactly_as_the_general_one(raw):
    assert _outcome(v.key, raw) == _outcome(v.key, _Text(raw))


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYISH, max_size=10), st.booleans())
def test_a_namespaces_fast_path_answers_exactly_as_the_general_one(segments, allow_empty):
    plain = tuple(segments)

    def check(raw: Any) -> Any:
        return v.namespace(raw, allow_empty=allow_empty)

    general = _outcome(check, tuple(_Text(s) for s in plain))
    assert _outcome(check, plain) == general
    assert _outcome(check, "/".join(plain)) == _outcome(check, _Text("/".join(plain)))


@pytest.mark.parametrize("raw", [".é", "é.", "a..é", _Text(".a"), ".\u4e16"])
def test_a_non_ascii_key_with_an_empty_segment_is_refused_like_an_ascii_one(raw):
    with pytest.raises(ValidationError, match="empty taxonomy segment"):
        v.key(raw)


# -- canonical JSON in one pass: the same text and the same refusals as the plain encoder -----------------

_REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class _Level(enum.IntEnum):
    LOW = 1


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.just(_Level.LOW)
)
# shapes the two-level check takes (dicts, lists, tuples of scalars) and the ones it leaves to the walk
# (deeper trees, OrderedDicts, non-string keys, NaN, sets)
_json_trees = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3).map(OrderedDict)
        | st.dictionaries(st.integers(0, 9) | st.booleans(), inner, min_size=1, max_size=2)
        | st.lists(st.just(float("nan")) | st.frozensets(st.integers(), max_size=1), min_size=1, max_size=1)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(_json_trees)
def test_canonical_json_is_the_plain_encoders_text_and_refuses_what_it_would(value):
    def has_bad_key(node: Any) -> bool:
        if isinstance(node, dict):
            return any(not isinstance(k, str) or has_bad_key(x) for k, x in node.items())
        return isinstance(node, list | tuple) and any(has_bad_key(x) for x in node)

    try:
        want: str | None = _REFERENCE.encode(value)
    except (ValueError, TypeError):
        want = None
    if want is not None and not has_bad_key(value):
        assert v.canonical_json(value, "value", 10**9) == want
    else:  # NaN, a set, a key that is no string: refused, naming the field
        with pytest.raises(ValidationError) as refused:
            v.canonical_json(value, "value", 10**9)
        assert refused.value.field == "value"


def test_shared_subtrees_and_cycles_are_told_apart_after_the_two_level_check():
    leaf = {"a": [1, 2]}
    assert v.canonical_json({"x": leaf, "y": [leaf, leaf]}, "value", 1000) == (
        '{"x":{"a":[1,2]},"y":[{"a":[1,2]},{"a":[1,2]}]}'
    )
    loop: list[Any] = [1]
    loop.append([loop])
    with pytest.raises(ValidationError, match="contains itself"):
        v.canonical_json(loop, "value", 1000)
