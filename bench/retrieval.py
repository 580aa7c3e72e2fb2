"""Retrieval quality on real third-party data, through memlane's public API.

Usage::

    python bench/retrieval.py locomo --memories ../shared/data/locomo/locomo_memories.jsonl \\
        --queries ../shared/data/locomo/locomo_queries.jsonl [--mode hybrid|lexical|vector|all]
    python bench/retrieval.py beir --dir ../shared/data/scifact --split train [--mode ...]

    python bench/retrieval.py locomo --memories ... --queries ... --facts [--observations FILE]

    common options: [--embedder minilm|minilm-numpy|fake|none] [--json OUT] [--limit-queries N]
                    [--sweep] [--store-dir DIR] [--neighbours N (locomo only)]

What is measured (see /work/shared/data/README.md for the data):

* ``locomo``: one namespace per conversation, ``("locomo", conversation_id)``;
  one item per dialog turn, key = the turn's ``dia_id`` (``D1:3``), value and
  indexed text = ``"<speaker>: <turn text>"`` plus ``" [image: <caption>]"``
  when the turn shared a picture. Each question with evidence is asked
  within its own conversation's namespace with
  ``mem.recall(question, mode=M, namespace_prefix=..., limit=20)``; reported:
  hit@k and mrecall@k for k = 1, 5, 10, 20 and MRR@20, overall and per
  category. ``--neighbours N`` is a separate, labelled configuration: the
  value stays the turn, but the indexed ``text=`` is the turn with up to N
  turns before and after it in the same session.
* ``locomo --facts`` (the facts layer): the same turn items, and in the same
  store each session as a document with one chunk per turn (same text), each
  speaker as an entity and each observation
  (``locomo_observations.jsonl``) as a claim: ``speaker`` = the observed
  speaker, ``asserted_at`` = the session time, ``chunk`` = its first evidence
  turn, ``about`` = the speaker. Per question, in its conversation:
  ``claims_and_sources_context(question)`` (defaults ``k=50``,
  ``candidate_k=200``), scored on its passages, on the source turns of its
  claim groups, on both (top k of each) and on one interleaved list; once
  more with ``entity_ids`` = the speakers named in the question (resolved
  with ``resolve_entity``); beside ``search`` over the turn items (lexical,
  and hybrid with an embedder) and plain FTS5. turns@10 = distinct turns a
  reader is handed by the top 10 of each list.
* ``beir`` (SciFact): one namespace ``("scifact",)``, key = the document id,
  value/text = ``title + " " + text``; queries = those in ``qrels/<split>.tsv``;
  ``limit=100``; reported: nDCG@10 (binary gains), Recall@10, Recall@100.

In the same run, always: memlane ``lexical`` and the reference "plain SQLite
FTS5 BM25" built with raw ``sqlite3`` (tokenizer ``porter``, question tokens
quoted and OR-ed, one FTS5 table per conversation / over title + text, fed the
exact text memlane indexes), so every report carries the ratio
memlane-lexical / plain FTS5. For LoCoMo a second plain-FTS5 row indexes the
bare turn text (no speaker, no caption): the README's reference set-up.

``--sweep`` then runs a grid of *global* search settings on the same store
(channel weights, ``rrf_k``, ``candidate_k``, query stop-word removal) through
``Memory.search``; query vectors are embedded once and passed as
``embedding=``. Stop-word removal is an experiment done by filtering the
query text handed to the lexical channel (memlane itself does not do it).

Embedding happens inside ``put_many``; an embedder wrapper times it, so the
throughput reported is what memlane's writes actually saw. Stores live in a
temporary directory removed at exit, unless ``--store-dir DIR`` (outside the
repository) asks to keep them for re-use by a later run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import memlane

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Goal, format_table, machine_info, progress, ratio, summarize, write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODES = ("lexical", "vector", "hybrid")
BASE_LABEL = "hybrid (current defaults)"

GOAL_LOCOMO = Goal("hybrid LoCoMo hit@10 >= 0.80", 0.80, higher_is_better=True)
GOAL_SCIFACT = Goal("hybrid SciFact nDCG@10 >= 0.75", 0.75, higher_is_better=True)

# Stop-word lists for the query-side experiment. "lucene" is Lucene's classic
# English set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET); "nltk" is NLTK's English
# list (function words, pronouns, auxiliaries, question words).
STOP_WORDS: dict[str, frozenset[str]] = {
    "lucene": frozenset(
        "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
        "they this to was will with".split()
    ),
    "nltk": frozenset(
        "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers "
        "herself it its itself they them their theirs themselves what which who whom this that these those am is "
        "are was were be been being have has had having do does did doing a an the and but if or because as "
        "until while of at by for with about against between into through during before after above below to "
        "from up down in out on off over under again further then once here there when where why how all any "
        "both each few more most other some such no nor not only own same so than too very s t can will just "
        "don should now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn "
        "shan shouldn wasn weren won wouldn".split()
    ),
}
_WORD = re.compile(r"\w+", re.UNICODE)


# -- data -------------------------------------------------------------------------


@dataclass(slots=True)
class Doc:
    namespace: tuple[str, ...]
    key: str
    value: str
    text: str  # what memlane indexes (== value unless a context configuration is chosen)
    bare: str  # the reference text for the README's plain-FTS5 set-up


@dataclass(slots=True)
class Query:
    qid: str
    namespace: tuple[str, ...]
    text: str
    gold: frozenset[str]
    category: str = "all"


@dataclass(slots=True)
class Dataset:
    name: str
    docs: list[Doc]
    queries: list[Query]
    limit: int
    headline: str  # the metric goals are stated in
    ks: tuple[int, ...]
    describe: str
    categories: list[str] = field(default_factory=list)


def _jsonl(path: str | Path) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def locomo_turn_text(r: dict[str, Any]) -> str:
    """A LoCoMo turn as memlane stores it: ``"Speaker: text [image: caption]"``."""
    text = f"{r['speaker']}: {r['text']}"
    if r.get("image_caption"):
        text += f" [image: {r['image_caption']}]"
    return text


def load_locomo(memories: str, queries: str, neighbours: int) -> Dataset:
    rows = list(_jsonl(memories))
    turn_text = {r["id"]: locomo_turn_text(r) for r in rows}
    # sessions in turn order, for the neighbour-context configuration
    sessions: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        sessions[(r["conversation_id"], r["session"])].append(r)
    docs = []
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
        for i, r in enumerate(turns):
            value = turn_text[r["id"]]
            if neighbours:
                window = turns[max(0, i - neighbours) : i + neighbours + 1]
                text = "\n".join(turn_text[w["id"]] for w in window)
            else:
                text = value
            docs.append(Doc(("locomo", r["conversation_id"]), r["dia_id"], value, text, r["text"]))
    qs = []
    for q in _jsonl(queries):
        if not q.get("evidence_ids"):
            continue
        conv = q["conversation_id"]
        gold = frozenset(e.split(":", 1)[1] for e in q["evidence_ids"] if e.startswith(conv + ":"))
        qs.append(Query(q["id"], ("locomo", conv), q["question"], gold, q["category_name"]))
    indexed = "turn" if not neighbours else f"turn +/- {neighbours} neighbour(s) in its session"
    return Dataset(
        "locomo",
        docs,
        qs,
        limit=20,
        headline="hit@10",
        ks=(1, 5, 10, 20),
        describe=f"value = 'Speaker: text [image: caption]'; indexed text = {indexed}",
        categories=sorted({q.category for q in qs}),
    )


def load_beir(directory: str, split: str) -> Dataset:
    base = Path(directory)
    docs = []
    for d in _jsonl(base / "corpus.jsonl"):
        text = f"{d.get('title', '')} {d['text']}".strip()
        docs.append(Doc(("scifact",), str(d["_id"]), text, text, text))
    gold: dict[str, set[str]] = defaultdict(set)
    with open(base / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["score"]) > 0:
                gold[row["query-id"]].add(row["corpus-id"])
    qs = [
        Query(str(q["_id"]), ("scifact",), q["text"], frozenset(gold[str(q["_id"])]))
        for q in _jsonl(base / "queries.jsonl")
        if str(q["_id"]) in gold
    ]
    return Dataset(
        f"beir:{base.name}",
        docs,
        qs,
        limit=100,
        headline="ndcg@10",
        ks=(10, 100),
        describe="value = indexed text = title + ' ' + text",
    )


# -- metrics ----------------------------------------------------------------------


def score(ds: Dataset, ranked: Sequence[str], gold: frozenset[str]) -> dict[str, float]:
    """Per-question metrics from the ranked keys."""
    out: dict[str, float] = {}
    if ds.name == "locomo":
        for k in ds.ks:
            found = len(gold.intersection(ranked[:k]))
            out[f"hit@{k}"] = 1.0 if found else 0.0
            out[f"mrecall@{k}"] = found / len(gold)
        out["mrr@20"] = next((1.0 / i for i, key in enumerate(ranked[:20], 1) if key in gold), 0.0)
    else:
        dcg = sum(1.0 / math.log2(i + 1) for i, key in enumerate(ranked[:10], 1) if key in gold)
        idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold), 10) + 1))
        out["ndcg@10"] = dcg / idcg
        out["recall@10"] = len(gold.intersection(ranked[:10])) / len(gold)
        out["recall@100"] = len(gold.intersection(ranked[:100])) / len(gold)
    return out


def aggregate(ds: Dataset, per_query: list[tuple[Query, dict[str, float]]]) -> dict[str, Any]:
    def mean(rows: list[dict[str, float]]) -> dict[str, float]:
        return {m: round(sum(r[m] for r in rows) / len(rows), 4) for m in rows[0]} if rows else {}

    out: dict[str, Any] = {"n": len(per_query), "overall": mean([m for _, m in per_query])}
    if ds.categories:
        out["by_category"] = {
            c: {
                "n": sum(1 for q, _ in per_query if q.category == c),
                **mean([m for q, m in per_query if q.category == c]),
            }
            for c in ds.categories
        }
    return out


def metric_names(ds: Dataset) -> list[str]:
    if ds.name == "locomo":
        return [f"hit@{k}" for k in ds.ks] + [f"mrecall@{k}" for k in ds.ks] + ["mrr@20"]
    return ["ndcg@10", "recall@10", "recall@100"]


# -- embedder wrapper -----------------------------------------------------------------


class TimedEmbedder:
    """Passes calls to an embedder, counting texts, word pieces and seconds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.seconds = 0.0
        self.texts = 0
        self.tokens = 0
        self.calls = 0

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        counter = getattr(self.inner, "token_counts", None)
        if counter is not None:
            self.tokens += sum(counter(texts))  # outside the timed section
        t0 = time.perf_counter()
        out = self.inner.embed_batch(texts)
        self.seconds += time.perf_counter() - t0
        self.texts += len(texts)
        self.calls += 1
        return out  # type: ignore[no-any-return]

    def snapshot(self) -> dict[str, float]:
        return {
            "texts": self.texts,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "texts_per_s": round(self.texts / self.seconds, 2) if self.seconds else math.nan,
            "tokens_per_s": round(self.tokens / self.seconds, 1) if self.seconds and self.tokens else math.nan,
            "mean_tokens": round(self.tokens / self.texts, 1) if self.texts and self.tokens else math.nan,
        }

    def reset(self) -> None:
        self.seconds, self.texts, self.tokens, self.calls = 0.0, 0, 0, 0


