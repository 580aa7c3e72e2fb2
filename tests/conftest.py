"""Shared fixtures: a fake clock and a ``mem`` fixture parametrized over backends.

Tests under ``tests/conformance`` take only ``mem`` (and ``clock``), so the same
file runs against every backend that the parametrization lists.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import memlane


def pytest_configure(config: pytest.Config) -> None:
    sys._called_from_test = True  # type: ignore[attr-defined]


class FakeClock:
    """A settable clock: ``clock()`` returns ``clock.now``; ``advance`` moves it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """The URL of a fresh, empty database on each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    raise AssertionError(request.param)  # pragma: no cover - later backends


@pytest.fixture
def mem(store_url: str, clock: FakeClock) -> Iterator[memlane.Memory]:
    """A fresh memory on each backend, driven by the fake clock."""
    m = memlane.open(store_url, clock=clock, embedder="fake")
    yield m
    m.close()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("MEMLANE_DB", raising=False)
    monkeypatch.delenv("MEMLANE_EMBEDDER", raising=False)
    monkeypatch.chdir(tmp_path)
