"""The human renderings of the operations' answers, by the shape of the answer: tables, trees, one-line confirmations.

Each takes the :class:`~memlane.cli.made.Call` of a command (its arguments, its own options, the answer). Stored text
goes into rich as ``Text``, never as markup.
"""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.json import JSON
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..values.model import namespace_text
from .base import _brief, _cli_words, _console, _plural, _say, _show, _squeezable, _table, _when, namespace_hint


def _ns(namespace: Any) -> str:
    """A namespace as typed (text) or as the core holds it (segments), in its text form."""
    return namespace if isinstance(namespace, str) else namespace_text(namespace)


def no_item(args: dict[str, Any]) -> str:
    if "item_id" in args:
        return f"no item with id {args['item_id']!r}"
    hint = namespace_hint(str(args["namespace"]))
    return f"no item at {args['namespace']} key {args['key']!r}" + (f"; {hint}" if hint else "")


# -- items


def items(c: Any) -> None:
    """The table every item listing uses (list, fetch)."""
    found = c.result.items if hasattr(c.result, "items") and not isinstance(c.result, list) else c.result
    rows = [(Text(namespace_text(i.namespace)), Text(i.key), i.value_type, _squeezable(_brief(i.value)),
             str(i.version), _when(i.updated_at)) for i in found]  # fmt: skip
    _show(["=namespace", "=key", "!type", "value", "!>v", "@updated (UTC)"], rows, "No items.")
    if getattr(c.result, "next_cursor", None):
        _say(f"Next page: --cursor {c.result.next_cursor}")


def stored(c: Any) -> None:  # the value is not echoed: it may be a secret, and the caller already has it
    item = c.result
    _say(f"Stored {namespace_text(item.namespace)} key {item.key!r} ({item.value_type}, version {item.version})")


def item(c: Any) -> None:
    """The value as JSON, then a table of the item's details."""
    found, console = c.result, _console()
    console.print(JSON.from_data(found.value, ensure_ascii=False))
    details = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    details.add_column(style="dim")
    details.add_column(overflow="fold")
    for label, shown in [
        ("namespace", namespace_text(found.namespace)), ("key", found.key), ("type", found.value_type),
        ("version", str(found.version)), ("created", _when(found.created_at)), ("updated", _when(found.updated_at)),
        ("expires", _when(found.expires_at) or "never"), ("author", found.author or ""),
        ("metadata", json.dumps(found.metadata, ensure_ascii=False)), ("text", _brief(found.text, 200)),
        ("id", found.id),
    ]:  # fmt: skip
        details.add_row(label, Text(shown))
    console.print(details)


def turns(c: Any) -> None:
    first, last = c.result[0], c.result[-1]
    _say(f"Stored {_plural(len(c.result), 'turn')} in {namespace_text(first.namespace)} session "
         f"{first.value['session']!r}: keys {first.key} .. {last.key}")  # fmt: skip


def deleted(c: Any) -> None:
    where = f"{c.args['namespace']} key {c.args['key']!r}" if "key" in c.args else f"id {c.args['item_id']!r}"
    _say(f"Deleted {where}")


def cleared(c: Any) -> None:
    _say(f"Cleared {_plural(c.result, 'item')} under {c.args['namespace_prefix']}")


def namespaces(c: Any) -> None:
    _show(["namespace"], [(Text(namespace_text(ns)),) for ns in c.result], "No namespaces.", box=box.HEAVY_HEAD)


def summary(c: Any) -> None:
    tree = Tree(Text(_ns(c.args.get("namespace_prefix", ())) or "(all namespaces)"))
    for ns, paths in c.result.items():
        branch = tree.add(Text(f"{ns} ({sum(paths.values())})"))
        for path, count in paths.items():
            branch.add(Text(f"{path} ({count})"))
    _console().print(tree if c.result else "No items.")


def versions(c: Any) -> None:
    rows = [(str(v.version), v.change, _when(v.changed_at), Text(v.changed_by or ""), v.value_type,
             _squeezable(_brief(v.value))) for v in c.result]  # fmt: skip
    empty = f"No history for {c.args['namespace']} key {c.args['key']!r}."
    _show(["version", "change", "@changed (UTC)", "changed by", "type", "value"], rows, empty)


