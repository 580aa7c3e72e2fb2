"""The relevance decision: fit it on development data, check it on data it never saw.

Usage::

    # the paraphrase probe as a user meets it: notes written with put, questions through recall and search
    python bench/relevance.py probe [--split dev|heldout|all] [--embedder minilm] [--indexing background]

    # gather each hit's evidence (decision off) on every set, then fit and report
    python bench/relevance.py collect --locomo-store DIR/locomo-n0-minilm.db \\
        --queries ../shared/data/locomo/locomo_queries.jsonl \\
        [--scifact-store DIR/beir-scifact-n0-minilm.db --scifact ../shared/data/scifact] --out evidence.json
    python bench/relevance.py fit --evidence evidence.json [--json OUT]

    # issue #38: the generated conversations' evidence per question; the decision replayed with and without the
    # name rule on collected evidence (collect --generated --scifact-vectors ...)
    python bench/relevance.py explain [--embedder minilm] [--json OUT]
    python bench/relevance.py rules --evidence evidence.json [--standout 0.2 0.3] [--json OUT]

    # put then search at once (background indexing): latency and found, the search's catch-up on and off
    python bench/relevance.py freshness [--rounds 40]

    # LoCoMo through recall as an agent calls it, on the fitting and the held-out conversations
    python bench/relevance.py locomo --locomo-store DIR/locomo-n0-minilm.db [--json OUT]

    # a LoCoMo store of some conversations written with add_conversation under any embedder (see EMBEDDERS)
    python bench/relevance.py build --embedder shifted:minilm --convs conv-26 conv-30 --out DIR/s.db
    python bench/relevance.py locomo --locomo-store DIR/s.db --embedder shifted:minilm --convs conv-26 conv-30

Embedders (``--embedder``; ``probe`` takes several, comma-separated): ``minilm``
(the default), ``shifted:NAME`` (NAME's vectors plus one shared direction, so
different texts score 0.7-0.85 cosine, as older API embedders do), ``fake``,
``none`` (lexical only: a base install), ``trigram`` (a caller's own
embedder, written here as a caller writes one: hashed character trigrams), and
``noisy:NAME[:LEVEL]`` (NAME's vectors plus a fixed random vector per text,
LEVEL times as long, default 1.0: a weaker model of meaning, trusted in part).

Sets (see docs/benchmarks.md, "Relevance decision"):

* ``paraphrase``: ``bench/data/paraphrase.json``, memlane's own probe: short
  notes of four people, questions that name what a note holds in other words,
  and questions nothing answers. ``dev`` may be fitted on; ``heldout`` never is.
* ``locomo``: the LoCoMo turns written with ``add_conversation`` (build the store
  with ``bench/retrieval.py locomo --ingest conversation --store-dir DIR``).
  Conversations conv-26, conv-30 and conv-41 are for fitting, conv-42 and
  conv-43 are held out. Each question is asked in its own conversation (its
  gold turns are the positives) and in another conversation of the same part,
  where nothing can answer it (every hit is a negative).
* ``scifact``: claims against abstracts (train qrels), a check only: the
  decision must not cost nDCG@10.

Labels: a gold hit is relevant, every hit of a question asked where its answer
does not exist is not; other hits of a real question are left out of the fit
(they are often related, and no label says whether they answer).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memlane  # noqa: E402
from memlane.domain.search import relevance  # noqa: E402

HERE = Path(__file__).resolve().parent
PARAPHRASE = HERE / "data" / "paraphrase.json"
LOCOMO_FIT = ("conv-26", "conv-30", "conv-41")
LOCOMO_HELDOUT = ("conv-42", "conv-43")
LIMIT = 20
FEATURES = {
    "vector": ("similarity", "standout", "coverage", "rarity", "absent", "absent_similarity"),
    "lexical": ("coverage", "rarity", "absent"),
}


# An experiment of issue #38, not shipped: words-only evidence plus `held` (the plain share of the query's content
# words the hit holds; a word every item holds, as a conversation's speaker, weighs nothing in coverage), fitted by
# `fit` with that feature, its threshold the most abstention on the fitting conversations that keeps their hit@10
# and SciFact's even half. `--words-model held` (locomo, probe, conversations) runs the decision with it.
HELD_MODEL = relevance.Model(
    bias=-4.532,
    weights={"coverage": 4.897, "rarity": 3.406, "absent": -6.691, "held": 8.796},
    threshold=0.50,
    companion=0.10,
)


def use_words_model(name: str) -> None:
    """Swap the words-only decision for the experiment ``name`` (``shipped`` leaves it as it is)."""
    if name == "shipped":
        return
    original = relevance.Judge.evidence

    def evidence(self: relevance.Judge, hit: Any) -> dict[str, float]:
        out = original(self, hit)
        held = [w for w in self.held(hit) if w in self.content]
        out["held"] = round(len(set(held)) / len(self.content), 4) if self.content else 0.0
        return out

    relevance.Judge.evidence = evidence  # type: ignore[method-assign]
    relevance.LEXICAL_MODEL = HELD_MODEL


class Shifted:
    """NAME's vectors plus one shared direction: unrelated texts score high, as older API embedders' do."""

    def __init__(self, inner: Any, weight: float = 1.6) -> None:
        self.inner, self.weight = inner, weight
        self.name = f"shifted-{inner.name}"
        self.dimension = inner.dimension

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        vecs = np.asarray(self.inner.embed_batch(texts), dtype=np.float64)
        moved = vecs + self.weight / math.sqrt(self.dimension)
        return (moved / np.linalg.norm(moved, axis=1, keepdims=True)).tolist()  # type: ignore[no-any-return]


class Trigram:
    """A caller's own embedder, as a caller writes one: hashed character trigrams of the lowercase text."""

    name = "trigram"
    dimension = 256

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        import zlib

        out = []
        for text in texts:
            vec = [0.0] * self.dimension
            padded = f"  {text.lower()}  "
            for i in range(len(padded) - 2):
                vec[zlib.crc32(padded[i : i + 3].encode()) % self.dimension] += 1.0
            norm = math.sqrt(sum(x * x for x in vec)) or 1.0
            out.append([x / norm for x in vec])
        return out


