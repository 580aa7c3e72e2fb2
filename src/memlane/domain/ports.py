"""What the domain parts need from the memory that composes them, as protocols.

The facts layer, the indexer, the query space, conversations and chooser
recall are handed the composing memory (or a Client) as one of these, so none
of them imports :mod:`memlane.core.memory`, which imports them: every dependency
points one way (see docs/architecture.md).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..store.base import Store
    from ..values.model import Item, Namespace, Page
    from .search.embedders import Embedder
    from .search.relevance import Scale


class Core(Protocol):
    """The parts of a memory a domain part builds on: its store, clock, author and embedder."""

    author: str | None

    @property
    def store(self) -> Store: ...

    @property
    def embedder(self) -> Embedder | None: ...

    def _now(self) -> datetime: ...

    def _embed(self, texts: Sequence[str]) -> list[bytes]: ...

    def _embed_query(self, query: str) -> list[float]: ...

    def _scale_for_relevance(self) -> Scale | None: ...


class Reader(Protocol):
    """Exact reads by address, as both a Memory and a Client offer them."""

    def list(
        self,
        namespace_prefix: Namespace | str = (),
        *,
        key_prefix: str = "",
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page: ...

    def get_many(self, addresses: Iterable[tuple[Namespace | str, str]]) -> builtins.list[Item | None]: ...
