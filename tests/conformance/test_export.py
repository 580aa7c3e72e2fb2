"""Export / import round-trips a store exactly."""

from __future__ import annotations

import pytest

import memlane
from memlane import ValidationError


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
    with memlane.open(str(tmp_path / "copy.db"), clock=clock) as copy:
        assert copy.import_records(exported) == len(exported)
        assert list(copy.export_records()) == exported
        assert copy.get("user/1", "preferences.ui.theme") == mem.get("user/1", "preferences.ui.theme")
        assert copy.history("room/general", "gone") == mem.history("room/general", "gone")
        assert [h.key for h in copy.search("deploy").hits] == [h.key for h in mem.search("deploy").hits]
        clock.advance(120)
        assert copy.get("room/general", "ephemeral") is None


def test_import_is_all_or_nothing(mem, clock, tmp_path):
    _fill(mem, clock)
    records = list(mem.export_records())
    records.insert(2, {"record": "item", "namespace": "x", "key": "k"})
    with memlane.open(str(tmp_path / "copy.db"), clock=clock) as copy:
        with pytest.raises(ValidationError, match="record 3"):
            copy.import_records(records)
        assert copy.stats().active_items == 0 and copy.stats().history_versions == 0