class Noisy:
    """NAME's vectors plus a random vector fixed per text: what they say is still there, under noise."""

    def __init__(self, inner: Any, level: float = 1.0) -> None:
        self.inner, self.level = inner, level
        self.name = f"noisy-{inner.name}-{level:g}"
        self.dimension = inner.dimension

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        import hashlib

        import numpy as np

        vecs = np.asarray(self.inner.embed_batch(texts), dtype=np.float64)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        for row, text in zip(vecs, texts, strict=True):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            noise = np.random.default_rng(seed).standard_normal(self.dimension)
            row += self.level * noise / np.linalg.norm(noise)
        return (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).tolist()  # type: ignore[no-any-return]


def make_embedder(spec: str) -> Any:
    """An embedder from a bench spec (see the module docstring): a name memlane knows, or one of the above."""
    from memlane.domain.search.embedders import resolve_embedder

    if spec == "none":
        return None
    if spec.startswith("shifted:"):
        return Shifted(resolve_embedder(spec.split(":", 1)[1]))
    if spec == "trigram":
        return Trigram()
    if spec.startswith("noisy:"):
        name, _, level = spec.split(":", 1)[1].partition(":")
        return Noisy(resolve_embedder(name), float(level or 1.0))
    return spec


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def status_of(env: Any) -> str:
    """The envelope's status (a memlane before issue #24 has none: an empty answer said "nothing")."""
    return str(getattr(env, "status", "found" if env.hits else "nothing_relevant"))


# -- the paraphrase probe ------------------------------------------------------------------


def paraphrase_users(split: str) -> list[dict[str, Any]]:
    data = json.loads(PARAPHRASE.read_text(encoding="utf-8"))["splits"]
    return [u for name, users in data.items() if split in (name, "all") for u in users]


def write_notes(mem: Any, users: Sequence[dict[str, Any]]) -> None:
    for user in users:
        for note in user["notes"]:
            mem.put(tuple(user["namespace"]), note["key"], note["text"])


def probe(args: argparse.Namespace) -> dict[str, Any]:
    """The paraphrase probe (and the plain examples) once per embedder of ``--embedder`` (comma-separated)."""
    use_words_model(args.words_model)
    specs = [e for e in args.embedder.split(",") if e]
    if len(specs) == 1:
        return probe_one(args, specs[0])
    return {spec: probe_one(args, spec) for spec in specs}


# plain examples written for this bench (not from any data set): notes as a user writes them, each with a question
# it answers in other or the same words, and questions nothing here answers
EXAMPLES: dict[str, Any] = {
    "notes": {
        "car": "I drive a blue Subaru Outback, bought second hand in 2019.",
        "deploy": "We deploy the billing service every Friday after noon.",
        "travel": "Flying to Lisbon in May for my sister's wedding, back on the 14th.",
        "diet": "Vegetarian since 2020, but I still eat eggs and cheese.",
        "cat": "Our cat Miso hides under the bed when the vacuum runs.",
        "work": "Backend engineer at a logistics startup since March.",
    },
    "questions": {
        "what car do I drive?": "car",
        "deploy": "deploy",
        "what are my travel plans?": "travel",
        "do I eat meat?": "diet",
        "what is my pet's name?": "cat",
        "where do I work?": "work",
    },
    "unrelated": [
        "what is the boiling point of mercury?",
        "who painted the Sistine chapel ceiling?",
        "how many moons does Neptune have?",
        "recommend a thriller novel",
    ],
}


def examples(mem: Any) -> dict[str, Any]:
    ns = ("bench", "examples")
    for key, text in EXAMPLES["notes"].items():
        mem.put(ns, key, text)
    found = [
        q
        for q, key in EXAMPLES["questions"].items()
        if key in [h.key for h in mem.recall(q, namespace_prefix=ns).hits][:3]
    ]
    empty = [q for q in EXAMPLES["unrelated"] if status_of(mem.recall(q, namespace_prefix=ns)) == "nothing_relevant"]
    return {
        "found_in_top3": f"{len(found)}/{len(EXAMPLES['questions'])}",
        "missed": [q for q in EXAMPLES["questions"] if q not in found],
        "unrelated_nothing_relevant": f"{len(empty)}/{len(EXAMPLES['unrelated'])}",
    }


