"""The fair gate on expensive work: a model-based test of its rule, then real threads and a real event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gating import over_share, waiting
from memlane.values.errors import BusyError
from memlane.values.gate import Gate

AGENTS = ("a", "b", "c", "d")


class GateRule(RuleBasedStateMachine):
    """Arrivals, finishes and time-outs in any order, checked against what the gate promises.

    * never more than ``capacity`` places held, nor more than ``per_agent`` by one agent, and no place idle
      while a request that could take it waits;
    * a request starts at once exactly when both limits leave room; it is refused only when its agent holds
      or awaits its fair share while another agent waits, or has ``max_waiting`` waiting;
    * once an agent's first waiting request could start, every other agent is served at most once before it
      (round robin).
    """

    @initialize(per_agent=st.integers(1, 3), capacity=st.integers(1, 6), max_waiting=st.integers(1, 4))
    def start(self, per_agent: int, capacity: int, max_waiting: int) -> None:
        self.gate = Gate(per_agent, capacity, max_waiting=max_waiting)
        self.held: Counter[str] = Counter()
        self.queued: dict[str, list] = {a: [] for a in AGENTS}
        self.passed: dict[object, Counter[str]] = {}  # a first waiter that could start -> grants to others since

    def _eligible(self, agent: str) -> bool:
        return self.held[agent] < self.gate.per_agent

    def _granted(self) -> None:
        for agent, queue in self.queued.items():
            for waiter in [w for w in queue if w.granted]:
                queue.remove(waiter)
                self.held[agent] += 1
                self._count_grant(agent, waiter)

    def _count_grant(self, agent: str, waiter: object | None) -> None:
        self.passed.pop(waiter, None)
        for first, grants in self.passed.items():
            if first.caller != agent:  # type: ignore[attr-defined]
                grants[agent] += 1

    def _track(self) -> None:
        for agent, queue in self.queued.items():
            if queue and self._eligible(agent) and queue[0] not in self.passed:
                self.passed[queue[0]] = Counter()

    @rule(agent=st.sampled_from(AGENTS))
    def arrive(self, agent: str) -> None:
        mine = self.held[agent] + len(self.queued[agent])
        others_wait = any(q for a, q in self.queued.items() if a != agent)
        room = sum(self.held.values()) < self.gate.capacity and self._eligible(agent)
        try:
            waiter = self.gate._arrive(agent, None)
        except BusyError as e:
            assert e.retry_after >= 1 and not room
            assert (others_wait and mine >= self.gate.per_agent) or len(self.queued[agent]) >= self.gate.max_waiting
            return
        assert (waiter is None) == room
        # and it is refused whenever one of those holds: waiting is not granted past the share or max_waiting
        assert room or not (others_wait and mine >= self.gate.per_agent)
        assert room or len(self.queued[agent]) < self.gate.max_waiting
        if waiter is None:
            self.held[agent] += 1
            self._count_grant(agent, None)
        else:
            self.queued[agent].append(waiter)
        self._track()

    @precondition(lambda self: sum(self.held.values()) > 0)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        agent = data.draw(st.sampled_from(sorted(a for a, n in self.held.items() if n)))
        self.held[agent] -= 1
        self.gate.release(agent)
        self._granted()
        self._track()

    @precondition(lambda self: any(self.queued.values()))
    @rule(data=st.data())
    def time_out(self, data: st.DataObject) -> None:
        agent = data.draw(st.sampled_from(sorted(a for a, q in self.queued.items() if q)))
        waiter = data.draw(st.sampled_from(self.queued[agent]))
        with pytest.raises(BusyError, match="no place for this search or query within"):
            self.gate._give_up(waiter)
        self.queued[agent].remove(waiter)
        self.passed.pop(waiter, None)
        self._track()

    @invariant()
    def places_are_bounded_and_never_idle_while_a_request_that_could_take_one_waits(self) -> None:
        held = sum(self.held.values())
        assert self.gate.running() == held <= self.gate.capacity
        assert all(n <= self.gate.per_agent for n in self.held.values())
        assert self.gate.waiting() == sum(len(q) for q in self.queued.values())
        if held < self.gate.capacity:
            assert not any(q and self._eligible(a) for a, q in self.queued.items())

    @invariant()
    def round_robin(self) -> None:
        for grants in self.passed.values():
            assert all(n <= 1 for n in grants.values()), grants


GateRule.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_the_gate_keeps_its_rule = GateRule.TestCase


def test_bad_settings_are_refused() -> None:
    for bad in ({"per_agent": 0}, {"capacity": 0}, {"max_waiting": -1}, {"max_wait": -1}):
        with pytest.raises(ValueError, match="at least"):
            Gate(**bad)  # type: ignore[arg-type]


def test_an_agent_alone_waits_past_its_share_but_is_not_refused() -> None:
    gate = Gate(per_agent=2, capacity=3, max_wait=10)
    done, leave = threading.Event(), threading.Event()

    def third_request() -> None:
        with gate.enter("a"):
            done.set()
            leave.wait(5)

    with gate.enter("a"), gate.enter("a"):
        third = threading.Thread(target=third_request)
        third.start()
        deadline = time.monotonic() + 5
        while gate.waiting() < 1:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert gate.running("a") == 2 and not done.is_set()  # a place is free, but not for a third of a's
        with gate.enter("b"):  # another agent's request starts at once
            assert gate.running() == 3
    assert done.wait(5) and gate.running("a") == 1  # its turn came when one of a's finished
    leave.set()
    third.join(timeout=5)


def test_threads_wait_their_turn_and_a_request_over_the_share_is_refused_while_others_wait() -> None:
    gate = Gate(per_agent=2, capacity=2, max_wait=10)
    order: list[str] = []
    with gate.enter("hog"), gate.enter("hog"):
        with waiting(gate, "polite") as threads:
            with pytest.raises(BusyError, match="its fair share is 2") as refused:
                with gate.enter("hog"):
                    pass
            assert refused.value.retry_after >= 1
            order.append("hog refused")
    for t in threads:
        t.join(timeout=5)
        assert not t.is_alive()
    assert gate.running() == 0 and gate.waiting() == 0 and order == ["hog refused"]


def test_a_request_that_waits_too_long_is_refused_and_leaves_the_queue() -> None:
    gate = Gate(per_agent=1, capacity=1, max_wait=0.05)
    with gate.enter("a"):
        started = time.monotonic()
        with pytest.raises(BusyError, match="within 0.05 s") as refused:
            with gate.enter("b"):
                pass
        assert time.monotonic() - started >= 0.05
        assert refused.value.retry_after >= 1
        assert gate.waiting() == 0
    with gate.enter("b"):  # the place is free again
        assert gate.running() == 1


def test_a_failure_inside_the_block_gives_its_place_back() -> None:
    gate = Gate(per_agent=1, capacity=1)
    with pytest.raises(RuntimeError):
        with gate.enter("a"):
            raise RuntimeError("boom")
    assert gate.running() == 0


def test_retry_after_follows_how_long_places_are_held() -> None:
    gate = Gate(per_agent=1, capacity=1, max_wait=0.01)
    for _ in range(40):
        gate._take("a")
        gate.release("a", held_s=4.0)
    with gate.enter("a"):
        with pytest.raises(BusyError) as refused:
            with gate.enter("b"):
                pass
    assert refused.value.retry_after >= 4


def test_event_loop_waiters_are_served_in_turn_and_cancellation_frees_the_place() -> None:
    async def scenario() -> list[str]:
        gate = Gate(per_agent=3, capacity=1, max_wait=5)
        served: list[str] = []
        await gate.acquire("hog")

        async def one(caller: str) -> None:
            await gate.acquire(caller)
            served.append(caller)
            await asyncio.sleep(0)
            gate.release(caller)

        tasks = [asyncio.create_task(one("hog")) for _ in range(3)]
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(one("victim")))
        gone = asyncio.create_task(one("leaver"))
        await asyncio.sleep(0.01)
        gone.cancel()  # the caller went away while waiting: it takes no place
        await asyncio.sleep(0.01)
        gate.release("hog")
        await asyncio.gather(*tasks)
        assert gate.running() == 0 and gate.waiting() == 0
        return served

    served = asyncio.run(scenario())
    # the hog queued three first, the victim one: round robin serves the victim second, not fourth
    assert served == ["hog", "victim", "hog", "hog"]


def test_async_and_thread_callers_share_one_gate() -> None:
    gate = Gate(per_agent=1, capacity=1, max_wait=5)
    done = threading.Event()

    async def scenario() -> None:
        with over_share(gate, "x"):
            with pytest.raises(BusyError, match="fair share"):
                await gate.acquire("x")
        await gate.acquire("x")
        gate.release("x")
        done.set()

    asyncio.run(scenario())
    assert done.is_set() and gate.running() == 0


def test_the_process_queues_a_bounded_number_of_requests_whoever_sends_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers are told apart before their token is checked: made-up tokens, each a caller of its own, must not
    queue without bound."""
    import memlane.values.gate

    monkeypatch.setattr(memlane.values.gate, "MAX_QUEUED", 3)
    gate = Gate(per_agent=1, capacity=1, max_wait=10)

    def wait_as(caller: str) -> None:
        with gate.enter(caller):
            pass

    with gate.enter("holder"):
        threads = [threading.Thread(target=wait_as, args=(f"made-up-{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while gate.waiting() < 3:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        with pytest.raises(BusyError, match=r"3 searches or queries are waiting in this process \(at most 3\)"):
            with gate.enter("made-up-3"):
                pass
    for t in threads:
        t.join(timeout=5)
    assert gate.running() == 0 and gate.waiting() == 0


@pytest.mark.parametrize("allowed", [0, 1, 3])
def test_with_n_waiting_allowed_the_nth_waits_and_the_next_is_refused(allowed: int) -> None:
    gate = Gate(per_agent=1, capacity=1, max_wait=10, max_waiting=allowed)
    with gate.enter("a"):
        with waiting(gate, "a", allowed) as threads:  # alone: past its share, its requests wait
            assert gate.waiting() == allowed
            with pytest.raises(BusyError) as refused:
                with gate.enter("a"):
                    pass
            assert gate.waiting() == allowed and gate.running("a") == 1
            assert f"this agent already has {allowed} searches or queries waiting (at most {allowed})" in str(
                refused.value
            )
            assert refused.value.retry_after >= 1
            if allowed:
                with waiting(gate, "b", 1) as others:  # another agent's count is its own
                    assert gate.waiting() == allowed + 1
                threads += others
    for t in threads:
        t.join(timeout=10)
    assert gate.running() == 0 and gate.waiting() == 0


def test_each_refusal_says_why_and_when_to_retry() -> None:
    gate = Gate(per_agent=1, capacity=2, max_wait=0.05, max_waiting=1)
    gate._held_s = 3.0  # places are held 3 s on average
    with gate.enter("a"), gate.enter("b"):
        with waiting(gate, "c", 1) as threads:  # c waits: a is at its share while another agent waits
            with pytest.raises(BusyError) as over:
                with gate.enter("a"):
                    pass
            assert str(over.value) == (
                "this agent already has 1 searches or queries running or waiting while other agents wait (its fair "
                "share is 1); retry after the time given"
            )
            assert over.value.retry_after == 5  # ceil(3 x (1 + 1 waiting / 2 places))
            with pytest.raises(BusyError) as full:
                with gate.enter("c"):
                    pass
            assert str(full.value) == (
                "this agent already has 1 searches or queries waiting (at most 1); wait for some to finish, then retry"
            )
            assert full.value.retry_after == 5
    for t in threads:
        t.join(timeout=10)
    with gate.enter("a"), gate.enter("a2"), pytest.raises(BusyError) as late:
        with gate.enter("b"):
            pass
    assert str(late.value) == (
        "no place for this search or query within 0.05 s (the service is saturated); retry after the time given"
    )
    assert late.value.retry_after == 3


def test_the_process_wide_refusal_says_how_many_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    import memlane.values.gate

    monkeypatch.setattr(memlane.values.gate, "MAX_QUEUED", 1)
    gate = Gate(per_agent=1, capacity=1, max_wait=10)
    gate._held_s = 2.0
    with gate.enter("holder"), waiting(gate, "one", 1) as threads:
        with pytest.raises(BusyError) as full:
            with gate.enter("two"):
                pass
    for t in threads:
        t.join(timeout=10)
    assert (
        str(full.value) == "1 searches or queries are waiting in this process (at most 1); retry after the time given"
    )
    assert full.value.retry_after == 4  # ceil(2 x (1 + 1 waiting / 1 place))


@pytest.mark.parametrize(("held", "waiters", "expected"), [(1.0, 0, 1), (0.2, 0, 1), (1.0, 1, 2), (2.5, 3, 10)])
def test_retry_after_is_the_time_the_queue_ahead_takes_at_least_a_second(
    held: float, waiters: int, expected: int
) -> None:
    gate = Gate(per_agent=1, capacity=1, max_wait=10)
    gate._held_s = held
    with gate.enter("holder"), waiting(gate, "w", waiters) if waiters else contextlib.nullcontext() as threads:
        assert gate._retry_after() == expected  # held x (1 + waiting / capacity), rounded up
    for t in threads or ():
        t.join(timeout=10)


def test_an_event_loop_waiter_is_refused_after_max_wait_and_a_cancelled_one_just_leaves() -> None:
    async def scenario() -> None:
        gate = Gate(per_agent=1, capacity=1, max_wait=0.1)
        await gate.acquire("hog")
        started = time.monotonic()
        with pytest.raises(BusyError, match="within 0.1 s"):
            await asyncio.wait_for(gate.acquire("late"), 5)  # bounded: a waiter that is never refused fails here
        assert 0.05 <= time.monotonic() - started < 5 and gate.waiting() == 0
        gate.max_wait = 10
        leaver = asyncio.create_task(gate.acquire("leaver"))
        await asyncio.sleep(0.01)
        assert gate.waiting() == 1
        leaver.cancel()
        await asyncio.gather(leaver, return_exceptions=True)
        assert leaver.cancelled() and gate.waiting() == 0 and gate.running() == 1  # cancelled, not refused
        gate.release("hog")
        assert gate.running() == 0

    asyncio.run(scenario())


def test_each_agents_places_are_counted_apart_and_nothing_is_kept_once_all_leave() -> None:
    gate = Gate(per_agent=2, capacity=4)
    with gate.enter("a"), gate.enter("a"), gate.enter("b"):
        assert (gate.running("a"), gate.running("b"), gate.running("c"), gate.running()) == (2, 1, 0, 3)
    for n in range(50):  # many callers, each once (made-up tokens): the gate keeps no entry for any of them
        with gate.enter(f"caller-{n}"):
            pass
    assert gate.running() == 0 and gate._running == {} and gate._queues == {} and not gate._turns


def test_a_new_gate_asks_for_one_second() -> None:
    """Before any place was held, a place is taken to last a second: the first refusal says 1."""
    gate = Gate(per_agent=1, capacity=1, max_waiting=0)
    with gate.enter("a"), pytest.raises(BusyError) as refused:
        with gate.enter("b"):
            pass
    assert refused.value.retry_after == 1
