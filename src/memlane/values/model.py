"""The values memlane hands back: items, versions, pages, hits and envelopes.

All are frozen dataclasses with ``to_dict()`` giving the JSON form that the CLI,
the exporter and (later) the HTTP service render. Timestamps are timezone-aware
UTC datetimes; in JSON they are ISO 8601 strings.
"""

from __future__ import annotations

import json
import json.scanner
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

Namespace = tuple[str, ...]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="microseconds")


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def namespace_text(namespace: Namespace) -> str:
    """The text form of a namespace: segments joined with ``/``."""
    return "/".join(namespace)


_UNSET: Any = object()  # an Item's value not decoded yet (``None`` is a value)
# The C scanner parses canonical JSON memlane wrote itself (no leading whitespace, no trailing text) about
# five times faster than json.loads, whose Python-level wrapper dominates for small values.
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined,arg-type]
_fromiso = datetime.fromisoformat
_new = object.__new__


@lru_cache(maxsize=8192)
def namespace_tuple(text: str) -> Namespace:
    """A namespace's text form back to its tuple of segments."""
    return tuple(text.split("/"))


def decode_json(text: str) -> Any:
    """Decode JSON text that memlane wrote (canonical: nothing before or after the value)."""
    return _scan_json(text, 0)[0]


def parse_metadata(text: str) -> dict[str, Any]:
    """Stored metadata JSON to a dict (a fresh ``{}`` for the common empty case)."""
    return {} if text == "{}" else decode_json(text)  # type: ignore[no-any-return]


def _row_field(index: int, doc: str) -> Any:
    """A property reading and replacing ``_row[index]`` of an :class:`Item`."""
    return property(lambda self: self._row[index], lambda self, value: self._set(index, value), doc=doc)


def _row_time(index: int, doc: str) -> Any:
    """:func:`_row_field` for a time: stored ISO text is read as a datetime."""

    def get(self: Item) -> Any:
        at = self._row[index]
        return _fromiso(at) if type(at) is str else at

    return property(get, lambda self, value: self._set(index, value), doc=doc)


