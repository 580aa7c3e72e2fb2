"""Rules written twice, in SQL and in Python, agree on generated values, on SQLite and PostgreSQL.

A rule that lives in two places can drift in one of them (``<`` for ``<=``, a
bound read as closed, a time compared in another zone) and the other keeps the
tests green. So each rule below is read through every implementation on the
same generated data, and all of them must equal a brute-force reference:

- expiry: live while ``now < expires_at``.
  SQL: ``expires_at > now`` in get_many, fetch, list, namespaces, summarize,
  the search confirm step, delete, the ``items`` view and ``text_match``;
  ``expires_at <= now`` in cleanup; PostgreSQL's upsert and ``if_absent``.
  Python: both stores' ``get``; SQLite's ``put`` (a new item or a replace,
  ``if_absent``); PostgreSQL's ``clear``.
- validity: a fact holds at t when ``valid_from <= t < valid_to``, a missing
  end open; ``valid_to`` must be later than ``valid_from``.
  SQL: ``_VALID`` (facts_context, hydrate) and the ``facts_current`` view.
  Python: ``_holds`` (traverse, facts_context's hop expansion), the
  ``valid_to`` check of ``assert_fact``.
- belief: believed at b when ``recorded_at <= b < retracted_at``; evidence
  counts from its own ``recorded_at``. SQL only (``_BELIEVED`` and the
  evidence filter), so it is compared with the reference alone.

Times are generated around the edges (the instant, one microsecond either
side) and anywhere, in several UTC offsets and as naive ISO text (UTC), since
the stores compare fixed-width UTC text. One store per test; each example
writes under its own namespace. The ``client`` run is skipped: these read the
stores directly.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane import ConflictError, ValidationError

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
US = timedelta(microseconds=1)
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8)), timezone(timedelta(hours=14))]
)
EDGE = st.sampled_from([-1, 0, 1])  # microseconds from an edge
NEAR = st.one_of(EDGE, st.integers(-3, 3), st.integers(-10_000_000, 10_000_000))


class Clock:
    """A settable clock shared by every example of one test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def opened(store_url):
    """A memory on this backend without an embedder (the rules live in SQL and Python, not in vectors)."""
    clock = Clock()
    with memlane.open(store_url, clock=clock, embedder=None) as mem:
        yield mem, clock, itertools.count()


# -- expiry ------------------------------------------------------------------------------

LEAD = 10_000_010  # microseconds from the write to the instant probed: every ttl stays positive


