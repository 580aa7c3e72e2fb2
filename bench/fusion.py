"""Fusion experiments for issue #38: each channel's nominations dumped once, fusions replayed offline.

``dump`` reads, for every LoCoMo question (fitting and held-out conversations, asked at home) and every SciFact
train claim, the lexical and vector channels' first ``--depth`` nominations straight from the store (what
``Memory.search`` fuses), with each nomination's key. ``replay`` fuses them again under each setting of a grid
(RRF constant, channel weights, candidate_k, score fusion) and prints LoCoMo hit@10 (no decision) per part and
SciFact nDCG@10 on even and odd claim ids (odd ids are never used to choose). A setting worth shipping is then
checked live, decision on, with ``bench/relevance.py locomo`` / ``conversations`` / ``probe`` and
``bench/retrieval.py beir``.

    python bench/fusion.py dump --locomo-store DIR/locomo-n0-minilm.db \
        --scifact-store DIR/beir-scifact-train-minilm.db --scifact-vectors DIR/beir-scifact-queries-minilm.json \
        --out DIR/noms.json
    python bench/fusion.py replay --noms DIR/noms.json
    # SciFact live, decision on (recall as an agent calls it), under search's defaults or changed ones
    python bench/fusion.py [with --rrf-k 5 --vec 0.6 | with --alpha 0.4 --] scifact --scifact-store ... \
        --scifact-vectors DIR/beir-scifact-queries-minilm.json
    # any bench/relevance.py command under changed defaults (core/memory.py's, patched in this process)
    python bench/fusion.py with --rrf-k 5 --vec 0.6 -- relevance locomo --locomo-store DIR/locomo-n0-minilm.db ...

``fuse_scores`` (``with --alpha``) is the convex fusion tried for issue #38 and not shipped (see
docs/benchmarks.md): each channel's scores standardised over its nominations, weighted and summed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memlane  # noqa: E402
from memlane.domain.search import rank  # noqa: E402

LOCOMO_PARTS = {"fit": ("conv-26", "conv-30", "conv-41"), "heldout": ("conv-42", "conv-43")}


def _noms(mem: Any, text: str, ns: tuple[str, ...], vector: Sequence[float] | None, depth: int, key_of: Any) -> dict:
    store = mem._store
    within = mem._within(ns)
    lex = store.lexical(rank.terms(text), within, depth, ())
    vec = store.vector(vector, within, depth, ()) if vector is not None else []
    ids = list(dict.fromkeys([n[0] for n in lex] + [n[0] for n in vec]))
    items = store.hydrate(ids, within, datetime.now(UTC))
    return {
        "lexical": [[key_of(items[n[0]]), float(n[1])] for n in lex if n[0] in items],
        "vector": [[key_of(items[n[0]]), float(n[1])] for n in vec if n[0] in items],
    }


def dump(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    mem = memlane.open(args.locomo_store, embedder="minilm", indexing="sync")
    queries = [json.loads(line) for line in open(args.queries, encoding="utf-8") if line.strip()]
    for part, convs in LOCOMO_PARTS.items():
        for q in queries:
            conv = q["conversation_id"]
            if conv not in convs or not q.get("evidence_ids"):
                continue
            gold = sorted(e.split(":", 1)[1] for e in q["evidence_ids"] if e.startswith(conv + ":"))
            vector = mem._embed_query(q["question"])
            noms = _noms(
                mem,
                q["question"],
                ("locomo", conv),
                vector,
                args.depth,
                lambda it: str(it.metadata.get("message_id", it.key)),
            )
            rows.append({"dataset": "locomo", "part": part, "qid": q["id"], "gold": gold, **noms})
    mem.close()
    print(f"locomo: {len(rows)}", file=sys.stderr)
    from retrieval import load_beir  # type: ignore[import-not-found]

    ds = load_beir(args.scifact, "train")
    vectors = json.loads(Path(args.scifact_vectors).read_text())["vectors"]
    mem = memlane.open(args.scifact_store, embedder="minilm", indexing="sync")
    for q in ds.queries:
        noms = _noms(mem, q.text, ("scifact",), vectors[q.qid][1], args.depth, lambda it: it.key)
        part = "even" if int(q.qid) % 2 == 0 else "odd"
        rows.append({"dataset": "scifact", "part": part, "qid": q.qid, "gold": sorted(q.gold), **noms})
    mem.close()
    Path(args.out).write_text(json.dumps(rows), encoding="utf-8")
    print(f"wrote {len(rows)} rows", file=sys.stderr)
    return 0


def scifact(args: argparse.Namespace) -> int:
    """SciFact live, decision on (``recall`` as an agent calls it): nDCG@10 and empty answers, even and odd ids."""
    from retrieval import load_beir

    ds = load_beir(args.scifact, "train")
    vectors = json.loads(Path(args.scifact_vectors).read_text())["vectors"]
    mem = memlane.open(args.scifact_store, embedder="minilm", indexing="sync")
    sums: dict[str, list[float]] = {}
    for q in ds.queries:
        env = mem.recall(q.text, mode=args.mode, namespace_prefix=("scifact",), limit=100, embedding=vectors[q.qid][1])
        ranked = [h.item.key for h in env.hits]
        dcg = sum(1.0 / math.log2(i + 1) for i, key in enumerate(ranked[:10], 1) if key in q.gold)
        idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(q.gold), 10) + 1))
        for part in ("all", "even" if int(q.qid) % 2 == 0 else "odd"):
            got = sums.setdefault(part, [0.0, 0.0, 0.0])
            got[0] += dcg / idcg
            got[1] += not env.hits
            got[2] += 1
    mem.close()
    out = {
        p: {"ndcg@10": round(v[0] / v[2], 4), "empty": round(v[1] / v[2], 4), "n": int(v[2])} for p, v in sums.items()
    }
    print(json.dumps(out), flush=True)
    return 0


Fuser = Callable[[dict[str, Any], int], list[str]]


def rrf(rrf_k: float, w_lex: float, w_vec: float, ck: int | None = None) -> Fuser:
    def fuse(row: dict[str, Any], limit: int) -> list[str]:
        k = ck if ck is not None else max(50, 2 * limit)
        scores: dict[str, float] = {}
        for ch, w in (("lexical", w_lex), ("vector", w_vec)):
            for r, (key, _) in enumerate(row[ch][:k], 1):
                scores[key] = scores.get(key, 0.0) + w / (rrf_k + r)
        return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))][:limit]

    return fuse


def convex(alpha: float, norm: str = "minmax") -> Fuser:
    """alpha * normalised vector + (1 - alpha) * normalised lexical, over each channel's nominations."""

    def fuse(row: dict[str, Any], limit: int) -> list[str]:
        k = max(50, 2 * limit)
        scores: dict[str, float] = {}
        for ch, w in (("lexical", 1 - alpha), ("vector", alpha)):
            noms = row[ch][:k]
            if not noms:
                continue
            vals = [s for _, s in noms]
            if ch == "lexical":
                vals = [-s if s < 0 else s for s in vals]  # bm25() is negative in FTS5: larger magnitude is better
            hi, lo = max(vals), min(vals)
            if norm == "minmax":
                normed = [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in vals]
            else:  # z-score
                mu = sum(vals) / len(vals)
                sd = math.sqrt(sum((s - mu) ** 2 for s in vals) / len(vals)) or 1.0
                normed = [(s - mu) / sd for s in vals]
            floor_ = min(normed)
            for (key, _), s in zip(noms, normed, strict=True):
                scores[key] = scores.get(key, 0.0) + w * (s - floor_)
        return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))][:limit]

    return fuse


