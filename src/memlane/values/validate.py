"""Boundary validation: every argument is checked once, here, before storage.

Each check raises :class:`~memlane.values.errors.ValidationError` naming the field, so
nothing half-valid ever reaches a backend. Namespace parsing is cached because
agents write to the same few namespaces over and over.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, overload

from .errors import ValidationError
from .model import Namespace

MAX_SEGMENTS = 8
MAX_SEGMENT_CHARS = 128
MAX_KEY_CHARS = 256
# an address is also bounded in UTF-8 bytes (two a character on average), so that the largest one the
# rules allow fits every backend's index: PostgreSQL's btree holds at most 2704 bytes per row, and
# (namespace text of 8 * 256 + 7 bytes, key of 512) is 2584 with the row's overhead
MAX_SEGMENT_BYTES = 2 * MAX_SEGMENT_CHARS
MAX_KEY_BYTES = 2 * MAX_KEY_CHARS
MAX_VALUE_CHARS = 16 * 1024 * 1024
MAX_TEXT_CHARS = 16 * 1024 * 1024
MAX_METADATA_CHARS = 64 * 1024
MAX_TTL_SECONDS = 100 * 365.25 * 86400
MAX_QUERY_CHARS = 4096
# lists and objects inside one another, counted from the value itself (a scalar is 0 deep, [] is 1):
# deep enough for any real document, shallow enough that every interface (JSON encoders, pydantic,
# the MCP SDK, PostgreSQL's jsonb) can read back whatever was stored, inside its envelope
MAX_DEPTH = 100
RESERVED = "_memlane"  # a first segment no item may use: memlane's own records lived there
# the fields a record of put_many may have
RECORD_FIELDS = frozenset({"namespace", "key", "value", "text", "metadata", "ttl", "index"})
# a conversation's turns searched with each turn, each side. Measured on shared/data LoCoMo with
# bench/conversation.py (default recall, MiniLM): hit@10 0.739 for the turn alone, 0.832 at +/-1 turn,
# 0.863 at +/-2, 0.835 at +/-3.
DEFAULT_WINDOW = 2

# an id memlane did not make itself (an import's): a short token, as memlane's own are (32 hex digits,
# or a kind prefix such as ``ent_`` and 32 hex digits), so that every id fits every index; use fullmatch
ID = re.compile(r"[A-Za-z0-9_-]{1,100}")

# control characters, and lone UTF-16 surrogates (not encodable as UTF-8, so no
# database can store them)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_PLAIN = frozenset({str})


def utf8_within(text: str, field: str, limit: int, chars: int, *, what: str = "") -> None:
    """Refuse ``text`` (already free of lone surrogates) past ``limit`` UTF-8 bytes.

    A limit of ``chars`` characters comes with one of ``limit`` bytes (two a character on average),
    so that whatever is accepted fits the index it is stored in.
    """
    size = len(text.encode("utf-8"))
    if size > limit:
        raise ValidationError(
            field,
            f"{what}is {size:,} bytes in UTF-8; at most {limit:,} ({chars:,} characters, two bytes each on "
            "average): shorten it",
        )


def _namespace_from_parts(parts: tuple[Any, ...], field: str, allow_empty: bool) -> Namespace:
    if not parts:
        if allow_empty:
            return ()
        raise ValidationError(field, "is empty; give 1 to 8 segments, e.g. ('user', '123')")
    if len(parts) > MAX_SEGMENTS:
        raise ValidationError(field, f"has {len(parts)} segments; at most {MAX_SEGMENTS}")
    for seg in parts:
        if type(seg) is str and 0 < len(seg) <= MAX_SEGMENT_CHARS and seg.isascii() and seg.isprintable():
            # printable ASCII has no control character or surrogate and one byte a character: only '/' is
            # left to check (the same answer as below, without the regular expression and the encoding)
            if "/" not in seg:
                continue
        if not isinstance(seg, str):
            raise ValidationError(field, f"segment {seg!r} is not a string")
        if not seg:
            raise ValidationError(field, "has an empty segment")
        if len(seg) > MAX_SEGMENT_CHARS:
            raise ValidationError(field, f"segment is {len(seg)} characters; at most {MAX_SEGMENT_CHARS}")
        if "/" in seg:
            raise ValidationError(field, f"segment {seg!r} contains '/'; pass a tuple of segments")
        if _CONTROL.search(seg):
            raise ValidationError(field, f"segment {seg!r} contains a control character or a lone surrogate")
        utf8_within(seg, field, MAX_SEGMENT_BYTES, MAX_SEGMENT_CHARS, what="segment ")
    if parts[0] == RESERVED:
        raise ValidationError(
            field,
            f"{RESERVED!r} is reserved for memlane's own records and holds no items; choose another first segment",
        )
    return tuple(parts)


@lru_cache(maxsize=16384)
def _cached_namespace(raw: str | tuple[Any, ...], field: str, allow_empty: bool) -> Namespace:
    if isinstance(raw, str):
        if raw.strip("/") and raw.strip("/") != raw and "//" not in raw:  # a path's habit: "/user/42", "user/42/"
            raise ValidationError(
                field,
                f"has an empty segment: a namespace has no leading or trailing '/'; write {raw.strip('/')!r}, "
                f"not {raw!r}",
            )
        parts: tuple[Any, ...] = tuple(raw.split("/")) if raw else ()
    else:
        parts = raw
    return _namespace_from_parts(parts, field, allow_empty)


def message_list(raw: Any) -> list[Any]:
    """A conversation's ``messages`` as a list, refusing a string or a single mapping (a common slip)."""
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise ValidationError("messages", f"must be a list of messages (mappings), not {type(raw).__name__}")
    return list(raw)