@SETTINGS
@given(
    offsets=st.lists(st.one_of(st.none(), NEAR), min_size=1, max_size=4),
    zone=ZONES,
    micros=st.integers(0, 999_999),
)
def test_expiry_is_decided_alike_by_every_read_and_write(opened, offsets, zone, micros):
    mem, clock, counter = opened
    n = next(counter)
    probe = T0 + timedelta(days=n + 1, microseconds=micros)  # later than anything an earlier example wrote
    written_at = probe - timedelta(microseconds=LEAD)
    clock.now = written_at.astimezone(zone)  # the memory turns any zone into UTC
    mem.cleanup()  # rows of earlier examples: all expired by now
    root = ("p", str(n))
    spaces = [(*root, f"i{i}") for i in range(len(offsets))]
    records = []
    for ns, offset in zip(spaces, offsets, strict=True):
        ttl = None if offset is None else (LEAD + offset) / 1e6
        for key in ("get", "put", "absent", "delete"):
            records.append({"namespace": ns, "key": key, "value": key, "text": "probe word", "ttl": ttl})
        records.append({"namespace": (*ns, "clear"), "key": "x", "value": 0, "text": "probe word", "ttl": ttl})
    items = mem.put_many(records)
    expires = [items[5 * i].expires_at for i in range(len(offsets))]
    for offset, at in zip(offsets, expires, strict=True):
        assert at == (None if offset is None else probe + timedelta(microseconds=offset))

    clock.now = probe.astimezone(zone)
    live = [at is None or probe < at for at in expires]  # the reference
    alive = [ns for ns, ok in zip(spaces, live, strict=True) if ok]
    text = "/".join(root)
    assert [mem.get(ns, "get") is not None for ns in spaces] == live  # Python
    assert [i is not None for i in mem.get_many([(ns, "get") for ns in spaces])] == live  # SQL from here on
    assert sorted(i.namespace for i in mem.fetch("get", namespace_prefix=root, limit=1000)) == alive
    listed = {(i.namespace, i.key) for i in mem.list(root, limit=1000).items}
    assert listed == {(ns, k) for ns in alive for k in ("get", "put", "absent", "delete")} | {
        ((*ns, "clear"), "x") for ns in alive
    }
    assert mem.namespaces(root) == sorted([*alive, *((*ns, "clear") for ns in alive)])
    assert mem.summarize(root) == {
        **{"/".join(ns): {"absent": 1, "delete": 1, "get": 1, "put": 1} for ns in alive},
        **{"/".join(ns) + "/clear": {"x": 1} for ns in alive},
    }
    env = mem.search("probe", namespace_prefix=root, limit=1000, channels=["lexical"])
    assert {(h.namespace, h.key) for h in env.hits} == listed
    assert env.dropped_by_hydration == len(records) - len(listed)
    rows = mem.query("SELECT namespace, key FROM items WHERE namespace LIKE ?", [text + "/%"], max_rows=1000).rows
    assert {(tuple(ns.split("/")), k) for ns, k in rows} == listed
    rows = mem.query(
        "SELECT namespace FROM items WHERE text_match(text, 'probe') AND namespace LIKE ? AND key = 'get'",
        [text + "/%"],
    ).rows
    assert sorted(tuple(r[0].split("/")) for r in rows) == alive

    for i, (ns, ok) in enumerate(zip(spaces, live, strict=True)):
        again = mem.put(ns, "put", "again")  # SQLite decides in Python, PostgreSQL in its upsert
        assert (again.version, again.id == items[5 * i + 1].id) == ((2, True) if ok else (1, False))
        assert mem.history(ns, "put")[0].change == ("replace" if ok else "expire")
        if ok:
            with pytest.raises(ConflictError):
                mem.put(ns, "absent", "mine", if_absent=True)
        else:
            assert mem.put(ns, "absent", "mine", if_absent=True).version == 1
        assert mem.delete(ns, "delete") is ok
        assert mem.clear((*ns, "clear")) == (1 if ok else 0)  # PostgreSQL decides in Python
    # left expired: each expired item's 'get' and 'delete' rows ('put' and 'absent' were rewritten, 'clear' cleared)
    assert mem.cleanup() == 2 * live.count(False)


# -- validity --------------------------------------------------------------------------------

ANCHOR = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
FORM = st.sampled_from(["datetime", "text", "naive text"])  # how a time is passed: every form means one instant


def _given(at, zone, form):
    """An instant as the caller may pass it: an aware datetime in some zone, ISO text, or naive ISO text (UTC)."""
    if form == "naive text":
        return at.astimezone(UTC).replace(tzinfo=None).isoformat()
    shown = at.astimezone(zone)
    return shown if form == "datetime" else shown.isoformat()


def _holds(window, t):
    start, end = window
    return (start is None or start <= t) and (end is None or t < end)