# -- ranked reads


def _channel_cell(hit: Any, channel: str) -> str:
    """``#rank (raw score)`` of one channel for one hit; ``-`` when the channel did not find it."""
    rank, raw = hit.ranks.get(channel), hit.channel_scores.get(channel)
    return "-" if rank is None else f"#{rank}" if raw is None else f"#{rank} ({raw:.4g})"


def _footer(envelope: Any) -> str:
    parts = [f"mode {envelope.params.get('mode')}"] if envelope.operation == "recall" else []
    parts.append(f"candidates: {', '.join(f'{ch} {n}' for ch, n in envelope.counts.items()) or 'none'}")
    parts.append(f"dropped by hydration: {envelope.dropped_by_hydration}")
    parts.append(f"truncated: {'yes' if envelope.truncated else 'no'}")
    total = envelope.timings.get("total_ms")
    return " · ".join(parts + ([f"{total:.1f} ms"] if total is not None else []))


def envelope(c: Any) -> None:
    """The rendering `search` and `recall` share: hits, then a footer line and notes."""
    found = c.result
    keyed = found.params.get("mode") == "keyed"
    if keyed:
        _say(f"Keyed recall of {found.params['key']!r}: exact key, newest first, no ranking (score 0.0).")
    channels = [ch for ch in found.counts if ch != "keyed"]  # one column per channel that nominated anything
    for hit in found.hits:
        channels += [ch for ch in hit.ranks if ch not in channels]
    columns = ["#", "=namespace", "=key", "@updated (UTC)" if keyed else "!>score", *(">" + ch for ch in channels)]
    rows = [(str(n), Text(namespace_text(hit.namespace)), Text(hit.key),
             _when(hit.item.updated_at) if keyed else f"{hit.score:.4f}", *(_channel_cell(hit, ch) for ch in channels),
             _squeezable(_brief(hit.text, 80))) for n, hit in enumerate(found.hits, 1)]  # fmt: skip
    _show([*columns, "text"], rows, "No results.")
    _say(_footer(found))
    for note_text in found.notes:
        _say(f"Note: {_cli_words(note_text)}")
    # items the vector channel could not see (no embedder then, or not yet indexed), when it may explain a short answer
    if "vector" in found.counts and len(found.hits) < found.params.get("limit", 0):
        missing = max(found.pending_vectors or 0, c.mem.stats().vectors_missing)
        if missing:
            _say(f"Note: {missing:,} item{'s' * (missing != 1)} {'have' if missing != 1 else 'has'} no vector yet, so "
                 "the vector channel could not find them; `memlane index` embeds them")  # fmt: skip
    if found.truncated:
        _console().print("More results exist; raise --limit to see them.")


# -- the facts layer


def _facts_table(facts: list[Any]) -> Table:
    def valid(f: Any) -> str:
        return "always" if f.valid_from is None and f.valid_to is None else (
            f"{_when(f.valid_from) or '…'} → {_when(f.valid_to) or '…'}")  # fmt: skip

    def recorded(f: Any) -> str:
        return _when(f.recorded_at) + (f" (retracted {_when(f.retracted_at)})" if f.retracted_at else "")

    rows = [(Text(f.text), valid(f), recorded(f), str(f.evidence_count), f.id) for f in facts]
    return _table(["fact", "@valid (UTC)", "@recorded (UTC)", "evidence", "=id"], rows)


def _entity_table(entities: list[Any]) -> Table:
    rows = [(e.id, Text(e.name), Text(e.kind), Text(namespace_text(e.namespace)), Text(", ".join(e.aliases)),
             _squeezable(_brief(e.profile, 50))) for e in entities]  # fmt: skip
    return _table(["=id", "name", "kind", "=namespace", "aliases", "profile"], rows)


