"""Generated inputs at and around every documented limit, on every backend.

test_limits.py checks each limit with one hand-picked input at it and one past
it. Here hypothesis builds many: addresses, names, metadata and values whose
lengths (in characters of one to four UTF-8 bytes), byte sizes, nesting depths
and segment counts sit just under, on and just over each limit, with the
characters the rules refuse ('/', control characters, lone surrogates) mixed
in. An oracle restates the documented rules (written out here, not read from
memlane), and each input must go one of two ways:

- accepted, and then stored and read back exactly through ``get``, ``list``
  and ``search`` (``lookup`` and ``resolve_entity`` for names);
- refused with a ``ValidationError`` naming the field, and nothing written.

A third way (a ``StoreError``, a 500, an index that cannot hold the row) is the
class of bug this file is for. Examples are bounded so that the file runs in
``make test``; ``LIMITS_EXAMPLES`` raises the count for a longer run.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conformance import OVER_HTTP
from memlane import ValidationError

EXAMPLES = int(os.environ.get("LIMITS_EXAMPLES", "30"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same examples on every run and backend: a failure here is reproducible
)

# the documented limits (docs/python-api.md, docs/facts.md)
SEGMENTS, SEGMENT_CHARS, SEGMENT_BYTES = 8, 128, 256
KEY_CHARS, KEY_BYTES = 256, 512
NAME_CHARS, NAME_BYTES = 1000, 2000
METADATA_CHARS = 64 * 1024
FACT_TEXT_CHARS = 200_000  # a fact's text, what search indexes (its object is kept whole)
DEPTH = 100

# characters by their UTF-8 width, and the ones the rules refuse in an address
WIDTHS = {
    1: st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/."),
    2: st.characters(min_codepoint=0x0410, max_codepoint=0x044F),  # Cyrillic
    3: st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK ideographs
    4: st.characters(min_codepoint=0x1F300, max_codepoint=0x1F5FF),  # pictographs
}
REFUSED_IN_ADDRESSES = st.sampled_from(["/", "\x00", "\x1f", "\x7f", "\x85", "\ud800", "\udfff"])


def _state(mem):
    """Every table a write could touch, counted in one statement (a refused call must leave it as it was)."""
    return mem.query(
        "SELECT (SELECT count(*) FROM items), (SELECT coalesce(sum(version), 0) FROM items), "
        "(SELECT count(*) FROM item_history), (SELECT count(*) FROM entities), (SELECT count(*) FROM entity_aliases), "
        "(SELECT count(*) FROM facts), (SELECT count(*) FROM evidence), (SELECT count(*) FROM claims)"
    ).rows


def _refused(mem, fields, call, *args, **kwargs):
    before = _state(mem)
    with pytest.raises(ValidationError) as e:
        call(*args, **kwargs)
    assert e.value.field in fields, f"{e.value.field!r} not in {fields}: {e.value}"
    assert _state(mem) == before


@st.composite
def near(draw, chars: int, size: int, width: int | None = None, at_chars: bool | None = None) -> str:
    """Text of one character width whose length sits at, under or over ``chars`` characters or ``size`` bytes."""
    width = draw(st.sampled_from(sorted(WIDTHS))) if width is None else width
    at_chars = draw(st.booleans()) if at_chars is None else at_chars
    # aim at the character limit (wide characters then pass the byte limit) or at the byte limit, give or take one
    target = chars if at_chars else min(chars, size // width)
    count = max(1, target + draw(st.sampled_from([-1, 0, 0, 1])))
    text = draw(st.text(WIDTHS[width], min_size=count, max_size=count))
    pad = draw(st.sampled_from([0, 0, 1, 2]))  # one-byte characters that may tip the byte count over
    text += "x" * pad
    if draw(st.integers(0, 9)) == 0:  # now and then a character no address may hold
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(REFUSED_IN_ADDRESSES) + text[at + 1 :]
    return text


@st.composite
def addresses(draw) -> tuple[list[str], str]:
    """Segments and a key near their limits: each drawn on its own, or all of one width aimed at one limit
    (only an address long in every part can outgrow an index row)."""
    count = draw(st.sampled_from([1, 2, SEGMENTS - 1, SEGMENTS, SEGMENTS, SEGMENTS + 1]))
    width, at_chars = (None, None) if draw(st.booleans()) else (draw(st.sampled_from([2, 3, 4])), draw(st.booleans()))
    segments = [draw(near(SEGMENT_CHARS, SEGMENT_BYTES, width, at_chars)) for _ in range(count)]
    return segments, draw(near(KEY_CHARS, KEY_BYTES, width, at_chars))


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) < 0xE000 for c in text)


def _bad_chars(text: str) -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cs") for c in text)


def segment_ok(seg: str) -> bool:
    return 0 < len(seg) <= SEGMENT_CHARS and _size(seg) <= SEGMENT_BYTES and "/" not in seg and not _bad_chars(seg)


def key_ok(key: str) -> bool:
    return (
        0 < len(key) <= KEY_CHARS
        and _size(key) <= KEY_BYTES
        and not _bad_chars(key)
        and not (key.startswith(".") or key.endswith(".") or ".." in key)
    )


def test_a_lone_surrogate_is_refused_naming_the_field_on_every_interface(mem):
    bad = "a\ud800b"
    _refused(mem, {"namespace"}, mem.put, ("n", bad), "k", 1)
    _refused(mem, {"key"}, mem.put, ("n",), bad, 1)
    _refused(mem, {"text"}, mem.put, ("n",), "k", 1, text=bad)
    _refused(mem, {"value"}, mem.put, ("n",), "k", bad)
    _refused(mem, {"name"}, mem.add_entity, "names", bad)


NUL_TEXTS = {
    "text": lambda m, bad: m.put("n", "k", 1, text=bad),
    "name": lambda m, bad: m.add_entity("n", bad),
    "kind": lambda m, bad: m.add_entity("n", "x", kind=bad),
    "aliases": lambda m, bad: m.add_entity("n", "x", aliases=[bad]),
    "profile": lambda m, bad: m.add_entity("n", "x", profile=bad),
    "predicate": lambda m, bad: m.assert_fact("n", m.resolve_entity("s")["entities"][0].entity.id, bad, 1),
    "source": lambda m, bad: m.assert_fact("n", m.resolve_entity("s")["entities"][0].entity.id, "p", 1, source=bad),
    "title": lambda m, bad: m.add_document("n", bad, "passage"),
    "speaker": lambda m, bad: m.add_claim("n", "c", speaker=bad),
    "query": lambda m, bad: m.search(bad),
}


def test_a_nul_in_stored_text_is_refused_naming_the_field_on_every_backend(mem):
    bad = "a\x00b"
    mem.add_entity("n", "s")  # the subject of the facts
    for field, call in NUL_TEXTS.items():
        _refused(mem, {field}, call, mem, bad)
    _refused(mem, {"text"}, mem.add_document, "n", "t", bad)
    _refused(mem, {"text"}, mem.add_document, "n", "t", ["fine", bad])
    _refused(mem, {"text"}, mem.add_claim, "n", bad)
    _refused(mem, {"claims[1].text"}, mem.add_claims, "n", [{"text": "fine"}, {"text": bad}])
    # inside JSON it is escaped: values and metadata hold it, and the text made from a value drops it
    mem.put("n", "nul", bad, metadata={bad: bad})
    got = mem.get("n", "nul")
    assert (got.value, got.metadata, got.text) == (bad, {bad: bad}, "a b")
    assert [h.key for h in mem.search("a", namespace_prefix="n").hits] == ["nul"]


@SETTINGS
@given(address=addresses(), dotted=st.booleans())
def test_addresses_near_their_limits_are_stored_exactly_or_refused_naming_the_field(mem, backend, address, dotted):
    segments, key = address
    if backend in OVER_HTTP:  # the Client cannot encode a lone surrogate at all: pinned below
        assume(not any(_surrogate(s) for s in (*segments, key)))
    if dotted and len(key) > 2:  # a taxonomy key, a.b
        key = key[: len(key) // 2] + "." + key[len(key) // 2 + 1 :]
    ns = tuple(segments)
    word = "zq" + str(abs(hash((ns, key))) % 10**9)
    ns_ok = len(ns) <= SEGMENTS and all(segment_ok(s) for s in ns) and ns[0] != "_memlane"
    if not (ns_ok and key_ok(key)):
        _refused(mem, {"namespace" if not ns_ok else "key"}, mem.put, ns, key, {"v": key}, text=word)
        if ns_ok:
            _refused(mem, {"key"}, mem.get, ns, key)
        else:
            _refused(mem, {"namespace"}, mem.get, ns, "k")
            _refused(mem, {"namespace_prefix"}, mem.list, ns)
        return
    mem.clear(ns)  # what an earlier example (shrinking may repeat one) left at this address
    item = mem.put(ns, key, {"v": key}, text=word, metadata={"k": key})
    assert (item.namespace, item.key, item.value) == (ns, key, {"v": key})
    got = mem.get("/".join(ns), key)
    assert (got.namespace, got.key, got.value, got.metadata) == (ns, key, {"v": key}, {"k": key})
    assert [(i.namespace, i.key) for i in mem.list(ns).items] == [(ns, key)]
    assert [(h.namespace, h.key) for h in mem.search(word, namespace_prefix=ns, channels=["lexical"]).hits] == [
        (ns, key)
    ]
    assert mem.put(ns, key, 2).version == 2  # the unique index finds the row again
    assert mem.delete(ns, key) is True


EXAMPLE = itertools.count()


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def _normalised(text: str) -> str:
    # the documented matching form: compatibility forms, no accents, casefolded, words only
    from memlane.values.facts_text import normalise

    return normalise(text)


def name_ok(raw: str, *, matched: bool) -> bool:
    name = _collapsed(raw)
    if not name or len(name) > NAME_CHARS or _size(name) > NAME_BYTES or _surrogate(name) or "\x00" in name:
        return False
    return not matched or _size(_normalised(name)) <= NAME_BYTES


names = st.one_of(
    near(NAME_CHARS, NAME_BYTES),
    # compatibility characters that expand when normalised: the ligature U+FDFA is 3 bytes and normalises to 33
    st.integers(55, 66).map(lambda n: "\ufdfa" * n),
    st.integers(1, 3).map(lambda n: " " * n),  # blank: empty once collapsed
)


@SETTINGS
@given(name=names, alias=names, claim=names)
def test_names_near_their_limits_are_stored_exactly_or_refused_naming_the_field(mem, backend, name, alias, claim):
    if backend in OVER_HTTP:
        assume(not any(_surrogate(s) for s in (name, alias, claim)))
    ns = ("names", str(next(EXAMPLE)))  # resolve_entity looks only at this example's entities
    if not (name_ok(name, matched=True) and name_ok(alias, matched=True)):
        _refused(mem, {"name", "aliases"}, mem.add_entity, ns, name, aliases=[alias])
    else:
        entity = mem.add_entity(ns, name, aliases=[alias])
        (found,) = mem.lookup([entity.id])
        assert found.name == _collapsed(name)
        assert [c.entity.id for c in mem.resolve_entity(alias, namespace_prefix=ns)["entities"]] == [entity.id]
        if name_ok(claim, matched=False):  # a source is a name, not matched
            fact = mem.assert_fact(ns, entity.id, "said", "x", source=claim)
            assert _collapsed(claim) in mem.lookup([fact.id])[0].sources
    if not name_ok(claim, matched=True):
        _refused(mem, {"text"}, mem.add_claim, ns, claim)
    else:
        stored = mem.add_claim(ns, claim)
        assert mem.lookup([stored.id])[0].text == _collapsed(claim)


def nested(depth: int, leaf: Any, objects: bool) -> Any:
    for _ in range(depth):
        leaf = {"in": leaf} if objects else [leaf]
    return leaf


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=20),  # any character, control characters included
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(
    value=json_values,
    depth=st.sampled_from([0, 1, DEPTH - 2, DEPTH - 1, DEPTH, DEPTH + 1]),
    objects=st.booleans(),
    fill=st.sampled_from([0, 1, 2]),
    width=st.sampled_from(sorted(WIDTHS)),
    text=st.text(st.characters(codec="utf-8"), max_size=30),
)
def test_values_and_metadata_near_their_limits_read_back_exactly_or_are_refused(
    mem, value, depth, objects, fill, width, text
):
    deep = nested(depth, value, objects)
    # metadata: {"m": <one level deeper than the value>, "pad": <filler>} whose canonical JSON is
    # METADATA_CHARS - 1, exactly it, or one more, in characters of the drawn width
    base = json.dumps({"m": deep, "pad": ""}, **CANONICAL)
    metadata = {"m": deep, "pad": FILLER[width] * max(METADATA_CHARS - len(base) - 1 + fill, 0)}
    meta_ok = len(json.dumps(metadata, **CANONICAL)) <= METADATA_CHARS and _depth(metadata) <= DEPTH
    value_ok = _depth(deep) <= DEPTH
    ns = ("values", f"d{depth}")
    if not value_ok:
        _refused(mem, {"value"}, mem.put, ns, "k", deep, text=text)
        return
    if "\x00" in text:  # text is stored as it is, and PostgreSQL's text cannot hold NUL (a value may: JSON escapes it)
        _refused(mem, {"text"}, mem.put, ns, "k", deep, text=text)
        return
    if not meta_ok:
        _refused(mem, {"metadata"}, mem.put, ns, "k", deep, text=text, metadata=metadata)
        return
    mem.put(ns, "k", deep, text=text + " zqvalue", metadata=metadata)
    got = mem.get(ns, "k")
    assert _same(got.value, deep) and _same(got.metadata, metadata) and got.text == text + " zqvalue"
    (listed,) = mem.list(ns).items
    assert _same(listed.value, deep) and _same(listed.metadata, metadata)
    hits = mem.search("zqvalue", namespace_prefix=ns, channels=["lexical"]).hits
    assert [h.key for h in hits] == ["k"] and _same(hits[0].value, deep)


FILLER = {1: "a", 2: "ж", 3: "中", 4: "🌀"}
CANONICAL: dict[str, Any] = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON, with the types JSON keeps (1 and 1.0 and True are different values)."""
    return json.dumps(a, **CANONICAL) == json.dumps(b, **CANONICAL)