def probe_one(args: argparse.Namespace, spec: str) -> dict[str, Any]:
    """Every paraphrase question must find its note in the top 3; every unrelated one must come back empty."""
    users = paraphrase_users(args.split)
    out: dict[str, Any] = {"split": args.split, "embedder": spec, "indexing": args.indexing, "surfaces": {}}
    with tempfile.TemporaryDirectory(prefix="memlane-probe-") as tmp:
        mem = memlane.open(str(Path(tmp) / "probe.db"), embedder=make_embedder(spec), indexing=args.indexing)
        write_notes(mem, users)  # background: the first searches embed their scope first (read-your-writes)
        for surface in ("recall", "search"):
            found = unrelated_empty = 0
            misses: list[str] = []
            leaks: list[str] = []
            statuses: dict[str, int] = defaultdict(int)
            paraphrases = unrelated = 0
            for user in users:
                ns = tuple(user["namespace"])
                ask = mem.recall if surface == "recall" else mem.search
                for q in user["queries"]:
                    env = ask(q["q"], namespace_prefix=ns, limit=10)
                    keys = [h.key for h in env.hits if surface == "recall" or getattr(h, "relevant", True)][:3]
                    paraphrases += 1
                    if q["answer"] in keys:
                        found += 1
                    else:
                        misses.append(f"{q['q']!r} -> {q['answer']} ({q['kind']}); got {keys}")
                for text in user["unrelated"]:
                    env = ask(text, namespace_prefix=ns, limit=10)
                    unrelated += 1
                    statuses[status_of(env)] += 1
                    if status_of(env) == "nothing_relevant":
                        unrelated_empty += 1
                    else:
                        leaks.append(f"{text!r}: {[(h.key, getattr(h, 'relevance', None)) for h in env.hits][:3]}")
            out["surfaces"][surface] = {
                "paraphrases_in_top3": f"{found}/{paraphrases}",
                "unrelated_nothing_relevant": f"{unrelated_empty}/{unrelated}",
                "misses": misses,
                "leaks": leaks,
                "statuses_of_unrelated": dict(statuses),
            }
        out["examples"] = examples(mem)
        progress(
            f"probe {spec}: "
            + json.dumps({k: v for k, v in out["surfaces"]["recall"].items() if "/" in str(v)})
            + f" examples {out['examples']}"
        )
        mem.close()
    return out


# conversations written for this bench (not from any data set): two pairs of speakers chatting about the same
# topics, generated from templates; each question asked in its own conversation (found?) and in the other one, where
# the speaker it names never spoke (empty?). A check built unlike LoCoMo: short questions, short turns, one topic each.
TOPICS = {
    "hiking": "went hiking on the {p} trail with {c}",
    "recipe": "cooked a new recipe with {f} for {c}",
    "concert": "saw a concert by {b} at the {p} hall",
    "painting": "finished a painting of the {p} harbour",
    "marathon": "signed up for the {p} marathon with {c}",
    "garden": "planted {f} in the garden",
    "guitar": "practised guitar with {c} all evening",
    "museum": "visited the {p} museum with {c}",
}
ASKED = {
    "hiking": "go hiking on the trail",
    "recipe": "cook a new recipe",
    "concert": "see the concert at the hall",
    "painting": "finish the painting of the harbour",
    "marathon": "sign up for the marathon",
    "garden": "plant in the garden",
    "guitar": "practise guitar",
    "museum": "visit the museum",
}


def chat(speakers: Sequence[str], seed: int, turns: int = 300) -> list[dict[str, str]]:
    import random

    rnd = random.Random(seed)
    places, company = ["north", "river", "old", "city", "lake", "hill"], ["my cousin", "a friend", "the kids"]
    foods, bands = ["lentils", "basil", "squash", "mushrooms"], ["a jazz trio", "an indie band", "the choir"]
    replies = ["Nice!", "How was it?", "Sounds fun.", "Really? Tell me more.", "Good for you."]
    out = []
    for i in range(turns):
        topic = TOPICS[rnd.choice(list(TOPICS))]
        text = "I " + topic.format(
            p=rnd.choice(places), c=rnd.choice(company), f=rnd.choice(foods), b=rnd.choice(bands)
        )
        out.append({"speaker": speakers[i % 2], "text": rnd.choice(replies) if rnd.random() < 0.5 else text + "."})
    return out


def write_chats(mem: Any) -> list[tuple[str, str]]:
    """The two generated conversations written into namespaces ``a`` and ``b``; their questions ``(home, text)``."""
    people = {"a": ("Maya", "Leo"), "b": ("Tom", "Ana")}
    for i, (ns, speakers) in enumerate(people.items()):
        mem.add_conversation(ns, chat(speakers, i + 1), session="s1", at="2024-05-01T10:00:00Z")
    questions = [(ns, f"When did {n} {v}?") for ns, pair in people.items() for n in pair for v in ASKED.values()]
    questions += [
        (ns, f"Who did {n} {v} with?") for ns, pair in people.items() for n in pair for v in list(ASKED.values())[:3]
    ]
    return questions


def conversations(args: argparse.Namespace) -> dict[str, Any]:
    """Questions about two generated conversations, each asked at home (found) and in the other one (empty)."""
    use_words_model(args.words_model)
    mem = memlane.open(":memory:", embedder=make_embedder(args.embedder), indexing="sync")
    questions = write_chats(mem)
    if args.lowercase:  # as a user who types no capitals asks: the question names nothing (rank.names)
        questions = [(ns, q.lower()) for ns, q in questions]
    out: dict[str, Any] = {
        "embedder": args.embedder,
        "words_model": args.words_model,
        "questions": len(questions),
        "lowercase": args.lowercase,
    }
    for mode in ("hybrid", "lexical") if mem.embedder is not None else ("lexical",):
        found = sum(mem.recall(q, namespace_prefix=ns, mode=mode).status == "found" for ns, q in questions)
        empty = sum(
            mem.recall(q, namespace_prefix="b" if ns == "a" else "a", mode=mode).status == "nothing_relevant"
            for ns, q in questions
        )
        out[mode] = {"found_at_home": f"{found}/{len(questions)}", "empty_elsewhere": f"{empty}/{len(questions)}"}
    mem.close()
    return out


