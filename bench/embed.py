"""Embedder benchmark: the default embedder against the numpy MiniLM, same texts, same run.

Usage::

    python bench/embed.py [--embedders minilm minilm-numpy] [--n 200] [--batch-size 32]
                          [--repeat 3] [--blas-threads N] [--json OUT]

Texts are generated deterministically (sentences drawn from a fixed word list
with a seeded RNG) in two sets: **short** (~30 word pieces, a typical memory)
and **long** (~100 word pieces); the real mean token count, as the model's
tokenizer sees it, is reported. For each set and each embedder, in this one
process:

* load: reading and checking the model (the first thing each embedder does);
* single: ``embed_batch([text])`` once per text, the latency an agent sees
  when it stores memories one at a time;
* batch: ``embed_batch(texts)`` over all texts with each ``--batch-size``.

Every measurement runs ``--repeat`` rounds; rounds interleave the embedders
(rotating their order), so a noisy neighbour on a small machine slows all of
them alike. Reported: best and median texts/s, CPU-seconds per text (all
threads), and the first embedder's rate over each other's (the goal: 3x the
numpy MiniLM in every row). The first embedder's vectors are compared with the
others' (cosine per text).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Goal, fmt_num, format_table, machine_info, progress, write_json  # noqa: E402

GOAL = Goal("default embedder >= 3x the numpy MiniLM's texts/s (every row)", 3.0, higher_is_better=True)

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

# words per text for each set; word pieces come out about 1.25x the words
SETS = {"short": (20, 28), "long": (76, 96)}


def make_texts(n: int, seed: int = 7, words: tuple[int, int] = SETS["long"]) -> list[str]:
    """``n`` deterministic texts of ``words`` words in 8-16 word sentences."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        target, count_so_far = rng.randint(*words), 0
        sentences = []
        while count_so_far < target:
            count = min(rng.randint(8, 16), target - count_so_far)
            sentence = " ".join(rng.choice(WORDS) for _ in range(count))
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".,;!?"))
            count_so_far += count
        texts.append(" ".join(sentences))
    return texts


