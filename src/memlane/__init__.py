"""memlane: durable memory for AI agents.

Two verbs for two questions: exact lookup when the agent knows the address
(``get``, ``fetch``, ``list``, ``summarize``), search when it knows a topic
(``search``). One SQLite file by default.
"""

from .aio import AsyncClient, AsyncMemory
from .client import Client
from .errors import (
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
from .indexer import CatchUp
from .memory import Memory, open
from .model import Envelope, Hit, Item, Namespace, Page, Stats, Version
from .query.model import QueryPlan, QueryResult, SavedQuery
from .retention import CleanupReport, RetentionRule
from .search.choose import Chooser, OpenAIChooser

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