def make_embedder(name: str) -> TimedEmbedder | None:
    if name == "none":
        return None
    from memlane.domain.search.embedders import get_embedder

    inner: Any = get_embedder(name)
    load = getattr(inner, "load", None)
    if load is not None:
        load()
    return TimedEmbedder(inner)


# -- store ----------------------------------------------------------------------------


def open_store(ds: Dataset, path: Any, embedder: TimedEmbedder | None, batch: int) -> tuple[Any, dict[str, Any]]:
    """Open (building it if needed) the memlane store for a dataset: a SQLite path, or a fresh PostgreSQL URL."""
    if not isinstance(path, str | Path):  # an open memory (--ingest conversation)
        return path, {"path": str(path.store.location), "items": path.stats().active_items, "reused": True}
    info: dict[str, Any] = {"path": str(path), "items": len(ds.docs), "reused": False}
    if isinstance(path, Path) and path.exists():
        mem = memlane.open(str(path), embedder=embedder, indexing="sync")
        stats = mem.stats()
        if stats.active_items == len(ds.docs) and stats.vectors_missing == 0:
            info["reused"] = True
            progress(f"re-using {path} ({stats.active_items:,} items, {stats.vectors:,} vectors)")
            return mem, info
        mem.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    mem = memlane.open(str(path), embedder=embedder, indexing="sync")
    records = [{"namespace": d.namespace, "key": d.key, "value": d.value, "text": d.text} for d in ds.docs]
    if embedder is not None:
        embedder.reset()
    t0 = time.perf_counter()
    for start in range(0, len(records), batch):
        mem.put_many(records[start : start + batch])
        done = min(len(records), start + batch)
        if embedder is not None and embedder.seconds:
            rate = f"; embedding {embedder.texts / embedder.seconds:,.1f} texts/s"
        else:
            rate = ""
        progress(f"  put_many {done:,}/{len(records):,} ({time.perf_counter() - t0:,.0f} s{rate})")
    info["put_many_seconds"] = round(time.perf_counter() - t0, 3)
    if embedder is not None:
        info["embedding"] = embedder.snapshot()
        embedder.reset()
    return mem, info


# -- runners ----------------------------------------------------------------------------


def hit_key(hit: Any) -> str:
    """The dataset key a hit stands for: its ``message_id`` (turns written by ``add_conversation``) or its key."""
    return str(hit.item.metadata.get("message_id", hit.item.key))


