"""Chooser-assisted recall: a caller's model picks addresses from the map.

memlane never runs a language model itself. In ``single`` and ``tiered``
recall it hands a caller-supplied :class:`Chooser` a map of the store (option
strings ``"namespace:path"`` with item counts), the chooser returns the options
it wants, and memlane reads exactly those addresses with ``get_many``.

* ``single``: one step over every address under the prefix (capped at
  ``max_options``; the envelope notes a cut).
* ``tiered``: drill one taxonomy level at a time. Each step shows only the
  children of what was chosen, cut to the ``max_options`` largest, so every
  step's map stays a constant size however big the store grows. A chosen
  option that is a whole key is read; its children, if any, are drilled.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ...values import chat
from ...values.errors import ChooserError, ValidationError
from ...values.model import Envelope, Hit, namespace_text

if TYPE_CHECKING:
    from ..ports import Reader

MAX_OPTIONS = 200
MAX_DEPTH = 16


@runtime_checkable
class Chooser(Protocol):
    """Picks addresses for a query from a map of the store."""

    def choose(self, query: str, options: Mapping[str, int], *, limit: int) -> Sequence[str]:
        """Return the options (keys of ``options``) worth reading, best first.

        Args:
            query: what the agent wants to know.
            options: ``"namespace:path"`` -> number of items at or under it.
            limit: the most options wanted.
        """
        ...


def _split(option: str) -> tuple[str, str]:
    ns, _, path = option.rpartition(":")
    return ns, path


def _addresses(mem: Any, prefix: Any) -> list[tuple[str, str]]:
    """Every address under ``prefix``, through the public ``list`` (so a Client works too)."""
    out: list[tuple[str, str]] = []
    cursor = None
    while True:
        page = mem.list(prefix, limit=1000, cursor=cursor)
        out += [(namespace_text(i.namespace), i.key) for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return out


def choose(
    mem: Reader,
    query: str,
    chooser: Chooser,
    *,
    mode: str,
    namespace_prefix: Any = (),
    limit: int = 10,
    max_options: int = MAX_OPTIONS,
) -> Envelope:
    """Run ``single`` or ``tiered`` recall with a chooser; returns the envelope."""
    from ...values import validate as v

    started = time.perf_counter()
    prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
    limit = v.limit(limit, maximum=1000)
    addresses = _addresses(mem, prefix)
    keys = {f"{ns}:{key}" for ns, key in addresses}
    notes: list[str] = []
    chosen: list[str] = []
    steps = 0

    def ask(options: dict[str, int]) -> list[str]:
        nonlocal steps
        steps += 1
        if len(options) > max_options:
            notes.append(f"step {steps}: map cut to the {max_options} largest of {len(options)} options")
            options = dict(sorted(options.items(), key=lambda kv: (-kv[1], kv[0]))[:max_options])
        picked = list(chooser.choose(query, options, limit=limit))
        unknown = [p for p in picked if p not in options]
        if unknown:
            notes.append(f"step {steps}: ignored {len(unknown)} option(s) that were not offered")
        return [p for p in dict.fromkeys(picked) if p in options]

    if mode == "single":
        chosen = ask({k: 1 for k in sorted(keys)})[:limit]
    else:
        frontier = [""]  # "" = the roots of every namespace
        for depth in range(1, MAX_DEPTH + 1):
            options: dict[str, int] = {}
            for ns, key in addresses:
                parts = key.split(".")
                if len(parts) < depth:
                    continue
                parent = ".".join(parts[: depth - 1])
                if depth > 1 and f"{ns}:{parent}" not in frontier:
                    continue
                node = f"{ns}:{'.'.join(parts[:depth])}"
                options[node] = options.get(node, 0) + 1
            if not options:
                break
            picked = ask(options)
            chosen.extend(p for p in picked if p in keys and p not in chosen)
            frontier = picked
            if len(chosen) >= limit or not picked:
                break
        chosen = chosen[:limit]
    items = mem.get_many([_split(c) for c in chosen])
    hits = [Hit(item, 0.0, {"chooser": i}) for i, item in enumerate(items, 1) if item is not None]
    return Envelope(
        operation="recall",
        params={
            "query": query,
            "namespace_prefix": namespace_text(prefix),
            "limit": limit,
            "mode": mode,
            "max_options": max_options,
        },
        hits=hits,
        counts={"chooser": len(chosen)},
        dropped_by_hydration=len(chosen) - len(hits),
        truncated=False,
        timings={"total_ms": round((time.perf_counter() - started) * 1000, 3), "steps": steps},
        notes=notes,
        status="found" if hits else "nothing_relevant",  # the chooser's picks are its judgement
    )


_PROMPT = (
    "You choose which entries of an agent's memory to read. Options are 'namespace:path' "
    "with the number of items at or under each. Reply with JSON only: "
    '{"choices": ["<option>", ...]}, best first, at most LIMIT options, copied exactly.'
)


class OpenAIChooser:
    """A chooser backed by an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the chat model name.
        base_url: defaults to ``$MEMLANE_CHAT_BASE_URL``, ``$OPENAI_BASE_URL``
            or ``https://api.openai.com/v1``.
        api_key: defaults to ``$MEMLANE_CHAT_API_KEY`` or ``$OPENAI_API_KEY``.
        timeout: seconds per request.
    """

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None, timeout: float = 30
    ) -> None:
        if not model:
            raise ValidationError("model", "name the chat model to use")
        self.model = model
        self.base_url = (
            base_url
            or os.environ.get("MEMLANE_CHAT_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or "https://api.openai.com/v1"
        ).rstrip("/")
        self._api_key = api_key or os.environ.get("MEMLANE_CHAT_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout

    def choose(self, query: str, options: Mapping[str, int], *, limit: int) -> list[str]:
        """Ask the model; parse the JSON list of choices from its reply."""
        lines = "\n".join(f"{opt} ({count})" for opt, count in options.items())
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": _PROMPT.replace("LIMIT", str(limit))},
                {"role": "user", "content": f"Question: {query}\n\nOptions:\n{lines}"},
            ],
        }
        content = chat.complete(self.base_url, self._api_key, body, self.timeout, ChooserError)
        return _parse_choices(content)[:limit]


def _parse_choices(content: Any) -> list[str]:
    if not isinstance(content, str):
        raise ChooserError("the chat model's reply has no text")
    match = re.search(r"\{.*\}|\[.*\]", content, re.S)
    try:
        parsed = json.loads(match.group(0) if match else content)
    except ValueError:
        raise ChooserError("the chat model did not reply with JSON choices") from None
    choices = parsed.get("choices") if isinstance(parsed, dict) else parsed
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise ChooserError("the chat model's JSON has no list of option strings")
    return choices


__all__ = ["Chooser", "OpenAIChooser", "choose"]
