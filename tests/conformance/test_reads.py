"""Exact reads: fetch, list, namespaces, summarize; segment-boundary prefixes."""

from __future__ import annotations

import pytest

from memlane import ValidationError

from .indexed import indexed


def test_fetch_newest_first_across_namespaces(mem, clock):
    mem.put("room/general", "session-digest", "general digest")
    clock.advance(1)
    mem.put("room/ops", "session-digest", "ops digest")
    clock.advance(1)
    mem.put("user/1", "session-digest", "user digest")
    mem.put("user/1", "other", "not this")
    assert [i.value for i in mem.fetch("session-digest")] == [
        "user digest",
        "ops digest",
        "general digest",
    ]
    assert [i.value for i in mem.fetch("session-digest", namespace_prefix="room")] == [
        "ops digest",
        "general digest",
    ]
    assert [i.value for i in mem.fetch("session-digest", limit=1)] == ["user digest"]


def test_fetch_is_deterministic_on_ties(mem):
    for ns in ["c", "a", "b"]:
        mem.put(ns, "k", ns)
    runs = {tuple(i.namespace for i in mem.fetch("k")) for _ in range(5)}
    assert runs == {(("a",), ("b",), ("c",))}


def test_buried_digest_keyed_fetch_beats_search(mem, clock):
    room = ("room", "eng")
    mem.put(
        room,
        "session-digest",
        "SESSION DIGEST: we chose Postgres for the billing service; owner Dana.",
    )
    chatter = [
        "session session digest digest: the session digest bot posted another session digest",
        "digest of the session: session went long, digest later, session digest pending",
        "session notes: digest the session digest before the next session digest",
        "reminder: session digest session digest session digest",
    ]
    for i, text in enumerate(chatter):
        clock.advance(1)
        mem.put(room, f"chat.{i}", text)
    search_keys = [h.key for h in mem.search("session digest", namespace_prefix=room, channels=["lexical"]).hits]
    assert search_keys[0] != "session-digest"  # BM25 buries it under the chatter
    for _ in range(3):
        fetched = mem.fetch("session-digest", namespace_prefix=room)
        assert fetched[0].text.startswith("SESSION DIGEST:")


def test_namespace_prefix_respects_segment_boundaries(mem):
    mem.put(("tenant", "acme"), "k", 1)
    mem.put(("tenant", "acme", "user"), "k", 2)
    mem.put(("tenant", "acme-corp"), "k", 3)
    mem.put(("tenant", "acme.x"), "k", 4)
    mem.put(("tenant", "acmf"), "k", 5)
    prefix = ("tenant", "acme")
    assert sorted(i.value for i in mem.list(prefix).items) == [1, 2]
    assert sorted(i.value for i in mem.fetch("k", namespace_prefix=prefix)) == [1, 2]
    assert mem.namespaces(prefix) == [("tenant", "acme"), ("tenant", "acme", "user")]
    assert set(mem.summarize(prefix)) == {"tenant/acme", "tenant/acme/user"}
    mem.put(("tenant", "acme"), "doc", "alpha words")
    mem.put(("tenant", "acme-corp"), "doc", "alpha words")
    indexed(mem)
    for channel in ("lexical", "vector"):
        hits = mem.search("alpha", namespace_prefix=prefix, channels=[channel]).hits
        assert {h.namespace for h in hits} <= {("tenant", "acme"), ("tenant", "acme", "user")}, channel
        assert ("tenant", "acme") in {h.namespace for h in hits}


def test_key_prefix_respects_segment_boundaries(mem):
    for k in [
        "preferences.ui",
        "preferences.ui.theme",
        "preferences.ui.font.size",
        "preferences.uix",
        "preferences.u",
    ]:
        mem.put("u", k, k)
    keys = [i.key for i in mem.list("u", key_prefix="preferences.ui").items]
    assert keys == ["preferences.ui", "preferences.ui.font.size", "preferences.ui.theme"]
    assert [i.key for i in mem.list("u", key_prefix="preferences.ui.").items] == keys
    assert mem.summarize("u", key_prefix="preferences.ui", depth=3) == {
        "u": {"preferences.ui": 1, "preferences.ui.font": 1, "preferences.ui.theme": 1}
    }