@SETTINGS
@given(
    anchor=ANCHOR,
    windows=st.lists(st.tuples(st.one_of(st.none(), NEAR), st.one_of(st.none(), NEAR)), min_size=1, max_size=4),
    at=NEAR,
    zones=st.tuples(ZONES, ZONES, ZONES),
    forms=st.tuples(FORM, FORM, FORM),
)
def test_validity_is_decided_alike_by_sql_and_python(opened, anchor, windows, at, zones, forms):
    mem, clock, counter = opened
    ns = ("v", str(next(counter)))
    subject = mem.add_entity(ns, "subject")
    model: dict[str, tuple[tuple[datetime | None, datetime | None], str]] = {}
    for j, (a, b) in enumerate(windows):
        start = None if a is None else anchor + timedelta(microseconds=a)
        end = None if b is None else anchor + timedelta(microseconds=b)
        other = mem.add_entity(ns, f"object {j}")
        args = {
            "valid_from": None if start is None else _given(start, zones[0], forms[0]),
            "valid_to": None if end is None else _given(end, zones[1], forms[1]),
        }
        if start is not None and end is not None and end <= start:
            with pytest.raises(ValidationError) as e:
                mem.assert_fact(ns, subject.id, f"rel {j}", other.id, **args)
            assert e.value.field == "valid_to"
            continue
        fact = mem.assert_fact(ns, subject.id, f"rel {j}", other.id, **args)
        assert (fact.valid_from, fact.valid_to) == (start, end)
        model[fact.id] = ((start, end), other.id)
    t = anchor + timedelta(microseconds=at)
    holding = {fid for fid, (window, _) in model.items() if _holds(window, t)}  # the reference
    when = {"valid_at": _given(t, zones[2], forms[2])}

    ctx = mem.facts_context("", entity_ids=[subject.id], hops=0, time=when, limit=100)  # SQL
    assert {f.id for f in ctx["facts"]} == holding
    paths = mem.traverse([subject.id], hops=1, time=when)  # Python
    assert {p.facts[0].id for p in paths["paths"]} == holding
    assert paths.dropped["broken_paths"] == len(model) - len(holding)
    reached = mem.facts_context("", entity_ids=[subject.id], hops=1, time=when, limit=100)  # Python hop, then SQL
    assert reached.counts["neighbourhood"] == 1 + len(holding)
    assert {f.id for f in reached["facts"]} == holding
    saved, clock.now = clock.now, t.astimezone(zones[2])  # the reads of what holds now
    try:
        assert {f.id for f in mem.hydrate(list(model)) if f is not None} == holding
        rows = mem.query("SELECT id FROM facts_current WHERE subject_id = ?", [subject.id]).rows
        assert {r[0] for r in rows} == holding
    finally:
        clock.now = saved


# -- belief ----------------------------------------------------------------------------------

GAP = st.one_of(st.sampled_from([0, 1]), st.integers(0, 10_000_000))  # microseconds between two events


@SETTINGS
@given(
    lives=st.lists(
        st.tuples(GAP, st.one_of(st.none(), GAP), st.one_of(st.none(), GAP)), min_size=1, max_size=4
    ),  # (recorded after T0, second evidence after that, retracted after that)
    pick=st.tuples(st.integers(0, 3), st.sampled_from(["recorded", "evidence", "retracted"]), EDGE),
    free=st.one_of(st.none(), st.integers(-1_000_000, 40_000_000)),
    zone=ZONES,
)
def test_belief_time_and_evidence_follow_the_reference(opened, lives, pick, free, zone):
    mem, clock, counter = opened
    ns = ("b", str(next(counter)))
    base = T0 + timedelta(days=1000)
    subject = mem.add_entity(ns, "subject")
    model = {}
    for j, (recorded_gap, evidence_gap, retract_gap) in enumerate(lives):
        other = mem.add_entity(ns, f"object {j}")
        recorded = base + timedelta(microseconds=recorded_gap)
        clock.now = recorded.astimezone(zone)
        fact = mem.assert_fact(ns, subject.id, f"rel {j}", other.id)
        assert fact.recorded_at == recorded
        evidence = [recorded]
        last = recorded
        if evidence_gap is not None:
            last = recorded + timedelta(microseconds=evidence_gap)
            clock.now = last
            assert mem.assert_fact(ns, subject.id, f"rel {j}", other.id, source="second").id == fact.id
            evidence.append(last)
        retracted = None
        if retract_gap is not None:
            retracted = last + timedelta(microseconds=retract_gap)
            clock.now = retracted
            assert mem.retract_fact(fact.id).retracted_at == retracted
        model[fact.id] = (recorded, retracted, evidence)
    events = [(r, x if x is not None else r, ev[-1]) for r, x, ev in model.values()]
    j, which, edge = pick
    r, x, e = events[j % len(events)]
    at = {"recorded": r, "retracted": x, "evidence": e}[which] + timedelta(microseconds=edge)
    if free is not None:
        at = base + timedelta(microseconds=free)
    believed = {  # the reference: fact id -> evidence count at ``at``
        fid: sum(t <= at for t in ev) for fid, (r, x, ev) in model.items() if r <= at and (x is None or at < x)
    }
    clock.now = base + timedelta(days=1)
    when = {"believed_at": at.astimezone(zone)}
    ctx = mem.facts_context("", entity_ids=[subject.id], hops=0, time=when, limit=100)
    assert {f.id: f.evidence_count for f in ctx["facts"]} == believed
    paths = mem.traverse([subject.id], hops=1, time=when)
    assert {p.facts[0].id: p.facts[0].evidence_count for p in paths["paths"]} == believed
