"""``AsyncMemory`` and ``AsyncClient``: memlane for asyncio, from the same declaration.

One class per mode, with the same method names: ``await mem.get(ns, key)``
where the synchronous API has ``mem.get(ns, key)``, as httpx's ``AsyncClient``
mirrors its ``Client``. Every public method of ``Memory`` and ``Client`` has
its twin, made at import from its signature and docstring
(:mod:`memlane.values.surface`), so the async twins cannot drift from the core.

The exact reads and the item writes (:data:`AWAITED`: ``get``, ``exists``,
``get_many``, ``fetch``, ``list``, ``namespaces``, ``select``, ``history``,
``put``, ``put_many``, ``delete``) are declared once in ``Memory`` as a
generator of steps (:mod:`memlane.core.twins`): the async twin runs the same
steps, so it checks its arguments on the loop exactly as the synchronous
method does, and awaits the store: on PostgreSQL its statements run on
the event loop itself, over psycopg's async connections (a set per event
loop, opened as they are needed); on SQLite, whose driver has no async side,
in a worker thread. An embedder's work for a write (``indexing="sync"``) runs
in a worker thread. Every other call
runs the synchronous core in a worker thread (:func:`asyncio.to_thread`):
the event loop never waits on SQLite, PostgreSQL or the network, and calls
from many tasks run side by side (``Memory`` and ``Client`` are safe to share
between threads). ``.sync`` is the wrapped object. A method that returns an
iterator (:data:`LISTED`: ``export_records``) has a twin that returns the list
of what it yields, read whole in one worker thread.

Close an ``AsyncMemory`` (``await mem.close()``, or ``async with``) on the
loop that used it: that closes the loop's async connections too.

    async with await memlane.aio.open("memory.db") as mem:
        await mem.put("notes", "pets.cat", {"name": "Miso"})
        env = await mem.search("cat")
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from .client import Client
from .core import twins
from .core.memory import Memory
from .core.memory import open as _open
from .values import surface


def _methods(cls: type) -> tuple[str, ...]:
    """``cls``'s public methods: each has a coroutine twin (``close`` is the async classes' own)."""
    return tuple(
        n for n in dir(cls) if n[0] != "_" and n != "close" and inspect.isfunction(inspect.getattr_static(cls, n))
    )


# what AsyncMemory awaits on the store's async side: Memory's twins (core/twins.py), the exact reads and the item
# writes, native where the driver is (PostgreSQL). Every other method (search and recall, whose embedder's work is
# CPU; the facts layer, conversations, the query space, retention, the owner's settings) runs the synchronous core
# in a worker thread
AWAITED = tuple(n for n in _methods(Memory) if twins.steps_of(getattr(Memory, n)))
# the methods that return an iterator: the twin returns the list of what it yields, read whole in one worker
# thread (an iterator resumed on the loop would hold the store's read open across the caller's awaits)
LISTED = tuple(n for n in _methods(Memory) if inspect.isgeneratorfunction(getattr(Memory, n)))


class _Async:
    """What both async classes share: the wrapped object, closing, ``async with``."""

    sync: Any

    async def close(self) -> None:
        """Close the wrapped object (its store, or its connection pool)."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    if TYPE_CHECKING:  # the twins are made at import: to a type checker, each is a coroutine of Any

        def __getattr__(self, name: str) -> Any: ...


class AsyncMemory(_Async):
    """A :class:`~memlane.core.memory.Memory` for asyncio: every operation a coroutine, run off the event loop.

    Make one with ``await memlane.aio.open(...)`` (same arguments as
    :func:`memlane.open`), or wrap a memory you opened: ``AsyncMemory(mem)``.
    """

    def __init__(self, memory: Memory) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"AsyncMemory wraps a memlane Memory (memlane.open(...)), not {type(memory).__name__}")
        self.sync = memory

    @property
    def author(self) -> str | None:
        """Who this memory's writes are recorded as (see :func:`memlane.open`)."""
        return self.sync.author

    @property
    def embedder(self) -> Any:
        """The embedder that makes vectors, or ``None`` (lexical search only)."""
        return self.sync.embedder

    def __repr__(self) -> str:
        return f"<AsyncMemory {self.sync!r}>"

    async def close(self) -> None:
        """Close the memory (its store and its indexer), then this loop's async connections.

        In that order: once the store is closed no call can open connections anew, so none outlives the close.
        """
        await asyncio.to_thread(self.sync.close)
        await self.sync.store.aclose()


def _awaited(name: str) -> Any:
    steps = twins.steps_of(getattr(Memory, name))
    assert steps is not None

    async def method(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await twins.arun(self.sync.store, steps(self.sync, *args, **kwargs))

    return method


def _listed(name: str) -> Any:
    async def method(self: _Async, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(lambda: list(getattr(self.sync, name)(*args, **kwargs)))

    return method


def _dress_listed(owner: type, sync: type, name: str) -> None:
    method = surface.dress(_listed(name), owner, getattr(sync, name), asynchronous=True)
    listed = inspect.signature(method).replace(return_annotation="Awaitable[list[dict[str, Any]]]")
    method.__signature__ = listed  # type: ignore[attr-defined]
    setattr(owner, name, method)


class AsyncClient(_Async):
    """A :class:`~memlane.client.Client` for asyncio: the same arguments, every method a coroutine.

    Requests run in worker threads over the client's connection pool, so
    concurrent tasks share its connections and its retries.
    """

    DIFFERS = Client.DIFFERS  # its twins show the Client's methods, which differ from Memory's there

    def __init__(self, url: str | Sequence[str], token: str, **options: Any) -> None:
        self.sync = Client(url, token, **options)

    @property
    def url(self) -> str:
        """The service this client talks to now."""
        return self.sync.url

    def __repr__(self) -> str:  # never the token
        return f"<AsyncClient {self.sync.url}>"


for _name in AWAITED:
    setattr(AsyncMemory, _name, surface.dress(_awaited(_name), AsyncMemory, getattr(Memory, _name), asynchronous=True))
for _name in LISTED:
    _dress_listed(AsyncMemory, Memory, _name)
    _dress_listed(AsyncClient, Client, _name)
surface.off_loop(AsyncMemory, Memory, _methods(Memory))  # each method not made above
surface.off_loop(AsyncClient, Client, _methods(Client))


class Opening:
    """What :func:`open` returns: await it for the memory, or use it in ``async with`` directly.

    ``async with await memlane.aio.open(path) as mem`` and ``async with memlane.aio.open(path) as mem`` both
    open the memory off the event loop and close it at the end of the block.
    """

    def __init__(self, url: str | os.PathLike[str] | None, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._memory: AsyncMemory | None = None

    async def _opened(self) -> AsyncMemory:
        return AsyncMemory(await asyncio.to_thread(_open, self._url, **self._options))

    def __await__(self) -> Generator[Any, None, AsyncMemory]:
        return self._opened().__await__()

    async def __aenter__(self) -> AsyncMemory:
        self._memory = await self._opened()
        return self._memory

    async def __aexit__(self, *exc: object) -> None:
        memory, self._memory = self._memory, None
        if memory is not None:
            await memory.close()


def open(url: str | os.PathLike[str] | None = None, **options: Any) -> Opening:  # noqa: A001
    """Open a memory for asyncio; the arguments of :func:`memlane.open`, opened off the event loop.

    Await it (``mem = await memlane.aio.open(path)``), or use it in ``async with`` with or without ``await``.
    """
    return Opening(url, options)