def namespace(raw: Any, field: str = "namespace", *, allow_empty: bool = False) -> Namespace:
    """Parse a namespace given as a tuple/list of segments or as text ``a/b``.

    Args:
        raw: the namespace as given by the caller.
        field: the argument name reported in errors.
        allow_empty: accept ``()`` / ``""`` (a prefix meaning "everything").
    """
    kind = type(raw)
    if kind is str or (kind is tuple and _PLAIN >= set(map(type, raw))):
        # the common case, exactly plain text or plain segments: straight to the cache (a point read's budget)
        return _cached_namespace(raw, field, allow_empty)
    if isinstance(raw, list):
        raw = tuple(raw)
    # a subclass of str (perhaps unhashable, perhaps with its own split or equality) is read as its plain
    # text, so the cache and the checks see exactly what will be stored
    if isinstance(raw, str):
        raw = str.__str__(raw)
    elif isinstance(raw, tuple) and any(type(seg) is not str for seg in raw):
        raw = tuple(str.__str__(seg) if isinstance(seg, str) else seg for seg in raw)
    if not isinstance(raw, str | tuple):
        raise ValidationError(field, f"must be a tuple of strings or 'a/b' text, not {type(raw).__name__}")
    try:
        return _cached_namespace(raw, field, allow_empty)
    except TypeError:  # an unhashable segment (e.g. a list inside the tuple); text is always hashable here
        return _namespace_from_parts(raw, field, allow_empty)  # type: ignore[arg-type]


def key(raw: Any, field: str = "key") -> str:
    """Check a key: 1..256 characters and 512 bytes, no control characters, no empty path segment."""
    if type(raw) is str and 0 < len(raw) <= MAX_KEY_CHARS and raw.isascii() and raw.isprintable():
        # printable ASCII has no control character or surrogate, and one byte a character keeps it within the
        # byte limit: only the dots are left to check (the same answer as below, for a point read's budget)
        return _whole_segments(raw, field)
    if not isinstance(raw, str):
        raise ValidationError(field, f"must be a string, not {type(raw).__name__}")
    raw = str.__str__(raw)
    if not raw:
        raise ValidationError(field, "is empty")
    if len(raw) > MAX_KEY_CHARS:
        raise ValidationError(field, f"is {len(raw)} characters; at most {MAX_KEY_CHARS}")
    if _CONTROL.search(raw):
        raise ValidationError(field, "contains a control character or a lone surrogate")
    utf8_within(raw, field, MAX_KEY_BYTES, MAX_KEY_CHARS)
    return _whole_segments(raw, field)


def _whole_segments(raw: str, field: str) -> str:
    """``raw`` when no dotted segment of it is empty."""
    if raw[0] == "." or raw[-1] == "." or ".." in raw:
        raise ValidationError(field, f"{raw!r} has an empty taxonomy segment (leading, trailing or doubled '.')")
    return raw


