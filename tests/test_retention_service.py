"""History retention through the service and the Client: admin only, the same rules as in Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memlane
from live import LiveServer
from memlane import ForbiddenError, ValidationError
from memlane.core.access import Access
from memlane.server import create_app


@pytest.fixture
def served(tmp_path: Path) -> Any:
    with memlane.open(tmp_path / "keep.db", embedder=None) as mem:
        access = Access(mem)
        _, root = access.create_agent("root", admin=True)
        _, alice = access.create_agent("alice")
        server = LiveServer(create_app(mem))
        with memlane.Client(server.url, root) as admin, memlane.Client(server.url, alice) as agent:
            yield mem, admin, agent
        server.stop()


def test_an_admin_sets_lists_applies_and_clears_rules_over_http(served: Any) -> None:
    mem, admin, _ = served
    for n in range(5):
        admin.put("agent/alice", "counter", n)
    rule = admin.set_retention("agent", keep_versions=2)
    assert (rule.prefix, rule.keep_versions, rule.keep_days, rule.updated_by) == (
        ("agent",),
        2,
        None,
        "root",
    )  # the admin who set it
    assert [r.prefix for r in admin.retention_rules()] == [("agent",)] == [r.prefix for r in mem.retention_rules()]
    assert admin.cleanup() == 2  # five versions: the live one, two kept in history, two deleted
    assert [v.value for v in admin.history("agent/alice", "counter")] == [3, 2]
    assert admin.clear_retention("agent") is True and admin.clear_retention("agent") is False
    assert admin.retention_rules() == []


def test_rules_are_refused_to_agents_and_bad_limits_name_the_field(served: Any) -> None:
    mem, admin, agent = served
    with pytest.raises(ForbiddenError):
        agent.set_retention("agent/alice", keep_versions=1)
    with pytest.raises(ForbiddenError):
        agent.retention_rules()
    for kwargs, field in (
        ({"keep_versions": True}, "keep_versions"),
        ({"keep_days": -1}, "keep_days"),
        ({}, "keep_versions"),
    ):
        with pytest.raises(ValidationError) as e:
            admin.set_retention("agent", **kwargs)
        assert e.value.field == field
    with pytest.raises(ValidationError) as e:
        admin.set_retention("a//b", keep_versions=1)
    assert e.value.field == "prefix"
    assert mem.retention_rules() == []
