"""memlane: durable memory for AI agents.

Two verbs for two questions: exact lookup when the agent knows the address
(``get``, ``fetch``, ``list``, ``summarize``), search when it knows a topic
(``search``). One SQLite file by default.

The modules sit in one folder per layer (docs/architecture.md).
"""

from .aio import AsyncClient, AsyncMemory
from .client import Client
from .core.memory import Memory, open
from .domain.indexer import CatchUp
from .domain.search.choose import Chooser, OpenAIChooser
from .values.errors import (
    BackendUnavailableError,
    BusyError,
    ChooserError,
    ConflictError,
    EmbedderError,
    EmbedderMismatchError,
    ForbiddenError,
    MemlaneError,
    NotFoundError,
    QueryRefused,
    SchemaVersionError,
    StoreError,
    UnauthorizedError,
    ValidationError,
)
from .values.model import Envelope, Hit, Item, Namespace, Page, Stats, Version
from .values.query import QueryPlan, QueryResult, SavedQuery
from .values.retention import CleanupReport, RetentionRule

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncMemory",
    "BackendUnavailableError",
    "BusyError",
    "CatchUp",
    "Chooser",
    "ChooserError",
    "CleanupReport",
    "Client",
    "ConflictError",
    "EmbedderError",
    "EmbedderMismatchError",
    "ForbiddenError",
    "Envelope",
    "Hit",
    "Item",
    "MemlaneError",
    "Memory",
    "Namespace",
    "NotFoundError",
    "OpenAIChooser",
    "Page",
    "QueryPlan",
    "QueryRefused",
    "QueryResult",
    "RetentionRule",
    "SavedQuery",
    "SchemaVersionError",
    "Stats",
    "StoreError",
    "UnauthorizedError",
    "ValidationError",
    "Version",
    "open",
]