def test_a_fact_about_the_largest_object_is_stored_whole_and_its_text_cut_for_search(backend, request):
    if backend in OVER_HTTP:
        pytest.skip("megabytes over loopback add nothing: the cut is the facts layer's, checked on both stores")
    mem = request.getfixturevalue("mem")
    rng = random.Random(5)
    # distinct words, so PostgreSQL's tsvector of the whole text would pass its 1 MB
    words = " ".join("w" + "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=8)) for _ in range(300_000))
    kim = mem.add_entity("big", "Kim")
    fact = mem.assert_fact("big", kim.id, "wrote", words)
    (found,) = mem.lookup([fact.id])
    assert found.value == words and len(found.text) == FACT_TEXT_CHARS and found.text.startswith("Kim wrote w")
    assert [f.id for f in mem.facts_context(words.split()[1000])["facts"]] == [fact.id]
    assert mem.assert_fact("big", kim.id, "wrote", words, source="again").evidence_count == 2


def test_an_imported_item_id_too_long_for_an_index_is_refused(backend, request):
    if backend in OVER_HTTP:
        pytest.skip("the Client has no import_records (the service's import is the CLI's)")
    mem = request.getfixturevalue("mem")
    mem.put("n", "k", 1)
    records = [dict(r) for r in mem.export_records()]
    long_id = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(1000))  # 3,000 bytes that do not compress
    records[0] = {**records[0], "id": long_id, "key": "other"}
    _refused(mem, {"record"}, mem.import_records, records)


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["nul", "surrogate"])
def test_a_saved_query_description_that_no_backend_can_store_is_refused(mem, backend, bad):
    _refused(mem, {"description"}, mem.save_query, "q", "SELECT 1", description=bad)
