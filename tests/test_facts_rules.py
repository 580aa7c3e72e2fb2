"""The rules of the facts layer, each checked at its edges on a real SQLite store.

What this file guards (docs/facts.md, DESIGN.md section 3), by class of bug:

- evidence: asserting a fact that already holds adds the source as evidence to the same fact;
  ``evidence_count`` counts DISTINCT sources, an unsourced assertion is one anonymous source,
  and evidence is counted as of the read's belief time;
- identity: when a repeated assertion is the same fact and when it is a new one (another
  namespace, subject, predicate, object or validity window; a retracted fact is not revived);
  a hypothesis-generated sequence of writes is compared with a brute-force model;
- the two clocks: ``valid_from`` is inclusive and ``valid_to`` exclusive, ``recorded_at`` is
  inclusive and ``retracted_at`` exclusive, at exactly the edge and one microsecond either side;
  ``end_fact`` versions, ``retract_fact`` and ``supersedes``;
- claims: grouped by normalised text, corroboration counts distinct sources (chunks; a claim
  without a chunk is its own source), superseded claims are not testimony;
- documents: chunk packing at exactly ``chunk_chars``, sentence and hard splits, list input;
- entities: aliases, merges (a merged-away id resolves to the survivor, transitively),
  ``resolve_entity``'s stages;
- the reads: hops 0-3, predicate filters, limits, ``traverse`` (a path whole or dropped),
  ``neighbours``, ``lookup``/``hydrate``, the envelopes and their JSON round trips.
"""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memlane
from memlane import ConflictError, NotFoundError, ValidationError
from memlane.domain.facts import layer
from memlane.values import facts_text as ftext
from memlane.values.facts import (
    Candidate,
    Chunk,
    Claim,
    ClaimGroup,
    Context,
    Document,
    Entity,
    Fact,
    record_from_dict,
)
from memlane.values.facts import (
    Path as GraphPath,
)

NS = "team/acme"
US = timedelta(microseconds=1)
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    """A settable clock (like conftest's FakeClock), usable inside hypothesis examples."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)


def open_store(folder: Path, embedder: str | None = None) -> tuple[Any, Clock]:
    clock = Clock()
    return memlane.open(str(folder / "m.db"), embedder=embedder, clock=clock), clock


@pytest.fixture
def store(tmp_path: Path):
    mem, clock = open_store(tmp_path)
    yield mem, clock
    mem.close()


def agent_view(mem, name: str):
    """The calling agent's view of the memory, as the service uses it."""
    from memlane.core.access import Access

    access = Access(mem)
    return access.view(access.create_agent(name)[0])


def holding(mem, entity_ids, *, valid_at=None, believed_at=None, predicate=None, hops=0):
    """facts_context listing (no query) of every fact holding at the given times around the given entities."""
    time: Any = "current"
    if valid_at is not None or believed_at is not None:
        time = {k: v for k, v in (("valid_at", valid_at), ("believed_at", believed_at)) if v is not None}
    return mem.facts_context("", entity_ids=list(entity_ids), hops=hops, predicate=predicate, time=time, limit=100)


# -- evidence: one fact, distinct sources ------------------------------------------------------


def test_evidence_counts_distinct_sources_and_one_anonymous_source(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    first = mem.assert_fact(NS, kim.id, "lives in", "Lisbon")
    assert (first.evidence_count, first.sources) == (1, [])  # unsourced: one anonymous source
    clock.advance()
    again = mem.assert_fact(NS, kim.id, "lives in", "Lisbon")
    assert again.id == first.id and again.evidence_count == 1  # the anonymous source counts once
    clock.advance()
    sourced = mem.assert_fact(NS, kim.id, "lives in", "Lisbon", source="note:1")
    assert sourced.id == first.id
    assert (sourced.evidence_count, sourced.sources) == (2, ["note:1"])
    clock.advance()
    repeat = mem.assert_fact(NS, kim.id, "Lives  In", "Lisbon", source="note:1")
    assert repeat.id == first.id and repeat.evidence_count == 2  # the same source counts once
    clock.advance()
    other = mem.assert_fact(NS, kim.id, "lives_in", "Lisbon", source="note:2")
    assert (other.evidence_count, other.sources) == (3, ["note:1", "note:2"])
    assert mem.lookup([first.id])[0].evidence_count == 3
    facts = holding(mem, [kim.id])["facts"]
    assert [(f.id, f.evidence_count) for f in facts] == [(first.id, 3)]


def test_sources_are_listed_in_the_order_they_were_recorded(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    for source in ("zeta", "alpha", "mid"):
        fact = mem.assert_fact(NS, kim.id, "likes", "tea", source=source)
        clock.advance()
    assert fact.sources == ["zeta", "alpha", "mid"]
    assert fact.evidence_count == 3


def test_evidence_is_counted_as_of_the_belief_time(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    fact = mem.assert_fact(NS, kim.id, "likes", "tea", source="a")
    t1 = clock.now
    clock.advance(10)
    mem.assert_fact(NS, kim.id, "likes", "tea", source="b")
    t2 = clock.now
    clock.advance(10)

    def count(at):
        facts = holding(mem, [kim.id], believed_at=at)["facts"]
        return [(f.id, f.evidence_count, f.sources) for f in facts]

    assert count(t1) == [(fact.id, 1, ["a"])]
    assert count(t2 - US) == [(fact.id, 1, ["a"])]
    assert count(t2) == [(fact.id, 2, ["a", "b"])]  # evidence recorded exactly then is believed then
    assert count(clock.now) == [(fact.id, 2, ["a", "b"])]
    assert count(t1 - US) == []  # before the fact was recorded


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ("nothing", True),
        ("predicate spelling", True),
        ("namespace", False),
        ("subject", False),
        ("predicate", False),
        ("object value", False),
        ("object type", False),
        ("object entity", False),
    ],
)
def test_a_repeated_assertion_is_the_same_fact_only_for_the_same_statement(store, change, same):
    mem, clock = store
    kim, lee, oslo, rome = (mem.add_entity(NS, n) for n in ("Kim", "Lee", "Oslo", "Rome"))
    base = {"namespace": NS, "subject": kim.id, "predicate": "visited", "object": oslo.id}
    first = mem.assert_fact(base["namespace"], base["subject"], base["predicate"], base["object"], source="s1")
    if change in ("object value", "object type"):
        first = mem.assert_fact(NS, kim.id, "visited", "1", source="s1")
        base["object"] = "1"
    clock.advance()
    changed = dict(base)
    changed.update(
        {
            "nothing": {},
            "predicate spelling": {"predicate": "  VISITED "},
            "namespace": {"namespace": "team/other"},
            "subject": {"subject": lee.id},
            "predicate": {"predicate": "visits"},
            "object value": {"object": "2"},
            "object type": {"object": 1},
            "object entity": {"object": rome.id},
        }[change]
    )
    second = mem.assert_fact(
        changed["namespace"], changed["subject"], changed["predicate"], changed["object"], source="s2"
    )
    assert (second.id == first.id) is same
    assert second.evidence_count == (2 if same else 1)
    assert mem.lookup([first.id])[0].evidence_count == (2 if same else 1)


def test_a_merged_away_subject_or_object_asserts_the_survivors_fact(store):
    mem, clock = store
    kim, dup, oslo, oslo2 = (mem.add_entity(NS, n) for n in ("Kim", "K.", "Oslo", "Oslo city"))
    first = mem.assert_fact(NS, kim.id, "visited", oslo.id, source="a")
    mem.merge_entities(kim.id, dup.id)
    mem.merge_entities(oslo.id, oslo2.id)
    clock.advance()
    again = mem.assert_fact(NS, dup.id, "visited", oslo2.id, source="b")
    assert again.id == first.id and again.evidence_count == 2
    assert (again.subject, again.object) == (kim.id, oslo.id)
    assert (again.subject_name, again.object_name) == ("Kim", "Oslo")


def test_a_retracted_fact_is_not_revived_by_repeating_it(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    old = mem.assert_fact(NS, kim.id, "likes", "tea", source="a")
    clock.advance()
    mem.retract_fact(old.id)
    clock.advance()
    new = mem.assert_fact(NS, kim.id, "likes", "tea", source="a")
    assert new.id != old.id and new.evidence_count == 1 and new.retracted_at is None
    assert mem.lookup([old.id])[0].retracted_at is not None
    assert [f.id for f in holding(mem, [kim.id])["facts"]] == [new.id]


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ((None, None), (None, None), True),
        (("2026-01-01", "2026-02-01"), (None, None), True),  # no window given: not contradicted
        (("2026-01-01", "2026-02-01"), ("2026-01-01", None), True),
        (("2026-01-01", "2026-02-01"), (None, "2026-02-01"), True),
        (("2026-01-01", "2026-02-01"), ("2026-01-01", "2026-02-01"), True),
        (("2026-01-01", "2026-02-01"), ("2026-01-02", None), False),
        (("2026-01-01", "2026-02-01"), (None, "2026-02-02"), False),
        (("2026-01-01", "2026-02-01"), ("2026-01-01T00:00:00.000001", None), False),
        ((None, None), ("2026-01-01", None), False),  # a window where there was none is another fact
        ((None, None), (None, "2026-01-01"), False),
    ],
)
def test_a_repeated_assertion_with_another_window_is_a_new_fact(store, first, second, same):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    a = mem.assert_fact(NS, kim.id, "in", "Oslo", valid_from=first[0], valid_to=first[1], source="a")
    clock.advance()
    b = mem.assert_fact(NS, kim.id, "in", "Oslo", valid_from=second[0], valid_to=second[1], source="b")
    assert (a.id == b.id) is same
    if same:
        assert (b.evidence_count, b.valid_from, b.valid_to) == (2, a.valid_from, a.valid_to)
    else:
        assert b.evidence_count == 1 and a.evidence_count == 1
        assert b.valid_from == (None if second[0] is None else layer._time(second[0], "x"))


