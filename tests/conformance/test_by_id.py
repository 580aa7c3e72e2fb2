"""Items by id (get_by_id, delete_by_id, an update at the id's address) and import_records: on every backend."""

from __future__ import annotations

import pytest

from memlane import ForbiddenError, ValidationError
from memlane.core.access import Access

NEVER_WRITTEN = "0" * 32


def test_get_by_id_reads_the_item_a_write_or_a_hit_names(mem):
    item = mem.put("user/1", "preferences.editor", "vim keybindings", metadata={"source": "chat"})
    assert mem.get_by_id(item.id) == item
    hit = mem.search("vim keybindings").hits[0]
    assert mem.get_by_id(hit.item.id) == item
    assert mem.get_by_id(NEVER_WRITTEN) is None


def test_an_update_at_the_ids_address_keeps_the_id(mem, clock):
    first = mem.put("user/1", None, "a note")  # a note: its key is its id
    found = mem.get_by_id(first.id)
    clock.advance(5)
    second = mem.put(found.namespace, found.key, "a corrected note")
    assert second.id == first.id and second.version == 2 and second.created_at == first.created_at
    assert mem.get_by_id(first.id).value == "a corrected note"
    assert [v.value for v in mem.history("user/1", found.key)] == ["a note"]


def test_delete_by_id_deletes_once_and_keeps_history_as_delete_does(mem, clock):
    item = mem.put("user/1", "k", "v1")
    clock.advance(1)
    assert mem.delete_by_id(item.id) is True
    assert mem.get_by_id(item.id) is None and mem.get("user/1", "k") is None
    assert mem.delete_by_id(item.id) is False
    assert mem.delete_by_id(NEVER_WRITTEN) is False
    (version,) = mem.history("user/1", "k")
    assert (version.item_id, version.value, version.change, version.changed_at) == (item.id, "v1", "delete", clock.now)
    # the same as delete by address
    other = mem.put("user/1", "k2", "v1")
    clock.advance(1)
    mem.delete("user/1", "k2")
    (by_address,) = mem.history("user/1", "k2")
    assert (by_address.change, by_address.changed_by) == (version.change, version.changed_by)
    assert by_address.item_id == other.id


def test_an_expired_id_is_gone(mem, clock):
    item = mem.put("user/1", "k", "v", ttl=10)
    clock.advance(11)
    assert mem.get_by_id(item.id) is None
    assert mem.delete_by_id(item.id) is False


@pytest.mark.parametrize("bad", [123, "", None, "x" * 201])
def test_a_bad_id_is_a_validation_error_naming_it(mem, bad):
    for call in (mem.get_by_id, mem.delete_by_id):
        with pytest.raises(ValidationError) as e:
            call(bad)
        assert e.value.field == "item_id"


def test_import_records_is_all_or_nothing_and_names_the_bad_record(mem):
    good = {
        "record": "item", "id": "0190a1b2c3d4e5f60718293a4b5c6d7e", "namespace": ["user", "1"], "key": "k",
        "value": "imported", "value_type": "string", "text": "imported", "metadata": {}, "author": "kim",
        "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00",
        "expires_at": None, "version": 1,
    }  # fmt: skip
    bad = {**good, "id": "0190a1b2c3d4e5f60718293a4b5c6d7f", "key": "k2", "created_at": "yesterday"}
    with pytest.raises(ValidationError, match="record 2") as e:
        mem.import_records([good, bad])
    assert "yesterday" in str(e.value) and "nothing was imported" in str(e.value)
    assert mem.get("user/1", "k") is None and mem.list().items == []
    with pytest.raises(ValidationError, match="record 2"):
        mem.import_records([good, "not a record"])
    assert mem.list().items == []
    assert mem.import_records([good]) == 1
    got = mem.get_by_id(good["id"])
    assert (got.value, got.author, got.created_at.isoformat()) == ("imported", "kim", good["created_at"])
    assert mem.import_records([good]) == 0  # idempotent


@pytest.mark.embedded
def test_an_agent_asking_an_id_it_cannot_see_gets_the_not_found_answer(mem):
    access = Access(mem)
    access.create_agent("alice")
    access.create_agent("bob")
    access.grant("alice", "project/x", "read")
    bobs = mem.put("agent/bob", "plans", "bob's secret plan")
    shared = mem.put("project/x", "status", "read-only for alice")
    alice = access.view(access.agent("alice"))
    own = alice.put("agent/alice", "plans", "alice's plan")
    assert alice.get_by_id(bobs.id) is None and alice.get_by_id(NEVER_WRITTEN) is None
    assert alice.delete_by_id(bobs.id) is False and alice.delete_by_id(NEVER_WRITTEN) is False
    assert mem.get_by_id(bobs.id) == bobs  # untouched
    assert alice.get_by_id(shared.id) == shared
    with pytest.raises(ForbiddenError, match="project/x"):
        alice.delete_by_id(shared.id)
    assert mem.get_by_id(shared.id) == shared
    assert alice.get_by_id(own.id) == own and alice.delete_by_id(own.id) is True
    assert mem.history("agent/alice", "plans")[0].changed_by == "alice"
    assert not hasattr(alice, "import_records")  # an owner operation: it writes ids, times and authors as given


def test_exported_items_import_back_by_id(mem):
    item = mem.put("user/1", "k", {"v": 1}, metadata={"source": "chat"})
    exported = getattr(mem, "sync", mem).export_records()  # an async surface's export is its .sync's iterator
    records = [r for r in exported if r["record"] == "item"]  # over a service: GET /v1/export
    assert mem.delete_by_id(item.id) is True
    assert mem.import_records(records) == 1
    assert mem.get_by_id(item.id) == item