def freshness(args: argparse.Namespace) -> dict[str, Any]:
    """Put then search at once, background indexing: write and search latency, and how often the item is found.

    Subjects, interleaved per round: the search embedding its scope's waiting items first (the default
    ``CatchUp``) and the same with it off (``CatchUp(items=0)``: the behaviour before issue #24).
    """
    import statistics

    out: dict[str, Any] = {"rounds": args.rounds, "embedder": args.embedder}
    with tempfile.TemporaryDirectory(prefix="memlane-fresh-") as tmp:
        mem = memlane.open(str(Path(tmp) / "fresh.db"), embedder=args.embedder)  # background indexing
        mem.put_many([{"namespace": "warm", "key": f"w{i}", "value": f"warm-up note {i}"} for i in range(8)])
        mem.wait_indexed()
        samples: dict[str, dict[str, list[float]]] = {
            s: {"put_ms": [], "search_ms": [], "found": []} for s in ("catch_up", "off")
        }
        for i in range(args.rounds):
            for subject in ("catch_up", "off") if i % 2 else ("off", "catch_up"):
                mem.catch_up = memlane.CatchUp() if subject == "catch_up" else memlane.CatchUp(items=0)
                ns = ("fresh", subject, str(i))
                text = f"the {subject} courier delivered parcel {i} to the harbour office"
                t0 = time.perf_counter()
                mem.put(ns, "note", text)
                t1 = time.perf_counter()
                env = mem.search(text, namespace_prefix=ns, channels=["vector"])
                t2 = time.perf_counter()
                samples[subject]["put_ms"].append((t1 - t0) * 1000)
                samples[subject]["search_ms"].append((t2 - t1) * 1000)
                samples[subject]["found"].append(1.0 if env.hits else 0.0)
        mem.close()
    for subject, s in samples.items():
        out[subject] = {
            "put_p50_ms": round(statistics.median(s["put_ms"]), 2),
            "search_p50_ms": round(statistics.median(s["search_ms"]), 2),
            "search_p90_ms": round(sorted(s["search_ms"])[int(0.9 * len(s["search_ms"]))], 2),
            "found_by_vector_at_once": round(sum(s["found"]) / len(s["found"]), 3),
        }
    return out


# -- evidence -------------------------------------------------------------------------------


@contextmanager
def recording() -> Iterator[list[tuple[str, dict[str, float], bool, dict[str, Any]]]]:
    """Capture the evidence the decision reads for every hit it judges: ``(item id, features, vector_ran, raw)``.

    ``raw`` is what the features are made of (the scope's size and the query words' document counts, the words
    the hit holds, its similarity and the query's profile, each read on the reference scale), so a rule built
    from other features can be replayed without searching again (``rules``).
    """
    seen: list[tuple[str, dict[str, float], bool, dict[str, Any]]] = []
    original = relevance.Judge.judge

    def spy(self: relevance.Judge, hit: Any) -> relevance.Verdict:
        seen.append((hit.item.id, self.evidence(hit), self.vector_ran, raw_evidence(self, hit)))
        return original(self, hit)

    relevance.Judge.judge = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        relevance.Judge.judge = original  # type: ignore[method-assign]


def raw_evidence(judge: relevance.Judge, hit: Any) -> dict[str, Any]:
    """What a hit's features are made of (see ``recording``)."""
    rows, dfs = judge.scope()
    read = judge.scale.read if judge.scale is not None else (lambda s: s)
    sim = judge.similarity(hit) if judge.vector_ran else None
    return {
        "content": list(judge.content),
        "rows": rows,
        "dfs": {w: dfs.get(w, 0) for w in judge.content},
        "held": sorted(set(judge.held(hit)) & set(judge.content)),
        "holds_all": judge.holds_all(hit),
        "sim": None if sim is None else round(read(sim), 4),
        "mean": None if judge.vector_mean is None else round(read(judge.vector_mean), 4),
        "noise": judge.noise,
    }


def hit_key(hit: Any) -> str:
    return str(hit.item.metadata.get("message_id", hit.item.key))


def observe(
    mem: Any,
    rows: list[dict[str, Any]],
    *,
    dataset: str,
    part: str,
    qid: str,
    text: str,
    ns: Sequence[str],
    gold: frozenset[str] | None,
    mode: str,
    embedding: Sequence[float] | None = None,
) -> None:
    """One search, decision off: each hit's evidence, rank and label (gold / elsewhere / unlabelled)."""
    channels = ("lexical", "vector") if mode == "hybrid" else ("lexical",)
    with recording() as seen:
        env = mem.search(
            text,
            namespace_prefix=tuple(ns),
            limit=LIMIT,
            channels=channels,
            embedding=embedding if mode == "hybrid" else None,
        )
    evidence = {item_id: features for item_id, features, _, _ in seen}
    raw = {item_id: r for item_id, _, _, r in seen}
    for rank, hit in enumerate(env.hits, 1):
        key = hit_key(hit)
        label = None if gold is None else (1 if key in gold else None)
        if part.endswith("elsewhere"):
            label = 0
        rows.append(
            {
                "dataset": dataset,
                "part": part,
                "qid": qid,
                "mode": mode,
                "rank": rank,
                "key": key,
                "label": label,
                "gold": key in gold if gold else False,
                "features": evidence[hit.item.id],
                "raw": raw[hit.item.id],
            }
        )
    rows.append(
        {
            "dataset": dataset,
            "part": part,
            "qid": qid,
            "mode": mode,
            "rank": 0,
            "gold_count": len(gold or ()),
            "text": text,
        }
    )