def test_an_ended_fact_still_gains_evidence_on_its_new_version(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    fact = mem.assert_fact(NS, kim.id, "in", "Oslo", valid_from="2026-01-01", source="a")
    clock.advance()
    ended = mem.end_fact(fact.id, "2026-03-01")
    assert (ended.id, ended.version, ended.evidence_count) == (fact.id, 2, 1)
    clock.advance()
    again = mem.assert_fact(NS, kim.id, "in", "Oslo", source="b")
    assert (again.id, again.version, again.evidence_count) == (fact.id, 2, 2)
    assert again.valid_to == datetime(2026, 3, 1, tzinfo=UTC)


# -- a brute-force model of facts, versions and evidence under random writes -----------------


D1, D2, D3 = T0 - timedelta(days=1), T0 + timedelta(seconds=5), T0 + timedelta(days=1)
OPS = st.one_of(
    st.tuples(
        st.just("assert"),
        st.integers(0, 1),  # subject
        st.sampled_from(["likes", "Likes ", "owns"]),
        st.integers(0, 2),  # object: entity C, "x", 1
        st.sampled_from([None, D1, D2]),
        st.sampled_from([None, D2, D3]),
        st.sampled_from([None, "s1", "s2"]),
        st.one_of(st.none(), st.integers(0, 30)),  # supersedes a known fact
    ),
    # the statement of a known fact again: another source, and no, the same, half or a shifted window
    st.tuples(
        st.just("again"),
        st.integers(0, 30),
        st.sampled_from([None, "s1", "s2", "s3"]),
        st.sampled_from(["none", "same", "from", "to", "shift", "later end"]),
    ),
    st.tuples(st.just("retract"), st.integers(0, 30)),
    st.tuples(st.just("end"), st.integers(0, 30), st.sampled_from([D1, D2, D3])),
)


class Model:
    """Rows (one per version) and evidence as the rules say they must be."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.evidence: dict[str, dict[str, datetime]] = {}
        self.order: list[str] = []  # fact ids, first asserted first
        self.statement: dict[str, tuple[int, str, int]] = {}  # fact id: (subject, predicate, object) as drawn

    def latest(self, fid: str) -> dict[str, Any]:
        return max((r for r in self.rows if r["id"] == fid), key=lambda r: r["version"])

    def close(self, fid: str, now: datetime) -> None:
        row = self.latest(fid)
        assert row["ret"] is None
        row["ret"] = now

    def sources(self, fid: str, believed: datetime | None) -> tuple[int, list[str]]:
        ev = [(at, src) for src, at in self.evidence[fid].items() if believed is None or at <= believed]
        return len(ev), [src for _, src in sorted(ev) if src]

    def holding(self, valid: datetime, believed: datetime) -> set[tuple[str, int, int]]:
        return {
            (r["id"], r["version"], self.sources(r["id"], believed)[0])
            for r in self.rows
            if r["rec"] <= believed
            and (r["ret"] is None or r["ret"] > believed)
            and (r["vf"] is None or r["vf"] <= valid)
            and (r["vt"] is None or r["vt"] > valid)
        }


def check_fact(model: Model, fact: Fact) -> None:
    row = model.latest(fact.id)
    count, sources = model.sources(fact.id, None)
    assert (fact.version, fact.valid_from, fact.valid_to) == (row["version"], row["vf"], row["vt"])
    assert (fact.recorded_at, fact.retracted_at) == (row["rec"], row["ret"])
    assert (fact.evidence_count, fact.sources) == (count, sources)


def run_sequence(mem, clock: Clock, ops) -> None:
    a, b, c = (mem.add_entity(NS, n) for n in ("Ann", "Bo", "Cy"))
    subjects, objects = [a.id, b.id], [c.id, "x", 1]
    model = Model()
    times = []
    for op in ops:
        clock.advance()
        now = clock.now
        times.append(now)
        if op[0] == "again":
            if not model.order:
                continue
            fid = model.order[op[1] % len(model.order)]
            row = model.latest(fid)
            vf, vt = {
                "none": (None, None),
                "same": (row["vf"], row["vt"]),
                "from": (row["vf"], None),
                "to": (None, row["vt"]),
                "shift": ((row["vf"] or D1) + US, row["vt"]),
                "later end": (row["vf"], (row["vt"] or D3) + US),
            }[op[3]]
            op = ("assert", *model.statement[fid], vf, vt, op[2], None)
        if op[0] == "assert":
            _, si, pred, oi, vf, vt, src, sup = op
            key = (subjects[si], pred.strip().lower(), json_key(objects[oi]))
            target = None if sup is None or not model.order else model.order[sup % len(model.order)]
            if vf is not None and vt is not None and vt <= vf:
                with pytest.raises(ValidationError):
                    mem.assert_fact(NS, subjects[si], pred, objects[oi], valid_from=vf, valid_to=vt, source=src)
                continue
            if target is not None and model.latest(target)["ret"] is not None:
                with pytest.raises(ConflictError):
                    mem.assert_fact(NS, subjects[si], pred, objects[oi], valid_from=vf, valid_to=vt, supersedes=target)
                continue
            fact = mem.assert_fact(
                NS, subjects[si], pred, objects[oi], valid_from=vf, valid_to=vt, source=src, supersedes=target
            )
            if target is not None:
                model.close(target, now)
            matches = [
                r["id"]
                for r in model.rows
                if r["key"] == key
                and r["ret"] is None
                and (vf is None or r["vf"] == vf)
                and (vt is None or r["vt"] == vt)
            ]
            if matches:
                assert fact.id in matches  # evidence, not a duplicate
            else:
                assert fact.id not in model.evidence  # a new fact
                model.rows.append(
                    {"id": fact.id, "version": 1, "key": key, "vf": vf, "vt": vt, "rec": now, "ret": None}
                )
                model.evidence[fact.id] = {}
                model.order.append(fact.id)
                model.statement[fact.id] = (si, pred, oi)
            model.evidence[fact.id].setdefault(src or "", now)
            check_fact(model, fact)
        elif not model.order:
            continue
        elif op[0] == "retract":
            fid = model.order[op[1] % len(model.order)]
            if model.latest(fid)["ret"] is not None:
                with pytest.raises(ConflictError, match="already retracted"):
                    mem.retract_fact(fid)
                continue
            fact = mem.retract_fact(fid)
            model.close(fid, now)
            check_fact(model, fact)
        else:
            fid, end = model.order[op[1] % len(model.order)], op[2]
            row = model.latest(fid)
            if row["ret"] is not None:
                with pytest.raises(ConflictError):
                    mem.end_fact(fid, end)
                continue
            if row["vf"] is not None and end <= row["vf"]:
                with pytest.raises(ValidationError):
                    mem.end_fact(fid, end)
                continue
            fact = mem.end_fact(fid, end)
            model.close(fid, now)
            model.rows.append({**row, "version": row["version"] + 1, "vt": end, "rec": now, "ret": None})
            check_fact(model, fact)
    clock.advance()
    for fact in mem.lookup(model.order):
        check_fact(model, fact)
    current = {(fid, model.latest(fid)["version"]) for fid, *_ in model.holding(clock.now, clock.now)}
    hydrated = mem.hydrate(model.order)
    assert {(f.id, f.version) for f in hydrated if f is not None} == current
    everyone = [a.id, b.id, c.id]

    def read(valid: datetime | None, believed: datetime | None) -> set[tuple[str, int, int]]:
        facts = holding(mem, everyone, valid_at=valid, believed_at=believed)["facts"]
        return {(f.id, f.version, f.evidence_count) for f in facts}

    assert read(None, None) == model.holding(clock.now, clock.now)
    for edge in (D1, D2, D3, D1 + US, D3 + US):
        for valid in (edge - US, edge, edge + US):
            assert read(valid, None) == model.holding(valid, clock.now), (valid, "valid")
    for at in times:
        for believed in (at - US, at):
            assert read(D2, believed) == model.holding(D2, believed), (believed, "believed")


def json_key(value: Any) -> str:
    import json

    return json.dumps(value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=12))
# sequences the rules turn on, always run: a retracted fact repeated, an ended fact repeated with and
# without its window, the anonymous source then named ones, a fact superseding itself
@example([("assert", 0, "likes", 1, None, None, "s1", None), ("retract", 0), ("again", 0, "s1", "none")])
@example(
    [
        ("assert", 0, "likes", 0, D1, None, None, None),
        ("end", 0, D2),
        ("again", 0, "s2", "same"),
        ("again", 0, None, "none"),
        ("again", 0, "s1", "from"),
        ("again", 0, "s1", "later end"),
    ]
)
@example(
    [
        ("assert", 1, "owns", 2, None, None, None, None),
        ("again", 0, None, "none"),
        ("again", 0, "s1", "to"),
        ("again", 0, "s2", "shift"),
        ("again", 0, "s2", "none"),
    ]
)
@example(
    [
        ("assert", 0, "likes", 1, None, D3, "s1", None),
        ("assert", 0, "Likes ", 1, None, None, "s2", 0),
        ("again", 1, None, "same"),
    ]
)
def test_random_writes_agree_with_a_brute_force_model(tmp_path_factory, ops):
    mem, clock = open_store(tmp_path_factory.mktemp("model"))
    try:
        run_sequence(mem, clock, ops)
    finally:
        mem.close()


# -- the two clocks at their edges ---------------------------------------------------------------


def test_valid_from_is_inclusive_and_valid_to_exclusive_in_every_read(store):
    mem, clock = store
    start, end = T0 + timedelta(days=1), T0 + timedelta(days=2)
    kim, oslo = mem.add_entity(NS, "Kim"), mem.add_entity(NS, "Oslo")
    edge = mem.assert_fact(NS, kim.id, "in", oslo.id, valid_from=start, valid_to=end)
    mem.assert_fact(NS, oslo.id, "population", 700_000)  # reached only through the edge
    clock.advance()
    expected = {start - US: False, start: True, start + US: True, end - US: True, end: False, end + US: False}
    for at, holds in expected.items():
        ids = [f.id for f in holding(mem, [kim.id], valid_at=at)["facts"]]
        assert (edge.id in ids) is holds, at
        one_hop = [f.text for f in holding(mem, [kim.id], valid_at=at, hops=1)["facts"]]
        assert ("Oslo population 700000" in one_hop) is holds, at  # the neighbourhood grows only over holding edges
        paths = mem.traverse([kim.id], hops=1, time={"valid_at": at})
        assert (len(paths["paths"]), paths.dropped["broken_paths"]) == ((1, 0) if holds else (0, 1)), at
        clock.now = at  # "current" and hydrate read the world now
        assert (mem.hydrate([edge.id])[0] is not None) is holds, at
        assert ("Kim in Oslo" in mem.resolve_entity("Kim")["entities"][0].facts) is holds, at
        assert (edge.id in [f.id for f in holding(mem, [kim.id])["facts"]]) is holds, at
        assert mem.lookup([edge.id])[0].id == edge.id  # lookup reads every state


def test_recorded_at_is_inclusive_and_retracted_at_exclusive(store):
    mem, clock = store
    kim, oslo = mem.add_entity(NS, "Kim"), mem.add_entity(NS, "Oslo")
    clock.advance(10)
    recorded = clock.now
    fact = mem.assert_fact(NS, kim.id, "in", oslo.id, source="a")
    clock.advance(10)
    retracted = clock.now
    assert mem.retract_fact(fact.id).retracted_at == retracted
    clock.advance(10)
    expected = {recorded - US: False, recorded: True, retracted - US: True, retracted: False, retracted + US: False}
    for at, believed in expected.items():
        ctx = holding(mem, [kim.id], believed_at=at)
        assert ([f.id for f in ctx["facts"]] == [fact.id]) is believed, at
        paths = mem.traverse([kim.id], hops=1, time={"believed_at": at})
        assert len(paths["paths"]) == (1 if believed else 0), at
        assert paths.dropped["broken_paths"] == 0  # not believed is no edge at all, not a broken path
        if believed:
            assert paths["paths"][0].facts[0].evidence_count == 1
            assert ctx["facts"][0].retracted_at == retracted  # the row as it is stored


def test_supersedes_retracts_the_old_fact_in_the_same_write(store):
    mem, clock = store
    plan = mem.add_entity(NS, "Plan")
    march = mem.assert_fact(NS, plan.id, "cutover", "2026-03-01", source="v1")
    clock.advance()
    changed = clock.now
    april = mem.assert_fact(NS, plan.id, "cutover", "2026-04-15", source="v2", supersedes=march.id)
    assert april.id != march.id and april.recorded_at == changed
    old = mem.lookup([march.id])[0]
    assert old.retracted_at == changed and old.version == 1
    assert [f.value for f in holding(mem, [plan.id])["facts"]] == ["2026-04-15"]
    assert [f.value for f in holding(mem, [plan.id], believed_at=changed - US)["facts"]] == ["2026-03-01"]
    with pytest.raises(ConflictError, match="already retracted"):
        mem.assert_fact(NS, plan.id, "cutover", "2026-05-01", supersedes=march.id)
    assert [f.value for f in holding(mem, [plan.id])["facts"]] == ["2026-04-15"]  # the refused write left nothing
    with pytest.raises(ValidationError) as err:
        mem.assert_fact(NS, plan.id, "cutover", "x", supersedes="item_1")
    assert err.value.field == "supersedes"
    with pytest.raises(NotFoundError, match="no fact"):
        mem.assert_fact(NS, plan.id, "cutover", "x", supersedes="fact_" + "0" * 32)


def test_superseding_the_fact_being_repeated_makes_a_new_fact(store):
    mem, clock = store
    plan = mem.add_entity(NS, "Plan")
    first = mem.assert_fact(NS, plan.id, "cutover", "2026-03-01", source="v1")
    clock.advance()
    again = mem.assert_fact(NS, plan.id, "cutover", "2026-03-01", source="v2", supersedes=first.id)
    assert again.id != first.id and again.evidence_count == 1 and again.sources == ["v2"]


def test_end_fact_appends_a_version_and_keeps_the_old_one_readable(store):
    mem, clock = store
    kim, acme = mem.add_entity(NS, "Kim"), mem.add_entity(NS, "Acme")
    start = T0 - timedelta(days=30)
    fact = mem.assert_fact(NS, kim.id, "works at", acme.id, valid_from=start, source="hr")
    clock.advance()
    before_end = clock.now
    clock.advance()
    ended = mem.end_fact(fact.id, T0)
    assert (ended.id, ended.version, ended.valid_from, ended.valid_to) == (fact.id, 2, start, T0)
    assert (ended.recorded_at, ended.retracted_at, ended.evidence_count, ended.sources) == (clock.now, None, 1, ["hr"])
    assert mem.lookup([fact.id])[0].version == 2
    then = holding(mem, [kim.id], believed_at=before_end, valid_at=T0)["facts"]
    assert [(f.version, f.valid_to) for f in then] == [(1, None)]  # believed then: no end known
    now = holding(mem, [kim.id], valid_at=T0 - US)["facts"]
    assert [(f.version, f.valid_to) for f in now] == [(2, T0)]
    assert holding(mem, [kim.id], valid_at=T0)["facts"] == []
    clock.advance()
    twice = mem.end_fact(fact.id, T0 - timedelta(days=1))  # a corrected end is one more version
    assert (twice.version, twice.valid_from, twice.valid_to) == (3, start, T0 - timedelta(days=1))
    with pytest.raises(ValidationError) as err:
        mem.end_fact(fact.id, start)
    assert err.value.field == "valid_to" and "later than the fact's valid_from" in str(err.value)
    assert f"({start.isoformat(timespec='microseconds')})" in str(err.value)  # the start it must come after
    assert mem.lookup([fact.id])[0].version == 3  # the refused end changed nothing
    with pytest.raises(ValidationError) as err:
        mem.end_fact(fact.id, None)
    assert err.value.field == "valid_to" and "is required" in str(err.value)
    mem.retract_fact(fact.id)
    with pytest.raises(ConflictError, match="already retracted"):
        mem.end_fact(fact.id, T0)
    with pytest.raises(ValidationError) as err:
        mem.end_fact("ent_1", T0)
    assert err.value.field == "fact_id"


def test_times_without_a_zone_are_utc_and_other_zones_are_converted(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    plus2 = datetime(2026, 3, 1, 14, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    fact = mem.assert_fact(NS, kim.id, "in", "Oslo", valid_from="2026-03-01T12:00:00", valid_to=plus2)
    assert fact.valid_from == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert fact.valid_to == datetime(2026, 3, 1, 14, tzinfo=UTC) and fact.valid_to.utcoffset() == timedelta(0)
    inside = holding(mem, [kim.id], valid_at="2026-03-01T15:59:59+02:00")["facts"]
    assert [f.id for f in inside] == [fact.id]
    assert holding(mem, [kim.id], valid_at="2026-03-01T16:00:00+02:00")["facts"] == []
    with pytest.raises(ValidationError) as err:
        mem.assert_fact(NS, kim.id, "in", "Oslo", valid_from="tomorrow")
    assert err.value.field == "valid_from" and "ISO-8601" in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.assert_fact(NS, kim.id, "in", "Oslo", valid_to=12)
    assert err.value.field == "valid_to" and "datetime or ISO-8601 text, not int" in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.assert_fact(NS, kim.id, "in", "Oslo", valid_from=T0, valid_to=T0)
    assert err.value.field == "valid_to" and "later than valid_from" in str(err.value)


# -- claims: grouped by what they say, corroborated by distinct sources ------------------------


def groups_of(mem, query, **kw):
    return [(g.text, g.corroboration, len(g.claims)) for g in mem.claims_and_sources_context(query, **kw)["claims"]]


def test_claims_group_by_normalised_text_and_count_distinct_chunks(store):
    mem, clock = store
    doc = mem.add_document(NS, "standup", ["Ravi: the cutover moves.", "Dana: yes it moves.", "Lee: ok."])
    one, two, _ = doc.chunk_ids
    mem.add_claim(NS, "The cutover moves to April", speaker="Ravi", chunk=one)
    clock.advance()
    mem.add_claim(NS, "the CUTOVER moves to april!", speaker="Ravi again", chunk=one)  # the same source
    clock.advance()
    assert groups_of(mem, "cutover april") == [("The cutover moves to April", 1, 2)]
    mem.add_claim(NS, "The  cutover, moves to April.", speaker="Dana", chunk=two)
    clock.advance()
    assert groups_of(mem, "cutover april") == [("The cutover moves to April", 2, 3)]
    mem.add_claim(NS, "the cutover moves to Apríl", speaker="Lee")  # no chunk: its own source
    mem.add_claim(NS, "the cutover moves to april", speaker="Mo")
    assert groups_of(mem, "cutover april") == [("The cutover moves to April", 4, 5)]
    mem.add_claim(NS, "the cutover moves to May", speaker="Mo")  # says something else
    got = groups_of(mem, "cutover")
    assert sorted(got) == [("The cutover moves to April", 4, 5), ("the cutover moves to May", 1, 1)]


def test_a_group_lists_its_claims_oldest_first_and_shows_the_first_text(store):
    mem, clock = store
    texts = ["Launch is Friday", "launch is friday", "LAUNCH IS FRIDAY"]
    made = []
    for text in texts:
        made.append(mem.add_claim(NS, text, speaker=text[:3], asserted_at="2026-01-02T09:00:00Z"))
        clock.advance()
    (group,) = mem.claims_and_sources_context("launch friday")["claims"]
    assert group.text == "Launch is Friday" and [c.id for c in group.claims] == [c.id for c in made]
    assert group.claims[0].asserted_at == datetime(2026, 1, 2, 9, tzinfo=UTC)
    assert group.claims[0].speaker == "Lau" and group.claims[0].namespace == ("team", "acme")
    assert group.score == round(1 / 11, 10) and group.ranks == {"lexical": 1}


def test_superseded_claims_are_not_testimony(store):
    mem, clock = store
    a = mem.add_claim(NS, "Launch is Friday", speaker="A")
    b = mem.add_claim(NS, "launch is friday", speaker="B")
    clock.advance()
    gone = mem.supersede_claim(b.id, a.id)
    assert (gone.superseded_by, gone.superseded_at) == (a.id, clock.now)
    assert mem.lookup([b.id])[0].superseded_at == clock.now  # written, not only returned
    assert groups_of(mem, "launch friday") == [("Launch is Friday", 1, 1)]
    assert mem.hydrate([a.id, b.id])[1] is None and mem.hydrate([a.id])[0].id == a.id
    mem.supersede_claim(a.id)
    assert groups_of(mem, "launch friday") == []
    assert mem.lookup([a.id])[0].superseded_by is None
    with pytest.raises(ConflictError, match="already superseded"):
        mem.supersede_claim(a.id)
    c = mem.add_claim(NS, "Launch moved")
    for bad in (c.id, "claim_" + "0" * 32, 7):
        with pytest.raises(NotFoundError, match="no other claim"):
            mem.supersede_claim(c.id, bad)
    with pytest.raises(NotFoundError, match="no claim"):
        mem.supersede_claim("claim_" + "0" * 32)
    assert mem.lookup([c.id])[0].superseded_at is None


def test_groups_hold_only_claims_in_scope_and_k_truncates(store):
    mem, clock = store
    mem.add_claim("team/acme", "Launch is Friday", speaker="A")
    clock.advance()
    mem.add_claim("team/other", "launch is friday", speaker="B")
    mem.add_claim("team/acme", "Launch is Monday", speaker="C")
    everything = groups_of(mem, "launch friday monday")
    assert sorted(everything) == [("Launch is Friday", 2, 2), ("Launch is Monday", 1, 1)]
    scoped = groups_of(mem, "launch friday", namespace_prefix="team/acme")
    assert sorted(scoped) == [("Launch is Friday", 1, 1), ("Launch is Monday", 1, 1)]
    top = mem.claims_and_sources_context("launch friday monday", k=1)
    assert len(top["claims"]) == 1 and top.truncated == ["claims"] and top.counts["claims"] == 1
    assert mem.claims_and_sources_context("launch friday monday", k=2).truncated == []


def test_claims_and_passages_about_entities(store):
    mem, clock = store
    billing, other = mem.add_entity(NS, "Billing"), mem.add_entity(NS, "Other")
    dup = mem.add_entity(NS, "Billing v2")
    cited = mem.add_document(NS, "standup", ["the billing cutover is on", "more billing talk"])
    uncited = mem.add_document(NS, "notes", ["billing notes nobody cites"])
    mem.add_claim(NS, "billing cutover is on", chunk=cited.chunk_ids[0], about=[dup.id])
    mem.add_claim(NS, "billing is late", about=[other.id])
    mem.merge_entities(billing.id, dup.id)
    ctx = mem.claims_and_sources_context("billing", entity_ids=[billing.id])
    assert [g.text for g in ctx["claims"]] == ["billing cutover is on"]  # claims about the merged-away id count
    assert sorted(p.id for p in ctx["passages"]) == sorted(cited.chunk_ids)  # every passage of a cited document
    assert uncited.chunk_ids[0] not in [p.id for p in ctx["passages"]]
    assert ctx.notes == [] and ctx.params["entity_ids"] == [billing.id]
    unfiltered = mem.claims_and_sources_context("billing")
    assert len(unfiltered["claims"]) == 2 and len(unfiltered["passages"]) == 3
    lonely = mem.claims_and_sources_context("billing", entity_ids=[other.id])
    assert lonely["passages"] == [] and lonely.notes == ["no document is cited by a current claim about these entities"]
    claim = ctx["claims"][0].claims[0]
    mem.supersede_claim(claim.id)
    after = mem.claims_and_sources_context("billing", entity_ids=[billing.id])
    assert after["claims"] == [] and after["passages"] == []  # a superseded citation cites nothing
    with pytest.raises(NotFoundError):
        mem.claims_and_sources_context("billing", entity_ids=["ent_" + "0" * 32])
    with pytest.raises(ValidationError) as err:
        mem.claims_and_sources_context("billing", entity_ids="ent_1")
    assert err.value.field == "entity_ids"


def test_claims_envelope_reports_what_it_did(store):
    mem, _ = store
    doc = mem.add_document(NS, "d", ["one cutover", "two"])
    mem.add_claim(NS, "The cutover", chunk=doc.chunk_ids[0])
    ctx = mem.claims_and_sources_context("cutover", k=5, candidate_k=10)
    assert ctx.operation == "claims_and_sources_context"
    assert ctx.params == {"query": "cutover", "entity_ids": None, "k": 5, "candidate_k": 10}
    # the second passage is found on its context (the first), after the passage that holds the word
    assert ctx.counts == {"claims_lexical": 1, "passages_lexical": 2, "claims": 1, "passages": 2}
    assert ctx.dropped == {"claims": 0, "passages": 0} and ctx.truncated == [] and ctx.notes == []
    assert set(ctx.timings) == {"claims_ms", "passages_ms", "total_ms"}
    assert all(isinstance(v, float) and v >= 0 for v in ctx.timings.values())
    passage, neighbour = ctx["passages"]
    assert (passage.score, passage.ranks, passage.document_title, passage.position) == (
        round(1 / 11, 10),
        {"lexical": 1},
        "d",
        0,
    )
    assert (neighbour.text, neighbour.ranks, neighbour.position) == ("two", {"lexical": 2}, 1)
    with pytest.raises(ValidationError) as err:
        mem.claims_and_sources_context("  ")
    assert err.value.field == "query" and "is empty" in str(err.value)
    for field, kw in (("k", {"k": 0}), ("k", {"k": 101}), ("candidate_k", {"candidate_k": 0})):
        with pytest.raises(ValidationError) as err:
            mem.claims_and_sources_context("x", **kw)
        assert err.value.field == field
    assert len(mem.claims_and_sources_context("x", k=100, candidate_k=400)["claims"]) == 0
    two = mem.add_document(NS, "e", ["cutover again", "cutover once more"])
    few = mem.claims_and_sources_context("cutover", k=1)
    assert len(few["passages"]) == 1 and few.truncated == ["passages"]
    assert len(mem.claims_and_sources_context("cutover", k=3)["passages"]) == 3 and two


def test_add_claims_checks_every_field_and_names_it(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    alice = agent_view(mem, "alice")
    for raw in ("x", {"text": "x"}, 7):  # as the service passes a body's field on
        for caller, ns in ((alice, "agent/alice"), (mem, NS)):  # the owner too: 7 was a raw TypeError
            with pytest.raises(ValidationError) as err:
                caller.add_claims(ns, raw)
            assert err.value.field == "claims" and "must be a list of claim objects" in str(err.value)
    cases = [
        ([1], "claims", "item 0 is not an object with a text"),
        ([{"text": "ok"}, {"text": " "}], "claims[1].text", "must not be empty"),
        ([{"text": "ok", "speaker": 3}], "claims[0].speaker", "must be a string"),
        ([{"text": "ok", "asserted_at": "soon"}], "claims[0].asserted_at", "ISO-8601"),
        ([{"text": "ok", "about": "ent_1"}], "claims[0].about", "must be a list of ids"),
        ([{"text": "ok", "about": ["ent_" + "z" * 32]}], "claims[0].about", "is not an entity id"),
        ([{"text": "ok", "said": "x"}], "claims[0].said", "is not a claim field"),
    ]
    for claims, field, message in cases:
        with pytest.raises(ValidationError) as err:
            mem.add_claims(NS, claims)
        assert (err.value.field, message in str(err.value)) == (field, True), claims
    with pytest.raises(ValidationError) as err:
        mem.add_claim(NS, "ok", about=["ent_" + "z" * 32])
    assert err.value.field == "about"
    with pytest.raises(NotFoundError, match="no chunk"):
        mem.add_claim(NS, "ok", chunk=5)
    twice = mem.add_claim(NS, "  spaced   out  ", about=[kim.id, kim.id])
    assert (twice.text, twice.about, twice.speaker, twice.chunk_id) == ("spaced out", [kim.id], None, None)
    assert mem.lookup([twice.id])[0].about == [kim.id]
    monkey = pytest.MonkeyPatch()
    monkey.setattr(layer, "MAX_BATCH", 2)
    try:
        with pytest.raises(ValidationError) as err:
            mem.add_claims(NS, [{"text": "a"}, {"text": "b"}, {"text": "c"}])
        assert err.value.field == "claims" and "at most 2 per call" in str(err.value)
        assert len(mem.add_claims(NS, [{"text": "a"}, {"text": "b"}])) == 2
    finally:
        monkey.undo()


# -- documents: chunks of at most chunk_chars ------------------------------------------------------


def test_paragraphs_pack_up_to_exactly_chunk_chars():
    a = "a" * 60
    for b_len, pieces in ((38, 1), (39, 2)):  # 60 + 2 ("\n\n") + 38 == 100
        b = "b" * b_len
        assert ftext.chunk(f"{a}\n\n{b}", 100) == ([f"{a}\n\n{b}"] if pieces == 1 else [a, b])
    assert ftext.chunk(f"{a}\n \n{'b' * 38}\n\n\n{'c' * 10}", 100) == [f"{a}\n\n{'b' * 38}", "c" * 10]
    assert ftext.chunk("  \n\n  ", 100) == []


def test_a_paragraph_of_exactly_chunk_chars_stays_whole_and_a_longer_one_splits_at_sentences():
    exact = ("Word " * 20)[:99] + "."
    assert len(exact) == 100 and ftext.chunk(exact, 100) == [exact]
    s1, s2, s3 = "A" * 40 + ".", "B" * 40 + "!", "C" * 40 + "?"
    assert ftext.chunk(f"{s1} {s2} {s3}", 100) == [f"{s1} {s2}", s3]  # sentences packed with one space
    # 84 characters with two spaces: too long whole; its sentences re-joined by one space make 83
    assert ftext.chunk(f"{s1}  {s2}", 83) == [f"{s1} {s2}"]
    assert ftext.chunk(f"{s1}  {s2}", 82) == [s1, s2]
    assert ftext.chunk(f"{s1}  {s2}", 84) == [f"{s1}  {s2}"]


def test_a_long_sentence_is_cut_at_the_last_space_before_the_limit_or_hard_at_it():
    assert ftext._hard_split("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]
    words = "aaaa " * 50  # spaces every five characters
    pieces = ftext._hard_split(words.strip(), 100)
    assert all(len(p) <= 100 for p in pieces) and " ".join(pieces) == words.strip()
    assert pieces[0] == ("aaaa " * 20).strip()  # cut at the last space before 100
    # a space at or before half the limit is too early: cut hard at the limit
    early = "y" * 50 + " " + "y" * 80
    assert ftext._hard_split(early, 100) == ["y" * 50 + " " + "y" * 49, "y" * 31]
    late = "y" * 51 + " " + "y" * 80
    assert ftext._hard_split(late, 100) == ["y" * 51, "y" * 80]
    assert ftext._hard_split("z" * 100, 100) == ["z" * 100]
    assert ftext._hard_split("", 100) == []
    assert ftext.chunk("q" * 201, 100) == ["q" * 100, "q" * 100, "q"]


def test_a_list_is_one_chunk_per_element_and_never_packed():
    assert ftext.chunk(["one.", "  ", " two. ", "three."], 100) == ["one.", "two.", "three."]
    assert ftext.chunk(["x" * 150], 100) == ["x" * 100, "x" * 50]


def test_add_document_stores_the_chunks_in_order_and_checks_its_input(store):
    mem, clock = store
    text = "\n\n".join(["p" * 60, "q" * 38, "r" * 39])
    doc = mem.add_document(NS, " Notes ", text, source="wiki:1", created_at="2025-12-31T00:00:00", chunk_chars=100)
    assert (doc.title, doc.source, doc.chunk_count, doc.namespace) == ("Notes", "wiki:1", 2, ("team", "acme"))
    assert (doc.created_at, doc.recorded_at) == (datetime(2025, 12, 31, tzinfo=UTC), clock.now)
    chunks = mem.lookup(doc.chunk_ids)
    assert [c.text for c in chunks] == ["p" * 60 + "\n\n" + "q" * 38, "r" * 39]
    assert [(c.position, c.document_id, c.document_title) for c in chunks] == [
        (0, doc.id, "Notes"),
        (1, doc.id, "Notes"),
    ]
    stored = mem.lookup([doc.id])[0]
    assert stored == doc
    plain = mem.add_document(NS, "plain", "short")
    assert (plain.source, plain.created_at, plain.chunk_count) == (None, None, 1)
    assert mem.lookup([plain.id])[0].source is None
    default = mem.add_document(NS, "long", "\n\n".join(["w" * 700, "v" * 600]))  # 1302 > 1200
    assert default.chunk_count == 2
    assert mem.add_document(NS, "long", "\n\n".join(["w" * 600, "v" * 598])).chunk_count == 1
    for chunk_chars, ok in ((99, False), (100, True), (100_000, True), (100_001, False), (True, False), ("1", False)):
        if ok:
            mem.add_document(NS, "t", "x", chunk_chars=chunk_chars)
            continue
        with pytest.raises(ValidationError) as err:
            mem.add_document(NS, "t", "x", chunk_chars=chunk_chars)
        assert err.value.field == "chunk_chars"
    for bad, field, message in (
        (5, "text", "must be a string or a list of strings, not int"),
        (["ok", 5], "text", "must be a string"),
        ([" ", ""], "text", "has no words"),
        ("\n\n \n", "text", "has no words"),
    ):
        with pytest.raises(ValidationError) as err:
            mem.add_document(NS, "t", bad)
        assert err.value.field == field and message in str(err.value), bad
    with pytest.raises(ValidationError) as err:
        mem.add_document(NS, "t", "x", created_at="later")
    assert err.value.field == "created_at"
    with pytest.raises(ValidationError) as err:
        mem.add_document(NS, " ", "x")
    assert err.value.field == "title"
    with pytest.raises(ValidationError) as err:
        mem.add_document(NS, "t", "x", source="")
    assert err.value.field == "source"


def test_neighbours_are_the_passages_around_a_chunk_in_order(store):
    mem, _ = store
    doc = mem.add_document(NS, "talk", [f"turn {i}" for i in range(6)])
    other = mem.add_document(NS, "other", ["elsewhere"])
    ids = doc.chunk_ids
    assert [c.id for c in mem.neighbours(ids[2])] == ids[1:4]
    assert [c.id for c in mem.neighbours(ids[2], before=0, after=0)] == [ids[2]]
    assert [c.id for c in mem.neighbours(ids[2], before=2, after=50)] == ids[0:6]
    assert [c.id for c in mem.neighbours(ids[5], before=1, after=3)] == ids[4:6]
    assert [c.id for c in mem.neighbours(other.chunk_ids[0], before=5, after=5)] == other.chunk_ids
    for before, after, field in ((-1, 0, "before"), (51, 0, "before"), (0, 51, "after"), (0, -1, "after")):
        with pytest.raises(ValidationError) as err:
            mem.neighbours(ids[0], before=before, after=after)
        assert err.value.field == field
    assert len(mem.neighbours(ids[0], before=50, after=50)) == 6
    with pytest.raises(NotFoundError, match="no chunk"):
        mem.neighbours(123)


def test_normalise_ignores_case_accents_punctuation_and_spacing():
    assert ftext.normalise("José  O'Neil") == "jose o neil"
    assert ftext.normalise("  Straße_Ünïcode—ﬁx!! ") == "strasse unicode fix"
    assert ftext.normalise("A.B") == "a b" and ftext.normalise("...") == ""


# -- entities: names, aliases, merges --------------------------------------------------------------


def test_add_entity_returns_what_is_stored(store):
    mem, clock = store
    e = mem.add_entity("team/acme", "  Ravi   Kumar ", kind="person", aliases=["RK", "Ravi Kumar", "RK"], profile="eng")
    assert (e.namespace, e.kind, e.name, e.aliases, e.profile) == (
        ("team", "acme"),
        "person",
        "Ravi Kumar",
        ["RK"],
        "eng",
    )
    assert (e.merged_into, e.created_at) == (None, clock.now) and e.id.startswith("ent_") and len(e.id) == 36
    assert mem.lookup([e.id])[0] == e
    plain = mem.add_entity(["team", "acme"], "Thing")
    assert (plain.kind, plain.aliases, plain.profile) == ("thing", [], "")
    for kwargs, field, message in (
        ({"name": ""}, "name", "must not be empty"),
        ({"name": 5}, "name", "must be a string, not int"),
        ({"name": "x" * 1001}, "name", "at most 1,000"),
        ({"name": "x", "kind": " "}, "kind", "must not be empty"),
        ({"name": "x", "aliases": "RK"}, "aliases", "must be a list of names"),
        ({"name": "x", "aliases": [""]}, "aliases", "must not be empty"),
        ({"name": "x", "profile": 3}, "profile", "must be a string, not int"),
    ):
        with pytest.raises(ValidationError) as err:
            mem.add_entity(NS, **kwargs)
        assert err.value.field == field and message in str(err.value), kwargs
    assert mem.add_entity(NS, "x" * 1000).name == "x" * 1000


def test_aliases_resolve_and_land_on_the_survivor(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim Lee", aliases=["KL"])
    dup = mem.add_entity(NS, "K. Lee", aliases=["kimmy"])
    mem.merge_entities(kim.id, dup.id)
    after = mem.add_alias(dup.id, "The Kim")  # through the merged-away id
    assert after.id == kim.id and sorted(after.aliases) == ["K. Lee", "KL", "The Kim", "kimmy"]
    assert mem.add_alias(kim.id, "kl").aliases == after.aliases  # the same name normalised is no new alias
    for name, matched in (("Kim Lee", "name"), ("The Kim", "alias"), ("kimmy", "alias"), ("K. Lee", "name")):
        ctx = mem.resolve_entity(name)
        assert ctx.status == "resolved" and ctx["entities"][0].entity.id == kim.id, name
        assert ctx["entities"][0].matched == matched, name
    assert mem.resolve_entity("the   KIM!")["entities"][0].matched == "normalised"
    gone = mem.lookup([dup.id])[0]
    assert gone.merged_into == kim.id and mem.hydrate([dup.id, kim.id])[0] is None
    with pytest.raises(ValidationError) as err:
        mem.add_alias("kim", "x")
    assert err.value.field == "entity_id" and "is not an entity id" in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.add_alias(kim.id, "  ")
    assert err.value.field == "alias"
    with pytest.raises(NotFoundError, match="no entity"):
        mem.add_alias("ent_" + "0" * 32, "x")


def test_merges_are_transitive_and_facts_follow_the_survivor(store):
    mem, clock = store
    a, b, c, oslo = (mem.add_entity(NS, n) for n in ("Ann", "Anne", "Annie", "Oslo"))
    fact = mem.assert_fact(NS, c.id, "lives in", oslo.id, source="c-note")
    seen = mem.assert_fact(NS, oslo.id, "visited by", c.id)
    mem.merge_entities(b.id, c.id)
    mem.merge_entities(a.id, b.id)  # c -> b -> a
    assert mem.lookup([c.id])[0].merged_into == b.id
    survivor = mem.lookup([a.id])[0]
    assert sorted(survivor.aliases) == ["Anne", "Annie"]
    ctx = mem.resolve_entity("Annie")
    assert [x.entity.id for x in ctx["entities"]] == [a.id] and ctx["entities"][0].facts == ["Annie lives in Oslo"]
    stored = mem.lookup([fact.id, seen.id])
    assert (stored[0].subject, stored[0].subject_name) == (a.id, "Ann")
    assert (stored[1].object, stored[1].object_name) == (a.id, "Ann")  # the object follows the merge too
    for start in (a.id, b.id, c.id):
        facts = holding(mem, [start])["facts"]
        assert sorted(f.id for f in facts) == sorted([fact.id, seen.id]), start
        assert [p.entities for p in mem.traverse([start], hops=1)["paths"]] == [[a.id, oslo.id]] * 2
    with pytest.raises(ConflictError, match="nothing to merge"):
        mem.merge_entities(a.id, c.id)
    with pytest.raises(ConflictError, match="nothing to merge"):
        mem.merge_entities(c.id, a.id)
    with pytest.raises(ValidationError) as err:
        mem.merge_entities(a.id, "x")
    assert err.value.field == "merged"
    with pytest.raises(ValidationError) as err:
        mem.merge_entities("x", a.id)
    assert err.value.field == "survivor"


def test_resolve_entity_prefers_exact_names_then_aliases_then_normalised(store):
    mem, clock = store
    exact = mem.add_entity(NS, "Ravi", kind="person", profile="backend")
    clock.advance()
    alias = mem.add_entity("team/other", "R. Kumar", kind="person", aliases=["Ravi K"], profile="design")
    clock.advance()
    loose = mem.add_entity(NS, "ravi", kind="person", profile="backend")
    ctx = mem.resolve_entity("Ravi")
    assert ctx.status == "resolved" and ctx["entities"][0].entity.id == exact.id  # exact case first
    assert ctx.params == {"name": "Ravi"} and ctx.counts == {"candidates": 1} and ctx.notes == []
    assert mem.resolve_entity("Ravi K")["entities"][0].entity.id == alias.id
    loose_ctx = mem.resolve_entity("RAVI")
    assert loose_ctx.status == "ambiguous" and [c.entity.id for c in loose_ctx["entities"]] == [exact.id, loose.id]
    assert {c.matched for c in loose_ctx["entities"]} == {"normalised"}
    assert loose_ctx.notes == ["2 entities match 'RAVI'; they differ in: facts only"]
    clock.advance()
    mem.add_entity("team/other", "RAVI!", kind="robot", profile="design")
    three = mem.resolve_entity("ravi.")
    assert three.counts == {"candidates": 3}
    assert three.notes == ["3 entities match 'ravi.'; they differ in: namespace, kind, profile, facts"]
    assert mem.resolve_entity("ravi", namespace_prefix="team/acme").counts == {"candidates": 1}
    none = mem.resolve_entity("!!!")
    assert none.status == "none" and none["entities"] == [] and none.counts == {"candidates": 0}
    assert mem.resolve_entity("Nobody").status == "none"
    assert set(ctx.timings) == {"total_ms"} and ctx.operation == "resolve_entity"
    with pytest.raises(ValidationError) as err:
        mem.resolve_entity(" ")
    assert err.value.field == "name"


def test_a_candidate_shows_its_three_newest_current_facts(store):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    for i in range(5):
        mem.assert_fact(NS, kim.id, "visited", f"city {i}")
        clock.advance()
    gone = mem.assert_fact(NS, kim.id, "visited", "city 5")
    clock.advance()
    mem.retract_fact(gone.id)
    mem.assert_fact(NS, kim.id, "visited", "city 6", valid_to=clock.now)  # ended already
    mem.assert_fact("elsewhere", kim.id, "visited", "city 7")
    (cand,) = mem.resolve_entity("Kim", namespace_prefix=NS)["entities"]
    assert cand.facts == ["Kim visited city 4", "Kim visited city 3", "Kim visited city 2"]
    (cand,) = mem.resolve_entity("Kim")["entities"]
    assert cand.facts[0] == "Kim visited city 7"


def test_a_fact_about_a_merged_away_entity_gains_evidence_from_the_survivor(store):
    mem, clock = store
    ann, annie, oslo = (mem.add_entity(NS, n) for n in ("Ann", "Annie", "Oslo"))
    fact = mem.assert_fact(NS, annie.id, "lives in", oslo.id, source="a")
    mem.merge_entities(ann.id, annie.id)
    clock.advance()
    again = mem.assert_fact(NS, ann.id, "lives in", oslo.id, source="b")
    assert len(holding(mem, [ann.id])["facts"]) == 1  # one fact, not "Annie lives in Oslo" and "Ann lives in Oslo"
    assert again.id == fact.id and again.evidence_count == 2


# -- the neighbourhood: hops 0-3, predicate, limit ------------------------------------------------


@pytest.fixture
def chain(store):
    """A - B - C - D - E joined by 'next' edges, each entity with one value fact."""
    mem, clock = store
    names = "ABCDE"
    ents = [mem.add_entity(NS, n) for n in names]
    for n, e in zip(names, ents, strict=True):
        mem.assert_fact(NS, e.id, "label", f"{n} label")
        clock.advance()
    edges = []
    for x, y in itertools.pairwise(ents):
        edges.append(mem.assert_fact(NS, x.id, "next", y.id))
        clock.advance()
    return mem, clock, ents, edges


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
def test_facts_context_reaches_exactly_hops_steps_out(chain, hops):
    mem, clock, ents, edges = chain
    ctx = mem.facts_context("", entity_ids=[ents[0].id], hops=hops, limit=100)
    reached = set("ABCDE"[: hops + 1])
    labels = {f.value for f in ctx["facts"] if f.predicate == "label"}
    assert labels == {f"{n} label" for n in reached}
    nexts = {(f.subject_name, f.object_name) for f in ctx["facts"] if f.predicate == "next"}
    assert nexts == {(x, y) for x, y in itertools.pairwise("ABCDE") if x in reached}  # edges touching the area
    assert ctx.counts == {"neighbourhood": hops + 1, "facts": len(ctx["facts"])}
    assert ctx.params == {
        "query": "",
        "entity_ids": [ents[0].id],
        "hops": hops,
        "predicate": None,
        "limit": 100,
        "time": "current",
    }

    # nearest entities first
    def distance(f):
        return min("ABCDE".index(n) for n in (f.subject_name, f.object_name) if n)

    assert [distance(f) for f in ctx["facts"]] == sorted(distance(f) for f in ctx["facts"])


def test_hops_outside_0_to_3_are_refused(chain):
    mem, _, ents, _ = chain
    for hops in (-1, 4, True, "1", 1.0):
        with pytest.raises(ValidationError) as err:
            mem.facts_context("x", entity_ids=[ents[0].id], hops=hops)
        assert err.value.field == "hops"


def test_expansion_follows_only_edges_that_hold(chain):
    mem, clock, ents, edges = chain
    mem.end_fact(edges[1].id, T0 - timedelta(days=1))  # B - C no longer holds
    clock.advance()
    ctx = mem.facts_context("", entity_ids=[ents[0].id], hops=3, limit=100)
    assert ctx.counts["neighbourhood"] == 2
    assert {f.value for f in ctx["facts"] if f.predicate == "label"} == {"A label", "B label"}
    then = mem.facts_context("", entity_ids=[ents[0].id], hops=3, limit=100, time={"valid_at": T0 - timedelta(days=2)})
    assert then.counts["neighbourhood"] == 4
    mem.retract_fact(edges[0].id)
    clock.advance()
    assert mem.facts_context("", entity_ids=[ents[0].id], hops=3).counts["neighbourhood"] == 1


def test_predicate_filters_the_facts_but_not_the_expansion(chain):
    mem, _, ents, _ = chain
    ctx = mem.facts_context("", entity_ids=[ents[0].id], hops=2, predicate=" Label ", limit=100)
    assert sorted(f.value for f in ctx["facts"]) == ["A label", "B label", "C label"]
    assert ctx.params["predicate"] == "label"
    matched = mem.facts_context("label", entity_ids=[ents[0].id], hops=1, predicate="next")
    assert [f.predicate for f in matched["facts"]] == ["next", "next"]
    everywhere = mem.facts_context("label", predicate="label", limit=100)
    assert len(everywhere["facts"]) == 5
    none = mem.facts_context("label", predicate="next")
    assert none["facts"] == []
    combined = mem.combined_context("label", entity_ids=[ents[0].id], predicate="next", k=3)
    assert {f.predicate for f in combined["facts"]} == {"next"}
    assert combined.params["predicate"] == "next" and combined.params["k"] == 3 and combined.params["limit"] == 3


def test_matched_facts_come_first_then_the_rest_and_limit_truncates(chain):
    mem, _, ents, _ = chain
    ctx = mem.facts_context("B label", entity_ids=[ents[0].id], hops=1, limit=100)
    assert ctx["facts"][0].value == "B label" and ctx["facts"][0].ranks["lexical"] == 1
    matched = [f for f in ctx["facts"] if f.score is not None]
    rest = [f for f in ctx["facts"] if f.score is None]
    assert ctx["facts"] == matched + rest and ctx.counts["matched"] == len(matched) >= 1
    assert all(f.ranks == {} for f in rest) and all("lexical" in f.ranks for f in matched)
    short = mem.facts_context("", entity_ids=[ents[0].id], hops=3, limit=2)
    assert len(short["facts"]) == 2 and short.truncated == ["facts"] and short.counts["facts"] == 2
    exact = mem.facts_context("", entity_ids=[ents[0].id], hops=0, limit=2)  # A label and A-B: exactly 2
    assert len(exact["facts"]) == 2 and exact.truncated == []
    for limit in (0, 101, "5"):
        with pytest.raises(ValidationError) as err:
            mem.facts_context("x", limit=limit)
        assert err.value.field == "limit"
    monkey = pytest.MonkeyPatch()
    monkey.setattr(layer, "MAX_NEIGHBOURHOOD", 3)
    try:
        cut = mem.facts_context("", entity_ids=[ents[0].id], hops=3, limit=100)
        assert cut.counts["neighbourhood"] == 3 and "neighbourhood" in cut.truncated
    finally:
        monkey.undo()


def test_facts_context_without_entities_searches_or_lists_everything(store):
    mem, clock = store
    plan = mem.add_entity(NS, "Plan")
    march = mem.assert_fact(NS, plan.id, "cutover date", "2026-03-01")
    clock.advance()
    april = mem.assert_fact(NS, plan.id, "cutover date", "2026-04-15", supersedes=march.id)
    clock.advance()
    other = mem.assert_fact("elsewhere", plan.id, "owner", "Dana")
    ctx = mem.facts_context("cutover")
    assert [f.id for f in ctx["facts"]] == [april.id]
    assert ctx.dropped == {"not_holding": 1}  # the superseded fact was nominated, then confirmed away
    assert ctx.counts == {"lexical": 2, "matched": 1, "facts": 1}
    assert ctx["facts"][0].score == round(1 / 12, 10) and ctx["facts"][0].ranks == {"lexical": 2}
    listed = mem.facts_context("???")  # no searchable words: the newest facts
    assert [f.id for f in listed["facts"]] == [other.id, april.id]
    assert listed.notes == [] and listed.counts == {"facts": 2}
    assert [f.id for f in mem.facts_context("???", limit=1)["facts"]] == [other.id]
    assert mem.facts_context("???", limit=1).truncated == ["facts"]
    assert [f.id for f in mem.facts_context("???", namespace_prefix=NS)["facts"]] == [april.id]
    assert mem.facts_context("nothing matches this")["facts"] == []
    with pytest.raises(ValidationError) as err:
        mem.facts_context("  ")
    assert err.value.field == "query" and "is empty" in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.facts_context("x", entity_ids=["ent_" + f"{i:032x}" for i in range(21)])
    assert err.value.field == "entity_ids" and "at most 20" in str(err.value)
    assert mem.facts_context("x", entity_ids=[plan.id] * 20).params["entity_ids"] == [plan.id]  # duplicates fold
    with pytest.raises(ValidationError) as err:
        mem.facts_context("x", entity_ids=["fact_1"])
    assert err.value.field == "entity_ids" and "ent_" in str(err.value)
    for time, field in (("now", "time"), ({"valid": 1}, "time"), ({"believed_at": "x"}, "time.believed_at")):
        with pytest.raises(ValidationError) as err:
            mem.facts_context("x", time=time)
        assert err.value.field == field
    point = mem.facts_context("x", time={"valid_at": "2026-01-01T00:00:00Z"})
    assert point.params["time"] == {"valid_at": "2026-01-01T00:00:00.000000+00:00", "believed_at": layer.ts(clock.now)}
    assert mem.facts_context("x", time=None).params["time"] == "current"


# -- traverse: a path whole or dropped ---------------------------------------------------------------


def test_traverse_returns_every_simple_path_up_to_hops(chain):
    mem, clock, ents, edges = chain
    ids = [e.id for e in ents]
    for hops in (1, 2, 3):
        ctx = mem.traverse([ids[1]], hops=hops)  # from B, both ways along the chain
        got = sorted("".join(n) for n in (p.names for p in ctx["paths"]))
        want = [p for p in ("BA", "BC", "BCD", "BCDE") if len(p) <= hops + 1]
        assert got == want, hops
        assert ctx.counts == {"paths": len(want)} and ctx.dropped == {"broken_paths": 0} and ctx.notes == []
        assert ctx.params == {"entity_ids": [ids[1]], "hops": hops, "time": "current"} and ctx.truncated == []
    path = next(p for p in mem.traverse([ids[1]], hops=3)["paths"] if len(p.entities) == 4)
    assert path.entities == ids[1:5] and [f.id for f in path.facts] == [e.id for e in edges[1:4]]
    assert all(isinstance(f, Fact) and f.evidence_count == 1 for f in path.facts)
    both = mem.traverse([ids[0], ids[4]], hops=1)
    assert sorted(p.names for p in both["paths"]) == [["A", "B"], ["E", "D"]]
    for hops in (0, 4):
        with pytest.raises(ValidationError) as err:
            mem.traverse([ids[0]], hops=hops)
        assert err.value.field == "hops"
    with pytest.raises(ValidationError) as err:
        mem.traverse([])
    assert err.value.field == "entity_ids" and "at least one" in str(err.value)


def test_a_path_with_one_broken_edge_is_dropped_whole(chain):
    mem, clock, ents, edges = chain
    ended = T0 - timedelta(days=1)
    mem.end_fact(edges[2].id, ended)  # C - D
    clock.advance()
    ctx = mem.traverse([ents[0].id], hops=3)
    assert sorted("".join(p.names) for p in ctx["paths"]) == ["AB", "ABC"]  # never "ABCD" cut short
    assert ctx.dropped == {"broken_paths": 1}
    assert ctx.notes == ["1 path(s) dropped: an edge on them does not hold at the requested time"]
    then = mem.traverse([ents[0].id], hops=3, time={"valid_at": ended - US})
    assert len(then["paths"]) == 3 and then.dropped == {"broken_paths": 0}
    assert then.params["time"]["valid_at"] == layer.ts(ended - US)


def test_traverse_says_when_paths_were_cut_off(chain, monkeypatch):
    mem, _, ents, _ = chain
    monkeypatch.setattr(layer, "MAX_PATHS", 2)
    ctx = mem.traverse([ents[0].id], hops=3)
    assert ctx.truncated == ["paths"] and len(ctx["paths"]) == 2
    monkeypatch.setattr(layer, "MAX_PATHS", 3)
    assert mem.traverse([ents[0].id], hops=3).truncated == []


def test_traverse_follows_only_entity_objects_and_no_cycles(store):
    mem, _ = store
    a, b, c = (mem.add_entity(NS, n) for n in "ABC")
    mem.assert_fact(NS, a.id, "knows", b.id)
    mem.assert_fact(NS, b.id, "knows", c.id)
    mem.assert_fact(NS, c.id, "knows", a.id)
    mem.assert_fact(NS, a.id, "age", 30)
    names = sorted("".join(p.names) for p in mem.traverse([a.id], hops=3)["paths"])
    assert names == ["AB", "ABC", "AC", "ACB"]


# -- lookup and hydrate ------------------------------------------------------------------------------


def test_lookup_reads_any_state_and_hydrate_only_what_is_current(store):
    mem, clock = store
    kim, dup = mem.add_entity(NS, "Kim"), mem.add_entity(NS, "K")
    live = mem.assert_fact(NS, kim.id, "likes", "tea")
    gone = mem.assert_fact(NS, kim.id, "likes", "coffee")
    later = mem.assert_fact(NS, kim.id, "likes", "cocoa", valid_from=clock.now + timedelta(days=1))
    ended = mem.assert_fact(NS, kim.id, "likes", "milk")
    clock.advance()
    mem.retract_fact(gone.id)
    mem.end_fact(ended.id, clock.now)
    mem.merge_entities(kim.id, dup.id)
    doc = mem.add_document(NS, "d", ["x"])
    said, old = mem.add_claim(NS, "said"), mem.add_claim(NS, "old")
    mem.supersede_claim(old.id)
    ids = [kim.id, dup.id, live.id, gone.id, later.id, ended.id, doc.id, doc.chunk_ids[0], said.id, old.id]
    found = mem.lookup(ids)
    assert [r.id for r in found] == ids
    assert found[3].retracted_at == clock.now and found[5].version == 2 and found[9].superseded_at == clock.now
    current = [r is not None for r in mem.hydrate(ids)]
    assert current == [True, False, True, False, False, False, True, True, True, False]
    assert mem.lookup(["fact_" + "0" * 32, "ent_" + "0" * 32, "claim_x", "doc_x", "chunk_x"]) == [None] * 5
    assert mem.lookup([]) == []
    for ids, message in ((["item_1"], "unknown kind"), ("ent_1", "must be a list of ids"), ([1], "is not an id")):
        with pytest.raises(ValidationError) as err:
            mem.lookup(ids)
        assert err.value.field == "ids" and message in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.lookup([f"fact_{i}" for i in range(1001)])
    assert "at most 1000" in str(err.value)
    assert len(mem.lookup([f"fact_{i}" for i in range(1000)])) == 1000


def test_lookup_and_hydrate_respect_what_an_agent_may_see(store):
    mem, _ = store
    alice = agent_view(mem, "alice")
    mine = mem.add_entity("agent/alice", "Mine")
    theirs = mem.add_entity("room/ops", "Theirs")
    fact = mem.assert_fact("room/ops", theirs.id, "is", "secret")
    assert [r is not None for r in alice.lookup([mine.id, theirs.id, fact.id])] == [True, False, False]
    assert [r is not None for r in alice.hydrate([mine.id, theirs.id, fact.id])] == [True, False, False]
    with pytest.raises(NotFoundError):
        alice.assert_fact("agent/alice", mine.id, "knows", theirs.id)
    with pytest.raises(NotFoundError):
        alice.retract_fact(fact.id)
    assert alice.resolve_entity("Theirs").status == "none"
    assert alice.facts_context("secret")["facts"] == []
    assert mem.facts_context("secret", namespace_prefix="room")["facts"][0].id == fact.id
    assert mem.resolve_entity("Mine", namespace_prefix="room").status == "none"


# -- vectors: each kind has its own index, every written text gets its vector ----------------------


def test_every_fact_claim_and_chunk_is_found_by_its_vector(tmp_path):
    mem, _ = open_store(tmp_path, embedder="fake")
    try:
        kim = mem.add_entity(NS, "Kim")
        fact = mem.assert_fact(NS, kim.id, "likes", "tea")
        doc = mem.add_document(NS, "d", ["a passage"])
        claim = mem.add_claim(NS, "a claim")
        query = "qqqq"  # no word in common: only the vector channel can nominate
        facts = mem.facts_context(query)
        assert [f.id for f in facts["facts"]] == [fact.id]
        assert facts.counts == {"lexical": 0, "vector": 1, "matched": 1, "facts": 1}
        assert facts["facts"][0].ranks == {"vector": 1} and facts["facts"][0].score == round(0.5 / 11, 10)
        said = mem.claims_and_sources_context(query)
        assert [g.claims[0].id for g in said["claims"]] == [claim.id]
        assert [p.id for p in said["passages"]] == doc.chunk_ids
        assert said.counts == {
            "claims_lexical": 0, "claims_vector": 1, "passages_lexical": 0, "passages_vector": 1,
            "claims": 1, "passages": 1,
        }  # fmt: skip
        assert said.dropped == {"claims": 0, "passages": 0}
        mem.add_claim(NS, "another claim")
        assert len(mem.claims_and_sources_context(query)["claims"]) == 2  # the index follows new rows
        mem.assert_fact(NS, kim.id, "likes", "cake")
        assert len(mem.facts_context(query)["facts"]) == 2
        near = mem.facts_context(query, entity_ids=[kim.id], hops=0)
        assert near.counts["vector"] == 2 and near.counts["matched"] == 2
    finally:
        mem.close()


def test_a_kind_without_vectors_nominates_nothing_by_vector(tmp_path):
    mem, _ = open_store(tmp_path, embedder="fake")
    try:
        kim = mem.add_entity(NS, "Kim")
        mem.assert_fact(NS, kim.id, "likes", "tea")
        said = mem.claims_and_sources_context("qqqq")  # no claim and no chunk has a vector yet
        assert said["claims"] == [] and said["passages"] == []
        assert said.counts == {"claims_lexical": 0, "claims_vector": 0, "passages_lexical": 0, "passages_vector": 0,
                               "claims": 0, "passages": 0}  # fmt: skip
    finally:
        mem.close()


def test_missing_vectors_are_made_for_every_kind(tmp_path):
    mem, clock = open_store(tmp_path)
    kim = mem.add_entity(NS, "Kim")
    for i in range(3):
        mem.assert_fact(NS, kim.id, "likes", f"tea {i}")
    mem.add_document(NS, "d", ["one", "two"])
    mem.add_claims(NS, [{"text": f"claim {i}"} for i in range(4)])
    mem.close()
    again = memlane.open(str(tmp_path / "m.db"), embedder=None, clock=clock)
    try:
        assert again._facts.embed_missing() == 0  # nothing to embed with
    finally:
        again.close()
    again = memlane.open(str(tmp_path / "m.db"), embedder="fake", clock=clock)
    try:
        assert again._facts.embed_missing(batch_size=2) == 3 + 2 + 4
        assert again._facts.embed_missing(batch_size=2) == 0
        assert len(again.facts_context("qqqq")["facts"]) == 3
        said = again.claims_and_sources_context("qqqq")
        assert len(said["claims"]) == 4 and len(said["passages"]) == 2
    finally:
        again.close()


# -- the records and envelopes on the wire --------------------------------------------------------


def test_every_envelope_survives_a_json_round_trip(chain):
    import json

    mem, clock, ents, edges = chain
    doc = mem.add_document(NS, "d", ["A label talk", "more"], source="s", created_at=T0)
    mem.add_claim(NS, "A label is fine", chunk=doc.chunk_ids[0], about=[ents[0].id], asserted_at=T0)
    mem.merge_entities(ents[0].id, mem.add_entity(NS, "Alias A").id)
    contexts = [
        mem.resolve_entity("A"),
        mem.facts_context("label", entity_ids=[ents[0].id], time={"valid_at": T0}),
        mem.claims_and_sources_context("label", entity_ids=[ents[0].id]),
        mem.combined_context("label", entity_ids=[ents[0].id]),
        mem.traverse([ents[0].id], hops=2),
    ]
    for ctx in contexts:
        wire = json.loads(json.dumps(ctx.to_dict()))
        back = Context.from_dict(wire)
        assert back == ctx, ctx.operation
        assert back.to_dict() == ctx.to_dict()
    records = mem.lookup([ents[0].id, edges[0].id, doc.id, doc.chunk_ids[0]])
    records.append(contexts[2]["claims"][0].claims[0])
    for record in records:
        wire = json.loads(json.dumps(record.to_dict()))
        assert record_from_dict(wire) == record
        assert type(record).from_dict(wire) == record
    assert record_from_dict(None) is None
    assert isinstance(record_from_dict(records[1].to_dict()).recorded_at, datetime)


def test_from_dict_fills_what_a_sparse_record_leaves_out():
    group = ClaimGroup.from_dict({"text": "t", "corroboration": 2, "claims": []})
    assert (group.score, group.ranks) == (0.0, {})
    ctx = Context.from_dict({"operation": "x"})
    assert (ctx.params, ctx.sections, ctx.counts, ctx.dropped, ctx.truncated, ctx.timings, ctx.notes, ctx.status) == (
        {}, {}, {}, {}, [], {}, [], None,
    )  # fmt: skip
    full = Context.from_dict(
        {"operation": "x", "notes": ["n"], "status": "resolved", "truncated": ["facts"], "timings": {"total_ms": 1.0},
         "counts": {"facts": 0}, "dropped": {"not_holding": 2}, "params": {"q": 1}, "sections": {"facts": []}}
    )  # fmt: skip
    assert (full.notes, full.status, full.truncated, full.dropped, full.sections) == (
        ["n"], "resolved", ["facts"], {"not_holding": 2}, {"facts": []},
    )  # fmt: skip
    ent = Entity.from_dict(
        {"id": "ent_1", "namespace": "a/b", "kind": "k", "name": "n", "created_at": "2026-01-01T00:00:00+00:00"}
    )
    assert ent.namespace == ("a", "b") and ent.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert (
        Entity.from_dict({"id": "e", "namespace": ["a", "b"], "kind": "k", "name": "2026-01-01"}).name == "2026-01-01"
    )
    cand = Candidate(Entity("ent_1", ("a",), "k", "n"), "name", ["f"])
    assert cand.to_dict()["entity"] == {
        "id": "ent_1", "namespace": ["a"], "kind": "k", "name": "n", "aliases": [], "profile": "",
        "merged_into": None, "created_at": None,
    }  # fmt: skip
    assert Candidate.from_dict({"entity": cand.to_dict()["entity"], "matched": "name"}).facts == []
    path = GraphPath(["ent_1"], ["n"], [])
    assert GraphPath.from_dict(path.to_dict()) == path
    chunk = Chunk("chunk_1", "doc_1", ("a",), 0, "t")
    assert chunk.to_dict()["namespace"] == ["a"] and Chunk.from_dict(chunk.to_dict()) == chunk
    claim = Claim("claim_1", ("a",), "t", None, None, None, [], T0)
    assert Claim.from_dict(claim.to_dict()) == claim
    doc = Document("doc_1", ("a",), "t", None, None, T0, 0)
    assert Document.from_dict(doc.to_dict()) == doc


# -- writes take the write lock before they read ----------------------------------------------------


@pytest.mark.parametrize("write", ["supersede_claim", "retract_fact", "end_fact", "assert_fact", "add_alias", "merge"])
def test_a_write_that_reads_first_waits_for_a_concurrent_writer(tmp_path, write):
    import sqlite3
    import threading

    mem, clock = open_store(tmp_path)
    try:
        kim, dup = mem.add_entity(NS, "Kim"), mem.add_entity(NS, "K")
        fact = mem.assert_fact(NS, kim.id, "likes", "tea")
        claim = mem.add_claim(NS, "Kim likes tea")
        clock.advance()
        calls = {
            "supersede_claim": lambda: mem.supersede_claim(claim.id),
            "retract_fact": lambda: mem.retract_fact(fact.id),
            "end_fact": lambda: mem.end_fact(fact.id, T0),
            "assert_fact": lambda: mem.assert_fact(NS, kim.id, "likes", "tea", source="b"),
            "add_alias": lambda: mem.add_alias(kim.id, "Kimmy"),
            "merge": lambda: mem.merge_entities(kim.id, dup.id),
        }
        other = sqlite3.connect(str(tmp_path / "m.db"), isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another process is writing...
        other.execute("UPDATE claims SET speaker = 'someone' WHERE id = ?", (claim.id,))
        commit = threading.Timer(0.2, other.execute, ["COMMIT"])  # ...and commits a moment later
        commit.start()
        try:
            result = calls[write]()  # waits for it, then reads the committed state and writes
        finally:
            commit.join()
            other.close()
        assert result is not None
        assert mem.lookup([claim.id])[0].speaker == "someone"
    finally:
        mem.close()


# -- export and import: rows travel verbatim, re-importing converges -----------------------------


def facts_state(mem, ids):
    """Everything the reads say about a memory's facts layer, comparable across stores."""
    return [r.to_dict() if r is not None else None for r in mem.lookup(ids)]


def test_the_facts_layer_moves_between_memories_and_a_newer_export_converges(tmp_path):
    import json

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src, clock = open_store(tmp_path / "a")
    dst, _ = open_store(tmp_path / "b")
    try:
        kim = src.add_entity(NS, "Kim", aliases=["KL"], profile="eng")
        dup = src.add_entity(NS, "K.")
        oslo = src.add_entity(NS, "Oslo")
        lives = src.assert_fact(NS, kim.id, "lives in", oslo.id, source="a", valid_from=T0)
        src.assert_fact(NS, kim.id, "lives in", oslo.id, source="b")
        age = src.assert_fact(NS, kim.id, "age", {"years": 30})
        doc = src.add_document(NS, "talk", ["Kim: I live in Oslo.", "ok"], source="chat", created_at=T0)
        claim = src.add_claim(NS, "Kim lives in Oslo", speaker="Kim", chunk=doc.chunk_ids[0], about=[kim.id])
        clock.advance()
        src.end_fact(lives.id, T0 + timedelta(days=1))
        old = [json.loads(json.dumps(r)) for r in src.export_records()]
        ids = [kim.id, dup.id, oslo.id, lives.id, age.id, doc.id, *doc.chunk_ids, claim.id]
        assert dst.import_records(old) == len(old)
        assert facts_state(dst, ids) == facts_state(src, ids)
        assert dst.import_records(old) == 0  # idempotent
        assert dst.claims_and_sources_context("Oslo")["claims"][0].claims[0].id == claim.id  # indexed for search
        assert dst.facts_context("age")["facts"][0].value == {"years": 30}
        clock.advance()
        src.retract_fact(age.id)
        src.supersede_claim(claim.id)
        src.merge_entities(kim.id, dup.id)
        newer = [json.loads(json.dumps(r)) for r in src.export_records()]
        assert dst.import_records(newer) >= 2  # the stamps (retraction, supersession; the merge is applied late)
        assert facts_state(dst, ids) == facts_state(src, ids)
        bad = [*newer, {"record": "fact", "id": "fact_x", "version": "2"}]
        with pytest.raises(ValidationError) as err:
            dst.import_records(bad)
        assert err.value.field == "record" and err.value.record == len(bad) and "nothing was imported" in str(err.value)
        for broken in (
            {"record": "chunk", "id": 5, "document_id": doc.id, "namespace": NS, "position": 0, "text": "x"},
            {"record": "chunk", "id": "chunk_y", "document_id": doc.id, "namespace": NS, "position": True, "text": "x"},
            {"record": "claim", "namespace": NS, "recorded_at": "yesterday"},
        ):
            with pytest.raises(ValidationError) as err:
                dst.import_records([broken])
            assert err.value.field == "record" and err.value.record == 1, broken
    finally:
        src.close()
        dst.close()


def test_an_import_record_missing_a_required_field_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src, _ = open_store(tmp_path / "a")
    dst, _ = open_store(tmp_path / "b")
    try:
        src.put(NS, "k", "v")
        records = [*src.export_records(), {"record": "entity", "id": "ent_" + "1" * 32, "namespace": NS}]
        with pytest.raises(ValidationError) as err:
            dst.import_records(records)
        assert err.value.field == "record" and err.value.record == len(records)
        assert dst.get(NS, "k") is None  # nothing was imported
    finally:
        src.close()
        dst.close()


def _import_source(folder):
    """A memory with one of every facts-layer record and an agent, and its export."""
    from memlane.core.access import Access

    src, _ = open_store(folder)
    kim, oslo = src.add_entity(NS, "Kim", aliases=["K"]), src.add_entity(NS, "Oslo")
    fact = src.assert_fact(NS, kim.id, "lives in", oslo.id, source="note")
    nothing = src.assert_fact(NS, kim.id, "owes", None)  # a JSON null object
    doc = src.add_document(NS, "Notes", "Kim lives in Oslo.")
    src.add_claim(NS, "Kim lives in Oslo", chunk=doc.chunk_ids[0], about=[kim.id])
    access = Access(src)
    access.create_agent("ann")
    access.create_room("team")
    access.add_member("team", "ann")
    access.grant("ann", "team/acme", "write")
    src.put(NS, "k", "v")
    return src, [json.loads(json.dumps(r)) for r in src.export_records()], [kim.id, oslo.id, fact.id, nothing.id]


def _changed(records, kind, **change):
    """The export with the first record of ``kind`` changed (a value of ``...`` drops the column)."""
    out = [dict(r) for r in records]
    n = next(i for i, r in enumerate(out) if r["record"] == kind)
    for col, value in change.items():
        if value is ...:
            del out[n][col]
        else:
            out[n][col] = value
    return out, n + 1


MISSING = "ent_" + "0" * 32
BROKEN_IMPORTS = {
    "entity without name": ("entity", {"name": ...}),
    "entity without a profile": ("entity", {"profile": None}),
    "alias of no entity": ("alias", {"entity_id": MISSING}),
    "fact about no entity": ("fact", {"subject": MISSING}),
    "fact without a key": ("fact", {"fact_key": ...}),
    "fact with an id too long for an index": ("fact", {"id": "fact_" + "a" * 3000}),
    "fact with an id ending in a newline": ("fact", {"id": "fact_" + "a" * 32 + "\n"}),
    "evidence without a time": ("evidence", {"recorded_at": None}),
    "evidence source past the name bytes": ("evidence", {"source": "\u4e00" * 667}),
    "entity norm past the name bytes": ("entity", {"norm": "\u4e00" * 667}),
    "alias norm past the name bytes": ("alias", {"norm": "\u4e00" * 667}),
    "chunk of no document": ("chunk", {"document_id": "doc_" + "0" * 32}),
    "claim from no chunk": ("claim", {"chunk_id": "chunk_" + "0" * 32}),
    "claim without a norm": ("claim", {"norm": ...}),
    "claim about no entity": ("claim_entity", {"entity_id": MISSING}),
    "member of no room": ("access_member", {"room": "nowhere"}),
    "grant to no agent": ("access_grant", {"agent": "nobody"}),
    "grant of an unknown mode": ("access_grant", {"mode": "admin"}),
    "grant of an empty prefix": ("access_grant", {"prefix": ""}),
    "agent named past a segment": ("access_agent", {"name": "\u4e00" * 86}),
    "agent without a token": ("access_agent", {"token_hash": None}),
    "entity name with a NUL": ("entity", {"name": "Ki\x00m"}),
    "chunk text with a lone surrogate": ("chunk", {"text": "x\ud800"}),
    "claim text with a NUL": ("claim", {"text": "\x00"}),
    "fact text past what search indexes": ("fact", {"text": "w " * 100_001}),
    "chunk text past the widest chunk": ("chunk", {"text": "w" * 100_001}),
    "claim text past a name": ("claim", {"text": "w" * 1001}),
}


@pytest.mark.parametrize("broken", BROKEN_IMPORTS, ids=list(BROKEN_IMPORTS))
def test_an_import_record_the_database_would_refuse_is_refused_before_anything_is_written(tmp_path, broken):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src, records, _ = _import_source(tmp_path / "a")
    dst, _ = open_store(tmp_path / "b")
    try:
        kind, change = BROKEN_IMPORTS[broken]
        bad, number = _changed(records, kind, **change)
        with pytest.raises(ValidationError) as err:
            dst.import_records(bad)
        assert err.value.field == "record" and err.value.record == number, err.value
        assert "nothing was imported" in str(err.value)
        assert dst.get(NS, "k") is None and dst.export_records is not None
        assert list(dst.export_records()) == []
        assert dst.import_records(records) == len(records)  # the whole export, unbroken, goes in
    finally:
        src.close()
        dst.close()


def test_an_agent_with_another_agents_token_hash_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src, records, _ = _import_source(tmp_path / "a")
    dst, _ = open_store(tmp_path / "b")
    try:
        agent = next(r for r in records if r["record"] == "access_agent")
        twin = {**agent, "name": "twin"}
        with pytest.raises(ValidationError) as err:
            dst.import_records([*records, twin])
        assert err.value.record == len(records) + 1 and "token hash" in str(err.value)
        assert list(dst.export_records()) == []
    finally:
        src.close()
        dst.close()


def test_a_fact_with_a_null_object_moves_between_memories_intact(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src, records, ids = _import_source(tmp_path / "a")
    dst, _ = open_store(tmp_path / "b")
    try:
        dst.import_records(records)
        assert facts_state(dst, ids) == facts_state(src, ids)
        assert dst.lookup([ids[3]])[0].value is None
        assert dst.query("SELECT object_value FROM facts WHERE id = ?", [ids[3]]).rows == [["null"]]
    finally:
        src.close()
        dst.close()


def test_vector_nominations_stay_inside_the_scope_and_candidate_k(tmp_path):
    mem, clock = open_store(tmp_path, embedder="fake")
    try:
        for i, ns in enumerate(("team/acme", "team/acme", "team/other", "teamx")):
            mem.add_claim(ns, f"claim {i} in {ns}")
            clock.advance()
        query = "qqqq"
        everything = mem.claims_and_sources_context(query)
        assert everything.counts["claims_vector"] == 4 and len(everything["claims"]) == 4
        team = mem.claims_and_sources_context(query, namespace_prefix="team")
        assert team.counts["claims_vector"] == 3  # "team" holds team/... and never teamx
        assert {c.namespace for g in team["claims"] for c in g.claims} == {("team", "acme"), ("team", "other")}
        acme = mem.claims_and_sources_context(query, namespace_prefix="team/acme")
        assert acme.counts["claims_vector"] == 2
        one = mem.claims_and_sources_context(query, candidate_k=1)
        assert one.counts["claims_vector"] == 1 and len(one["claims"]) == 1
        first = everything["claims"][0].claims[0]
        mem.supersede_claim(first.id)
        after = mem.claims_and_sources_context(query)
        # the vector channel still nominates the superseded claim; confirm drops it
        assert after.dropped["claims"] == 1 and len(after["claims"]) == 3
    finally:
        mem.close()


def test_changing_the_embedder_rebuilds_every_facts_vector(tmp_path):
    from memlane.domain.search.embedders import FakeEmbedder

    mem, clock = open_store(tmp_path, embedder="fake")
    try:
        kim = mem.add_entity(NS, "Kim")
        mem.assert_fact(NS, kim.id, "likes", "tea")
        mem.add_claim(NS, "Kim likes tea")
        mem.add_document(NS, "d", ["a passage"])
        assert mem.facts_context("qqqq").counts["vector"] == 1
        assert mem.reindex(FakeEmbedder(16)) >= 3
        ctx = mem.facts_context("qqqq")
        assert ctx.counts["vector"] == 1 and len(ctx["facts"]) == 1
        said = mem.claims_and_sources_context("qqqq")
        assert said.counts["claims_vector"] == 1 and said.counts["passages_vector"] == 1
    finally:
        mem.close()


def test_namespace_prefixes_hold_a_namespace_and_what_is_under_it(store):
    mem, _ = store
    for ns in ("team", "team/acme", "team/acme/x", "teamx", "other"):
        e = mem.add_entity(ns, f"Kim {ns}")
        mem.assert_fact(ns, e.id, "lives in", f"city {ns}")
    for prefix, count in (("team", 3), ("team/acme", 2), ("teamx", 1), ((), 5), ("nobody", 0)):
        assert len(mem.facts_context("lives", namespace_prefix=prefix)["facts"]) == count, prefix
    agent_view(mem, "alice")
    from memlane.core.access import Access

    access = Access(mem)
    access.create_room("eng")
    access.add_member("eng", "alice")
    access.grant("alice", "team/acme", "read")
    mine = mem.add_entity("agent/alice", "Mine")
    mem.assert_fact("agent/alice", mine.id, "lives in", "home")
    alice = access.view(access.agent("alice"))  # her grants as they are now
    seen = {f.namespace for f in alice.facts_context("lives")["facts"]}
    assert seen == {("agent", "alice"), ("team", "acme"), ("team", "acme", "x")}


def test_combined_context_runs_both_reads_and_names_their_parts(chain):
    mem, _, ents, _ = chain
    doc = mem.add_document(NS, "d", ["A label talk"])
    mem.add_claim(NS, "A label is fine", chunk=doc.chunk_ids[0], about=[ents[0].id])
    ctx = mem.combined_context("label", entity_ids=[ents[0].id], hops=0, k=1)
    facts = mem.facts_context("label", entity_ids=[ents[0].id], hops=0, limit=1)
    said = mem.claims_and_sources_context("label", entity_ids=[ents[0].id], k=1)
    assert ctx.operation == "combined_context"
    assert [f.id for f in ctx["facts"]] == [f.id for f in facts["facts"]]
    assert [g.text for g in ctx["claims"]] == [g.text for g in said["claims"]]
    assert [p.id for p in ctx["passages"]] == [p.id for p in said["passages"]]
    assert ctx.params == {**facts.params, "k": 1}
    assert ctx.counts == {**{f"facts_{n}": c for n, c in facts.counts.items()}, **said.counts}
    assert ctx.dropped == {"facts_not_holding": 0, "claims": 0, "passages": 0}
    assert ctx.truncated == ["facts"] and ctx.notes == []
    assert set(ctx.timings) == {"facts_ms", "claims_and_sources_ms", "total_ms"}
    assert all(isinstance(v, float) and v >= 0 for v in ctx.timings.values())
    lonely = mem.combined_context("label", entity_ids=[ents[4].id], time={"valid_at": T0})
    assert lonely.notes == ["no document is cited by a current claim about these entities"]
    assert lonely.params["time"]["valid_at"] == layer.ts(T0)
    for k in (0, 101):
        with pytest.raises(ValidationError) as err:
            mem.combined_context("label", k=k)
        assert err.value.field == "k"


def test_references_that_are_no_entity_are_refused_with_what_to_do(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    ghost = "ent_" + "f" * 32
    for call, field in (
        (lambda: mem.assert_fact(NS, "Kim", "likes", "tea"), "subject"),
        (lambda: mem.assert_fact(NS, "ent_" + "F" * 32, "likes", "tea"), "subject"),
        (lambda: mem.facts_context("x", entity_ids=["ent_123"]), "entity_ids"),
        (lambda: mem.traverse(["ent_" + "g" * 32]), "entity_ids"),
    ):
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == field and "is not an entity id (ent_ followed by 32 hex digits)" in str(err.value)
    for call in (
        lambda: mem.assert_fact(NS, ghost, "likes", "tea"),
        lambda: mem.assert_fact(NS, kim.id, "knows", ghost),
        lambda: mem.facts_context("x", entity_ids=[ghost]),
        lambda: mem.traverse([ghost]),
        lambda: mem.merge_entities(kim.id, ghost),
    ):
        with pytest.raises(NotFoundError) as err:
            call()
        assert "that you can see; find one with resolve_entity or add_entity" in str(err.value)
    for bad, message in ((True, "must be an integer, not bool"), (9, "must be between 0 and 3, got 9")):
        with pytest.raises(ValidationError) as err:
            mem.facts_context("x", entity_ids=[kim.id], hops=bad)
        assert message in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.facts_context("x", time=5)
    assert err.value.field == "time" and '"current" or' in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.facts_context("x", time={"valid_at": T0, "when": 1})
    assert "unknown fields ['when']" in str(err.value)
    with pytest.raises(ConflictError) as err:
        fact = mem.assert_fact(NS, kim.id, "likes", "tea")
        mem.retract_fact(fact.id)
        mem.retract_fact(fact.id)
    assert "assert it again to revive it" in str(err.value)
    with pytest.raises(ValidationError) as err:
        mem.assert_fact(NS, kim.id, "likes", object())
    assert err.value.field == "object"


@pytest.mark.parametrize("write", ["add_entity", "add_document", "add_claims", "assert_fact"])
def test_a_write_that_fails_part_way_leaves_nothing_behind(store, monkeypatch, write):
    mem, clock = store
    kim = mem.add_entity(NS, "Kim")
    before = list(mem.export_records())

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(layer.FactsLayer, "_index_text", fail)  # the last step of most writes
    monkeypatch.setattr(layer, "index_chunks", fail)  # add_document's
    monkeypatch.setattr(layer.FactsLayer, "_insert_aliases", fail)  # add_entity's last step
    calls = {
        "add_entity": lambda: mem.add_entity(NS, "Lee", aliases=["L"]),
        "add_document": lambda: mem.add_document(NS, "d", ["one", "two"]),
        "add_claims": lambda: mem.add_claims(NS, [{"text": "a", "about": [kim.id]}, {"text": "b"}]),
        "assert_fact": lambda: mem.assert_fact(NS, kim.id, "likes", "tea", source="s"),
    }
    with pytest.raises(RuntimeError, match="disk full"):
        calls[write]()
    assert list(mem.export_records()) == before


def test_every_text_field_is_checked_and_named(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    bad = "half a \ud800 surrogate"
    for call, field in (
        (lambda: mem.add_entity(NS, bad), "name"),
        (lambda: mem.add_entity(NS, "x", kind=bad), "kind"),
        (lambda: mem.add_entity(NS, "x", aliases=[bad]), "aliases"),
        (lambda: mem.add_entity(NS, "x", profile=bad), "profile"),
        (lambda: mem.add_alias(kim.id, bad), "alias"),
        (lambda: mem.assert_fact(NS, kim.id, bad, "x"), "predicate"),
        (lambda: mem.assert_fact(NS, kim.id, "p", "x", source=bad), "source"),
        (lambda: mem.add_document(NS, bad, "x"), "title"),
        (lambda: mem.add_document(NS, "t", bad), "text"),
        (lambda: mem.add_document(NS, "t", [bad]), "text"),
        (lambda: mem.add_document(NS, "t", "x", source=bad), "source"),
        (lambda: mem.add_claim(NS, bad), "text"),
        (lambda: mem.add_claim(NS, "x", speaker=bad), "speaker"),
        (lambda: mem.resolve_entity(bad), "name"),
        (lambda: mem.facts_context(bad), "query"),
        (lambda: mem.claims_and_sources_context(bad), "query"),
        (lambda: mem.facts_context("x", predicate=bad), "predicate"),
    ):
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == field


def test_refusals_say_exactly_what_is_wrong(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    fact = mem.assert_fact(NS, kim.id, "likes", "tea")
    alice = agent_view(mem, "alice")
    cases = [
        (lambda: mem.add_entity(NS, " "), "name: must not be empty"),
        (lambda: mem.lookup("fact_1"), "ids: must be a list of ids"),
        (
            lambda: mem.facts_context("x", time="then"),
            'time: must be "current" or {"valid_at": ..., "believed_at": ...}',
        ),
        (lambda: mem.add_entity(NS, "x", aliases="y"), "aliases: must be a list of names"),
        (
            lambda: mem.assert_fact(NS, kim.id, "p", 1, valid_from=T0, valid_to=T0),
            "valid_to: must be later than valid_from",
        ),
        (lambda: mem.end_fact(fact.id, None), "valid_to: is required: the time the fact stopped holding"),
        (lambda: mem.add_document(NS, "t", " "), "text: has no words; a document needs at least one non-blank passage"),
        (lambda: alice.add_claims("agent/alice", "x"), "claims: must be a list of claim objects"),
        (lambda: mem.traverse([]), "entity_ids: must name at least one entity"),
        (lambda: mem.facts_context(" "), "query: is empty; give a query, entity_ids, or both"),
        (lambda: mem.claims_and_sources_context(" "), "query: is empty; say what to look for"),
        (
            lambda: mem.add_claims(NS, [{"text": "x", "who": 1}]),
            "claims[0].who: is not a claim field (text, speaker, asserted_at, chunk, about)",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValidationError) as err:
            call()
        assert str(err.value) == message
    no_words = mem.claims_and_sources_context("???")
    assert no_words.notes == ["the query has no searchable words"] and no_words["claims"] == []


def test_a_fact_reads_back_as_its_statement(store):
    mem, clock = store
    kim, oslo = mem.add_entity(NS, "Kim"), mem.add_entity(NS, "Oslo")
    cases = [
        (oslo.id, "Kim lives in Oslo", None),
        ("Lisbon", "Kim lives in Lisbon", "Lisbon"),
        (30, "Kim lives in 30", 30),
        (True, "Kim lives in true", True),
        (None, "Kim lives in null", None),
        ({"city": "Rome"}, 'Kim lives in {"city":"Rome"}', {"city": "Rome"}),
        (["a", 1], 'Kim lives in ["a",1]', ["a", 1]),
    ]
    for obj, text, value in cases:
        fact = mem.assert_fact(NS, kim.id, "Lives  In", obj)
        assert (fact.text, fact.value, fact.predicate, fact.subject_name) == (text, value, "lives_in", "Kim"), obj
        assert (fact.object, fact.object_name) == ((oslo.id, "Oslo") if obj == oslo.id else (None, None)), obj
        assert (fact.version, fact.namespace, fact.recorded_at, fact.retracted_at) == (
            1,
            ("team", "acme"),
            clock.now,
            None,
        )
        assert mem.lookup([fact.id])[0] == fact
    assert len(holding(mem, [kim.id])["facts"]) == len(cases)  # each a fact of its own


def test_sources_recorded_at_the_same_moment_are_listed_by_name(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    for source in ("b", "c", "a"):
        fact = mem.assert_fact(NS, kim.id, "likes", "tea", source=source)
    assert fact.sources == ["a", "b", "c"]


def test_a_large_neighbourhood_is_searched_whole_then_confirmed(chain, monkeypatch):
    mem, _, ents, _ = chain
    mem.assert_fact(NS, mem.add_entity(NS, "Far").id, "label", "far label")  # matches, outside the area
    # A's area holds two facts, "A label" and A - B; six facts in all say "label"
    for area, lexical, dropped in ((2, 1, 0), (1, 6, 5)):
        monkeypatch.setattr(layer, "MAX_AREA", area)
        ctx = mem.facts_context("label", entity_ids=[ents[0].id], hops=0)
        assert ctx.counts["lexical"] == lexical, area
        assert ctx.dropped == {"not_holding": dropped}, area
        assert [f.value for f in ctx["facts"]] == ["A label", None], area


def test_the_rest_of_a_neighbourhood_comes_nearest_first_then_newest_first(chain):
    mem, clock, ents, edges = chain
    ctx = mem.facts_context("", entity_ids=[ents[1].id], hops=1, limit=100)
    texts = [f.text for f in ctx["facts"]]
    # distance 0 (B's own facts, newest first), then distance 1 (A's and C's label, newest first)
    assert texts == ["B next C", "A next B", "B label B label", "C next D", "C label C label", "A label A label"]
    assert mem.facts_context("???", limit=100).truncated == []
    listed = mem.facts_context("???", limit=len(ctx["facts"]) + 4)  # all nine facts fit exactly
    assert len(listed["facts"]) == 9 and listed.truncated == []
    assert mem.facts_context("???", limit=8).truncated == ["facts"]


def test_claims_about_at_most_a_hundred_entities(store):
    mem, _ = store
    with pytest.raises(ValidationError) as err:
        mem.add_claim(NS, "x", about=[f"ent_{i}" for i in range(101)])
    assert err.value.field == "about" and "at most 100" in str(err.value)
    with pytest.raises(NotFoundError, match="no claim"):
        mem.supersede_claim(5)


def test_an_ambiguous_name_says_which_details_differ(store):
    mem, clock = store
    mem.add_entity(NS, "Sam", kind="person", aliases=["Sammy"], profile="p")
    clock.advance()
    mem.add_entity(NS, "Sam", kind="person", profile="p")
    ctx = mem.resolve_entity("Sam")
    assert ctx.status == "ambiguous" and ctx.notes == ["2 entities match 'Sam'; they differ in: aliases, facts"]


def test_the_vector_channel_nominates_the_nearest_first(tmp_path):
    mem, clock = open_store(tmp_path, embedder="fake")
    try:
        for text in ("gamma delta", "epsilon zeta", "alpha beta"):  # the nearest written last
            mem.add_claim(NS, text)
            clock.advance()
        ctx = mem.claims_and_sources_context("alpha beta", candidate_k=1)
        assert [(g.text, g.ranks) for g in ctx["claims"]] == [("alpha beta", {"lexical": 1, "vector": 1})]
    finally:
        mem.close()


def test_malformed_ids_and_times_name_their_field(store):
    mem, _ = store
    kim = mem.add_entity(NS, "Kim")
    fact = mem.assert_fact(NS, kim.id, "likes", "tea")
    for call, field in (
        (lambda: mem.claims_and_sources_context("x", entity_ids=["ent_123"]), "entity_ids"),
        (lambda: mem.combined_context("x", entity_ids=["ent_123"]), "entity_ids"),
        (lambda: mem.end_fact(fact.id, "later"), "valid_to"),
        (lambda: mem.end_fact(fact.id, 5), "valid_to"),
    ):
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == field


def test_an_agent_view_has_the_same_defaults_as_memory(store):
    mem, _ = store
    alice = agent_view(mem, "alice")
    kim = alice.add_entity("agent/alice", "Kim")
    assert (kim.kind, kim.aliases, kim.profile) == ("thing", [], "")
    alice.assert_fact("agent/alice", kim.id, "likes", "tea")
    for view in (mem, alice):
        facts = view.facts_context("tea", entity_ids=[kim.id])
        assert facts.params == {
            "query": "tea", "entity_ids": [kim.id], "hops": 1, "predicate": None, "limit": 20, "time": "current",
        }  # fmt: skip
        said = view.claims_and_sources_context("tea")
        assert said.params == {"query": "tea", "entity_ids": None, "k": 50, "candidate_k": 200}
        both = view.combined_context("tea")
        assert both.params == {
            "query": "tea", "entity_ids": None, "hops": 1, "predicate": None, "limit": 50, "time": "current", "k": 50,
        }  # fmt: skip
        assert view.traverse([kim.id]).params == {"entity_ids": [kim.id], "hops": 2, "time": "current"}


def test_candidates_come_oldest_first_even_within_one_millisecond(store):
    mem, clock = store
    for n in range(10):
        first = mem.add_entity(NS, f"Twin {n}")
        clock.advance(0.0001)  # 100 microseconds: the same millisecond in the id
        second = mem.add_entity(NS, f"Twin {n}")
        clock.advance(1)
        ctx = mem.resolve_entity(f"Twin {n}")
        assert [c.entity.id for c in ctx["entities"]] == [first.id, second.id], n


def test_a_malformed_or_foreign_id_is_refused_naming_its_argument(store):
    mem, _ = store
    with pytest.raises(ValidationError) as refused:
        mem.retract_fact("not-a-fact")
    assert refused.value.field == "fact_id"
    with pytest.raises(ValidationError) as refused:  # a fact id where entity ids go
        mem.traverse(["fact_" + "0" * 32])
    assert refused.value.field == "entity_ids" and "ent_" in str(refused.value)


class _ChosenVectors:
    """An embedder whose vectors the test chooses, so each channel's ranks are known."""

    name = "chosen"
    dimension = 3

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self._vectors = vectors

    def embed_batch(self, texts):  # type: ignore[no-untyped-def]
        return [self._vectors.get(t, [0.0, 0.0, 1.0]) for t in texts]


def test_claims_fuse_lexical_ahead_of_vector_as_the_facts_weights_say(tmp_path: Path) -> None:
    # lexical ranks: A 1st ("orbit" twice), C 2nd; vector ranks: C 1st (the query's own vector), B 2nd, A 3rd.
    # With the facts layer's weights (lexical 1.0, vector 0.5) A leads; with equal weights C would.
    a, b, c = "orbit orbit", "satellite plan", "orbit launch window moved to friday afternoon"
    vectors = {"orbit": [1.0, 0.0, 0.0], c: [1.0, 0.0, 0.0], b: [0.9, 0.43588989, 0.0], a: [0.0, 1.0, 0.0]}
    mem = memlane.open(str(tmp_path / "m.db"), embedder=_ChosenVectors(vectors), indexing="sync")
    for text in (a, b, c):
        mem.add_claim("team", text)
    said = mem.claims_and_sources_context("orbit")
    assert said.counts["claims_lexical"] == 2 and said.counts["claims_vector"] == 3
    assert [claim.text for group in said["claims"] for claim in group.claims][:2] == [a, c]
    mem.close()


def test_a_chunks_context_takes_a_neighbour_that_fits_exactly_the_room_left() -> None:
    """Budget 4: "ab" and its separator leave 1 character, which "c" fills; nothing past the budget."""
    assert ftext.context("T", ["x", "ab", "c"], 0, budget=4) == "T\n\nab c"
    assert ftext.context("T", ["ab", "c", "x"], 2, budget=4) == "T\nab c\n"


@given(
    words=st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=6), min_size=1, max_size=6),
    spare=st.integers(min_value=0, max_value=3),
)
@example(words=["ab", "cdefghijk"], spare=0)  # a space early in a passage that exactly fills the budget
@example(words=["abcdefghij", "kl"], spare=0)  # ... and late
def test_a_neighbour_that_fits_the_budget_is_kept_whole_on_either_side(words: list[str], spare: int) -> None:
    """A passage no longer than the room left is never cut at a word, the exact fit included."""
    passage = " ".join(words)
    budget = len(passage) + spare
    assert ftext.context("T", [passage, "middle", passage], 1, budget=budget) == f"T\n{passage}\n{passage}"


def test_dropping_the_facts_vectors_twice_is_harmless(tmp_path) -> None:
    with memlane.open(str(tmp_path / "drop.db"), embedder=None) as mem:
        mem._facts.drop_vectors()
        mem._facts.drop_vectors()
        assert mem.stats().vectors == 0


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(st.sampled_from(["Team", "ACME", "acme", "Ünï", "x-Y_z"]), min_size=1, max_size=3))
def test_the_facts_layer_keeps_a_namespace_exactly_as_written(store, segments):
    """Entities, facts and documents are stored under the namespace as written, case and all: they read back
    under it and are found under its own prefix (and not under a prefix that differs only in case)."""
    mem, _ = store
    ns = "/".join(segments)
    name = f"Ravi {uuid.uuid4().hex[:8]}"  # one store for every example: a name of its own
    ravi = mem.add_entity(ns, name)
    proj = mem.add_entity(ns, "Billing")
    fact = mem.assert_fact(ns, ravi.id, "works on", proj.id)
    doc = mem.add_document(ns, "notes", "Ravi works on billing.")
    assert ravi.namespace == fact.namespace == doc.namespace == tuple(segments)
    assert mem.resolve_entity(name, namespace_prefix=ns).status == "resolved"
    assert [r.namespace for r in mem.lookup([ravi.id, fact.id])] == [tuple(segments)] * 2
    if segments[0] != segments[0].swapcase():
        assert mem.resolve_entity(name, namespace_prefix=segments[0].swapcase()).status != "resolved"
