"""MiniLM embedding benchmark: model load time, single-text and batched throughput.

Usage::

    python bench/embed.py [--n 200] [--batch-size 8 32 64] [--json OUT]

Texts are generated deterministically (sentences drawn from a fixed word list
with a seeded RNG), aiming at ~100 word pieces each; the real mean token count,
as the model's tokenizer sees it, is reported next to the figures. Three
measurements, all in this one process:

* load: importing numpy/tokenizers, then reading the weights and tokenizer (cold,
  the first thing the process does);
* sequential: ``embed_batch([text])`` once per text, the latency an agent sees
  when it stores memories one at a time;
* batched: ``embed_batch(texts)`` over all texts with each ``--batch-size``
  (texts per forward pass, also capped at 4,096 tokens); best and median of
  ``--repeat`` interleaved rounds, since a noisy neighbour on a small machine
  only ever makes a run slower.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from typing import Any

from memlane.search.minilm import MiniLMEmbedder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Goal, fmt_num, format_table, machine_info, progress, summarize, write_json  # noqa: E402

GOAL = Goal("batched >= 50 embeddings/s at ~100 tokens", 50, higher_is_better=True)

WORDS = (
    "agent memory user project note meeting deadline budget report customer order invoice server "
    "database query index search result vector text file folder email message reply team manager "
    "design review release version feature bug fix test deploy cluster region latency error retry "
    "cache session token account password setting preference theme language timezone calendar "
    "travel flight hotel booking price discount payment refund address phone contact friend family "
    "weekend morning evening yesterday tomorrow always never often quickly carefully prefers wants "
    "needs asked said remembered forgot scheduled moved cancelled approved rejected updated created "
    "deleted shared opened closed started finished blue green large small new old first last "
    "important urgent private public local remote weekly monthly the a an of to in for with on at "
    "from by about after before because while and but or so that which who"
).split()


def make_texts(n: int, seed: int = 7) -> list[str]:
    """``n`` deterministic texts of 76-96 words in 8-16 word sentences (~100 word pieces)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        target, words = rng.randint(76, 96), 0
        sentences = []
        while words < target:
            count = min(rng.randint(8, 16), target - words)
            sentence = " ".join(rng.choice(WORDS) for _ in range(count))
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".,;!?"))
            words += count
        texts.append(" ".join(sentences))
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="texts to embed (default 200)")
    parser.add_argument(
        "--batch-size", type=int, nargs="+", default=[8, 32, 64], help="batch sizes to try (default 8 32 64)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="batched runs per batch size (default 3)")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or min(args.batch_size) < 1:
        parser.error("--n, --repeat and --batch-size must be >= 1")

    info = machine_info()
    t0 = time.perf_counter()
    import numpy
    import tokenizers

    imports_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    MiniLMEmbedder().load()
    load_s = time.perf_counter() - t0

    texts = make_texts(args.n)
    probe = MiniLMEmbedder()
    tokens = probe.token_counts(texts)
    mean_tokens = sum(tokens) / len(tokens)
    progress(f"{args.n} texts, {mean_tokens:.1f} tokens on average ({min(tokens)}-{max(tokens)})")

    probe.embed_batch(texts[:8])  # warm-up: first BLAS calls
    progress("sequential, one text per call")
    samples = []
    for text in texts:
        t0 = time.perf_counter_ns()
        probe.embed_batch([text])
        samples.append(time.perf_counter_ns() - t0)
    single = summarize(samples)
    single_rate = 1e9 * len(samples) / sum(samples)

    ms_per_text = single.mean_us / 1e3
    rows: list[list[Any]] = [
        ["sequential", 1, fmt_num(single_rate), "-", fmt_num(ms_per_text, 2), fmt_num(single_rate * mean_tokens)]
    ]
    results: dict[str, Any] = {
        "sequential": {"texts_per_s": round(single_rate, 2), "latency": single.to_dict()},
        "batched": [],
    }
    # Rounds interleave the batch sizes (rotating their order) so that drift, such as
    # another process starting, is spread over all of them instead of landing on one.
    embedders = {bs: MiniLMEmbedder(batch_size=bs) for bs in args.batch_size}
    rates: dict[int, list[float]] = {bs: [] for bs in args.batch_size}
    for embedder in embedders.values():
        embedder.embed_batch(texts[: embedder.batch_size])
    for r in range(args.repeat):
        progress(f"batched, round {r + 1}/{args.repeat}")
        order = args.batch_size[r % len(args.batch_size) :] + args.batch_size[: r % len(args.batch_size)]
        for batch_size in order:
            t0 = time.perf_counter()
            embedders[batch_size].embed_batch(texts)
            rates[batch_size].append(len(texts) / (time.perf_counter() - t0))
    best_overall = 0.0
    for batch_size in args.batch_size:
        best, median = max(rates[batch_size]), statistics.median(rates[batch_size])
        best_overall = max(best_overall, best)
        rows.append(
            ["batched", batch_size, fmt_num(best), fmt_num(median), fmt_num(1e3 / best, 2), fmt_num(best * mean_tokens)]
        )
        results["batched"].append(
            {"batch_size": batch_size, "texts_per_s_best": round(best, 2), "texts_per_s_median": round(median, 2)}
        )

    print(
        format_table(
            ["mode", "batch", "texts/s (best)", "texts/s (median)", "ms/text", "tokens/s"],
            rows,
            title=(
                f"MiniLM (all-MiniLM-L6-v2, numpy) - {args.n} texts, {mean_tokens:.1f} tokens mean, "
                f"{info['cpu_usable']} CPUs, load avg {info['loadavg_1_5_15']}"
            ),
        )
    )
    load_end = [round(x, 2) for x in os.getloadavg()]
    print(f"\nload: imports {imports_s * 1e3:.0f} ms + weights/tokenizer {load_s * 1e3:.0f} ms")
    print(f"load average at the end: {load_end} (this run's own threads count too)")
    print(f"goal: {GOAL.label}: {GOAL.status(best_overall)} ({best_overall:.1f}/s)")

    if args.json:
        write_json(
            args.json,
            {
                "benchmark": "embed",
                "machine": info,
                "loadavg_end": load_end,
                "numpy": numpy.__version__,
                "tokenizers": tokenizers.__version__,
                "env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS") if k in os.environ},
                "params": {"n": args.n, "repeat": args.repeat},
                "tokens": {"mean": round(mean_tokens, 2), "min": min(tokens), "max": max(tokens)},
                "load_ms": {"imports": round(imports_s * 1e3, 1), "model": round(load_s * 1e3, 1)},
                **results,
                "goal": {"label": GOAL.label, "value": round(best_overall, 2), "status": GOAL.status(best_overall)},
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