def _timed(fn: Any) -> tuple[float, float]:
    """(wall, cpu) seconds of ``fn()``; cpu counts every thread of this process."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--embedders",
        nargs="+",
        default=["minilm", "minilm-numpy"],
        help="registered embedder names; the first is compared with the others (default minilm minilm-numpy)",
    )
    parser.add_argument("--n", type=int, default=200, help="texts per set (default 200)")
    parser.add_argument("--single", type=int, default=50, help="texts embedded one at a time per round (default 50)")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[32], help="batch sizes to try (default 32)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per measurement (default 3)")
    parser.add_argument(
        "--blas-threads", type=int, help="set OPENBLAS/OMP/MKL_NUM_THREADS (numpy MiniLM) before numpy loads"
    )
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.single < 1 or min(args.batch_size) < 1:
        parser.error("--n, --single, --repeat and --batch-size must be >= 1")
    if args.blas_threads is not None:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.blas_threads)

    from memlane.domain.search.embedders import get_embedder

    info = machine_info()
    names: list[str] = args.embedders
    load_ms: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        get_embedder(name).load()  # type: ignore[attr-defined]
        load_ms[name] = (time.perf_counter() - t0) * 1e3

    results: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    worst_ratio = float("inf")
    for set_name, words in SETS.items():
        texts = make_texts(args.n, seed=7 if set_name == "long" else 11, words=words)
        tokens = get_embedder(names[0]).token_counts(texts)  # type: ignore[attr-defined]
        mean_tokens = sum(tokens) / len(tokens)
        progress(f"{set_name}: {args.n} texts, {mean_tokens:.1f} word pieces on average ({min(tokens)}-{max(tokens)})")

        # (mode, batch) -> name -> list of (texts/s, cpu s per text)
        modes = [("single", 1)] + [("batch", bs) for bs in args.batch_size]
        rates: dict[tuple[str, int], dict[str, list[tuple[float, float]]]] = {m: {n: [] for n in names} for m in modes}
        embedders = {(n, bs): get_embedder(n) for n in names for bs in args.batch_size}
        for (_, bs), e in embedders.items():
            e.batch_size = bs  # type: ignore[attr-defined]
            e.embed_batch(texts[:bs])  # warm-up
        singles = {n: get_embedder(n) for n in names}
        first = {n: singles[n].embed_batch(texts) for n in names}  # type: ignore[attr-defined]
        for r in range(args.repeat):
            progress(f"{set_name}: round {r + 1}/{args.repeat}")
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                part = texts[: args.single]
                wall, cpu = _timed(lambda e=singles[name], p=part: [e.embed_batch([t]) for t in p])
                rates[("single", 1)][name].append((len(part) / wall, cpu / len(part)))
                for bs in args.batch_size:
                    wall, cpu = _timed(lambda e=embedders[(name, bs)], t=texts: e.embed_batch(t))
                    rates[("batch", bs)][name].append((len(texts) / wall, cpu / len(texts)))

        agreement = {}
        for name in names[1:]:
            pairs = zip(first[names[0]], first[name], strict=True)
            cos = [sum(a * b for a, b in zip(u, v, strict=True)) for u, v in pairs]
            agreement[name] = {"min": round(min(cos), 5), "mean": round(statistics.fmean(cos), 5)}

        for mode, bs in modes:
            base = max(r for r, _ in rates[(mode, bs)][names[0]])
            for name in names:
                best = max(r for r, _ in rates[(mode, bs)][name])
                median = statistics.median(r for r, _ in rates[(mode, bs)][name])
                cpu_ms = 1e3 * min(c for _, c in rates[(mode, bs)][name])
                speedup = base / best if name != names[0] else None
                if speedup is not None:
                    worst_ratio = min(worst_ratio, speedup)
                rows.append(
                    [
                        set_name,
                        f"{mode} {bs}" if mode == "batch" else mode,
                        name,
                        fmt_num(best),
                        fmt_num(median),
                        fmt_num(cpu_ms, 2),
                        "-" if speedup is None else f"{speedup:.2f}x",
                    ]
                )
                results.append(
                    {
                        "set": set_name,
                        "mean_tokens": round(mean_tokens, 1),
                        "mode": mode,
                        "batch_size": bs,
                        "embedder": name,
                        "texts_per_s_best": round(best, 2),
                        "texts_per_s_median": round(median, 2),
                        "cpu_ms_per_text": round(cpu_ms, 3),
                        "first_over_this": None if speedup is None else round(speedup, 2),
                    }
                )
        for name, agree in agreement.items():
            progress(f"{set_name}: cosine {names[0]} vs {name}: min {agree['min']}, mean {agree['mean']}")
            results.append({"set": set_name, "agreement": name, **agree})

    print(
        format_table(
            ["set", "mode", "embedder", "texts/s (best)", "texts/s (median)", "CPU ms/text", f"{names[0]} / this"],
            rows,
            title=f"embedders, {args.n} texts per set, {info['cpu_usable']} CPUs, load avg {info['loadavg_1_5_15']}",
        )
    )
    load_end = [round(x, 2) for x in os.getloadavg()]
    print("\nload: " + ", ".join(f"{n} {ms:.0f} ms" for n, ms in load_ms.items()))
    print(f"load average at the end: {load_end} (this run's own threads count too)")
    if len(names) > 1:
        print(f"goal: {GOAL.label}: {GOAL.status(worst_ratio)} (lowest {worst_ratio:.2f}x)")

    if args.json:
        import numpy

        write_json(
            args.json,
            {
                "benchmark": "embed",
                "machine": info,
                "loadavg_end": load_end,
                "numpy": numpy.__version__,
                "env": {
                    k: os.environ[k]
                    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
                    if k in os.environ
                },
                "params": {"n": args.n, "single": args.single, "repeat": args.repeat, "embedders": names},
                "load_ms": {n: round(ms, 1) for n, ms in load_ms.items()},
                "results": results,
                "goal": {
                    "label": GOAL.label,
                    "value": round(worst_ratio, 2) if len(names) > 1 else None,
                    "status": GOAL.status(worst_ratio) if len(names) > 1 else "n/a",
                },
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
