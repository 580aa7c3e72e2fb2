"""Conversations as items: one addressable item per turn, indexed with the turns around it.

A turn is stored at ``(namespace, "<session>.t<turn>")`` with the turn number
zero-padded to five digits (``chat-1.t00042``), so address order is turn order
and ``list(namespace, key_prefix=session)`` reads a session back in order.

* the **value** is the turn itself: ``{session, turn, speaker, text, at}``
  (plus ``role`` and ``message_id`` when the message had them), so a hit
  answers "who said it, and when" by itself;
* the indexed **text** is the speaker and date, the turn, then its neighbours
  (up to ``window`` turns each side, in order), so a question phrased with
  the context of a turn still finds it, lexically and by vector.

Appending to a session continues its numbering and re-indexes the earlier
turns whose window now reaches the new ones.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..values import validate as v
from ..values.errors import ValidationError
from ..values.model import Item, Namespace
from ..values.validate import DEFAULT_WINDOW

if TYPE_CHECKING:
    from .ports import Reader

MAX_WINDOW = 10
MAX_MESSAGES = 10_000
MAX_TURNS = 99_999  # five digits keep address order equal to turn order
MAX_TURN_CHARS = 100_000
MAX_NAME_CHARS = 200
MESSAGE_FIELDS = frozenset({"role", "speaker", "text", "at", "id"})
_SESSION = re.compile(r"[^\s./#\x00-\x1f\x7f-\x9f]{1,100}")
_TURN_KEY = re.compile(r"\.t(\d{5})")
_MONTHS = ("January February March April May June July August September October November December").split()


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of a conversation as memlane stores it (an item's value)."""

    session: str
    turn: int
    speaker: str
    text: str
    at: datetime | None = None
    role: str | None = None
    message_id: str | int | None = None

    @property
    def key(self) -> str:
        """The turn's key in its namespace."""
        return turn_key(self.session, self.turn)

    def to_value(self) -> dict[str, Any]:
        """The item value: JSON, with ``at`` as ISO 8601 text."""
        out: dict[str, Any] = {
            "session": self.session,
            "turn": self.turn,
            "speaker": self.speaker,
            "text": self.text,
            "at": None if self.at is None else self.at.isoformat(),
        }
        if self.role is not None:
            out["role"] = self.role
        if self.message_id is not None:
            out["message_id"] = self.message_id
        return out

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> Turn:
        """Rebuild from an item value written by :func:`records`."""
        at = value.get("at")
        return cls(
            value["session"],
            value["turn"],
            value["speaker"],
            value["text"],
            None if at is None else datetime.fromisoformat(at),
            value.get("role"),
            value.get("message_id"),
        )


def turn_key(session: str, turn: int) -> str:
    """``<session>.t<turn, five digits>``: the address of a turn in its namespace."""
    return f"{session}.t{turn:05d}"


def new_session(now: datetime) -> str:
    """A fresh session name that sorts by creation time: ``c`` + date + random hex."""
    return f"c{now:%Y%m%d}-{secrets.token_hex(4)}"


def session_name(raw: Any) -> str:
    """Check a session name: 1..100 characters, no whitespace, ``.``, ``/``, ``#`` or control characters."""
    if not isinstance(raw, str):
        raise ValidationError("session", f"must be a string, not {type(raw).__name__}")
    if not _SESSION.fullmatch(raw):
        raise ValidationError(
            "session",
            f"{raw!r} is not a session name: use 1 to 100 characters without spaces, '.', '/' or '#' "
            "(for example 'chat-2026-03-01')",
        )
    return raw