def key_prefix(raw: Any, field: str = "key_prefix") -> str:
    """Check a key prefix; ``""`` means every key, one trailing ``.`` is dropped."""
    if raw is None or raw == "":
        return ""
    if isinstance(raw, str) and raw.endswith(".") and len(raw) > 1:
        raw = raw[:-1]
    return key(raw, field)


def _check_tree(value: Any, field: str) -> None:
    # json.dumps would silently turn {1: "a"} into {"1": "a"}: refuse instead,
    # so every stored value round-trips to exactly what was written; and refuse
    # nesting that some reader on the way back could not follow
    stack = [(value, 1)]
    seen: dict[int, int] = {}  # the deepest each list or object was reached at
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            _too_deep(value, field)
        if seen.get(id(node), 0) >= depth:
            continue  # shared: checked already at this depth or deeper
        seen[id(node)] = depth
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise ValidationError(field, f"object key {k!r} is not a string")
                if isinstance(v, dict | list | tuple):
                    stack.append((v, depth + 1))
        elif isinstance(node, list | tuple):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list | tuple))


def _too_deep(value: Any, field: str) -> None:
    try:
        _ENCODER.encode(value)
    except ValueError as e:
        if "Circular reference" in str(e):
            raise ValidationError(field, "contains itself (a reference cycle); JSON values are trees") from e
    except RecursionError:
        pass
    raise ValidationError(field, f"is nested more than {MAX_DEPTH} levels deep (lists and objects inside one another)")


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _not_json(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


# _ENCODER's own C encoder, made once instead of at every encode() call, and without its cycle check: a
# value reaches it only once it is known to be a tree (_shallow or _check_tree)
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_encode = (
    None if _make_encoder is None else _make_encoder(None, _not_json, _encode_str, None, ":", ",", True, False, False)
)
_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})


def _shallow(value: Any) -> bool:
    """Whether ``value`` is a tree ``_check_tree`` would pass, by the types of two levels alone.

    True for a plain dict with string keys, or a plain list or tuple, whose items are
    JSON scalars or plain lists and dicts of scalars: the shape of most records,
    checked without walking them in Python.
    """
    kind = type(value)
    if kind is dict:
        if not _STR.issuperset(map(type, value)):
            return False
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return False
    if _SCALARS.issuperset(map(type, items)):
        return True
    for item in items:
        kind = type(item)
        if kind is dict:
            if not (_STR.issuperset(map(type, item)) and _SCALARS.issuperset(map(type, item.values()))):
                return False
        elif kind is list or kind is tuple:
            if not _SCALARS.issuperset(map(type, item)):
                return False
        elif kind not in _SCALARS:
            return False
    return True


def canonical_json(value: Any, field: str, max_chars: int) -> str:
    """Canonical JSON (sorted keys, no NaN/Infinity) of a JSON-compatible value, in one pass of the encoder."""
    if isinstance(value, dict | list | tuple) and not _shallow(value):
        _check_tree(value, field)
    try:
        out = _ENCODER.encode(value) if _c_encode is None else "".join(_c_encode(value, 0))
    except ValueError as e:
        if "Out of range float" in str(e):
            raise ValidationError(field, "contains NaN or Infinity; JSON numbers must be finite") from e
        # a cycle or nesting past MAX_DEPTH never gets here: _check_tree refused it above
        raise ValidationError(field, f"cannot be stored as JSON ({e})") from e
    except TypeError as e:
        raise ValidationError(field, f"is not JSON-serialisable ({e})") from e
    if len(out) > max_chars:
        raise ValidationError(field, f"is {len(out):,} characters as JSON; at most {max_chars:,}")
    _utf8(out, field)
    return out


def _utf8(text: str, field: str) -> None:
    if text.isascii():  # known at no cost (CPython keeps the flag): ASCII holds no surrogate
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValidationError(field, "contains a lone UTF-16 surrogate, which is not valid Unicode text") from e


def _stored_text(text: str, field: str) -> str:
    """Text stored as it is (not inside JSON): valid UTF-8 and no NUL, which PostgreSQL's text cannot hold."""
    if "\x00" in text:
        raise ValidationError(
            field,
            f"contains a NUL character (U+0000) at position {text.index(chr(0))}, which PostgreSQL cannot store "
            "in text; remove it (a value may hold one: JSON escapes it)",
        )
    _utf8(text, field)
    return text


_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    list: "list",
    tuple: "list",
    dict: "object",
    type(None): "null",
}


