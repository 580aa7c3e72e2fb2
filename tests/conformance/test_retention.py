"""History retention: rules per namespace prefix, applied by ``cleanup()``, on every backend.

Rules are an owner setting stored in the database. On ``sqlite`` and
``postgres`` the ``owner`` is ``mem`` itself; on ``client`` it is a second
``Memory`` opened on the service's database (the Client has no retention
methods), while writes, ``cleanup()`` and ``history()`` go through the HTTP
service: the rules one process stores are the rules every process applies.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from conformance import OVER_HTTP
from memlane import CleanupReport, RetentionRule, ValidationError
from memlane.values.retention import MAX_KEEP_DAYS, MAX_KEEP_VERSIONS

DAY = 86400


@pytest.fixture
def owner(mem, backend, store_url, clock):
    """Who sets the rules: ``mem`` itself, or (client) another Memory on the same database."""
    if backend not in OVER_HTTP:
        yield mem
        return
    with memlane.open(store_url, clock=clock, embedder=None) as other:
        yield other


def write(mem, ns, key, count, start=0):
    for i in range(start, start + count):
        mem.put(ns, key, i)


def values(mem, ns, key):
    return [v.value for v in mem.history(ns, key)]


# -- keep N versions --------------------------------------------------------------------


def test_keep_versions_at_the_limit_and_one_past(mem, owner):
    owner.set_retention("c", keep_versions=3)
    write(mem, "c", "n", 4)  # live 3, history 2 1 0: exactly the limit
    assert mem.cleanup() == 0
    assert values(mem, "c", "n") == [2, 1, 0]
    mem.put("c", "n", 4)  # history 3 2 1 0: one past it
    assert mem.cleanup() == 1
    assert values(mem, "c", "n") == [3, 2, 1]
    live = mem.get("c", "n")
    assert (live.value, live.version) == (4, 5)  # the live item is never a history version
    assert mem.cleanup() == 0


def test_a_counter_written_900_times_keeps_n_versions(mem, owner):
    owner.set_retention("counter", keep_versions=10)
    mem.put_many([{"namespace": "counter", "key": "hits", "value": i} for i in range(900)])
    assert len(mem.history("counter", "hits")) == 899
    assert mem.cleanup() == 889
    assert values(mem, "counter", "hits") == list(range(898, 888, -1))
    assert mem.get("counter", "hits").version == 900
    assert mem.stats().history_versions == 10


def test_keep_zero_versions_keeps_only_the_live_item(mem, owner):
    owner.set_retention("c", keep_versions=0)
    write(mem, "c", "n", 3)
    assert mem.cleanup() == 2
    assert mem.history("c", "n") == []
    assert mem.get("c", "n").value == 2


def test_a_deleted_address_keeps_its_newest_versions(mem, owner):
    owner.set_retention("c", keep_versions=1)
    write(mem, "c", "gone", 3)
    assert mem.delete("c", "gone")
    assert mem.cleanup() == 2
    (last,) = mem.history("c", "gone")
    assert (last.value, last.change) == (2, "delete")


def test_versions_are_counted_per_address(mem, owner):
    owner.set_retention("c", keep_versions=2)
    write(mem, "c", "a", 5)
    write(mem, "c", "b", 2)
    write(mem, "c/d", "a", 4)
    assert mem.cleanup() == 2 + 0 + 1
    assert values(mem, "c", "a") == [3, 2]
    assert values(mem, "c", "b") == [0]
    assert values(mem, "c/d", "a") == [2, 1]


def test_an_expired_item_restarts_versions_but_history_counts_on(mem, owner, clock):
    owner.set_retention("c", keep_versions=2)
    mem.put("c", "k", "a", ttl=10)
    clock.advance(11)
    mem.put("c", "k", "b")  # a new item at version 1; "a" goes to history as expire
    mem.put("c", "k", "c")
    mem.put("c", "k", "d")
    assert mem.cleanup() == 1
    assert [(v.value, v.change) for v in mem.history("c", "k")] == [("c", "replace"), ("b", "replace")]


# -- keep D days -----------------------------------------------------------------------


def test_keep_days_at_the_exact_boundary_and_just_past(mem, owner, clock):
    owner.set_retention("d", keep_days=2)
    mem.put("d", "k", "v1")
    mem.put("d", "k", "v2")  # v1 leaves the live row now: changed_at = t0
    clock.advance(DAY)
    mem.put("d", "k", "v3")  # v2: changed_at = t0 + 1 day
    clock.advance(DAY - 0.000001)  # t0 + 2 days - 1 us: v1 is still inside
    assert mem.cleanup() == 0
    assert values(mem, "d", "k") == ["v2", "v1"]
    clock.advance(0.000001)  # exactly t0 + 2 days: v1 goes, as an item expires at expires_at
    assert mem.cleanup() == 1
    assert values(mem, "d", "k") == ["v2"]
    clock.advance(DAY)
    assert mem.cleanup() == 1
    assert mem.history("d", "k") == []
    assert mem.get("d", "k").value == "v3"


def test_fractional_days(mem, owner, clock):
    owner.set_retention("d", keep_days=0.25)
    write(mem, "d", "k", 2)
    clock.advance(6 * 3600 - 1)
    assert mem.cleanup() == 0
    clock.advance(1)
    assert mem.cleanup() == 1


def test_both_limits_keep_only_what_is_inside_both(mem, owner, clock):
    owner.set_retention("b", keep_versions=2, keep_days=1)
    write(mem, "b", "k", 4)  # history 2 1 0, all changed now
    assert mem.cleanup() == 1  # the version limit
    assert values(mem, "b", "k") == [2, 1]
    clock.advance(DAY)
    assert mem.cleanup() == 2  # the day limit, though within 2 versions
    assert mem.history("b", "k") == []


# -- prefixes ---------------------------------------------------------------------------


def test_rules_match_whole_segments_and_touch_nothing_else(mem, owner):
    owner.set_retention("user", keep_versions=0)
    spaces = ["user", "user/1", "user/1/2", "users", "user-x", "use", "user0", "other/user", "a%b"]
    for ns in spaces:
        write(mem, ns, "k", 3)
    assert mem.cleanup() == 3 * 2
    for ns in spaces:
        assert len(mem.history(ns, "k")) == (0 if ns in ("user", "user/1", "user/1/2") else 2), ns
        assert mem.get(ns, "k").value == 2


def test_metacharacters_in_a_prefix_are_data(mem, owner):
    owner.set_retention("a%", keep_versions=0)
    owner.set_retention("b_", keep_versions=0)
    for ns in ("a%", "a%/x", "ab", "a", "b_", "bc"):
        write(mem, ns, "k", 2)
    assert mem.cleanup() == 3
    assert [len(mem.history(ns, "k")) for ns in ("a%", "a%/x", "ab", "a", "b_", "bc")] == [0, 0, 1, 1, 0, 1]


def test_the_longest_prefix_wins_outright(mem, owner, clock):
    owner.set_retention("", keep_versions=0)
    owner.set_retention("user", keep_versions=2)
    owner.set_retention("user/1", keep_days=1)  # no version limit here: the shorter rules do not add theirs
    for ns in ("user/1", "user/1/x", "user/2", "users", "other"):
        write(mem, ns, "k", 5)
    report_total = mem.cleanup()
    assert [len(mem.history(ns, "k")) for ns in ("user/1", "user/1/x", "user/2", "users", "other")] == [4, 4, 2, 0, 0]
    assert report_total == 0 + 0 + 2 + 4 + 4
    assert owner.retention_for("user/1/x").prefix == ("user", "1")
    assert owner.retention_for("user/2").prefix == ("user",)
    assert owner.retention_for("users").prefix == ()
    clock.advance(DAY)
    assert mem.cleanup() == 8
    owner.clear_retention("")
    assert owner.retention_for("other") is None


def test_namespaces_without_a_rule_keep_everything(mem, owner, clock):
    owner.set_retention("ruled", keep_versions=0)
    write(mem, "free", "k", 20)
    clock.advance(10_000 * DAY)
    assert mem.cleanup() == 0
    assert len(mem.history("free", "k")) == 19


def test_cleanup_still_removes_expired_items_and_counts_both(mem, owner, clock):
    owner.set_retention("r", keep_versions=1)
    write(mem, "r", "k", 4)
    mem.put("t", "short", "x", ttl=5)
    clock.advance(5)
    assert mem.cleanup() == 1 + 2
    assert mem.get("r", "k").value == 3 and len(mem.history("r", "k")) == 1


# -- the rules themselves ------------------------------------------------------------------


def test_set_list_replace_and_clear(mem, owner, clock):
    rule = owner.set_retention(("user", "1"), keep_versions=5)
    assert rule == RetentionRule(("user", "1"), 5, None, clock.now, owner.author)
    owner.set_retention("", keep_days=30)
    clock.advance(1)
    replaced = owner.set_retention("user/1", keep_days=7)  # replaces the whole rule at that prefix
    assert (replaced.keep_versions, replaced.keep_days, replaced.updated_at) == (None, 7.0, clock.now)
    assert [(r.prefix, r.keep_versions, r.keep_days) for r in owner.retention_rules()] == [
        ((), None, 30.0),
        (("user", "1"), None, 7.0),
    ]
    assert replaced.to_dict() == {
        "prefix": "user/1",
        "keep_versions": None,
        "keep_days": 7.0,
        "updated_at": clock.now.isoformat(timespec="microseconds"),
        "updated_by": None,
    }
    assert owner.clear_retention("user") is False  # only the exact prefix
    assert owner.clear_retention("user/1") is True
    assert owner.clear_retention("user/1") is False
    assert owner.clear_retention(()) is True
    assert owner.retention_rules() == []


def test_rules_are_shared_by_every_memory_on_the_database(mem, owner, store_url, clock):
    with memlane.open(store_url, clock=clock, embedder=None) as other:
        other.set_retention("shared", keep_versions=1, keep_days=3.5)
        assert [r.to_dict() for r in owner.retention_rules()] == [r.to_dict() for r in other.retention_rules()]
        write(mem, "shared", "k", 4)
        assert mem.cleanup() == 2  # applied by whichever process cleans up
        assert owner.clear_retention("shared") and other.retention_rules() == []


def test_the_limits_themselves(mem, owner):
    assert owner.set_retention("a", keep_versions=MAX_KEEP_VERSIONS).keep_versions == MAX_KEEP_VERSIONS
    assert owner.set_retention("a", keep_days=MAX_KEEP_DAYS).keep_days == MAX_KEEP_DAYS
    assert owner.set_retention("a", keep_days=1e-6).keep_days == 1e-6
    write(mem, "a", "k", 3)
    assert mem.cleanup() == 0  # 86.4 ms (a millionth of a day) have not passed
    with pytest.raises(ValidationError):
        owner.set_retention("a", keep_versions=MAX_KEEP_VERSIONS + 1)
    with pytest.raises(ValidationError):
        owner.set_retention("a", keep_days=math.nextafter(MAX_KEEP_DAYS, math.inf))


BAD = [
    ({"keep_versions": -1}, "keep_versions"),
    ({"keep_versions": True}, "keep_versions"),
    ({"keep_versions": False}, "keep_versions"),
    ({"keep_versions": 2.0}, "keep_versions"),
    ({"keep_versions": "3"}, "keep_versions"),
    ({"keep_versions": MAX_KEEP_VERSIONS + 1}, "keep_versions"),
    ({"keep_days": 0}, "keep_days"),
    ({"keep_days": -1.5}, "keep_days"),
    ({"keep_days": True}, "keep_days"),
    ({"keep_days": float("nan")}, "keep_days"),
    ({"keep_days": float("inf")}, "keep_days"),
    ({"keep_days": "7"}, "keep_days"),
    ({"keep_days": MAX_KEEP_DAYS * 2}, "keep_days"),
    ({}, "keep_versions"),
    ({"keep_versions": None, "keep_days": None}, "keep_versions"),
    ({"keep_versions": 1, "keep_days": 0}, "keep_days"),  # one bad limit refuses the rule
]


@pytest.mark.parametrize(("limits", "field"), BAD, ids=[repr(b[0]) for b in BAD])
def test_bad_limits_are_refused_and_change_nothing(mem, owner, limits, field):
    owner.set_retention("keep", keep_versions=4)
    before = owner.retention_rules()
    with pytest.raises(ValidationError) as e:
        owner.set_retention("keep", **limits)
    assert e.value.field == field
    assert owner.retention_rules() == before


@pytest.mark.parametrize("prefix", ["a//b", "a/", ("a", ""), ("a/b",), "_memlane", ("a",) * 9, 7, None, "a\x00"])
def test_bad_prefixes_are_refused_and_change_nothing(mem, owner, prefix):
    with pytest.raises(ValidationError) as e:
        owner.set_retention(prefix, keep_versions=1)
    assert e.value.field == "prefix"
    with pytest.raises(ValidationError):
        owner.clear_retention(prefix)
    assert owner.retention_rules() == []


def test_cleanup_report_tells_expired_items_from_versions(mem, owner, clock):
    if not isinstance(mem, memlane.Memory):
        pytest.skip("cleanup_report is a Memory method; the Client's cleanup() returns the total")
    mem.set_retention("", keep_versions=2)
    mem.set_retention("x", keep_versions=0)
    write(mem, "x", "k", 3)
    write(mem, "y", "k", 5)
    mem.put("t", "k", 1, ttl=1)
    clock.advance(1)
    report = mem.cleanup_report()
    assert report == CleanupReport(1, 4, {"x": 2, "": 2})
    assert report.to_dict() == {"expired_items": 1, "history_versions": 4, "total": 5, "by_prefix": {"x": 2, "": 2}}
    assert mem.cleanup_report() == CleanupReport(0, 0, {"x": 0, "": 0})


@pytest.mark.embedded
def test_an_agent_cannot_reach_retention(mem):
    from memlane.core.access import Access

    access = Access(mem)
    agent, _ = access.create_agent("worker")
    view = access.view(agent)
    assert not any(hasattr(view, name) for name in ("set_retention", "clear_retention", "retention_rules", "cleanup"))
    scoped = view._as_author()  # the agent's narrowed copy of the Memory refuses too
    with pytest.raises(memlane.ForbiddenError):
        scoped.set_retention("agent/worker", keep_versions=0)
    with pytest.raises(memlane.ForbiddenError):
        scoped.clear_retention("agent/worker")
    admin, _ = access.create_agent("root", admin=True)
    assert access.view(admin)._as_author().set_retention("", keep_versions=3).keep_versions == 3


# -- the SQL against a Python model of which versions survive -------------------------------

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
# segment-boundary neighbours: "a" must never cover "a-b" or "a0" ('-' < '/' < '0')
SPACES = (("a",), ("a", "b"), ("a", "b", "c"), ("a-b",), ("a0",), ("b",))
RULE_PREFIXES = ((), ("a",), ("a", "b"), ("a", "b", "c"), ("a-b",), ("b",), ("a", "z"))
STEP = st.sampled_from([0, 0, 6 * 3600, 12 * 3600, DAY, DAY + 1, 2 * DAY])  # seconds between writes
LIMITS = st.tuples(
    st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), st.sampled_from([0.25, 0.5, 1, 1.5, 2, 3]))
).filter(lambda t: t != (None, None))


def surviving(versions, rule, now):
    """The model: which history entries (newest first) one rule keeps."""
    if rule is None:
        return versions
    keep_versions, keep_days = rule
    cutoff = None if keep_days is None else now - timedelta(days=keep_days)
    return [
        v
        for i, v in enumerate(versions)
        if (keep_versions is None or i < keep_versions) and (cutoff is None or v.changed_at > cutoff)
    ]


def longest(rules, namespace):
    covering = [p for p in rules if namespace[: len(p)] == p]
    return rules[max(covering, key=len)] if covering else None


@pytest.fixture
def rounds():
    return itertools.count()


@SETTINGS
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(SPACES), st.sampled_from(["k", "k.x"]), STEP, st.booleans()), min_size=1, max_size=25
    ),
    rules=st.dictionaries(st.sampled_from(RULE_PREFIXES), LIMITS, max_size=4),
    wait=st.sampled_from([0, 6 * 3600, DAY, DAY - 1, DAY + 1, 3 * DAY]),
)
def test_cleanup_keeps_exactly_what_the_model_keeps(mem, owner, clock, rounds, writes, rules, wait):
    n = next(rounds)
    root = ("p", str(n))
    clock.now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=1000 * n)
    # start from no history and no rules, so the count below is this example's alone: the earlier
    # example's rules go first, or the longest-prefix rule would still keep their addresses' history
    for r in owner.retention_rules():
        owner.clear_retention(r.prefix)
    owner.set_retention("", keep_versions=0)
    mem.cleanup()
    owner.clear_retention("")
    for ns, key, step, delete in writes:
        clock.advance(step)
        if delete:
            mem.delete((*root, *ns), key)
        else:
            mem.put((*root, *ns), key, step)
    # rules under this example's root, and the empty prefix covering everything
    scoped = {((*root, *p) if p else ()): limits for p, limits in rules.items()}
    for p, (keep_versions, keep_days) in scoped.items():
        owner.set_retention(p, keep_versions=keep_versions, keep_days=keep_days)
    clock.advance(wait)
    addresses = sorted({((*root, *ns), key) for ns, _, _, _ in writes for key in ("k", "k.x")})
    before = {a: mem.history(*a) for a in addresses}
    live = {a: mem.get(*a) for a in addresses}
    expected = {a: surviving(before[a], longest(scoped, a[0]), clock.now) for a in addresses}

    removed = mem.cleanup()

    after = {a: mem.history(*a) for a in addresses}
    assert {a: [v.to_dict() for v in vs] for a, vs in after.items()} == {
        a: [v.to_dict() for v in vs] for a, vs in expected.items()
    }
    assert removed == sum(len(before[a]) - len(expected[a]) for a in addresses)
    assert {a: mem.get(*a) for a in addresses} == live