def collect(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    modes = tuple(args.modes)
    with tempfile.TemporaryDirectory(prefix="memlane-evidence-") as tmp:
        mem = memlane.open(str(Path(tmp) / "probe.db"), embedder=args.embedder, indexing="sync")
        for split in ("dev", "heldout"):
            users = paraphrase_users(split)
            write_notes(mem, users)
            for user in users:
                ns = tuple(user["namespace"])
                for mode in modes:
                    for i, q in enumerate(user["queries"]):
                        observe(
                            mem,
                            rows,
                            dataset="paraphrase",
                            part=split,
                            qid=f"{ns[-1]}:q{i}",
                            text=q["q"],
                            ns=ns,
                            gold=frozenset([q["answer"]]),
                            mode=mode,
                        )
                    for i, text in enumerate(user["unrelated"]):
                        observe(
                            mem,
                            rows,
                            dataset="paraphrase",
                            part=f"{split}-elsewhere",
                            qid=f"{ns[-1]}:u{i}",
                            text=text,
                            ns=ns,
                            gold=None,
                            mode=mode,
                        )
        mem.close()
    progress(f"paraphrase: {len(rows)} rows")
    if args.generated:
        mem = memlane.open(":memory:", embedder=args.embedder, indexing="sync")
        for i, (home, text) in enumerate(write_chats(mem)):
            for mode in modes:
                for part, ns in (("check", home), ("check-elsewhere", "b" if home == "a" else "a")):
                    observe(
                        mem,
                        rows,
                        dataset="generated",
                        part=part,
                        qid=f"g{i}",
                        text=text,
                        ns=(ns,),
                        gold=None,
                        mode=mode,
                    )
        mem.close()
        progress(f"generated: {len(rows)} rows")
    if args.locomo_store:
        mem = memlane.open(args.locomo_store, embedder=args.embedder, indexing="sync")
        queries = [json.loads(line) for line in open(args.queries, encoding="utf-8") if line.strip()]
        for part, convs in (("fit", LOCOMO_FIT), ("heldout", LOCOMO_HELDOUT)):
            elsewhere = {c: convs[(i + 1) % len(convs)] for i, c in enumerate(convs)}
            for q in queries:
                conv = q["conversation_id"]
                if conv not in convs or not q.get("evidence_ids"):
                    continue
                gold = frozenset(e.split(":", 1)[1] for e in q["evidence_ids"] if e.startswith(conv + ":"))
                for mode in modes:
                    observe(
                        mem,
                        rows,
                        dataset="locomo",
                        part=part,
                        qid=q["id"],
                        text=q["question"],
                        ns=("locomo", conv),
                        gold=gold,
                        mode=mode,
                    )
                    observe(
                        mem,
                        rows,
                        dataset="locomo",
                        part=f"{part}-elsewhere",
                        qid=q["id"],
                        text=q["question"],
                        ns=("locomo", elsewhere[conv]),
                        gold=None,
                        mode=mode,
                    )
            progress(f"locomo {part}: {len(rows)} rows")
        mem.close()
    if args.scifact_store:
        from retrieval import load_beir

        ds = load_beir(args.scifact, "train")
        mem = memlane.open(args.scifact_store, embedder=args.embedder, indexing="sync")
        # the claims' vectors embedded once (bench/fusion.py's file): the hybrid rows need no model run
        vectors = json.loads(Path(args.scifact_vectors).read_text())["vectors"] if args.scifact_vectors else {}
        for q in ds.queries[: args.scifact_queries]:
            for mode in modes if q.qid in vectors else [m for m in modes if m == "lexical"]:
                observe(
                    mem,
                    rows,
                    dataset="scifact",
                    # even ids may guard a choice (see HELD_MODEL), odd ids are never looked at to choose
                    part="dev" if int(q.qid) % 2 == 0 else "check",
                    qid=q.qid,
                    text=q.text,
                    ns=("scifact",),
                    gold=q.gold,
                    mode=mode,
                    embedding=vectors[q.qid][1] if q.qid in vectors else None,
                )
        mem.close()
        progress(f"scifact: {len(rows)} rows")
    Path(args.out).write_text(json.dumps(rows), encoding="utf-8")
    progress(f"wrote {len(rows)} rows to {args.out}")
    return 0


def locomo(args: argparse.Namespace) -> dict[str, Any]:
    """LoCoMo through ``recall`` as an agent calls it (the decision on): hit@10 at home, empty answers elsewhere."""
    use_words_model(args.words_model)
    mem = memlane.open(args.locomo_store, embedder=make_embedder(args.embedder), indexing="sync")
    queries = [json.loads(line) for line in open(args.queries, encoding="utf-8") if line.strip()]
    out: dict[str, Any] = {}
    parts = (("chosen", tuple(args.convs)),) if args.convs else (("fit", LOCOMO_FIT), ("heldout", LOCOMO_HELDOUT))
    for part, convs in parts:
        elsewhere = {c: convs[(i + 1) % len(convs)] for i, c in enumerate(convs)}
        for mode in args.modes:
            hits = empty_home = empty_away = questions = 0
            statuses: dict[str, int] = defaultdict(int)
            for q in queries:
                conv = q["conversation_id"]
                if conv not in convs or not q.get("evidence_ids"):
                    continue
                gold = frozenset(e.split(":", 1)[1] for e in q["evidence_ids"] if e.startswith(conv + ":"))
                floor = False if args.no_floor else None
                home = mem.recall(q["question"], namespace_prefix=("locomo", conv), limit=LIMIT, mode=mode, floor=floor)
                away = mem.recall(
                    q["question"], namespace_prefix=("locomo", elsewhere[conv]), limit=LIMIT, mode=mode, floor=floor
                )
                questions += 1
                hits += any(hit_key(h) in gold for h in home.hits[:10])
                empty_home += not home.hits
                empty_away += not away.hits
                statuses[status_of(away)] += 1
            out[f"{part}:{mode}"] = {
                "questions": questions,
                "hit@10": round(hits / questions, 4),
                "empty_at_home": round(empty_home / questions, 4),
                "empty_elsewhere": round(empty_away / questions, 4),
                "statuses_elsewhere": dict(statuses),
            }
            progress(f"locomo {part} {mode}: {out[f'{part}:{mode}']}")
    mem.close()
    return out


def build(args: argparse.Namespace) -> int:
    """The turns of ``--convs`` written with ``add_conversation`` (as ``bench/retrieval.py --ingest conversation``)."""
    from retrieval import locomo_turn_text  # type: ignore[import-not-found]

    mem = memlane.open(args.out, embedder=make_embedder(args.embedder), indexing="sync")
    sessions: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for line in open(args.memories, encoding="utf-8"):
        r = json.loads(line)
        if r["conversation_id"] in args.convs:
            sessions[(r["conversation_id"], r["session"])].append(r)
    started = time.perf_counter()
    for (conv, session), turns in sorted(sessions.items()):
        turns.sort(key=lambda r: r["turn"])
        messages = [
            {"speaker": r["speaker"], "text": locomo_turn_text(r), "at": r["session_datetime"], "id": r["dia_id"]}
            for r in turns
        ]
        mem.add_conversation(("locomo", conv), messages, session=str(session))
    progress(f"built {args.out}: {mem.stats().active_items} turns in {time.perf_counter() - started:.0f} s")
    mem.close()
    return 0


# -- fit and replay ---------------------------------------------------------------------------


def fit_logistic(x: Any, y: Any, w: Any, l2: float = 1.0, steps: int = 50) -> Any:
    """Weighted L2-regularised logistic regression by Newton's method (column 0 is the intercept, not penalised)."""
    import numpy as np

    beta = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -50, 50)))
        grad = x.T @ (w * (p - y)) + penalty * beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def replay(rows: list[dict[str, Any]], model: relevance.Model, mode: str) -> dict[str, dict[str, float]]:
    """Per (dataset, part): the decision applied to the recorded hits, as recall would apply it."""
    by_query: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["mode"] == mode:
            by_query[(r["dataset"], r["part"], r["qid"])].append(r)
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (dataset, part, _), hits in by_query.items():
        gold_count = next(h["gold_count"] for h in hits if h["rank"] == 0)
        hits = sorted((h for h in hits if h["rank"]), key=lambda h: h["rank"])
        probability = [model.probability(h["features"]) for h in hits]
        found = any(p >= model.threshold for p in probability)  # as Judge.settle decides an answer
        kept = [h for h, p in zip(hits, probability, strict=True) if found and p >= model.companion]
        name = f"{dataset}:{part}"
        for label, ranked in (("on", kept), ("off", hits)):
            out[name][f"empty_{label}"].append(0.0 if ranked else 1.0)
            if dataset == "scifact":
                dcg = sum(1 / math.log2(i + 1) for i, h in enumerate(ranked[:10], 1) if h["gold"])
                idcg = sum(1 / math.log2(i + 1) for i in range(1, min(gold_count, 10) + 1)) or 1.0
                out[name][f"ndcg10_{label}"].append(dcg / idcg)
            elif dataset == "paraphrase":
                out[name][f"top3_{label}"].append(1.0 if any(h["gold"] for h in ranked[:3]) else 0.0)
            else:
                out[name][f"hit10_{label}"].append(1.0 if any(h["gold"] for h in ranked[:10]) else 0.0)
    return {
        name: {metric: round(sum(v) / len(v), 4) for metric, v in metrics.items()}
        | {"questions": len(next(iter(metrics.values())))}
        for name, metrics in sorted(out.items())
    }