def value(raw: Any, field: str = "value") -> tuple[str, str]:
    """Return ``(canonical_json, value_type)`` for a value."""
    if type(raw) is str:  # the common case, without the encoder's Python-level checks
        if len(raw) > MAX_VALUE_CHARS // 2:
            return canonical_json(raw, field, MAX_VALUE_CHARS), "string"
        out = _encode_str(raw)
        if len(out) > MAX_VALUE_CHARS:  # escapes can more than double a string: '"' is 2, a control character 6
            raise ValidationError(field, f"is {len(out):,} characters as JSON; at most {MAX_VALUE_CHARS:,}")
        _utf8(out, field)
        return out, "string"
    vtype = _TYPES.get(type(raw))
    if vtype is None:
        # subclasses of the JSON types (IntEnum, OrderedDict...) are accepted by their base
        for base, name in _TYPES.items():
            if isinstance(raw, base):
                vtype = name
                break
        else:
            raise ValidationError(field, f"{type(raw).__name__} is not a JSON value")
    if vtype == "number" and isinstance(raw, float) and not math.isfinite(raw):
        raise ValidationError(field, "must be finite; NaN and Infinity are not JSON")
    return canonical_json(raw, field, MAX_VALUE_CHARS), vtype


def text(raw: Any, field: str = "text") -> str:
    """Check an explicit search text: at most 16 MiB characters, valid Unicode, no NUL."""
    return _string(raw, field, MAX_TEXT_CHARS)


def _string(raw: Any, field: str, most: int) -> str:
    if not isinstance(raw, str):
        raise ValidationError(field, f"must be a string, not {type(raw).__name__}")
    if len(raw) > most:
        raise ValidationError(field, f"is {len(raw):,} characters; at most {most:,}")
    return _stored_text(raw, field)


def metadata(raw: Any, field: str = "metadata") -> str:
    """Canonical JSON of a metadata object (``None`` means ``{}``)."""
    if raw is None:
        return "{}"
    if not isinstance(raw, dict):
        raise ValidationError(field, f"must be a JSON object (dict), not {type(raw).__name__}")
    return canonical_json(raw, field, MAX_METADATA_CHARS)


def ttl(raw: Any, field: str = "ttl") -> float | None:
    """Check a time-to-live in seconds: positive and finite, or ``None``."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValidationError(field, f"must be a number of seconds, not {type(raw).__name__}")
    if not math.isfinite(raw) or raw <= 0:
        raise ValidationError(field, f"must be positive and finite seconds, got {raw!r}")
    if raw > MAX_TTL_SECONDS:
        raise ValidationError(field, f"is longer than 100 years ({raw!r} s); omit ttl to keep forever")
    return float(raw)


def limit(raw: Any, field: str = "limit", *, maximum: int = 10_000, minimum: int = 1) -> int:
    """Check an integer in ``[minimum, maximum]``: a limit, a count, a depth."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValidationError(field, f"must be an integer, not {type(raw).__name__}")
    if raw < minimum or raw > maximum:
        raise ValidationError(field, f"must be between {minimum} and {maximum}, got {raw}")
    return raw


def query(raw: Any, field: str = "query") -> str:
    """Check a search query string."""
    return _string(raw, field, MAX_QUERY_CHARS)


@overload
def time(raw: None, field: str) -> None: ...
@overload
def time(raw: str | datetime, field: str) -> datetime: ...
@overload
def time(raw: Any, field: str) -> datetime | None: ...


def time(raw: Any, field: str) -> datetime | None:
    """An aware UTC datetime from a datetime or ISO-8601 text (``None`` stays ``None``); no zone means UTC."""
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = datetime.fromisoformat(raw)
        except ValueError as e:
            raise ValidationError(field, f"is not an ISO-8601 time ({raw!r}); write e.g. 2026-03-01T09:00:00Z") from e
    if not isinstance(raw, datetime):
        raise ValidationError(field, f"must be a datetime or ISO-8601 text, not {type(raw).__name__}")
    if raw.tzinfo is None:
        return raw.replace(tzinfo=UTC)
    try:
        return raw.astimezone(UTC)
    except OverflowError as e:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC, 9999-12-31T23:59-05:00 in 10000
        raise ValidationError(
            field, f"{raw.isoformat()} falls outside the years 1 to 9999 once converted to UTC; give a time inside them"
        ) from e