def window_size(raw: Any) -> int:
    """Check ``window``: how many turns each side are indexed with a turn (0..10)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_WINDOW:
        raise ValidationError("window", f"must be an integer from 0 to {MAX_WINDOW}, got {raw!r}")
    return raw


def _name(raw: Any, field: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValidationError(field, f"must be a non-empty string, not {raw!r}")
    raw = raw.strip()
    if len(raw) > MAX_NAME_CHARS:
        raise ValidationError(field, f"is {len(raw)} characters; at most {MAX_NAME_CHARS}")
    if re.search(r"[\x00-\x1f\x7f-\x9f]", raw):
        raise ValidationError(field, "contains a control character")
    return v.text(raw, field)


@dataclass(frozen=True, slots=True)
class Message:
    """A checked incoming message, before it has a turn number."""

    speaker: str
    text: str
    at: datetime | None
    role: str | None
    message_id: str | int | None


def messages(raw: Any, default_at: datetime | None) -> list[Message]:
    """Check every message before anything is written; the first bad one raises, naming its position."""
    raw = v.message_list(raw)
    if not raw:
        raise ValidationError("messages", "is empty; pass at least one {speaker, text} message")
    if len(raw) > MAX_MESSAGES:
        raise ValidationError("messages", f"has {len(raw):,} messages; at most {MAX_MESSAGES:,} per call (split it)")
    out: list[Message] = []
    seen: dict[str | int, int] = {}
    for n, m in enumerate(raw):
        where = f"messages[{n}]"
        if not isinstance(m, Mapping):
            raise ValidationError(where, f"is a {type(m).__name__}, not a mapping like {{'speaker': ..., 'text': ...}}")
        unknown = sorted(set(m) - MESSAGE_FIELDS)
        if unknown:
            raise ValidationError(where, f"has unknown fields {unknown}; a message has {sorted(MESSAGE_FIELDS)}")
        text = m.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ValidationError(f"{where}.text", "is missing or blank; every message needs its text")
        if len(text) > MAX_TURN_CHARS:
            raise ValidationError(f"{where}.text", f"is {len(text):,} characters; at most {MAX_TURN_CHARS:,}")
        v.text(text, f"{where}.text")
        role = None if m.get("role") is None else _name(m["role"], f"{where}.role")
        speaker = _name(m["speaker"], f"{where}.speaker") if m.get("speaker") is not None else role
        if speaker is None:
            raise ValidationError(where, "has neither 'speaker' nor 'role'; say who spoke")
        at = v.time(m.get("at"), f"{where}.at") if m.get("at") is not None else default_at
        mid = m.get("id")
        if mid is not None:
            if isinstance(mid, bool) or not isinstance(mid, str | int) or (isinstance(mid, str) and not mid):
                raise ValidationError(f"{where}.id", f"must be a non-empty string or an integer, not {mid!r}")
            if isinstance(mid, str):
                _name(mid, f"{where}.id")
            if mid in seen:
                raise ValidationError(f"{where}.id", f"{mid!r} repeats messages[{seen[mid]}]; message ids are unique")
            seen[mid] = n
        out.append(Message(speaker, text, at, role, mid))
    return out


def _date(at: datetime) -> str:
    return f"{at.day} {_MONTHS[at.month - 1]} {at.year}"


def _line(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}"


def indexed_text(turns: Sequence[Turn], i: int, window: int) -> str:
    """What search indexes for ``turns[i]``: speaker and date with the turn, the turn again, then its window.

    The turn comes first so that an embedder that truncates long input still
    sees it, and twice so that its own words outweigh its neighbours': among
    the turns sharing a window, the one that said it ranks first (on LoCoMo,
    lexical MRR@20 0.40 -> 0.54 at window 2; bench/conversation.py).
    """
    turn = turns[i]
    head = turn.speaker if turn.at is None else f"{turn.speaker} on {_date(turn.at)}"
    lines = [f"{head}: {turn.text}", _line(turn)]
    around = [*turns[max(0, i - window) : i], *turns[i + 1 : i + 1 + window]]
    lines.extend(_line(t) for t in around)
    return "\n".join(lines)


def record(namespace: Namespace, turns: Sequence[Turn], i: int, window: int) -> dict[str, Any]:
    """The ``put_many`` record of ``turns[i]``."""
    turn = turns[i]
    metadata = None if turn.message_id is None else {"message_id": turn.message_id}
    return {
        "namespace": namespace,
        "key": turn.key,
        "value": turn.to_value(),
        "text": indexed_text(turns, i, window),
        "metadata": metadata,
    }


def tail(mem: Reader, namespace: Namespace, session: str, count: int) -> tuple[int, list[tuple[Turn, str]]]:
    """The highest turn number of a session (0 if new) and its last ``count`` turns with their indexed text."""
    last = 0
    kept: list[tuple[Turn, str]] = []
    cursor = None
    while True:
        page = mem.list(namespace, key_prefix=session, limit=1000, cursor=cursor)
        for item in page.items:
            if item.namespace != namespace or not _is_turn(item, session):
                continue
            turn = Turn.from_value(item.value)
            last = max(last, turn.turn)
            kept.append((turn, item.text))
            if len(kept) > count:
                kept.pop(0)
        if page.next_cursor is None:
            return last, kept if count else []
        cursor = page.next_cursor


def _is_turn(item: Item, session: str) -> bool:
    rest = item.key[len(session) :]
    value = item.value
    return (
        _TURN_KEY.fullmatch(rest) is not None
        and isinstance(value, dict)
        and value.get("session") == session
        and isinstance(value.get("turn"), int)
        and isinstance(value.get("speaker"), str)
        and isinstance(value.get("text"), str)
    )


def plan(
    namespace: Namespace,
    session: str,
    last: int,
    earlier: Sequence[tuple[Turn, str]],
    incoming: Sequence[Message],
    window: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The records of the new turns, and of the earlier turns whose indexed text changes.

    ``earlier`` is the session's last ``2 * window`` turns with their indexed
    text: the last ``window`` of them are re-indexed when their window now
    reaches the new turns, the ones before give those their context.
    """
    if last + len(incoming) > MAX_TURNS:
        raise ValidationError(
            "messages", f"session {session!r} would reach {last + len(incoming):,} turns; at most {MAX_TURNS:,}"
        )
    new = [Turn(session, last + n, m.speaker, m.text, m.at, m.role, m.message_id) for n, m in enumerate(incoming, 1)]
    turns = [*(t for t, _ in earlier), *new]
    start = len(earlier)
    added = [record(namespace, turns, i, window) for i in range(start, len(turns))]
    reindexed = [record(namespace, turns, i, window) for i in range(max(0, start - window), start)]
    return added, [
        r for r, (_, text) in zip(reindexed, earlier[max(0, start - window) :], strict=True) if r["text"] != text
    ]


__all__ = ["DEFAULT_WINDOW", "MAX_MESSAGES", "Turn", "indexed_text", "turn_key"]