class Item:
    """One stored value at an address ``(namespace, key)``.

    A snapshot: changing its fields changes nothing in the store. An item read
    from a store holds the stored row (value and metadata as canonical JSON,
    times as ISO 8601 text) and decodes each field on first access, so a
    ``get`` or a ``list`` pays only for the fields it reads. ``indexed`` is
    ``False`` for an item written with ``index=False``: search never returns
    it (keyed reads do). Items compare equal when every field is equal.
    """

    # _row: (id, namespace text, key, value JSON, value_type, text or None, metadata JSON, author, created_at,
    # updated_at, expires_at, version, indexed), a store's row; the rest cache what was decoded from it
    __slots__ = ("_row", "_namespace", "_value", "_text", "_metadata")
    __match_args__ = (
        "id",
        "namespace",
        "key",
        "value",
        "value_type",
        "text",
        "metadata",
        "author",
        "created_at",
        "updated_at",
        "expires_at",
        "version",
    )
    FIELDS = __match_args__
    """The item's fields, in constructor order (``indexed`` follows them)."""
    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaces

    def __init__(
        self,
        id: str,  # noqa: A002 - the field's name
        namespace: Namespace,
        key: str,
        value: Any,
        value_type: str,
        text: str,
        metadata: dict[str, Any],
        author: str | None,
        created_at: datetime,
        updated_at: datetime,
        expires_at: datetime | None,
        version: int,
        indexed: bool = True,
    ) -> None:
        self._row: tuple[Any, ...] = (
            id,
            None,
            key,
            None,
            value_type,
            text,
            None,
            author,
            created_at,
            updated_at,
            expires_at,
            version,
            indexed,
        )
        self._namespace: Namespace | None = namespace
        self._value = value
        self._text: str | None = text
        self._metadata: Any = metadata

    @classmethod
    def stored(cls, row: tuple[Any, ...], namespace: Namespace | None = None) -> Item:
        """An item from a store's row, decoded field by field on first access.

        ``row`` is ``(id, namespace, key, value, value_type, text, metadata,
        author, created_at, updated_at, expires_at, version, indexed)``: the
        namespace as text (or ``namespace``, its tuple, when the caller has
        it), value and metadata as canonical JSON, ``text`` ``None`` where it
        is the value's own (the string itself, or the JSON of any other
        value), times as ISO 8601 text or datetimes.
        """
        item = _new(cls)
        item._row = row
        item._namespace = namespace
        item._value = item._text = item._metadata = _UNSET
        return item

    def _set(self, index: int, value: Any) -> None:
        row = self._row
        self._row = (*row[:index], value, *row[index + 1 :])

    id: str = _row_field(0, "The item's id: stable across replacements, new for a new item at an expired address.")

    @property
    def namespace(self) -> Namespace:
        """The namespace, a tuple of segments."""
        namespace = self._namespace
        if namespace is None:
            namespace = self._namespace = namespace_tuple(self._row[1])
        return namespace

    @namespace.setter
    def namespace(self, value: Namespace) -> None:
        self._namespace = value

    key: str = _row_field(2, "The key: a taxonomy path such as ``preferences.ui.theme``.")

    @property
    def value(self) -> Any:
        """Any JSON value; its type is kept."""
        value = self._value
        if value is _UNSET:
            value = self._value = decode_json(self._row[3])
        return value

    @value.setter
    def value(self, value: Any) -> None:
        self.text  # noqa: B018 - a text rebuilt from the value stays the old value's
        self._value = value

    value_type: str = _row_field(4, "``string``, ``number``, ``boolean``, ``list``, ``object`` or ``null``.")

    @property
    def text(self) -> str:
        """What search indexes: the value's own text unless the writer gave another."""
        text = self._text
        if text is _UNSET:
            text = self._row[5]
            if text is None:
                text = self.value if self._row[4] == "string" else self._row[3]
            self._text = text
        return text  # type: ignore[return-value]

    @text.setter
    def text(self, value: str) -> None:
        self._text = value

    @property
    def metadata(self) -> dict[str, Any]:
        """A JSON object stored beside the value."""
        metadata = self._metadata
        if metadata is _UNSET:
            metadata = self._metadata = parse_metadata(self._row[6])
        return metadata  # type: ignore[no-any-return]

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self._metadata = value

    author: str | None = _row_field(7, "Who wrote this version (the memory's ``author``), or ``None``.")
    created_at: datetime = _row_time(8, "When the item was first written (kept across replacements).")
    updated_at: datetime = _row_time(9, "When this version was written.")
    expires_at: datetime | None = _row_time(10, "When the item stops being visible, or ``None``.")
    version: int = _row_field(11, "1 for a new item, one more at each replacement.")

    @property
    def indexed(self) -> bool:
        """``False`` for an item written with ``index=False``: no search returns it."""
        return bool(self._row[12])

    @indexed.setter
    def indexed(self, value: bool) -> None:
        self._set(12, value)

    def _fields(self) -> tuple[Any, ...]:
        return (*(getattr(self, name) for name in self.FIELDS), self.indexed)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        names = (*self.FIELDS, "indexed")
        return "Item(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields(), strict=True)) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, self._fields())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; namespace as a list of segments. ``indexed`` appears only when ``False``."""
        out = {
            "id": self.id,
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "value_type": self.value_type,
            "text": self.text,
            "metadata": self.metadata,
            "author": self.author,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "expires_at": _iso(self.expires_at),
            "version": self.version,
        }
        if not self.indexed:
            out["indexed"] = False
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Item:
        """Rebuild from ``to_dict()`` output (as a client receives it over HTTP)."""
        return cls(
            d["id"],
            tuple(d["namespace"]),
            d["key"],
            d.get("value"),
            d["value_type"],
            d.get("text", ""),
            d.get("metadata") or {},
            d.get("author"),
            datetime.fromisoformat(d["created_at"]),
            datetime.fromisoformat(d["updated_at"]),
            _dt(d.get("expires_at")),
            d["version"],
            d.get("indexed", True) is not False,
        )


@dataclass(frozen=True, slots=True)
class Version:
    """A past state of an address, kept when it was replaced or deleted.

    ``change`` says what ended this version: ``"replace"``, ``"delete"``,
    ``"clear"``, ``"expire"`` (an expired item overwritten by a new write) or
    ``"import"`` (displaced by an imported row).
    ``changed_at`` is when that happened and ``changed_by`` who did it.
    """

    item_id: str
    namespace: Namespace
    key: str
    value: Any
    value_type: str
    text: str
    metadata: dict[str, Any]
    author: str | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    version: int
    change: str
    changed_at: datetime
    changed_by: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}  # in field order
        out["namespace"] = list(self.namespace)
        for name in ("created_at", "updated_at", "expires_at", "changed_at"):
            out[name] = _iso(out[name])
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Version:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            item_id=d["item_id"],
            namespace=tuple(d["namespace"]),
            key=d["key"],
            value=d.get("value"),
            value_type=d["value_type"],
            text=d.get("text", ""),
            metadata=d.get("metadata") or {},
            author=d.get("author"),
            created_at=datetime.fromisoformat(d["created_at"]),
            updated_at=datetime.fromisoformat(d["updated_at"]),
            expires_at=_dt(d.get("expires_at")),
            version=d["version"],
            change=d["change"],
            changed_at=datetime.fromisoformat(d["changed_at"]),
            changed_by=d.get("changed_by"),
        )


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``list``: items in address order and the cursor for the next."""

    items: list[Item]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"items": [i.to_dict() for i in self.items], "next_cursor": self.next_cursor}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Page:
        """Rebuild from ``to_dict()`` output."""
        return cls([Item.from_dict(i) for i in d["items"]], d.get("next_cursor"))


@dataclass(slots=True)
class Stats:
    """Counts and sizes of a store, as of the store's clock."""

    backend: str
    location: str
    active_items: int
    expired_items: int
    namespaces: int
    history_versions: int
    size_bytes: int
    schema_version: int
    embedder: str | None = None
    vectors: int = 0
    vectors_missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Stats:
        """Rebuild from ``to_dict()`` output."""
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})  # type: ignore[arg-type]