def fit(args: argparse.Namespace) -> int:
    import numpy as np

    rows = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    report: dict[str, Any] = {}
    for mode, kind in (("hybrid", "vector"), ("lexical", "lexical")):
        names = FEATURES[kind]
        train = [
            r
            for r in rows
            if r["mode"] == mode
            and r["rank"]
            and r["label"] is not None
            and (
                (r["dataset"] == "paraphrase" and r["part"].startswith("dev"))
                or (r["dataset"] == "locomo" and r["part"].startswith("fit"))
            )
        ]
        x = np.array([[1.0] + [r["features"].get(n, 0.0) for n in names] for r in train])
        y = np.array([float(r["label"]) for r in train])
        # each question weighs the same whatever its number of hits, and the two sets weigh alike
        per_q: dict[tuple[str, str, str], int] = defaultdict(int)
        for r in train:
            per_q[(r["dataset"], r["part"], r["qid"])] += 1
        sets = defaultdict(int)
        for key in per_q:
            sets[key[0]] += 1
        w = np.array([1.0 / per_q[(r["dataset"], r["part"], r["qid"])] / sets[r["dataset"]] for r in train])
        w *= len(train) / w.sum()
        beta = fit_logistic(x, y, w, l2=args.l2)
        best = None
        fitting = [r for r in rows if r["part"] in ("dev", "dev-elsewhere", "fit", "fit-elsewhere")]
        weights = dict(zip(names, map(float, beta[1:]), strict=True))
        for threshold in np.arange(0.30, 0.96, 0.02):
            for companion in (0.2, 0.1, 0.05, 0.02, 0.0):  # on a tie the more selective
                model = relevance.Model(float(beta[0]), weights, round(float(threshold), 2), companion)
                res = replay(fitting, model, mode)
                para, para_else = res.get("paraphrase:dev", {}), res.get("paraphrase:dev-elsewhere", {})
                loc, loc_else = res.get("locomo:fit", {}), res.get("locomo:fit-elsewhere", {})
                # on the fitting data only: LoCoMo hit@10 may lose at most 0.015 against no decision; within that,
                # the most abstention (LoCoMo asked elsewhere, unrelated paraphrase questions) and paraphrases found
                kept = loc.get("hit10_on", 0) >= loc.get("hit10_off", 0) - 0.015
                quality = (
                    loc_else.get("empty_on", 0)
                    + para.get("top3_on", 0)
                    + para_else.get("empty_on", 0)
                    + loc.get("hit10_on", 0)
                )
                # when no setting keeps LoCoMo's hit@10 that close (words alone): the most hits among the settings
                # that abstain on 3 of 4 questions asked elsewhere
                fallback = (
                    loc.get("hit10_on", 0) if loc_else.get("empty_on", 0) >= 0.75 else loc_else.get("empty_on", 0) - 1
                )
                score = (1.0 if kept else 0.0, quality if kept else fallback)
                if best is None or score > best[0]:
                    best = (score, model)
        assert best is not None
        model = best[1]
        report[mode] = {
            "model": {
                "bias": round(model.bias, 3),
                "weights": {k: round(v, 3) for k, v in model.weights.items()},
                "threshold": round(model.threshold, 2),
                "companion": model.companion,
            },
            "train_rows": len(train),
            "results": replay(rows, model, mode),
            "results_current": replay(
                rows, relevance.VECTOR_MODEL if kind == "vector" else relevance.LEXICAL_MODEL, mode
            ),
        }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")
    return 0