def run_recall(
    mem: Any,
    ds: Dataset,
    mode: str,
    *,
    vectors: dict[str, list[float]] | None = None,
    floor: bool = True,
    namespace_of: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """The headline: ``Memory.recall`` exactly as an agent would call it.

    ``vectors`` (query id -> query vector) are passed as ``embedding=`` so a
    run re-uses cached query embeddings; ``namespace_of`` asks each question
    in another namespace (the abstention measure). ``empty`` is the share of
    questions answered with no hit.
    """
    per_query = []
    samples: list[int] = []
    notes: set[str] = set()
    empty = below = 0
    for q in ds.queries:
        embedding = vectors.get(q.qid) if vectors is not None and mode != "lexical" else None
        ns = q.namespace if namespace_of is None else namespace_of[q.qid]
        t0 = time.perf_counter_ns()
        env = mem.recall(q.text, mode=mode, namespace_prefix=ns, limit=ds.limit, embedding=embedding, floor=floor)
        samples.append(time.perf_counter_ns() - t0)
        notes.update(n for n in env.notes if not n.startswith("nothing relevant"))
        empty += not env.hits
        below += env.below_floor
        per_query.append((q, score(ds, [hit_key(h) for h in env.hits], q.gold)))
    out = aggregate(ds, per_query)
    out["empty"] = round(empty / len(ds.queries), 4) if ds.queries else math.nan
    out["below_floor_per_query"] = round(below / len(ds.queries), 2) if ds.queries else math.nan
    lat = summarize(samples)
    out["latency_ms"] = {"p50_ms": round(lat.p50_us / 1000, 3), "p99_ms": round(lat.p99_us / 1000, 3)}
    out["notes"] = sorted(notes)
    return out


def _fts_terms(text: str) -> list[str]:
    return list(dict.fromkeys(_WORD.findall(text.lower())))


def run_plain_fts5(ds: Dataset, which: str) -> dict[str, Any]:
    """Reference: plain FTS5 BM25, one table per namespace, raw sqlite3.

    ``which`` is ``"indexed"`` (the text memlane indexes) or ``"bare"``
    (the README's set-up: the turn text alone).
    """
    conn = sqlite3.connect(":memory:")
    tables: dict[tuple[str, ...], str] = {}
    for d in ds.docs:
        if d.namespace not in tables:
            tables[d.namespace] = name = f"t{len(tables)}"
            conn.execute(f"CREATE VIRTUAL TABLE {name} USING fts5(key UNINDEXED, body, tokenize='porter')")
    grouped: dict[tuple[str, ...], list[tuple[str, str]]] = defaultdict(list)
    for d in ds.docs:
        grouped[d.namespace].append((d.key, d.text if which == "indexed" else d.bare))
    for ns, rows in grouped.items():
        conn.executemany(f"INSERT INTO {tables[ns]} (key, body) VALUES (?, ?)", rows)
    per_query = []
    samples: list[int] = []
    for q in ds.queries:
        terms = _fts_terms(q.text)
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        t = tables[q.namespace]
        t0 = time.perf_counter_ns()
        rows = conn.execute(f"SELECT key FROM {t} WHERE {t} MATCH ? ORDER BY bm25({t}) LIMIT ?", (match, ds.limit))
        ranked = [r[0] for r in rows]
        samples.append(time.perf_counter_ns() - t0)
        per_query.append((q, score(ds, ranked, q.gold)))
    conn.close()
    out = aggregate(ds, per_query)
    out["latency_ms"] = {"p50_ms": round(summarize(samples).p50_us / 1000, 3)}
    return out


def strip_stop_words(text: str, stop: frozenset[str]) -> str:
    kept = [w for w in _WORD.findall(text) if w.lower() not in stop]
    return " ".join(kept) if kept else text


@dataclass(frozen=True, slots=True)
class Config:
    label: str
    channels: tuple[str, ...] = ("lexical", "vector")
    vector_weight: float = 1.0
    rrf_k: int = 60
    candidate_k: int | None = None
    stop: str | None = None


def sweep_configs(ds: Dataset, has_vectors: bool) -> list[Config]:
    """One factor at a time around the current defaults, then a small grid of the promising ones."""
    configs = [Config("lexical", ("lexical",))]
    configs += [Config(f"lexical, stop={s}", ("lexical",), stop=s) for s in STOP_WORDS]
    if not has_vectors:
        return configs
    default_k = max(50, 2 * ds.limit)
    configs.append(Config("vector", ("vector",)))
    configs.append(Config(BASE_LABEL))
    configs += [Config(f"hybrid, w_vec={w}", vector_weight=w) for w in (0.3, 0.5, 0.7, 1.5, 2.0)]
    configs += [Config(f"hybrid, rrf_k={k}", rrf_k=k) for k in (5, 10, 20, 30, 100)]
    configs += [Config(f"hybrid, candidate_k={c}", candidate_k=c) for c in (ds.limit, 2 * default_k, 4 * default_k)]
    configs += [Config(f"hybrid, stop={s}", stop=s) for s in STOP_WORDS]
    for stop in (None, "nltk"):
        for k in (10, 20, 30):
            for w in (0.5, 0.7, 1.0):
                for cand in (None, ds.limit):
                    parts = [f"rrf_k={k}", f"w_vec={w}"]
                    if cand is not None:
                        parts.append(f"candidate_k={cand}")
                    if stop is not None:
                        parts.append(f"stop={stop}")
                    configs.append(
                        Config("hybrid, " + ", ".join(parts), vector_weight=w, rrf_k=k, candidate_k=cand, stop=stop)
                    )
    seen: set[str] = set()
    return [c for c in configs if not (c.label in seen or seen.add(c.label))]  # type: ignore[func-returns-value]


def run_config(mem: Any, ds: Dataset, cfg: Config, vectors: dict[str, list[float]]) -> dict[str, Any]:
    per_query = []
    for q in ds.queries:
        text = q.text if cfg.stop is None else strip_stop_words(q.text, STOP_WORDS[cfg.stop])
        env = mem.search(
            text,
            namespace_prefix=q.namespace,
            limit=ds.limit,
            channels=cfg.channels,
            candidate_k=cfg.candidate_k,
            embedding=vectors.get(q.qid) if "vector" in cfg.channels else None,
            rrf_k=cfg.rrf_k,
            weights={"lexical": 1.0, "vector": cfg.vector_weight},
        )
        per_query.append((q, score(ds, [hit_key(h) for h in env.hits], q.gold)))
    return aggregate(ds, per_query)


# -- facts layer: claims and sources on LoCoMo (--facts) ------------------------------------

FACTS_KS = (1, 5, 10, 20)
FACTS_COLUMNS = ("hit@1", "hit@5", "hit@10", "hit@20", "mrecall@10", "mrr@20", "turns@10")
Slots = list[tuple[str, ...]]  # ranked results, each as the dia ids of the turns behind it


def slot_scores(gold: frozenset[str], lists: Sequence[Slots]) -> dict[str, float]:
    """Metrics when a reader gets the top k results of each list; a result stands for the turns behind it.

    A passage or a ``search`` hit stands for its turn, a claim group for the turns its claims
    were taken from. hit@k: a gold turn behind one of the top k results of any list; mrecall@k:
    the share of gold turns behind them; MRR@20: 1 / the best rank, over the lists, of a result
    with a gold turn behind it; turns@10: the distinct turns behind the top 10 of all lists (what
    the reader is handed).
    """
    out: dict[str, float] = {}
    for k in FACTS_KS:
        seen = set().union(*(s for lst in lists for s in lst[:k]))
        found = len(gold & seen)
        out[f"hit@{k}"] = 1.0 if found else 0.0
        out[f"mrecall@{k}"] = found / len(gold)
    ranks = [next((i for i, s in enumerate(lst[:20], 1) if not gold.isdisjoint(s)), 0) for lst in lists]
    best = min((r for r in ranks if r), default=0)
    out["mrr@20"] = 1.0 / best if best else 0.0
    out["turns@10"] = float(len(set().union(*(s for lst in lists for s in lst[:10]))))
    return out


def interleave(a: Slots, b: Slots) -> Slots:
    """One list of turns: passage 1, the turns of claim group 1, passage 2, ..., each turn once."""
    turns: dict[str, None] = {}
    for i in range(max(len(a), len(b))):
        for lst in (a, b):
            if i < len(lst):
                turns.update(dict.fromkeys(lst[i]))
    return [(t,) for t in turns]


@dataclass(slots=True)
class LocomoFacts:
    """The LoCoMo turns by session (in turn order) and the observations."""

    sessions: dict[tuple[str, int], list[dict[str, Any]]]
    observations: list[dict[str, Any]]
    speakers: dict[str, list[str]]  # conversation -> speaker names

    @property
    def sourced(self) -> set[str]:
        """Turn ids (``conv-26:D1:3``) that are the chunk of some claim (an observation's first evidence)."""
        return {o["evidence_ids"][0] for o in self.observations}


def load_locomo_facts(memories: str, observations: str) -> LocomoFacts:
    sessions: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    speakers: dict[str, dict[str, None]] = defaultdict(dict)
    for r in _jsonl(memories):
        sessions[(r["conversation_id"], r["session"])].append(r)
        speakers[r["conversation_id"]][r["speaker"]] = None
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
    obs = [o for o in _jsonl(observations) if o.get("evidence_ids")]
    return LocomoFacts(dict(sessions), obs, {c: list(s) for c, s in speakers.items()})


def build_facts(mem: Any, data: LocomoFacts, embedder: TimedEmbedder | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sessions as documents (one chunk per turn), speakers as entities, observations as claims.

    Returns the id map kept beside the store (chunk id -> dia id, claim ids) and the ingest figures.
    """
    info: dict[str, Any] = {}
    chunk_dia: dict[str, str] = {}
    turn_chunk: dict[str, str] = {}
    t0 = time.perf_counter()
    for (conv, session), turns in data.sessions.items():
        doc = mem.add_document(
            ("locomo", conv),
            f"{conv} session {session} ({turns[0]['session_date']})",
            [locomo_turn_text(r) for r in turns],
            source=f"locomo:{conv}:S{session}",
            created_at=turns[0]["session_datetime"],
        )
        if len(doc.chunk_ids) != len(turns):
            raise SystemExit(f"{conv} session {session}: {len(turns)} turns became {len(doc.chunk_ids)} chunks")
        for r, cid in zip(turns, doc.chunk_ids, strict=True):
            chunk_dia[cid] = r["dia_id"]
            turn_chunk[r["id"]] = cid
    info["add_document"] = {"documents": len(data.sessions), "chunks": len(chunk_dia)}
    info["add_document"]["seconds"] = round(time.perf_counter() - t0, 3)
    if embedder is not None:
        info["add_document"]["embedding"] = embedder.snapshot()
        embedder.reset()
    progress(
        f"  add_document: {len(data.sessions)} sessions, {len(chunk_dia):,} chunks ({time.perf_counter() - t0:,.0f} s)"
    )
    entity: dict[tuple[str, str], str] = {}
    for conv, names in data.speakers.items():
        for name in names:
            entity[(conv, name)] = mem.add_entity(("locomo", conv), name, kind="person").id
    for o in data.observations:
        key = (o["conversation_id"], o["speaker"])
        if key not in entity:
            entity[key] = mem.add_entity(("locomo", key[0]), key[1], kind="person").id
    when = {key: turns[0]["session_datetime"] for key, turns in data.sessions.items()}
    claim_ids = []
    samples: list[int] = []
    t0 = time.perf_counter()
    for i, o in enumerate(data.observations, 1):
        conv = o["conversation_id"]
        t1 = time.perf_counter_ns()
        claim = mem.add_claim(
            ("locomo", conv),
            o["text"],
            speaker=o["speaker"],
            asserted_at=when.get((conv, o["session"])),
            chunk=turn_chunk[o["evidence_ids"][0]],
            about=[entity[(conv, o["speaker"])]],
        )
        samples.append(time.perf_counter_ns() - t1)
        claim_ids.append(claim.id)
        if i % 200 == 0:
            progress(f"  add_claim {i:,}/{len(data.observations):,} ({time.perf_counter() - t0:,.0f} s)")
    lat = summarize(samples)
    info["add_claim"] = {
        "claims": len(claim_ids),
        "entities": len(entity),
        "seconds": round(time.perf_counter() - t0, 3),
        "p50_ms": round(lat.p50_us / 1000, 3),
        "p99_ms": round(lat.p99_us / 1000, 3),
    }
    if embedder is not None:
        info["add_claim"]["embedding"] = embedder.snapshot()
        embedder.reset()
    return {"chunk_dia": chunk_dia, "claim_ids": claim_ids, "entities": len(entity)}, info


def open_facts_store(
    ds: Dataset, data: LocomoFacts, path: Path | str, embedder: TimedEmbedder | None, batch: int
) -> tuple[Any, dict[str, str], dict[str, Any]]:
    """The turn items (for ``search``) and the facts layer's documents and claims in one store.

    With a file store the id map is kept beside it (``<store>.facts.json``, written last), and a
    store whose map, items and records all check out is re-used; anything else is rebuilt.
    """
    sidecar = Path(f"{path}.facts.json") if isinstance(path, Path) else None
    if sidecar is not None and isinstance(path, Path) and path.exists():
        if sidecar.exists():
            ids = json.loads(sidecar.read_text(encoding="utf-8"))
            mem = memlane.open(str(path), embedder=embedder, indexing="sync")
            stats = mem.stats()
            wanted = [*ids["chunk_dia"], *ids["claim_ids"]]
            found = [r for i in range(0, len(wanted), 1000) for r in mem.lookup(wanted[i : i + 1000])]
            if (
                stats.active_items == len(ds.docs)
                and stats.vectors_missing == 0
                and len(ids["chunk_dia"]) == sum(len(t) for t in data.sessions.values())
                and len(ids["claim_ids"]) == len(data.observations)
                and all(r is not None for r in found)
            ):
                progress(f"re-using {path} ({len(ids['chunk_dia']):,} chunks, {len(ids['claim_ids']):,} claims)")
                return mem, ids["chunk_dia"], {"path": str(path), "reused": True}
            mem.close()
        for suffix in ("", "-wal", "-shm", ".facts.json"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    mem, info = open_store(ds, path, embedder, batch)
    ids, more = build_facts(mem, data, embedder)
    info.update(more)
    if sidecar is not None:
        sidecar.write_text(json.dumps(ids), encoding="utf-8")
    return mem, ids["chunk_dia"], info


def _latency(samples: list[int]) -> dict[str, float]:
    lat = summarize(samples)
    return {"p50_ms": round(lat.p50_us / 1000, 3), "p99_ms": round(lat.p99_us / 1000, 3)}


def run_facts(mem: Any, ds: Dataset, data: LocomoFacts, chunk_dia: dict[str, str], embedder: Any) -> dict[str, Any]:
    """``claims_and_sources_context`` per question, beside ``search`` over the turn items, same store."""
    subjects: dict[str, list[tuple[Query, dict[str, float]]]] = defaultdict(list)
    latency: dict[str, list[int]] = defaultdict(list)
    timings: dict[str, list[float]] = defaultdict(list)
    calls: dict[str, int] = {}
    notes: set[str] = set()
    truncated: dict[str, int] = defaultdict(int)
    searches = {"search lexical": ("lexical",)}
    if embedder is not None:
        searches["search hybrid (default)"] = ("lexical", "vector")
    for label, channels in searches.items():
        if embedder is not None:
            embedder.reset()
        for q in ds.queries:
            t0 = time.perf_counter_ns()
            env = mem.search(q.text, namespace_prefix=q.namespace, limit=ds.limit, channels=channels)
            latency[label].append(time.perf_counter_ns() - t0)
            subjects[label].append((q, slot_scores(q.gold, [[(h.item.key,) for h in env.hits]])))
        if embedder is not None:
            calls[label] = embedder.calls
    names = {conv: [(n, re.compile(rf"\b{re.escape(n)}\b")) for n in ns] for conv, ns in data.speakers.items()}
    entity_cache: dict[tuple[str, str], str | None] = {}
    with_entities = 0
    for variant in ("", " + entity_ids"):
        if embedder is not None:
            embedder.reset()
        for i, q in enumerate(ds.queries, 1):
            ids = None
            if variant:
                conv = q.namespace[1]
                ids = []
                for name, pattern in names[conv]:
                    if not pattern.search(q.text):
                        continue
                    if (conv, name) not in entity_cache:
                        found = mem.resolve_entity(name, namespace_prefix=q.namespace)
                        entity_cache[(conv, name)] = (
                            found["entities"][0].entity.id if found.status == "resolved" else None
                        )
                    if entity_cache[(conv, name)]:
                        ids.append(entity_cache[(conv, name)])
                ids = ids or None
                with_entities += ids is not None
            t0 = time.perf_counter_ns()
            ctx = mem.claims_and_sources_context(q.text, namespace_prefix=q.namespace, entity_ids=ids)
            latency["facts" + variant].append(time.perf_counter_ns() - t0)
            for phase in ("claims_ms", "passages_ms"):
                timings[f"facts{variant} {phase}"].append(ctx.timings[phase])
            notes.update(ctx.notes)
            for section in ctx.truncated:
                truncated[f"facts{variant} {section}"] += 1
            passages: Slots = [(chunk_dia[p.id],) for p in ctx["passages"]]
            groups: Slots = [
                tuple(dict.fromkeys(chunk_dia[c.chunk_id] for c in g.claims if c.chunk_id in chunk_dia))
                for g in ctx["claims"]
            ]
            subjects[f"facts{variant}: passages"].append((q, slot_scores(q.gold, [passages])))
            subjects[f"facts{variant}: claims (source turns)"].append((q, slot_scores(q.gold, [groups])))
            subjects[f"facts{variant}: passages + claims"].append((q, slot_scores(q.gold, [passages, groups])))
            if not variant:
                merged = interleave(passages, groups)
                subjects["facts: interleaved, one list of turns"].append((q, slot_scores(q.gold, [merged])))
            if i % 200 == 0:
                progress(f"  claims_and_sources_context{variant} {i:,}/{len(ds.queries):,}")
        if embedder is not None:
            calls["facts" + variant] = embedder.calls
    results: dict[str, dict[str, Any]] = {}
    for label, per_query in subjects.items():
        results[label] = aggregate(ds, per_query)
        call = next(c for c in latency if label == c or label.startswith(c + ":"))
        results[label]["latency_ms"] = _latency(latency[call])
    sourced = data.sourced
    reachable = [q for q in ds.queries if any(f"{q.namespace[1]}:{g}" in sourced for g in q.gold)]
    return {
        "results": results,
        "phase_ms_mean": {k: round(sum(v) / len(v), 3) for k, v in timings.items()},
        "query_embedding_calls": calls,
        "questions_with_entity_ids": with_entities,
        "questions_with_a_sourced_gold_turn": len(reachable),
        "truncated": dict(truncated),
        "notes": sorted(notes),
    }


def facts_table(results: dict[str, dict[str, Any]], baseline: str) -> str:
    rows = []
    for label, res in results.items():
        o = res["overall"]
        rows.append(
            [label]
            + [f3(o.get(m)) for m in FACTS_COLUMNS]
            + [f3(ratio(o["hit@10"], results[baseline]["overall"]["hit@10"])), f3(res["latency_ms"]["p50_ms"])]
        )
    return format_table(["subject", *FACTS_COLUMNS, "hit@10 / search", "p50 ms (call)"], rows)


def facts_main(args: argparse.Namespace, ds: Dataset, target: Path | str, embedder: Any, report: dict[str, Any]) -> Any:
    """``locomo --facts``: build (or re-use) the store, run both subjects, print and record the figures."""
    data = load_locomo_facts(args.memories, args.observations)
    progress(f"facts: {len(data.sessions)} sessions, {len(data.observations):,} observations")
    mem, chunk_dia, build = open_facts_store(ds, data, target, embedder, args.batch)
    report["build"] = build
    out = run_facts(mem, ds, data, chunk_dia, embedder)
    plain = run_plain_fts5(ds, "indexed")
    results = {"plain FTS5 (same turn text)": plain, **out.pop("results")}
    report["results"] = results
    report["facts"] = out
    base = "search hybrid (default)" if "search hybrid (default)" in results else "search lexical"
    n = len(ds.queries)
    print(f"\nLoCoMo, facts layer: {len(data.sessions)} sessions as documents ({len(chunk_dia):,} turn chunks), ")
    print(f"{len(data.observations):,} observations as claims sourced from their first evidence turn; {n} questions")
    print(f"embedder: {args.embedder}; search = Memory.search over the same turns as items, limit {ds.limit}")
    print(
        f"questions with a gold turn that is some claim's source (claims-only ceiling): "
        f"{out['questions_with_a_sourced_gold_turn']} / {n} = {out['questions_with_a_sourced_gold_turn'] / n:.3f}"
    )
    if build["reused"]:
        print("ingest: store re-used from --store-dir, not measured in this run")
    steps = {"put_many_seconds": "put_many seconds", "embedding": "put_many embedding"}
    for step in ("put_many_seconds", "embedding", "add_document", "add_claim"):
        if step in build:
            print(f"ingest, {steps.get(step, step)}: {build[step]}")
    print()
    print(facts_table(results, base))
    print()
    shown = {k: v for k, v in results.items() if "entity_ids" not in k and "interleaved" not in k}
    print(category_table(ds, shown, "hit@10"))
    print()
    print(f"phase means (ms): {out['phase_ms_mean']}")
    print(f"query embedding calls per subject: {out['query_embedding_calls']} for {n} questions")
    print(f"questions asked with entity_ids (a speaker named in the question): {out['questions_with_entity_ids']}")
    print(f"truncated sections: {out['truncated']}; notes: {out['notes']}")
    return mem


# -- reporting --------------------------------------------------------------------------


def f3(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def results_table(ds: Dataset, rows: dict[str, dict[str, Any]], baseline: str) -> str:
    names = metric_names(ds)
    head = ds.headline
    out = []
    for label, res in rows.items():
        o = res["overall"]
        lat = res.get("latency_ms", {}).get("p50_ms")
        out.append(
            [label]
            + [f3(o.get(m)) for m in names]
            + [f3(ratio(o[head], rows[baseline]["overall"][head])), "-" if lat is None else f"{lat:.2f}"]
        )
    return format_table(["subject"] + names + [f"{head} / plain", "p50 ms"], out)


def category_table(ds: Dataset, rows: dict[str, dict[str, Any]], metric: str) -> str:
    out = []
    for c in ds.categories:
        n = next(iter(rows.values()))["by_category"][c]["n"]
        out.append([f"{c} ({n})"] + [f3(res["by_category"][c][metric]) for res in rows.values()])
    return format_table(["category (questions)"] + list(rows), out, title=f"{metric} per category")


def sweep_table(ds: Dataset, results: list[tuple[Config, dict[str, Any]]]) -> str:
    if ds.name == "locomo":
        cols = ["hit@5", "hit@10", "mrecall@10", "mrr@20"]
    else:
        cols = ["ndcg@10", "recall@10", "recall@100"]
    base = next((r for c, r in results if c.label == BASE_LABEL), results[0][1])
    head = ds.headline
    rows = []
    for cfg, res in results:
        o = res["overall"]
        row = [cfg.label] + [f3(o[m]) for m in cols] + [f"{o[head] - base['overall'][head]:+.3f}"]
        if ds.categories:
            row += [f3(res["by_category"][c]["hit@10"]) for c in ds.categories]
        rows.append(row)
    headers = ["configuration"] + cols + [f"d {head}"] + [f"{c[:6]} h@10" for c in ds.categories]
    return format_table(headers, rows)


def embedding_line(e: dict[str, Any]) -> str:
    line = f"{e['texts']:,} texts in {e['seconds']:,.1f} s = {e['texts_per_s']:,.1f} texts/s"
    if e["tokens"]:
        line += f"; {e['mean_tokens']} word pieces each, {e['tokens_per_s']:,.0f} word pieces/s"
    return line


def run_modes(
    args: argparse.Namespace,
    ds: Dataset,
    target: Path | str,
    embedder: TimedEmbedder | None,
    modes: list[str],
    report: dict[str, Any],
) -> Any:
    """The recall modes (and ``--sweep``) on the turn items; returns the open memory."""
    mem, build = open_store(ds, target, embedder, args.batch)
    report["build"] = build
    if "embedding" in build:
        e = build["embedding"]
        progress("corpus embedding: " + embedding_line(e))

    results: dict[str, dict[str, Any]] = {}
    progress("plain FTS5 baseline")
    results["plain FTS5"] = run_plain_fts5(ds, "indexed")
    if ds.name == "locomo":
        results["plain FTS5 (bare turn text)"] = run_plain_fts5(ds, "bare")
    if embedder is not None:
        embedder.reset()
    for mode in modes:
        progress(f"memlane recall mode={mode}")
        results[f"memlane {mode}"] = run_recall(mem, ds, mode)
    if embedder is not None and embedder.texts:
        report["query_embedding"] = embedder.snapshot()
    report["results"] = results

    print(f"\n{ds.name}: {len(ds.docs):,} documents, {len(ds.queries):,} queries, limit {ds.limit}")
    print(f"embedder: {args.embedder}; {ds.describe}")
    if "embedding" in build:
        e = build["embedding"]
        print(f"corpus embedding (inside put_many): {embedding_line(e)}")
    elif build["reused"]:
        print("corpus embedding: store re-used from --store-dir, not measured in this run")
    if "query_embedding" in report:
        print(f"query embedding (one query per recall call): {embedding_line(report['query_embedding'])}")
    print()
    print(results_table(ds, results, "plain FTS5"))
    if ds.categories:
        print()
        print(category_table(ds, results, "hit@10"))

    # goals
    head = ds.headline
    lex = results["memlane lexical"]["overall"][head]
    plain = results["plain FTS5"]["overall"][head]
    goals = [("lexical >= plain FTS5 (" + head + ")", lex >= plain - 1e-9, f"{lex:.3f} vs {plain:.3f}")]
    if "memlane hybrid" in results:
        hyb = results["memlane hybrid"]["overall"][head]
        goal = GOAL_LOCOMO if ds.name == "locomo" else GOAL_SCIFACT
        goals.append((goal.label, bool(goal.met(hyb)), f"{hyb:.3f}"))
        goals.append((f"hybrid >= lexical ({head})", hyb >= lex - 1e-9, f"{hyb:.3f} vs {lex:.3f}"))
        if ds.categories:
            worse = [
                c
                for c in ds.categories
                if results["memlane hybrid"]["by_category"][c][head]
                < results["memlane lexical"]["by_category"][c][head] - 1e-9
            ]
            goals.append(("hybrid >= lexical in every category", not worse, ", ".join(worse) or "all"))
    report["goals"] = [{"goal": g, "met": ok, "value": v} for g, ok, v in goals]
    print()
    print(format_table(["goal", "status", "value"], [[g, "met" if ok else "MISSED", v] for g, ok, v in goals]))

    if args.sweep:
        vectors: dict[str, list[float]] = {}
        if embedder is not None:
            embedder.reset()
            texts = [q.text for q in ds.queries]
            embedded = mem.embedder.embed_batch(texts)
            vectors = {q.qid: v for q, v in zip(ds.queries, embedded, strict=True)}
            progress(f"embedded {len(texts):,} queries: {embedder.snapshot()['texts_per_s']} texts/s")
        configs = sweep_configs(ds, embedder is not None)
        swept: list[tuple[Config, dict[str, Any]]] = []
        t0 = time.perf_counter()
        for i, cfg in enumerate(configs, 1):
            swept.append((cfg, run_config(mem, ds, cfg, vectors)))
            progress(
                f"  sweep {i}/{len(configs)} {cfg.label}: {head} {swept[-1][1]['overall'][head]:.3f} "
                f"({time.perf_counter() - t0:,.0f} s)"
            )
        report["sweep"] = [{"config": asdict(cfg), **res} for cfg, res in swept]
        print()
        print(f"sweep ({ds.describe}); d = change vs hybrid with current defaults")
        print(sweep_table(ds, swept))
    return mem


# -- relevance floor (issue #14) -------------------------------------------------------


def query_vectors(mem: Any, ds: Dataset, cache: Path | None) -> dict[str, list[float]]:
    """Query vectors by query id, embedded once and kept in ``cache`` (a JSON file) between runs."""
    if mem.embedder is None:
        return {}
    wanted = {q.qid: q.text for q in ds.queries}
    stored: dict[str, Any] = {}
    if cache is not None and cache.exists():
        stored = json.loads(cache.read_text())
        if stored.get("embedder") != mem.embedder.name:
            stored = {}
    vectors = {qid: v for qid, (text, v) in stored.get("vectors", {}).items() if wanted.get(qid) == text}
    todo = [q for q in ds.queries if q.qid not in vectors]
    if todo:
        progress(f"embedding {len(todo):,} queries")
        for start in range(0, len(todo), 64):
            chunk = todo[start : start + 64]
            for q, vec in zip(chunk, mem.embedder.embed_batch([q.text for q in chunk]), strict=True):
                vectors[q.qid] = [float(x) for x in vec]
        if cache is not None:
            old = stored.get("vectors", {}) if stored else {}
            old.update({q.qid: (q.text, vectors[q.qid]) for q in todo})
            cache.write_text(json.dumps({"embedder": mem.embedder.name, "vectors": old}))
    return vectors


def foreign_namespaces(ds: Dataset) -> dict[str, tuple[str, ...]]:
    """Each question's namespace in the abstention measure: the next conversation's (sorted), never its own."""
    spaces = sorted({q.namespace for q in ds.queries} | {d.namespace for d in ds.docs})
    nxt = {ns: spaces[(i + 1) % len(spaces)] for i, ns in enumerate(spaces)}
    return {q.qid: nxt[q.namespace] for q in ds.queries}


def abstention_rows(
    mem: Any, ds: Dataset, modes: Sequence[str], vectors: dict[str, list[float]]
) -> list[dict[str, Any]]:
    """Per mode, floor on and off: the real questions (hit@10, MRR) and the same ones asked elsewhere (empty)."""
    foreign = foreign_namespaces(ds) if ds.name == "locomo" else None
    rows = []
    for mode in modes:
        for floor in (True, False):
            real = run_recall(mem, ds, mode, vectors=vectors, floor=floor)
            row: dict[str, Any] = {"mode": mode, "floor": floor, "real": real}
            if foreign is not None:
                row["foreign"] = run_recall(mem, ds, mode, vectors=vectors, floor=floor, namespace_of=foreign)
            rows.append(row)
    return rows


def abstention_table(ds: Dataset, rows: list[dict[str, Any]]) -> str:
    head = ds.headline
    mrr = "mrr@20" if ds.name == "locomo" else "recall@100"
    off = {r["mode"]: r["real"]["overall"][head] for r in rows if not r["floor"]}
    out = []
    for r in rows:
        o = r["real"]["overall"]
        foreign = r.get("foreign")
        out.append(
            [
                f"{r['mode']} floor {'on' if r['floor'] else 'off'}",
                f3(o[head]),
                f3(o[mrr]),
                f"{o[head] - off[r['mode']]:+.3f}",
                f3(r["real"]["empty"]),
                f3(r["real"]["below_floor_per_query"]),
                "-" if foreign is None else f3(foreign["empty"]),
            ]
        )
    headers = ["recall", head, mrr, f"d {head} vs off", "empty (own)", "below_floor/q", "empty (other conv.)"]
    return format_table(headers, out)


@dataclass(slots=True)
class FloorSetting:
    noise: float
    common_share: float
    names: bool = True

    @property
    def label(self) -> str:
        return f"noise {self.noise:.2f}, common {self.common_share:.2f}, names {'on' if self.names else 'off'}"


@dataclass(slots=True)
class Seen:
    """One question's floor-off answer, with what the floor looks at, for replaying floor settings offline."""

    query: Query
    hits: list[tuple[str, float | None, list[str], bool]]  # key, similarity, matched, found lexically
    content: list[str]
    share: dict[str, float]  # word -> share of the scope's items containing it (words that alone support a hit)
    absent_names: bool


def observe(
    mem: Any, ds: Dataset, vectors: dict[str, list[float]], namespace_of: dict[str, tuple[str, ...]] | None
) -> list[Seen]:
    """Hybrid (or lexical) recall with the floor off, plus the scope counts the floor would ask for."""
    from memlane.domain.search import rank, relevance

    mode = "hybrid" if mem.embedder is not None else "lexical"
    within_of: dict[tuple[str, ...], Any] = {}
    out = []
    for q in ds.queries:
        ns = q.namespace if namespace_of is None else namespace_of[q.qid]
        vec = vectors.get(q.qid)
        env = mem.recall(q.text, mode=mode, namespace_prefix=ns, limit=ds.limit, embedding=vec, floor=False)
        within = within_of.setdefault(ns, [ns])
        content = relevance.content_terms(rank.terms(q.text))
        supports = ([w for w in h.matched if w in content] for h in env.hits)
        singles = {words[0] for words in supports if len(words) == 1}
        total, df = mem.store.document_counts(sorted(singles), within, 1_000_000)
        named = relevance.names(q.text)
        absent = bool(named) and not any(mem.store.document_counts(named, within, 1)[1].values())
        hits = [(hit_key(h), h.similarity, list(h.matched), "lexical" in h.ranks) for h in env.hits]
        out.append(Seen(q, hits, content, {w: df.get(w, 0) / max(total, 1) for w in singles}, absent))
    return out


def replay(ds: Dataset, seen: list[Seen], st: FloorSetting) -> dict[str, Any]:
    """The floor's rules (memlane.domain.search.relevance.clears) applied offline to observed answers."""
    from memlane.domain.search import relevance

    per_query = []
    empty = 0
    for s in seen:
        kept = []
        for key, sim, matched, lexical in s.hits:
            if st.names and s.absent_names:
                ok = sim is not None and sim >= max(st.noise, relevance.STRONG)
                ok = ok or sum(1 for w in matched if w in s.content) >= relevance.ABSENT_NAME_WORDS
            elif sim is not None and sim >= st.noise:
                ok = True
            else:
                words = [w for w in matched if w in s.content]
                if not words:
                    ok = lexical and not matched and bool(s.content)
                elif len(words) >= 2 or len(s.content) <= 1:
                    ok = True
                else:
                    df_share = s.share.get(words[0], 0.0)
                    ok = df_share < st.common_share
            if ok:
                kept.append(key)
        empty += not kept
        per_query.append((s.query, score(ds, kept, s.query.gold)))
    out = aggregate(ds, per_query)
    out["empty"] = round(empty / len(seen), 4)
    return out


def floor_sweep(
    mem: Any, ds: Dataset, vectors: dict[str, list[float]], settings: Sequence[FloorSetting]
) -> list[dict[str, Any]]:
    """Floor settings replayed over one floor-off pass (own namespace and, for LoCoMo, another conversation's)."""
    own = observe(mem, ds, vectors, None)
    other = observe(mem, ds, vectors, foreign_namespaces(ds)) if ds.name == "locomo" else None
    rows = []
    for st in settings:
        row: dict[str, Any] = {"setting": asdict(st), "label": st.label, "real": replay(ds, own, st)}
        if other is not None:
            row["foreign"] = replay(ds, other, st)
        rows.append(row)
    return rows


def floor_sweep_table(ds: Dataset, rows: list[dict[str, Any]], off: float) -> str:
    head = ds.headline
    out = []
    for r in rows:
        o = r["real"]["overall"]
        line = [r["label"], f3(o[head]), f"{o[head] - off:+.3f}"]
        if "foreign" in r:
            line.append(f3(r["foreign"]["empty"]))
        out.append(line)
    headers = ["floor setting", head, f"d {head} vs floor off"] + (
        ["empty (other conv.)"] if ds.name == "locomo" else []
    )
    return format_table(headers, out)


def relevance_main(args: argparse.Namespace, mem: Any, ds: Dataset, store_dir: Path, report: dict[str, Any]) -> None:
    """``--abstention`` and ``--floor-sweep``: the relevance floor measured on the store just opened."""
    cache = store_dir / f"{ds.name.replace(':', '-')}-queries-{args.embedder}.json"
    vectors = query_vectors(mem, ds, cache)
    modes = ["hybrid", "lexical"] if mem.embedder is not None else ["lexical"]
    if args.abstention:
        rows = abstention_rows(mem, ds, modes, vectors)
        report["abstention"] = rows
        print()
        print(f"relevance floor on and off ({ds.describe}); empty (other conv.): each question asked in the next")
        print("conversation's namespace, where its answer does not exist")
        print(abstention_table(ds, rows))
        if ds.categories:
            per_cat = {f"{r['mode']} floor {'on' if r['floor'] else 'off'}": r["real"] for r in rows}
            print()
            print(category_table(ds, per_cat, ds.headline))
            print()
            print(category_table(ds, per_cat, "mrr@20"))
    if args.floor_sweep:
        off = run_recall(mem, ds, modes[0], vectors=vectors, floor=False)["overall"][ds.headline]
        settings = [
            FloorSetting(noise, share, names)
            for names in (True, False)
            for noise in (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
            for share in (0.02, 0.05, 0.1, 0.2)
        ]
        rows = floor_sweep(mem, ds, vectors, settings)
        report["floor_sweep"] = rows
        print()
        print(f"floor settings, {modes[0]} recall ({ds.describe}); floor off: {ds.headline} {off:.3f}")
        print(floor_sweep_table(ds, rows, off))


def conversation_store(args: argparse.Namespace, target: Path | str, embedder: TimedEmbedder | None) -> Any:
    """``--ingest conversation``: the LoCoMo turns written with ``add_conversation``, one call per session.

    The hook for the conversation path (issue #14): each message carries its
    speaker, text, time and ``id`` = the turn's ``dia_id``, so hits map back
    through ``metadata["message_id"]`` (see :func:`hit_key`). Returns an open
    memory, which run_modes then uses as it is.
    """
    mem = memlane.open(str(target), embedder=embedder, indexing="sync")
    if not hasattr(mem, "add_conversation"):
        mem.close()
        raise SystemExit("--ingest conversation needs a memlane with Memory.add_conversation")
    sessions: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in _jsonl(args.memories):
        sessions[(r["conversation_id"], r["session"])].append(r)
    if mem.stats().active_items == 0:
        for (conv, session), turns in sorted(sessions.items()):
            turns.sort(key=lambda r: r["turn"])
            messages = [
                {"speaker": r["speaker"], "text": locomo_turn_text(r), "at": r["session_datetime"], "id": r["dia_id"]}
                for r in turns
            ]
            mem.add_conversation(("locomo", conv), messages, session=str(session))
    return mem


def stored_vectors(mem: Any, count: int) -> Any:
    """Up to ``count`` stored item vectors of a SQLite store, as unit rows of a float32 matrix (seeded choice)."""
    import numpy as np

    rows = mem.store.connection.execute(
        "SELECT embedding FROM item_vectors ORDER BY (item_rowid * 2654435761) % 4294967296 LIMIT ?", (count,)
    ).fetchall()
    matrix = np.array([np.frombuffer(r[0], dtype="<f4") for r in rows], dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def noise_main(args: argparse.Namespace) -> int:
    """The embedder's noise level: the best cosine a query reaches over a corpus it has nothing to do with.

    LoCoMo questions are searched (vector channel, floor off, one hit) over the
    SciFact abstracts and SciFact claims over the LoCoMo turns (the best match
    chance gives a whole corpus), and each question is compared with 2,000
    stored vectors of the other corpus (what chance gives one hit: the noise
    level is this distribution's 99th percentile).
    """
    import numpy as np

    embedder = make_embedder(args.embedder)
    if embedder is None:
        raise SystemExit("noise needs an embedder")
    store_dir = Path(args.store_dir).resolve()
    store_dir.mkdir(parents=True, exist_ok=True)
    locomo = load_locomo(args.memories, args.queries, 0)
    scifact = load_beir(args.dir, args.split)
    stores = {}
    for ds, variant in ((locomo, "n0"), (scifact, args.split)):
        path = store_dir / f"{ds.name.replace(':', '-')}-{variant}-{args.embedder}.db"
        stores[ds.name], _ = open_store(ds, path, embedder, args.batch)
    best: dict[str, list[float]] = {}
    pairs: dict[str, list[float]] = {}
    for queries, corpus in ((locomo, scifact), (scifact, locomo)):
        cache = store_dir / f"{queries.name.replace(':', '-')}-queries-{args.embedder}.json"
        vectors = query_vectors(stores[queries.name], queries, cache)
        sims = []
        for q in queries.queries[: args.limit_queries]:
            vec = vectors[q.qid]
            env = stores[corpus.name].search(q.text, channels=["vector"], embedding=vec, limit=1, floor=False)
            sims.append(env.hits[0].similarity if env.hits else 0.0)
        label = f"{queries.name} questions over {corpus.name}"
        best[label] = sorted(sims)
        # one question against one random document of the other corpus: the similarity chance gives a single hit
        docs = stored_vectors(stores[corpus.name], 2000)
        qs = np.array([vectors[q.qid] for q in queries.queries[: args.limit_queries]], dtype=np.float32)
        qs /= np.linalg.norm(qs, axis=1, keepdims=True)
        pairs[label] = sorted(float(x) for x in (qs @ docs.T).ravel())
    rows = []
    for kind, table in (("best of corpus", best), ("random pair", pairs)):
        for label, sims in table.items():
            pick = [sims[min(len(sims) - 1, int(p * len(sims)))] for p in (0.5, 0.9, 0.95, 0.99, 0.999)]
            rows.append([f"{label}, {kind}", f"{len(sims):,}", *(f"{x:.3f}" for x in pick), f"{sims[-1]:.3f}"])
    print(f"cosine similarity over an unrelated corpus, embedder {args.embedder}")
    print(format_table(["queries over corpus", "n", "p50", "p90", "p95", "p99", "p99.9", "max"], rows))
    for mem in stores.values():
        mem.close()
    if args.json:
        summary = {k: {"n": len(v), "p99": v[int(0.99 * len(v))]} for k, v in pairs.items()}
        write_json(args.json, {"embedder": args.embedder, "best": best, "pairs": summary, "machine": machine_info()})
    return 0


# -- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="dataset", required=True)
    lp = sub.add_parser("locomo", help="LoCoMo conversations (one namespace per conversation)")
    lp.add_argument("--memories", required=True, help="locomo_memories.jsonl")
    lp.add_argument("--queries", required=True, help="locomo_queries.jsonl")
    lp.add_argument(
        "--neighbours",
        type=int,
        default=0,
        help="index each turn with up to N neighbouring turns of its session (a separate configuration)",
    )
    lp.add_argument(
        "--facts",
        action="store_true",
        help="evaluate the facts layer instead: sessions as documents, observations as claims, "
        "claims_and_sources_context beside search over the same turns",
    )
    lp.add_argument(
        "--observations",
        help="locomo_observations.jsonl for --facts (default: beside --memories)",
    )
    lp.add_argument(
        "--ingest",
        choices=("put", "conversation"),
        default="put",
        help="put: one item per turn (today's path); conversation: mem.add_conversation per session "
        "(needs a memlane that has it; hits map back through metadata message_id)",
    )
    np_ = sub.add_parser("noise", help="the embedder's noise level: best cosine over an unrelated corpus")
    np_.add_argument("--memories", required=True, help="locomo_memories.jsonl")
    np_.add_argument("--queries", required=True, help="locomo_queries.jsonl")
    np_.add_argument("--dir", required=True, help="the SciFact folder (BEIR layout)")
    np_.add_argument("--split", default="train", help="SciFact qrels split (default train)")
    np_.add_argument("--embedder", choices=("minilm", "minilm-numpy", "fake"), default="minilm")
    np_.add_argument("--store-dir", required=True, metavar="DIR", help="where the two stores are kept and re-used")
    np_.add_argument("--limit-queries", type=int, default=None, metavar="N")
    np_.add_argument("--batch", type=int, default=256)
    np_.add_argument("--json", metavar="OUT")
    bp = sub.add_parser("beir", help="a BEIR-layout set such as SciFact")
    bp.add_argument("--dir", required=True, help="folder with corpus.jsonl, queries.jsonl, qrels/")
    bp.add_argument("--split", default="test", help="qrels split (default test)")
    for p in (lp, bp):
        p.add_argument("--mode", choices=(*MODES, "all"), default="hybrid", help="recall mode (default hybrid)")
        p.add_argument(
            "--embedder",
            choices=("minilm", "minilm-numpy", "fake", "none"),
            default="minilm",
            help="minilm: the default (onnxruntime, int8); minilm-numpy: the float32 numpy reference",
        )
        p.add_argument("--limit-queries", type=int, default=None, metavar="N", help="evaluate only the first N")
        p.add_argument("--sweep", action="store_true", help="also run the grid of search settings")
        p.add_argument(
            "--abstention",
            action="store_true",
            help="also measure the relevance floor on and off (LoCoMo: each question asked in another conversation)",
        )
        p.add_argument("--floor-sweep", action="store_true", help="also run the grid of relevance floor settings")
        p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
        p.add_argument("--batch", type=int, default=256, help="records per put_many call (default 256)")
        p.add_argument(
            "--threads",
            type=int,
            default=None,
            help="BLAS threads for MiniLM (OPENBLAS/OMP/MKL_NUM_THREADS); 1 is much faster on a busy machine",
        )
        p.add_argument(
            "--backend",
            choices=("sqlite", "postgres"),
            default="sqlite",
            help="postgres: a fresh database on $MEMLANE_TEST_PG_URL or a throwaway pgserver (no --store-dir)",
        )
        p.add_argument(
            "--store-dir",
            metavar="DIR",
            help="keep the store in DIR (outside the repo) and re-use it when it matches; default: a temp dir",
        )
    args = ap.parse_args(argv)
    if args.dataset == "noise":
        return noise_main(args)

    if args.dataset == "locomo":
        if args.neighbours < 0:
            ap.error("--neighbours must be >= 0")
        if args.facts and (args.neighbours or args.sweep):
            ap.error("--facts indexes bare turns; it does not combine with --neighbours or --sweep")
        ds = load_locomo(args.memories, args.queries, args.neighbours)
        variant = f"n{args.neighbours}"
        if args.facts:
            if args.observations is None:
                args.observations = str(Path(args.memories).with_name("locomo_observations.jsonl"))
            variant = "facts"
    else:
        ds = load_beir(args.dir, args.split)
        variant = args.split
    if args.limit_queries is not None:
        ds.queries = ds.queries[: args.limit_queries]
        ds.categories = [c for c in ds.categories if any(q.category == c for q in ds.queries)]
    modes = list(MODES) if args.mode == "all" else [args.mode]
    if args.threads is not None:
        if args.threads < 1:
            ap.error("--threads must be >= 1")
        if "numpy" in sys.modules:
            raise RuntimeError("--threads must take effect before numpy is imported")
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    embedder = make_embedder(args.embedder)
    if embedder is None:
        modes = [m for m in modes if m != "vector"]
        if not modes:
            ap.error("--mode vector needs an embedder")
    if "lexical" not in modes:
        modes.insert(0, "lexical")  # the lexical / plain-FTS5 ratio is in every report

    progress(f"{ds.name}: {len(ds.docs):,} documents, {len(ds.queries):,} queries; {ds.describe}")
    report: dict[str, Any] = {
        "machine": machine_info(),
        "dataset": ds.name,
        "describe": ds.describe,
        "documents": len(ds.docs),
        "queries": len(ds.queries),
        "embedder": args.embedder,
        "limit": ds.limit,
        "argv": sys.argv[1:] if argv is None else argv,
        "threads": args.threads,
    }

    if args.store_dir:
        store_dir = Path(args.store_dir).resolve()
        if store_dir == REPO or REPO in store_dir.parents:
            ap.error("--store-dir must be outside the repository")
        store_dir.mkdir(parents=True, exist_ok=True)
        tmp = None
    else:
        tmp = tempfile.TemporaryDirectory(prefix="memlane-retrieval-")
        store_dir = Path(tmp.name)
    path = store_dir / f"{ds.name.replace(':', '-')}-{variant}-{args.embedder}.db"

    pg = None
    if args.backend == "postgres":
        import contextlib

        import psycopg

        from _util import pg_url_for, postgres_server

        pg = contextlib.ExitStack()
        admin = pg.enter_context(postgres_server())
        dbname = f"memlane_retrieval_{os.getpid()}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        target: Path | str = pg_url_for(admin, dbname)
        report["backend"] = "postgres"
    else:
        target = path
    try:
        if args.dataset == "locomo" and args.facts:
            mem = facts_main(args, ds, target, embedder, report)
        else:
            if args.dataset == "locomo" and args.ingest == "conversation":
                target = conversation_store(args, target, embedder)
            mem = run_modes(args, ds, target, embedder, modes, report)
            if args.abstention or args.floor_sweep:
                relevance_main(args, mem, ds, store_dir, report)
        mem.close()
    finally:
        if pg is not None:
            mem.close()
            pg.close()
        if tmp is not None:
            tmp.cleanup()

    if args.json:
        write_json(args.json, report)
        progress(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
