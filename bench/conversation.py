"""LoCoMo through ``add_conversation``: how the neighbour window changes what recall finds.

Usage::

    python bench/conversation.py --memories ../shared/data/locomo/locomo_memories.jsonl \\
        --queries ../shared/data/locomo/locomo_queries.jsonl [--windows 0,1,2,3] \\
        [--embedder minilm|fake|none] [--mode hybrid|lexical|vector] [--json OUT]

Each LoCoMo conversation goes into its own namespace ``("locomo", conversation)``
with one ``add_conversation`` call per session (``session="S<n>"``, ``at`` = the
session's time, each message ``{speaker, text (+ " [image: caption]"), id: dia_id}``);
each question with evidence is asked with the default ``recall`` in its
conversation's namespace, ``limit=20``, and scored on the hits' ``message_id``
(hit@k, MRR@20, per category) with bench/retrieval.py's scoring. One fresh
store per window (the default embedder embeds every window's text once).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import memlane

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import format_table, progress, write_json  # noqa: E402
from retrieval import Dataset, Query, _jsonl, aggregate, make_embedder, score  # noqa: E402


def load(memories: str, queries: str) -> tuple[dict[tuple[str, int], list[dict[str, Any]]], Dataset]:
    sessions: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in _jsonl(memories):
        sessions[(r["conversation_id"], r["session"])].append(r)
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
    qs = []
    for q in _jsonl(queries):
        if not q.get("evidence_ids"):
            continue
        conv = q["conversation_id"]
        gold = frozenset(e.split(":", 1)[1] for e in q["evidence_ids"] if e.startswith(conv + ":"))
        qs.append(Query(q["id"], ("locomo", conv), q["question"], gold, q["category_name"]))
    ds = Dataset(
        "locomo",
        [],
        qs,
        limit=20,
        headline="hit@10",
        ks=(1, 5, 10, 20),
        describe="add_conversation, one call per session",
        categories=sorted({q.category for q in qs}),
    )
    return sessions, ds


def build(mem: Any, sessions: dict[tuple[str, int], list[dict[str, Any]]], window: int) -> float:
    t0 = time.perf_counter()
    for (conv, session), turns in sorted(sessions.items()):
        messages = []
        for r in turns:
            text = r["text"] + (f" [image: {r['image_caption']}]" if r.get("image_caption") else "")
            messages.append({"speaker": r["speaker"], "text": text, "id": r["dia_id"]})
        mem.add_conversation(
            ("locomo", conv), messages, session=f"S{session}", at=turns[0]["session_datetime"], window=window
        )
    return time.perf_counter() - t0


def run(mem: Any, ds: Dataset, mode: str) -> dict[str, Any]:
    per_query = []
    for q in ds.queries:
        env = mem.recall(q.text, mode=mode, namespace_prefix=q.namespace, limit=ds.limit)
        ranked = [str(h.item.metadata.get("message_id")) for h in env.hits]
        per_query.append((q, score(ds, ranked, q.gold)))
    return aggregate(ds, per_query)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--memories", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--windows", default="0,1,2,3")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--mode", default="hybrid")
    p.add_argument("--json")
    args = p.parse_args()
    sessions, ds = load(args.memories, args.queries)
    embedder = make_embedder(args.embedder)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for w in (int(x) for x in args.windows.split(",")):
            path = os.path.join(tmp, f"w{w}.db")
            with memlane.open(path, embedder=embedder, indexing="sync") as mem:
                seconds = build(mem, sessions, w)
                out = run(mem, ds, args.mode)
            out["build_seconds"] = round(seconds, 1)
            results[f"window {w}"] = out
            o = out["overall"]
            progress(f"window {w}: hit@10 {o['hit@10']:.3f} MRR@20 {o['mrr@20']:.3f} (built in {seconds:.0f} s)")
    rows = [
        [name, *(f"{r['overall'][m]:.3f}" for m in ("hit@1", "hit@5", "hit@10", "hit@20", "mrr@20"))]
        for name, r in results.items()
    ]
    print(
        f"LoCoMo via add_conversation, recall mode={args.mode}, embedder={args.embedder}, {len(ds.queries)} questions"
    )
    print(format_table(["indexed", "hit@1", "hit@5", "hit@10", "hit@20", "MRR@20"], rows))
    cats = ds.categories
    print()
    print(
        format_table(
            ["hit@10 by category", *cats],
            [[name, *(f"{r['by_category'][c]['hit@10']:.3f}" for c in cats)] for name, r in results.items()],
        )
    )
    if args.json:
        write_json(args.json, {"mode": args.mode, "embedder": args.embedder, "results": results})


if __name__ == "__main__":
    main()
