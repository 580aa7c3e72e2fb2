"""``core.twins``: one generator of steps is a method's synchronous and its asynchronous path (#40)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from memlane.core.twins import Steps, arun, on_store, steps_of, twin, work


class _Store:
    """A store with both sides, recording which ran and on which thread the work ran."""

    native_async = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def double(self, x: int, *, plus: int = 0) -> int:
        self.calls.append(("double", (x,), {"plus": plus}))
        return 2 * x + plus

    async def adouble(self, x: int, *, plus: int = 0) -> int:
        self.calls.append(("adouble", (x,), {"plus": plus}))
        return 2 * x + plus


class _Owner:
    def __init__(self) -> None:
        self.store = _Store()
        self.threads: list[int] = []

    def _square(self, x: int) -> int:
        self.threads.append(threading.get_ident())
        return x * x

    @twin
    def compute(self, x: int, *, heavy: bool = False) -> Steps[int]:
        """Square ``x`` (work), then double it with one (the store)."""
        if x < 0:
            raise ValueError("x")
        squared: int = yield work(self._square, x, heavy=heavy)
        doubled: int = yield on_store("double", squared, plus=1)
        return doubled


def test_the_sync_method_and_the_async_run_of_its_steps_answer_alike_each_on_its_side() -> None:
    owner = _Owner()
    assert owner.compute(3) == 19
    assert asyncio.run(arun(owner.store, steps_of(_Owner.compute)(owner, 3))) == 19  # type: ignore[misc]
    assert [c[0] for c in owner.store.calls] == ["double", "adouble"]
    assert owner.store.calls[0][1:] == owner.store.calls[1][1:] == ((9,), {"plus": 1})
    with pytest.raises(ValueError):  # a check refuses on both paths before any step
        owner.compute(-1)
    with pytest.raises(ValueError):
        asyncio.run(arun(owner.store, steps_of(_Owner.compute)(owner, -1)))  # type: ignore[misc]


def test_a_store_without_an_async_driver_runs_its_synchronous_verb_in_a_worker_thread() -> None:
    owner = _Owner()
    owner.store.native_async = False  # type: ignore[misc]
    threads = []
    double = owner.store.double

    def recorded(x: int, *, plus: int = 0) -> int:
        threads.append(threading.get_ident())
        return double(x, plus=plus)

    owner.store.double = recorded  # type: ignore[method-assign]
    assert asyncio.run(arun(owner.store, steps_of(_Owner.compute)(owner, 3))) == 19  # type: ignore[misc]
    assert [c[0] for c in owner.store.calls] == ["double"] and threads != [threading.get_ident()]


def test_heavy_work_runs_in_a_worker_thread_on_the_async_path_only() -> None:
    owner = _Owner()
    here = threading.get_ident()
    owner.compute(2, heavy=True)
    asyncio.run(arun(owner.store, steps_of(_Owner.compute)(owner, 2, heavy=False)))  # type: ignore[misc]
    asyncio.run(arun(owner.store, steps_of(_Owner.compute)(owner, 2, heavy=True)))  # type: ignore[misc]
    assert owner.threads[:2] == [here, here] and owner.threads[2] != here


def test_a_twin_shows_its_parameters_docstring_and_what_it_answers() -> None:
    sig = inspect.signature(_Owner.compute)
    assert list(sig.parameters) == ["self", "x", "heavy"] and sig.return_annotation == "int"
    assert inspect.getdoc(_Owner.compute) == "Square ``x`` (work), then double it with one (the store)."
    assert steps_of(_Owner.compute) is not None and steps_of(_Owner._square) is None


def test_a_twin_declared_without_postponed_annotations_answers_the_steps_third_type() -> None:
    namespace: dict[str, Any] = {}
    source = (
        "from memlane.core.twins import Steps, on_store, twin\n"
        "class Owner:\n"
        "    store = None\n"
        "    @twin\n"
        "    def f(self) -> Steps[bytes]:\n"
        "        return (yield on_store('x'))\n"
    )
    # as a module without `from __future__ import annotations` (this file's is not inherited): the type itself
    exec(compile(source, "<owner>", "exec", dont_inherit=True), namespace)
    assert inspect.signature(namespace["Owner"].f).return_annotation is bytes


def test_a_twin_not_annotated_as_steps_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match="annotate its return as Steps"):

        class _Bad:
            store = None

            @twin  # type: ignore[arg-type]
            def f(self) -> int:  # type: ignore[misc]
                return (yield on_store("x"))  # type: ignore[no-any-return]