def measure(rows: list[dict[str, Any]], fuse: Fuser) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for row in rows:
        gold = set(row["gold"])
        if row["dataset"] == "locomo":
            ranked = fuse(row, 20)
            val = 1.0 if gold.intersection(ranked[:10]) else 0.0
        else:
            ranked = fuse(row, 100)
            dcg = sum(1.0 / math.log2(i + 1) for i, key in enumerate(ranked[:10], 1) if key in gold)
            idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold), 10) + 1))
            val = dcg / idcg
        out.setdefault(f"{row['dataset']}:{row['part']}", []).append(val)
    return {name: round(sum(v) / len(v), 4) for name, v in sorted(out.items())}


def grid() -> list[tuple[str, Fuser]]:
    out: list[tuple[str, Fuser]] = [("shipped rrf_k=10 lex 1.0 vec 0.5", rrf(10, 1.0, 0.5))]
    for k in (1, 3, 5, 10, 20, 60):
        for wv in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0):
            out.append((f"rrf_k={k} vec={wv}", rrf(k, 1.0, wv)))
    for ck in (10, 20, 30, 100):
        out.append((f"rrf_k=10 vec=0.5 candidate_k={ck}", rrf(10, 1.0, 0.5, ck)))
    for a in (0.2, 0.3, 0.4, 0.5, 0.6):
        out.append((f"convex minmax alpha={a}", convex(a)))
        out.append((f"convex z alpha={a}", convex(a, "z")))
    return out


