"""Every public ``Memory`` method has its ``AsyncMemory`` twin, every ``Client`` method its ``AsyncClient`` one (#40).

The twins are made at import in :mod:`memlane.aio`, for every public method the sync class has (``AWAITED``:
the steps of Memory's twins; ``LISTED``: the iterators; the rest in a worker thread). The enumeration below
holds them to it, with a short list of reasoned exceptions.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

import memlane
from live import LiveServer
from memlane.aio import AsyncClient, AsyncMemory
from memlane.client import Client
from memlane.core.access import Access
from memlane.core.memory import Memory
from memlane.server import create_app

# public attributes of the sync class that have no coroutine twin, each for a reason
NOT_TWINNED: dict[type, dict[str, str]] = {
    Memory: {
        "store": "the synchronous store object itself, not an operation: reach it through `.sync.store`",
    },
    Client: {
        "DIFFERS": "a class constant (why a Client method differs from Memory's), copied as is, not a method",
    },
}
# properties both have: a plain attribute on the async class too (no I/O, nothing to await)
PROPERTIES = {Memory: {"embedder"}, Client: {"url"}}


def _public(cls: type) -> dict[str, Any]:
    """``cls``'s public attributes (context-manager dunders and other ``_`` names are the classes' own)."""
    return {name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")}


@pytest.mark.parametrize(("sync", "twin"), [(Memory, AsyncMemory), (Client, AsyncClient)])
def test_every_public_method_has_a_coroutine_twin(sync: type, twin: type) -> None:
    missing = []
    for name, attribute in _public(sync).items():
        if name in NOT_TWINNED[sync]:
            continue
        if isinstance(attribute, property):
            if not isinstance(inspect.getattr_static(twin, name, None), property):
                missing.append(f"{name} (a property)")
            continue
        if not inspect.iscoroutinefunction(getattr(twin, name, None)):
            missing.append(name)
    assert not missing, f"{twin.__name__} lacks twins of {sync.__name__}'s {missing}: declare them in memlane.aio"
    # the exception lists stay true: each names a public attribute the sync class still has
    assert set(NOT_TWINNED[sync]) <= set(_public(sync))
    assert {n for n, a in _public(sync).items() if isinstance(a, property)} - set(NOT_TWINNED[sync]) == PROPERTIES[sync]


def test_the_twins_show_the_sync_signature_and_say_what_a_listed_one_returns() -> None:
    for name in ("start_indexing", "export_records"):
        params = inspect.signature(getattr(Memory, name)).parameters
        assert inspect.signature(getattr(AsyncMemory, name)).parameters == params
    assert inspect.signature(AsyncMemory.export_records).return_annotation == "Awaitable[list[dict[str, Any]]]"
    assert memlane.aio.LISTED == ("export_records",)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield str(tmp_path / "a.db")
        return
    server = request.getfixturevalue("postgres")
    created = server.create()
    yield created
    server.drop(created)


def test_async_export_records_is_the_sync_export_as_a_list_and_imports_back(url: str, tmp_path: Path) -> None:
    with memlane.open(url, embedder=None) as mem:
        mem.put("notes", "k1", {"v": 1})
        mem.put("notes", "k1", {"v": 2})
        mem.put("notes/b", "k2", "x")
        expected = list(mem.export_records())

        async def main() -> list[dict[str, Any]]:
            records = await AsyncMemory(mem).export_records()
            async with memlane.aio.open(tmp_path / "b.db", embedder=None) as other:
                assert await other.import_records(records) == len(records)
                assert (await other.get("notes", "k1")).value == {"v": 2}  # type: ignore[union-attr]
                assert [v.value for v in await other.history("notes", "k1")] == [{"v": 1}]
            return records

        records = asyncio.run(main())
    assert isinstance(records, list)
    assert records == expected and len(records) == 3  # two items and one history version


def test_async_start_indexing_starts_the_indexer_before_any_write(tmp_path: Path) -> None:
    from memlane.domain.search.embedders import FakeEmbedder

    with memlane.open(tmp_path / "i.db", embedder=FakeEmbedder()) as mem:
        assert not mem._indexer.running
        asyncio.run(AsyncMemory(mem).start_indexing())
        assert mem._indexer.running


def test_async_client_export_records_is_the_client_export_as_a_list(tmp_path: Path) -> None:
    mem = memlane.open(tmp_path / "c.db", embedder=None)
    _, token = Access(mem).create_agent("tester", admin=True)
    server = LiveServer(create_app(mem))
    try:
        mem.put("notes", "k1", {"v": 1})
        with Client(server.url, token) as client:
            expected = list(client.export_records())

        async def main() -> list[dict[str, Any]]:
            async with AsyncClient(server.url, token) as client:
                return await client.export_records()  # type: ignore[no-any-return]

        records = asyncio.run(main())
        assert isinstance(records, list) and records == expected
        assert [r["key"] for r in records] == ["k1"]
    finally:
        server.stop()
        mem.close()