# -- issue #38: abstention beyond LoCoMo ------------------------------------------------------------


def explain(args: argparse.Namespace) -> dict[str, Any]:
    """Each generated-conversation question, at home and asked in the other conversation: why it is judged so.

    Per question: the status, the scope's document counts of its content words, its similarity profile (best,
    mean and lowest of its nearest, on the reference scale) and the strongest hit's evidence and text.
    """
    seen: list[tuple[Any, Any, Any]] = []
    original = relevance.Judge.judge

    def spy(self: relevance.Judge, hit: Any) -> relevance.Verdict:
        verdict = original(self, hit)
        seen.append((self, hit, verdict))
        return verdict

    relevance.Judge.judge = spy  # type: ignore[method-assign]
    mem = memlane.open(":memory:", embedder=make_embedder(args.embedder), indexing="sync")
    out: dict[str, Any] = {"embedder": args.embedder, "questions": []}
    try:
        for home, text in write_chats(mem):
            for where, ns in (("home", home), ("elsewhere", "b" if home == "a" else "a")):
                seen.clear()
                env = mem.recall(text, namespace_prefix=ns)
                row: dict[str, Any] = {"q": text, "asked": where, "status": env.status}
                if seen:
                    judge, hit, verdict = max(seen, key=lambda s: s[2].probability)
                    rows, dfs = judge.scope()
                    row["scope"] = {"rows": rows, "df": {w: dfs.get(w, 0) for w in judge.content}}
                    if judge.vector_ran and judge._profile:
                        read = judge.scale.read if judge.scale is not None else (lambda x: x)
                        sims = [read(x) for x in judge._profile.values()]
                        row["profile"] = {
                            "best": round(max(sims), 3),
                            "mean": round(sum(sims) / len(sims), 3),
                            "lowest": round(min(sims), 3),
                        }
                    row["strongest"] = {
                        "p": verdict.probability,
                        "evidence": judge.evidence(hit),
                        "held": judge.held(hit),
                        "why": verdict.why,
                        "text": hit.item.text[:100],
                    }
                out["questions"].append(row)
                progress(f"{where:9s} {env.status:16s} {text}")
    finally:
        relevance.Judge.judge = original  # type: ignore[method-assign]
        mem.close()
    return out


def _decide(
    hits: list[dict[str, Any]], text: str, mode: str, rule: str, standout: float, rarity: float
) -> list[dict[str, Any]]:
    """The decision replayed on one search's recorded hits: the model, every query word held, then ``rule``.

    ``rule``: ``none`` (the model alone, as before #38's name rule), ``names`` (the shipped rule on the query's
    names: relevance.Judge.unanswered_names), ``absent`` (the same rule on any absent content word, case-free).
    """
    from memlane.domain.search.rank import names

    model = relevance.VECTOR_MODEL if mode == "hybrid" else relevance.LEXICAL_MODEL
    named = names(text)
    probabilities, verdicts = [], []
    for h in hits:
        raw, f = h["raw"], h["features"]
        p = model.probability(f)
        relevant = p >= model.threshold or raw["holds_all"]
        words = [w for w in raw["content"] if rule == "absent" or w in named]
        missing = [w for w in words if raw["dfs"].get(w, 0) == 0]
        if (
            relevant
            and rule != "none"
            and missing
            and raw["rows"] >= relevance.IDF_MIN_ROWS
            and not (rule == "names" and set(words) & set(raw["held"]))
            and f.get("rarity", 0.0) < rarity
            and not (mode == "hybrid" and f.get("standout", 0.0) >= standout)
        ):
            relevant = False
        probabilities.append(p)
        verdicts.append(relevant)
    found = any(verdicts)
    return [h for h, p, r in zip(hits, probabilities, verdicts, strict=True) if r or (found and p >= model.companion)]


