"""Export / import round-trips a store exactly."""

from __future__ import annotations

import pytest

import memlane
from memlane import ValidationError

pytestmark = pytest.mark.embedded


def _fill(mem, clock):
    mem.put("user/1", "preferences.ui.theme", "dark", metadata={"m": [1, 2]})
    clock.advance(1)
    mem.put("user/1", "preferences.ui.theme", {"mode": "light", "contrast": 1.5})
    mem.put("room/general", None, "a note about deploys", text="deploy note")
    mem.put("room/general", "ephemeral", 3.12, ttl=60)
    mem.put("room/general", "gone", True)
    mem.delete("room/general", "gone")


def test_export_import_roundtrip_exact(mem, clock, tmp_path):
    _fill(mem, clock)
    exported = list(mem.export_records())
    assert {r["record"] for r in exported} == {"item", "version"}
    with memlane.open(str(tmp_path / "copy.db"), clock=clock, embedder="fake") as copy:
        assert copy.import_records(exported) == len(exported)
        assert list(copy.export_records()) == exported
        assert copy.get("user/1", "preferences.ui.theme") == mem.get("user/1", "preferences.ui.theme")
        assert copy.history("room/general", "gone") == mem.history("room/general", "gone")
        # rowids differ after import, so only ties may reorder
        assert sorted(h.key for h in copy.search("deploy").hits) == sorted(h.key for h in mem.search("deploy").hits)
        assert copy.stats().vectors == mem.stats().vectors  # recomputed on import
        clock.advance(120)
        assert copy.get("room/general", "ephemeral") is None


def test_import_is_all_or_nothing(mem, clock, tmp_path):
    _fill(mem, clock)
    records = list(mem.export_records())
    records.insert(2, {"record": "item", "namespace": "x", "key": "k"})
    with memlane.open(str(tmp_path / "copy.db"), clock=clock, embedder="fake") as copy:
        with pytest.raises(ValidationError, match="record 3"):
            copy.import_records(records)
        assert copy.stats().active_items == 0 and copy.stats().history_versions == 0


def test_reimport_is_idempotent(mem, clock):
    _fill(mem, clock)
    exported = list(mem.export_records())
    assert mem.import_records(exported) == 0
    assert list(mem.export_records()) == exported


def test_import_over_a_different_live_item_keeps_it_in_history(mem, clock):
    mem.put("u/1", "k", "old")
    exported = list(mem.export_records())
    mem.delete("u/1", "k")
    clock.advance(5)
    mem.put("u/1", "k", "newest")
    clock.advance(5)
    assert mem.import_records(exported) == 1
    assert mem.get("u/1", "k").value == "old"
    latest = mem.history("u/1", "k")[0]
    assert (latest.value, latest.change, latest.changed_at) == ("newest", "import", clock.now)
    assert [h.key for h in mem.search("old", channels=["lexical"]).hits] == ["k"]
    assert mem.search("newest", channels=["lexical"]).hits == []


def test_import_refuses_bad_times_and_kinds(mem):
    good = {
        "record": "item",
        "id": "x",
        "namespace": ["a"],
        "key": "k",
        "value": 1,
        "value_type": "number",
        "text": "1",
        "metadata": {},
        "author": None,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "expires_at": None,
        "version": 1,
    }
    for bad in (
        {"created_at": "yesterday"},
        {"updated_at": "2026-01-01T00:00:00"},
        {"record": "blob"},
        {"version": 0},
        {"id": 5},
    ):
        with pytest.raises(ValidationError, match="record 1"):
            mem.import_records([good | bad])
    assert mem.import_records([good]) == 1
