"""TTL: expired items are missing on every read path before cleanup."""

from __future__ import annotations


def test_expired_items_are_missing_everywhere_before_cleanup(mem, clock):
    mem.put("room/a", "short", "ephemeral zebra", ttl=10)
    mem.put("room/a", "long", "durable zebra")
    mem.put("room/b", "short", "ephemeral zebra two", ttl=10)
    clock.advance(9.999)
    assert mem.get("room/a", "short") is not None
    clock.advance(0.001)  # exactly at expires_at: gone
    assert mem.get("room/a", "short") is None
    assert mem.get_many([("room/a", "short"), ("room/a", "long")])[0] is None
    assert mem.fetch("short") == []
    assert [i.key for i in mem.list("room").items] == ["long"]
    assert mem.namespaces() == [("room", "a")]
    assert mem.summarize() == {"room/a": {"long": 1}}
    envelope = mem.search("zebra", channels=["lexical"])
    assert [h.key for h in envelope.hits] == ["long"]
    assert envelope.dropped_by_hydration == 2
    stats = mem.stats()
    assert (stats.active_items, stats.expired_items, stats.namespaces) == (1, 2, 1)
    assert mem.delete("room/a", "short") is False
    assert mem.cleanup() == 2
    stats = mem.stats()
    assert (stats.active_items, stats.expired_items) == (1, 0)
    assert mem.cleanup() == 0


def test_expires_at_is_set_from_ttl(mem, clock):
    from datetime import timedelta

    item = mem.put("a", "k", 1, ttl=90.5)
    assert item.expires_at == clock.now + timedelta(seconds=90.5)
    assert mem.get("a", "k").expires_at == item.expires_at


def test_rewrite_without_ttl_makes_item_durable(mem, clock):
    mem.put("a", "k", 1, ttl=5)
    mem.put("a", "k", 2)
    clock.advance(10)
    assert mem.get("a", "k").value == 2


def test_writing_over_an_expired_item_starts_a_new_item(mem, clock):
    old = mem.put("a", "k", "old", ttl=5)
    clock.advance(10)
    new = mem.put("a", "k", "new")
    assert new.id != old.id and new.version == 1 and new.created_at == clock.now
    assert mem.history("a", "k")[0].change == "expire"
    assert mem.search("old", channels=["lexical"]).hits == []
