"""An operation's synchronous and asynchronous paths from one declaration: a generator of steps.

A :func:`twin` method is written once, as a generator that checks its arguments
and yields what it needs done: :func:`on_store` (a store call, whose answer is
sent back) or :func:`work` (the core's own work, such as making a write's
vectors). ``Memory.<name>`` runs the steps on the synchronous store (:func:`run`);
``AsyncMemory.<name>`` runs the same generator with ``await store.a<name>(...)``
(a store without an async driver: its synchronous verb in a worker thread) and
heavy work in a worker thread (:func:`arun`), as ``PostgresStore`` carries
out a write's statements on a synchronous or an async cursor. No twin is written
by hand, so none can drift.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import typing
from collections.abc import Callable, Generator
from typing import Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class Step(NamedTuple):
    """What a twin asks for: ``store.<name>(*args, **kwargs)``, or ``call(*args)`` when ``call`` is given."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    call: Callable[..., Any] | None = None
    heavy: bool = False


_new = tuple.__new__
Steps = Generator[Step, Any, R]
"""A twin's body: yields steps, is sent each one's answer, returns the operation's answer."""


def on_store(name: str, *args: Any, **kwargs: Any) -> Step:
    """A call to the store's ``name`` (``a<name>``, awaited, on the async path)."""
    return _new(Step, (name, args, kwargs, None, False))  # NamedTuple's own __new__ is Python: slower per call


def work(call: Callable[..., Any], *args: Any, heavy: bool = False) -> Step:
    """``call(*args)``; ``heavy`` (CPU, such as an embedder's): in a worker thread on the async path."""
    return Step(call.__name__, args, {}, call, heavy)


def run(store: Any, steps: Steps[R]) -> R:
    """Carry out ``steps`` on the synchronous store."""
    try:
        step = next(steps)
        while True:
            step = steps.send((step.call or getattr(store, step.name))(*step.args, **step.kwargs))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(store: Any, steps: Steps[R]) -> R:
    """Carry out ``steps`` on the store's async side (``native_async``), else in worker threads; heavy work too."""
    answer: Any = None
    try:
        while True:
            step = steps.send(answer)
            if step.call is None and store.native_async:
                answer = await getattr(store, f"a{step.name}")(*step.args, **step.kwargs)
            elif step.call is None:  # a driver without an async side (SQLite): its synchronous verb in a thread
                answer = await asyncio.to_thread(getattr(store, step.name), *step.args, **step.kwargs)
            else:
                answer = await asyncio.to_thread(step.call, *step.args) if step.heavy else step.call(*step.args)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class _HasStore(Protocol):
    @property
    def store(self) -> Any: ...


S = TypeVar("S", bound=_HasStore)
_STEPS = re.compile(r"Steps\[(.*)\]", re.DOTALL)


def _answer(annotation: Any) -> Any:
    """What ``Steps[X]`` answers, ``X`` (text under ``from __future__ import annotations``); ``None`` if not steps."""
    if isinstance(annotation, str):
        found = _STEPS.fullmatch(annotation)
        return found and found.group(1)
    parts = typing.get_args(annotation)
    return parts[2] if typing.get_origin(annotation) is Generator and len(parts) == 3 else None


def twin(steps: Callable[Concatenate[S, P], Steps[R]]) -> Callable[Concatenate[S, P], R]:
    """The synchronous method made from ``steps`` (kept as its ``.steps``, for the async twin).

    It shows the parameters and docstring of ``steps``, and returns what they return (``Steps[Item]``: ``Item``).
    """

    @functools.wraps(steps)
    def method(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        return run(self.store, steps(self, *args, **kwargs))

    sig = inspect.signature(steps)
    returns = _answer(sig.return_annotation)
    if returns is None:
        raise TypeError(f"{steps.__qualname__} is a twin: annotate its return as Steps[<what it answers>]")
    method.__signature__ = sig.replace(return_annotation=returns)  # type: ignore[attr-defined]
    method.__annotations__ = {**steps.__annotations__, "return": returns}
    method.steps = steps  # type: ignore[attr-defined]
    return method


def steps_of(method: Callable[..., Any]) -> Callable[..., Steps[Any]] | None:
    """The generator a :func:`twin` method was made from; ``None`` for any other."""
    return getattr(method, "steps", None)