def replay(args: argparse.Namespace) -> int:
    rows = json.loads(Path(args.noms).read_text())
    for name, fuse in grid():
        print(name, json.dumps(measure(rows, fuse)), flush=True)
    return 0


def fuse_scores(
    nominations: Mapping[str, Sequence[tuple[Any, float] | tuple[Any, float, int]]],
    *,
    weights: Mapping[str, float] | None = None,
) -> list[rank.Candidate]:
    """Convex fusion of per-channel scores, each standardised over its own nominations (best first).

    A channel's raw scores (BM25, cosine) are turned into z-scores over what
    it nominated for this query, shifted so its last nomination scores 0; an
    item a channel did not nominate gets that 0. The fused score is the
    weighted sum. Unlike RRF it keeps how far ahead a channel's best is, and a
    z-score reads any embedder's or backend's scale the same way (an affine
    change of a channel's scores changes nothing). ``weights`` as :func:`rank.fuse`.
    Ties are broken by the ref.
    """
    by_ref: dict[Any, rank.Candidate] = {}
    for channel, hits in nominations.items():
        if not hits:
            continue
        weight = 1.0 if weights is None else weights.get(channel, 1.0)
        raws = [float(n[1]) for n in hits]
        mean = sum(raws) / len(raws)
        spread = (sum((r - mean) ** 2 for r in raws) / len(raws)) ** 0.5
        lowest = min(raws)
        for position, nomination in enumerate(hits, 1):
            ref, raw = nomination[0], nomination[1]
            cand = by_ref.get(ref)
            if cand is None:
                cand = by_ref[ref] = rank.Candidate(ref)
            if spread > 0:
                cand.score += weight * (raw - lowest) / spread
            cand.ranks[channel] = position
            cand.channel_scores[channel] = raw
            if len(nomination) > 2:
                cand.versions[channel] = nomination[2]  # type: ignore[misc]
    return sorted(by_ref.values(), key=lambda c: (-c.score, c.ref))


def patched(rrf_k: int | None, vec: float | None, lex: float | None, alpha: float | None = None) -> None:
    """Search's defaults as a changed ``core/memory.py`` would have them (``DEFAULT_RRF_K``, ``DEFAULT_WEIGHTS``);
    with ``alpha``, search fuses with :func:`fuse_scores` (vector ``alpha``, lexical ``1 - alpha``)."""
    from memlane.core import memory

    if alpha is not None:
        fixed = {"lexical": 1 - alpha, "vector": alpha}
        rank.fuse = lambda nominations, **_: fuse_scores(nominations, weights=fixed)  # type: ignore[assignment]

    if rrf_k is not None:
        memory.DEFAULT_RRF_K = rrf_k
        kw = memory.Memory.search.__kwdefaults__
        assert kw is not None
        kw["rrf_k"] = rrf_k
    if vec is not None:
        memory.DEFAULT_WEIGHTS["vector"] = vec
    if lex is not None:
        memory.DEFAULT_WEIGHTS["lexical"] = lex


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "with":
        # fusion.py with [--rrf-k K] [--vec W] [--lex W] -- relevance|retrieval ARGS...: that bench, these defaults
        w = argparse.ArgumentParser(prog="fusion.py with")
        w.add_argument("--rrf-k", type=int)
        w.add_argument("--vec", type=float)
        w.add_argument("--lex", type=float)
        w.add_argument("--alpha", type=float, help="convex fusion of z-scores, this weight on vectors")
        cut = argv.index("--")
        opts = w.parse_args(argv[1:cut])
        patched(opts.rrf_k, opts.vec, opts.lex, opts.alpha)
        bench, rest = argv[cut + 1], argv[cut + 2 :]
        module = __import__(bench) if bench != "fusion" else sys.modules[__name__]
        return int(module.main(rest))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--locomo-store", required=True)
    d.add_argument("--queries", default="../shared/data/locomo/locomo_queries.jsonl")
    d.add_argument("--scifact-store", required=True)
    d.add_argument("--scifact", default="../shared/data/scifact")
    d.add_argument("--scifact-vectors", required=True)
    d.add_argument("--depth", type=int, default=200)
    d.add_argument("--out", required=True)
    sf = sub.add_parser("scifact")
    sf.add_argument("--scifact-store", required=True)
    sf.add_argument("--scifact", default="../shared/data/scifact")
    sf.add_argument("--scifact-vectors", required=True)
    sf.add_argument("--mode", default="hybrid")
    r = sub.add_parser("replay")
    r.add_argument("--noms", required=True)
    args = ap.parse_args(argv)
    return {"dump": dump, "scifact": scifact, "replay": replay}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