def rules(args: argparse.Namespace) -> dict[str, Any]:
    """Replay the decision with and without the name rule on evidence gathered by ``collect`` (decision off)."""
    rows = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    searches: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    texts: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["dataset"], r["part"], r["qid"], r["mode"])
        if r["rank"] == 0:
            texts[key] = r
        else:
            searches[key].append(r)
    out: dict[str, Any] = {}
    for mode in ("hybrid", "lexical"):
        for rule in ("none", "names", "absent"):
            for standout in args.standout if mode == "hybrid" and rule != "none" else [math.inf]:
                metrics: dict[str, list[float]] = defaultdict(list)
                for key, meta in texts.items():
                    if key[3] != mode:
                        continue
                    hits = sorted(searches.get(key, []), key=lambda h: h["rank"])
                    kept = _decide(hits, meta.get("text", ""), mode, rule, standout, args.rarity)
                    name = f"{key[0]}:{key[1]}"
                    if key[1].endswith("elsewhere"):
                        metrics[f"{name} empty"].append(0.0 if kept else 1.0)
                    elif key[0] == "scifact":
                        gold = meta["gold_count"]
                        dcg = sum(1 / math.log2(i + 1) for i, h in enumerate(kept[:10], 1) if h["gold"])
                        idcg = sum(1 / math.log2(i + 1) for i in range(1, min(gold, 10) + 1)) or 1.0
                        metrics[f"{name} ndcg@10"].append(dcg / idcg)
                    elif key[0] == "paraphrase":
                        metrics[f"{name} top3"].append(1.0 if any(h["gold"] for h in kept[:3]) else 0.0)
                    elif key[0] == "locomo":
                        metrics[f"{name} hit@10"].append(1.0 if any(h["gold"] for h in kept[:10]) else 0.0)
                    else:
                        metrics[f"{name} found"].append(1.0 if kept else 0.0)
                label = f"{mode} {rule}" + ("" if math.isinf(standout) else f" standout>={standout}")
                out[label] = {m: round(sum(v) / len(v), 4) for m, v in sorted(metrics.items())}
                progress(f"{label}: {out[label]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="the paraphrase probe through recall and search")
    p.add_argument("--split", choices=("dev", "heldout", "all"), default="all")
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--indexing", choices=("background", "sync"), default="background")
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--words-model", choices=("shipped", "held"), default="shipped")
    cv = sub.add_parser("conversations", help="generated conversations: found at home, empty in the other one")
    cv.add_argument("--embedder", default="none")
    cv.add_argument("--words-model", choices=("shipped", "held"), default="shipped")
    cv.add_argument("--json", metavar="OUT")
    cv.add_argument("--lowercase", action="store_true", help="ask every question in lowercase")
    ex = sub.add_parser("explain", help="generated conversations: each question's evidence, at home and elsewhere")
    ex.add_argument("--embedder", default="minilm")
    ex.add_argument("--json", metavar="OUT")
    ru = sub.add_parser("rules", help="replay the decision with and without the name rule on collected evidence")
    ru.add_argument("--evidence", required=True)
    ru.add_argument("--standout", type=float, nargs="+", default=[getattr(relevance, "NAME_STANDOUT", 0.3)])
    ru.add_argument("--rarity", type=float, default=getattr(relevance, "NAME_RARITY", 0.5))
    ru.add_argument("--json", metavar="OUT")
    c = sub.add_parser("collect", help="record each hit's evidence with the decision off")
    c.add_argument("--embedder", default="minilm")
    c.add_argument("--locomo-store", help="a store built by bench/retrieval.py locomo --ingest conversation")
    c.add_argument("--queries", default="../shared/data/locomo/locomo_queries.jsonl")
    c.add_argument("--scifact-store", help="a store built by bench/retrieval.py beir --dir ... --store-dir")
    c.add_argument("--scifact", default="../shared/data/scifact")
    c.add_argument("--scifact-queries", type=int, default=None, metavar="N")
    c.add_argument("--scifact-vectors", help="the claims' vectors (bench/fusion.py's file): SciFact hybrid rows too")
    c.add_argument("--generated", action="store_true", help="the generated conversations too (never fitted on)")
    c.add_argument("--modes", nargs="+", default=["hybrid", "lexical"], choices=("hybrid", "lexical"))
    c.add_argument("--out", required=True)
    fr = sub.add_parser("freshness", help="put then search at once: latency and found, search catch-up on and off")
    fr.add_argument("--rounds", type=int, default=40)
    fr.add_argument("--embedder", default="minilm")
    fr.add_argument("--json", metavar="OUT")
    lo = sub.add_parser("locomo", help="LoCoMo through recall: hit@10 at home, empty answers elsewhere, per part")
    lo.add_argument("--locomo-store", required=True)
    lo.add_argument("--queries", default="../shared/data/locomo/locomo_queries.jsonl")
    lo.add_argument("--embedder", default="minilm")
    lo.add_argument("--modes", nargs="+", default=["hybrid", "lexical"])
    lo.add_argument("--convs", nargs="+", help="these conversations only (one part), each asked in the next one")
    lo.add_argument("--no-floor", action="store_true", help="the same recalls without the decision (floor=False)")
    lo.add_argument("--words-model", choices=("shipped", "held"), default="shipped")
    b = sub.add_parser("build", help="a LoCoMo store of some conversations, written with add_conversation")
    b.add_argument("--embedder", default="minilm")
    b.add_argument("--memories", default="../shared/data/locomo/locomo_memories.jsonl")
    b.add_argument("--convs", nargs="+", required=True)
    b.add_argument("--out", required=True)
    lo.add_argument("--json", metavar="OUT")
    f = sub.add_parser("fit", help="fit the decision on the development rows and replay it on every set")
    f.add_argument("--evidence", required=True)
    f.add_argument("--l2", type=float, default=1.0)
    f.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    if args.command == "probe":
        out = probe(args)
        text = json.dumps(out, indent=1)
        print(text)
        if args.json:
            Path(args.json).write_text(text, encoding="utf-8")
        return 0
    if args.command == "collect":
        return collect(args)
    if args.command == "build":
        return build(args)
    if args.command in ("locomo", "freshness", "conversations", "explain", "rules"):
        run = {
            "locomo": locomo,
            "freshness": freshness,
            "conversations": conversations,
            "explain": explain,
            "rules": rules,
        }[args.command]
        text = json.dumps(run(args), indent=1)
        print(text)
        if args.json:
            Path(args.json).write_text(text, encoding="utf-8")
        return 0
    return fit(args)


if __name__ == "__main__":
    raise SystemExit(main())
