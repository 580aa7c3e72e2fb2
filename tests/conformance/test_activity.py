"""activity: the timeline of writes, deletes, facts and recalls per namespace and hour (or day)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memlane import ValidationError


def _rows(answer):
    return {(r["namespace"], r["at"]): {k: r[k] for k in answer["series"]} for r in answer["rows"]}


def test_writes_deletes_facts_and_recalls_per_namespace_and_hour(mem, clock):
    hour0 = clock.now.replace(minute=0, second=0, microsecond=0)
    mem.put("team/a", "k1", "the billing migration plan")  # version 1, kept in history once replaced
    mem.put("team/a", "k1", "the billing migration plan, second draft")
    mem.put("team/b", "k2", "lunch menu")
    clock.advance(3600)
    mem.delete("team/b", "k2")
    ravi = mem.add_entity("team/a", "Ravi", kind="person")
    mem.assert_fact("team/a", ravi.id, "works on", "billing")
    hits = mem.search("billing migration", namespace_prefix="team").hits
    assert [h.key for h in hits] == ["k1"]
    mem.recall("", key="k1")
    mem.search("zebra", namespace_prefix="team", channels=["lexical"])  # no hits: counted nowhere

    at0, at1 = hour0.isoformat(), (hour0 + timedelta(hours=1)).isoformat()
    answer = mem.activity()
    assert answer["bucket"] == "hour" and answer["series"] == ["writes", "deletes", "facts", "recalls"]
    rows = _rows(answer)
    assert rows == {
        ("team/a", at0): {"writes": 2, "deletes": 0, "facts": 0, "recalls": 0},
        ("team/b", at0): {"writes": 1, "deletes": 0, "facts": 0, "recalls": 0},
        ("team/b", at1): {"writes": 0, "deletes": 1, "facts": 0, "recalls": 0},
        ("team/a", at1): {"writes": 0, "deletes": 0, "facts": 2, "recalls": 2},
    }
    # by day, one bucket per namespace; a prefix narrows it
    day = mem.activity("team/a", bucket="day")
    assert day["namespace_prefix"] == "team/a"
    assert [(r["namespace"], r["writes"], r["facts"], r["recalls"]) for r in day["rows"]] == [("team/a", 2, 2, 2)]
    assert day["rows"][0]["at"].endswith("T00:00:00+00:00")
    # the window: what happened more than `days` ago is left out
    clock.advance(3 * 86400)
    assert _rows(mem.activity(days=1)) == {}
    assert len(mem.activity(days=7)["rows"]) == 4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"bucket": "minute"}, "bucket"), ({"days": 0}, "days"), ({"days": 367}, "days"), ({"days": True}, "days")],
)
def test_activity_refuses_a_bad_window(mem, kwargs, field):
    with pytest.raises(ValidationError) as e:
        mem.activity(**kwargs)
    assert e.value.field == field