def _record(found: Any) -> None:
    from ..values.facts import Entity, Fact

    if isinstance(found, Entity | Fact):
        _console().print((_entity_table if isinstance(found, Entity) else _facts_table)([found]))
    else:
        _show(["field", "value"], [(k, Text(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)))
                                   for k, v in found.to_dict().items()])  # fmt: skip


def record(c: Any) -> None:
    _record(c.result)


def records(c: Any) -> None:
    for rid, found in zip(c.args["ids"], c.result, strict=True):
        if found is None:
            _say(f"{rid}: not found" + (" or not current" if c.own.get("current") else ""))
        else:
            _record(found)


def document(c: Any) -> None:
    _say(f"Stored {c.result.id} with {c.result.chunk_count} chunk(s): {', '.join(c.result.chunk_ids)}")


def chunks(c: Any) -> None:
    for chunk in c.result:
        bold = "bold" if chunk.id == c.args["chunk_id"] else ""
        _console().print(Text(f"[{chunk.position}] {chunk.text}", style=bold))


def claims(c: Any) -> None:
    _console().print(f"Recorded {_plural(len(c.result), 'claim')}")


def context(c: Any) -> None:
    """Each section of an assured read as its own table, then the counts, drops and notes."""
    ctx, console = c.result, _console()

    def said(g: Any, field: Any) -> str:
        return ", ".join(dict.fromkeys(field(claim) for claim in g.claims))

    for name, rows in ctx.sections.items():
        console.print(Text(f"{name} ({len(rows)})", style="bold"))
        if not rows:
            console.print("  none")
        elif name == "facts":
            console.print(_facts_table(rows))
        elif name == "entities":
            console.print(f"status: {ctx.status}")
            console.print(_entity_table([candidate.entity for candidate in rows]))
        elif name == "claims":
            _show(["#", "claim", "corroboration", "said by", "sources"], [
                (str(n), Text(g.text), str(g.corroboration), Text(said(g, lambda x: x.speaker or "?")),
                 _squeezable(said(g, lambda x: x.chunk_id or x.id))) for n, g in enumerate(rows, 1)])  # fmt: skip
        elif name == "passages":
            _show(["#", "document", "pos", "passage", "=id"], [
                (str(n), Text(p.document_title), str(p.position), _squeezable(_brief(p.text, 80)), p.id)
                for n, p in enumerate(rows, 1)])  # fmt: skip
        elif name == "paths":
            for p in rows:
                _say(" → ".join(p.names))
    counts = ", ".join(f"{k} {n}" for k, n in ctx.counts.items())
    dropped = ", ".join(f"{k} {n}" for k, n in ctx.dropped.items() if n)
    _say(" · ".join(x for x in (counts, f"dropped: {dropped}" if dropped else "") if x))
    for note_text in ctx.notes:
        _say(f"Note: {note_text}")
    if ctx.truncated:
        console.print(f"Cut: {', '.join(ctx.truncated)} had more results.")


# -- retention


def rule_prefix(prefix: Any) -> str:
    return _ns(prefix) or "(every namespace)"


def rule(c: Any) -> None:
    versions, days = c.result.keep_versions, c.result.keep_days
    kept = ([f"the newest {_plural(versions, 'version')}"] if versions is not None else []) + (
        [f"{days:g} day{'s' * (days != 1)}"] if days is not None else [])  # fmt: skip
    _say(f"Retention for {rule_prefix(c.result.prefix)}: keep {' and '.join(kept)} of history")


def rules(c: Any) -> None:
    rows = [(Text(rule_prefix(r.prefix)), "-" if r.keep_versions is None else str(r.keep_versions),
             "-" if r.keep_days is None else f"{r.keep_days:g}", r.to_dict()["updated_at"], Text(r.updated_by or ""))
            for r in c.result]  # fmt: skip
    _show(["prefix", "keep_versions", "keep_days", "updated_at", "updated_by"], rows,
          "No retention rules: history keeps every version")  # fmt: skip


def rule_cleared(c: Any) -> None:
    _say(f"Cleared the retention rule for {rule_prefix(c.args['prefix'])}")
