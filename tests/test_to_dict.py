"""Each answer's ``to_dict`` is JSON-ready: the standard ``json`` module writes it, reading that back gives the same
dict (lists, not tuples; ISO text, not datetimes), ``from_dict`` of it is an equal value, and changing the dict
leaves the value as it was. Checked on answers of a real memory, with a hypothesis-chosen history."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.core.access import Access
from memlane.values.model import Envelope, Stats, Version
from memlane.values.query import QueryPlan, SavedQuery


def _json_ready(d: dict[str, Any], value: Any) -> dict[str, Any]:
    """``d`` (``value.to_dict()``) read back from the standard encoder (no datetime or tuple passes unnoticed),
    after checking it names every field of ``value``, in order, even those that are ``None``."""
    assert list(d) == [f.name for f in dataclasses.fields(value)]
    again = json.loads(json.dumps(d))
    assert again == d
    return again  # type: ignore[no-any-return]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.sampled_from(["put", "put_ttl", "delete"]), min_size=1, max_size=5),
    namespace=st.sampled_from(["a", "a/b", "team/x/y"]),
)
def test_versions_stats_and_envelopes(tmp_path: Any, steps: list[str], namespace: str) -> None:
    with memlane.open(str(tmp_path / f"{uuid.uuid4().hex}.db"), embedder="fake") as mem:
        for n, step in enumerate([*steps, "put", "put"]):  # the last put replaces a version: history has one
            if step == "delete":
                mem.delete(namespace, "k")
            else:
                mem.put(namespace, "k", {"n": n, "words": "apple pie"}, ttl=3600 if step == "put_ttl" else None)
        mem.put(namespace, "other", "apple tart", metadata={"source": "chat"})
        versions = mem.history(namespace, "k")
        assert versions
        for version in versions:
            d = _json_ready(version.to_dict(), version)
            assert d["namespace"] == namespace.split("/") and isinstance(d["changed_at"], str)
            assert Version.from_dict(d) == version
        stats = mem.stats()
        assert Stats.from_dict(_json_ready(stats.to_dict(), stats)) == stats
        found = mem.search("apple", namespace_prefix=namespace.split("/")[0])
        assert found.hits
        d = _json_ready(found.to_dict(), found)
        assert all(isinstance(h, dict) for h in d["hits"])
        assert Envelope.from_dict(d).to_dict() == d


def test_access_changes(tmp_path: Any) -> None:
    with memlane.open(str(tmp_path / "a.db"), embedder=None) as mem:
        access = Access(mem)
        access.create_agent("kim")
        access.create_room("eng")
        access.add_member("eng", "kim")
        access.grant("kim", "project/x", "read")
        changes = [_json_ready(c.to_dict(), c) for c in access.history()]
    assert [c["action"] for c in changes] == ["create_agent", "create_room", "add_member", "grant"]
    assert changes[-1]["prefix"] == "project/x" and changes[-1]["mode"] == "read"
    assert all(isinstance(c["at"], str) and c["at"].endswith("+00:00") for c in changes)


def test_query_plans_and_saved_queries(tmp_path: Any) -> None:
    with memlane.open(str(tmp_path / "q.db"), embedder=None) as mem:
        mem.put("a", "k", "v")
        sql = "SELECT namespace FROM items WHERE key = :key"
        for plan in (mem.explain_query(sql, {"key": "k"}), mem.explain_query("DELETE FROM items")):
            assert QueryPlan.from_dict(_json_ready(plan.to_dict(), plan)) == plan
            d = plan.to_dict()
            for name in ("views", "functions", "parameters", "plan"):
                d[name].append("changed")  # the dict's lists are its own
            assert plan.to_dict() != d
        saved = mem.save_query("by-key", sql, "one key")
        assert SavedQuery.from_dict(_json_ready(saved.to_dict(), saved)) == saved == mem.saved_queries()[0]
        saved.to_dict()["parameters"].append("changed")
        assert saved.parameters == [":key"]