@pytest.mark.parametrize("meta", ["%", "_", "*", "?", "[", "a%b", "a_b"])
def test_metacharacters_in_names_are_data(mem, meta):
    mem.put(("ns", meta), f"k{meta}", 1)
    mem.put(("ns", "plain"), "kplain", 2)
    mem.put(("ns", "x" + meta), f"k{meta}x", 3)
    assert [i.value for i in mem.list(("ns", meta)).items] == [1]
    assert [i.value for i in mem.list("ns", key_prefix=f"k{meta}").items] == [1]
    assert mem.namespaces(("ns", meta)) == [("ns", meta)]


def test_list_pages_in_address_order(mem):
    for ns in ["b", "a", "a/z", "c"]:
        for k in ["k2", "k1", "k3"]:
            mem.put(ns, k, f"{ns}:{k}")
    expected = [f"{ns}:{k}" for ns in ["a", "a/z", "b", "c"] for k in ["k1", "k2", "k3"]]
    seen, cursor, pages = [], None, 0
    while True:
        page = mem.list(limit=5, cursor=cursor)
        seen.extend(i.value for i in page.items)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == expected and pages == 3
    assert mem.list(limit=12).next_cursor is None


def test_list_rejects_forged_cursor(mem):
    with pytest.raises(ValidationError) as e:
        mem.list(cursor="not-a-cursor!!")
    assert e.value.field == "cursor"


def test_namespaces_and_max_depth(mem):
    mem.put(("user", "1", "prefs"), "k", 1)
    mem.put(("user", "2"), "k", 1)
    mem.put(("room", "general"), "k", 1)
    assert mem.namespaces() == [("room", "general"), ("user", "1", "prefs"), ("user", "2")]
    assert mem.namespaces("user") == [("user", "1", "prefs"), ("user", "2")]
    assert mem.namespaces(max_depth=1) == [("room",), ("user",)]
    assert mem.namespaces("user", max_depth=2) == [("user", "1"), ("user", "2")]


def test_summarize_cuts_paths_at_depth(mem):
    mem.put("user/123", "preferences.ui.theme", "dark")
    mem.put("user/123", "preferences.ui.font", "mono")
    mem.put("user/123", "preferences.editor", "vim")
    mem.put("user/123", "projects.memlane.status.current", "active")
    mem.put("user/9", "preferences.ui.theme", "light")
    assert mem.summarize("user/123", depth=1) == {"user/123": {"preferences": 3, "projects": 1}}
    assert mem.summarize("user/123", depth=2) == {
        "user/123": {"preferences.ui": 2, "preferences.editor": 1, "projects.memlane": 1}
    }
    assert mem.summarize(depth=3)["user/9"] == {"preferences.ui.theme": 1}
    assert mem.summarize("user/123", key_prefix="projects", depth=4) == {
        "user/123": {"projects.memlane.status.current": 1}
    }
    assert mem.summarize("nothing") == {}


def test_select_orders_newest_first_by_default_and_by_address_when_asked(mem, clock):
    """Newest first is not address order here: the first address was written first."""
    for key in ("a", "b", "c"):
        mem.put("sel", key, {"kind": "note"})
        clock.advance(1)
    assert [i.key for i in mem.select("sel", where={"kind": "note"})] == ["c", "b", "a"]
    assert [i.key for i in mem.select("sel", where={"kind": "note"}, order="address")] == ["a", "b", "c"]
    mem.put("sel", "a", {"kind": "note", "v": 2})  # now the newest
    assert [i.key for i in mem.select("sel")] == ["a", "c", "b"]


def test_exists_says_whether_a_live_item_is_at_the_address(mem, clock):
    mem.put("a", "k", {"big": "x" * 1000})
    mem.put("a", "short", 1, ttl=5)
    mem.put("a", "gone", 1)
    mem.delete("a", "gone")
    assert mem.exists("a", "k") is True
    assert mem.exists(("a",), "short") is True
    assert mem.exists("a", "missing") is False and mem.exists("b", "k") is False
    assert mem.exists("a", "gone") is False  # deleted: only in history
    clock.advance(6)
    assert mem.exists("a", "short") is False  # expired
    assert mem.exists("a", "k") == (mem.get("a", "k") is not None)


@pytest.mark.parametrize(("namespace", "key", "field"), [("", "k", "namespace"), ("a", "", "key"), ("a", 7, "key")])
def test_exists_refuses_a_bad_address_naming_the_field(mem, namespace, key, field):
    with pytest.raises(ValidationError) as e:
        mem.exists(namespace, key)
    assert e.value.field == field