@dataclass(slots=True)
class Hit:
    """One ranked result, confirmed against the live row.

    ``score`` orders results. It is a Reciprocal Rank Fusion score (or 0.0
    for keyed recall): comparable within one envelope, not a calibrated
    relevance. ``ranks`` and ``channel_scores`` give each channel's 1-based rank
    and raw score (for ``lexical``: BM25, lower is better as SQLite reports it,
    negated so that higher is better).

    Why it is there: ``matched`` lists the query words found in the item's
    text, key or namespace (the lexical evidence; empty when only the vector
    channel found it) and ``similarity`` is the cosine similarity between the
    query and the item's vector (``None`` when the vector channel did not
    nominate the item).

    Whether it answers: ``relevant`` is the relevance decision on its evidence
    (:mod:`memlane.domain.search.relevance`), ``relevance`` the probability the
    decision computed and ``why`` the evidence in words. All three are ``None``
    for a keyed recall, which never judges.
    """

    item: Item
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    channel_scores: dict[str, float] = field(default_factory=dict)
    matched: list[str] = field(default_factory=list)
    similarity: float | None = None
    relevant: bool | None = None
    relevance: float | None = None
    why: str | None = None

    @property
    def namespace(self) -> Namespace:
        """The hit's namespace."""
        return self.item.namespace

    @property
    def key(self) -> str:
        """The hit's key."""
        return self.item.key

    @property
    def value(self) -> Any:
        """The hit's current value."""
        return self.item.value

    @property
    def text(self) -> str:
        """The text that was searched."""
        return self.item.text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the item's fields plus score, ranks, channel scores and why it matched."""
        out = self.item.to_dict()
        out.update(
            score=self.score,
            ranks=self.ranks,
            channel_scores=self.channel_scores,
            matched=self.matched,
            similarity=self.similarity,
            relevant=self.relevant,
            relevance=self.relevance,
            why=self.why,
        )
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hit:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            Item.from_dict(d),
            d["score"],
            d.get("ranks") or {},
            d.get("channel_scores") or {},
            d.get("matched") or [],
            d.get("similarity"),
            d.get("relevant"),
            d.get("relevance"),
            d.get("why"),
        )


@dataclass(slots=True)
class Envelope:
    """The self-describing answer of every ranked read.

    Attributes:
        operation: the verb that produced it (``search``, ``recall``...).
        params: the effective parameters, defaults filled in.
        hits: results, best first.
        counts: candidates each channel nominated.
        dropped_by_hydration: candidates the confirm step dropped because the
            live row was expired, deleted, replaced or not visible.
        truncated: more confirmed results existed than ``limit``.
        timings: milliseconds per phase.
        notes: anything the caller should know (a fallback taken, a channel skipped).
        pending_vectors: items in scope written but not embedded yet, so not seen
            by the vector channel (found lexically meanwhile); ``None`` when the
            vector channel did not run (and then absent on the wire).
        below_floor: confirmed candidates dropped because the relevance
            decision judged them not relevant (when it was applied), or their
            fused score was below ``min_score``.
        status: what the answer says about the memory: ``found`` (a hit
            passed the relevance decision), ``nothing_relevant`` (none did, and
            every item in scope was searchable on every channel that ran) or
            ``not_yet_indexed`` (none did, but ``pending_vectors`` items in scope
            still wait for their vectors: the answer may be among them). A keyed
            recall says ``found`` when it found the key, else ``nothing_relevant``.
    """

    operation: str
    params: dict[str, Any]
    hits: list[Hit]
    counts: dict[str, int]
    dropped_by_hydration: int
    truncated: bool
    timings: dict[str, float]
    notes: list[str] = field(default_factory=list)
    pending_vectors: int | None = None
    below_floor: int = 0
    status: str = "found"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}  # in field order
        out["hits"] = [h.to_dict() for h in self.hits]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Envelope:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            operation=d["operation"],
            params=d.get("params") or {},
            hits=[Hit.from_dict(h) for h in d.get("hits", [])],
            counts=d.get("counts") or {},
            dropped_by_hydration=d.get("dropped_by_hydration", 0),
            truncated=d.get("truncated", False),
            timings=d.get("timings") or {},
            notes=d.get("notes") or [],
            pending_vectors=d.get("pending_vectors"),
            below_floor=d.get("below_floor", 0),
            status=d.get("status") or ("found" if d.get("hits") else "nothing_relevant"),
        )
