"""Surfaces made from the operations table: one declaration, every method.

An operation is declared once: its entry in :data:`memlane.values.operations.OPERATIONS`
and its method on :class:`~memlane.core.memory.Memory` (signature, defaults,
docstring, as :data:`memlane.values.operations.DECLARED` holds them, so that the
Client imports no core). :func:`fill` gives a surface class (the Client,
``AgentView``) a method for every operation it does not write itself, with the
core's signature and docstring, so ``help()``, ``inspect.signature`` and editors
see the same parameters everywhere. A method a surface writes itself is a
deliberate difference, and must say why in the class's ``DIFFERS``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .operations import OPERATIONS, Operation, doc, signature


@functools.cache
def core(name: str) -> Callable[..., Any]:
    """``Memory.<name>`` as declared (:data:`memlane.values.operations.DECLARED`): a function with its
    signature and docstring, which a surface method is dressed in."""

    def declared(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"Memory.{name} as declared: call it on a Memory")

    declared.__name__ = declared.__qualname__ = name
    declared.__doc__ = doc(name)
    declared.__signature__ = signature(name)  # type: ignore[attr-defined]
    return declared


def arguments(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a caller gave, by name, checked against the core's signature (a ``TypeError`` as Python's)."""
    bound = signature(name).bind(None, *args, **kwargs)
    given = dict(bound.arguments)
    given.pop("self", None)
    return given


def dress(
    method: Callable[..., Any], owner: type, source: Callable[..., Any], *, asynchronous: bool = False
) -> Callable[..., Any]:
    """``method`` as ``owner``'s method of ``source``'s name, with ``source``'s signature and docstring."""
    sig = inspect.signature(source)
    if asynchronous:
        sig = sig.replace(return_annotation=f"Awaitable[{sig.return_annotation}]")
    method.__name__ = source.__name__
    method.__qualname__ = f"{owner.__qualname__}.{source.__name__}"
    method.__module__ = owner.__module__
    method.__doc__ = inspect.getdoc(source)
    method.__signature__ = sig  # type: ignore[attr-defined]
    return method


def fill(
    owner: type, build: Callable[[Operation], Callable[..., Any]], *, only: Callable[[Operation], bool] | None = None
) -> None:
    """Give ``owner`` a method for every operation (that ``only`` keeps) it does not define itself."""
    differs: Mapping[str, str] = getattr(owner, "DIFFERS", {})
    for op in OPERATIONS:
        if only is not None and not only(op):
            continue
        written = op.name in vars(owner)
        if written and op.name not in differs:
            raise TypeError(f"{owner.__name__}.{op.name} is written by hand: say why in {owner.__name__}.DIFFERS")
        if not written:
            method = dress(build(op), owner, core(op.name))
            method.made_from_table = True  # type: ignore[attr-defined]  # tells it from one written by hand
            setattr(owner, op.name, method)


def _offloaded(name: str, attribute: str) -> Callable[..., Any]:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        import asyncio  # loaded by then: the Client's import does without it

        return await asyncio.to_thread(getattr(getattr(self, attribute), name), *args, **kwargs)

    return method


def off_loop(owner: type, sync: type, names: Iterable[str], *, attribute: str = "sync") -> None:
    """Give ``owner`` a coroutine twin of each of ``sync``'s methods ``names``, run in a worker thread.

    The twin calls ``self.<attribute>.<name>`` through :func:`asyncio.to_thread`:
    the event loop never waits on the database or the network, and the call
    sees the caller's context variables. It shows ``sync``'s signature and docstring.
    """
    for name in names:
        if name not in vars(owner):
            setattr(owner, name, dress(_offloaded(name, attribute), owner, getattr(sync, name), asynchronous=True))
