"""An item's exact expiry instant (#35): at ``now == expires_at`` the item is gone, on every read that names it.

``exists`` reads only the expiry and ``get`` the whole row, on separate code
paths (and on PostgreSQL separate sync and async statements): they must agree
at every instant around the expiry, to the millisecond. Runs on every backend
and surface (the ``mem`` fixture), driven by the fake clock.
"""

from __future__ import annotations

from datetime import timedelta

import pytest


def _reads(mem) -> tuple[bool, bool, bool, list[str]]:  # noqa: ANN001
    """What each exact read says about ``a/short``."""
    return (
        mem.exists("a", "short"),
        mem.get("a", "short") is not None,
        mem.get_many([("a", "short")])[0] is not None,
        [i.key for i in mem.fetch("short")],
    )


@pytest.mark.parametrize("ttl", [10, 0.5, 2.25])
def test_exists_and_get_agree_at_every_millisecond_around_the_expiry(mem, clock, ttl):
    item = mem.put("a", "short", 1, ttl=ttl)
    assert item.expires_at == clock.now + timedelta(seconds=ttl)
    clock.advance(ttl - 0.002)
    assert _reads(mem) == (True, True, True, ["short"])
    clock.advance(0.001)  # a millisecond before: alive
    assert _reads(mem) == (True, True, True, ["short"])
    clock.advance(0.001)  # the instant itself: expired
    assert clock.now == item.expires_at
    assert _reads(mem) == (False, False, False, [])
    clock.advance(0.001)
    assert _reads(mem) == (False, False, False, [])


def test_at_the_instant_the_address_is_free_for_a_new_item(mem, clock):
    from memlane import ConflictError

    old = mem.put("a", "short", "old", ttl=5)
    clock.advance(4.999)
    with pytest.raises(ConflictError):
        mem.put("a", "short", "too early", if_absent=True)
    clock.advance(0.001)
    assert mem.exists("a", "short") is False and mem.delete("a", "short") is False
    new = mem.put("a", "short", "new", if_absent=True)
    assert new.version == 1 and new.id != old.id and new.expires_at is None
    assert mem.exists("a", "short") is True and mem.get("a", "short").value == "new"
