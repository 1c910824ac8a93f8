"""NV-Embed's latent-attention pooling, trained on CPU, against mean pooling of the same decoder.

    flock /tmp/docsearch-heavy.lock timeout 3600 python benchmarks/nv_embed_train.py \
        [--model smollm2-135m] [--train-seconds 240] [--train-queries 150] [--test-queries 100]

Writes benchmarks/results/nv_embed_train.json and .md (--name changes the file names).
1. Training data: the train splits of ../shared/data: scifact/train (claim -> abstract) and
   qmsum train (question -> meeting). A meeting is far longer than an input, so its positive is
   the window of `--window-words` words of the labelled meeting that BM25 ranks first for the
   question; windows of the same meeting are never its negatives. Mining pool: the positives
   plus `--pool-extra` random documents / windows per data set.
2. Training (`docsearch.training.nv_embed_train`): a latent block of the release's shape (512
   latents, 8 heads; head size `--head-dim`) on the frozen bidirectional decoder (states cached),
   or with `--lora-r 16` a LoRA on the decoder as well; stage 1 (in-batch + mined hard
   negatives, positive-aware: below 0.95 x the positive), then stage 2 (own negatives only),
   under `--train-seconds`.
3. Evaluation on subsampled test splits, both poolings on the same decoder states, the same
   inputs (instruction, EOS, pool mask) and the same cut at `--eval-max-length` tokens:
   - scifact test: `--test-queries` claims over their judged abstracts plus random ones,
     `--test-docs` in all;
   - qmsum test (window proxy): `--test-queries` questions over windows: each question's
     BM25-best window of its labelled meeting is its one relevant passage, among the other
     questions' positives and random windows, `--test-docs` in all. This is a passage-level
     stand-in for meeting retrieval (a meeting is 10k words), with BM25-chosen labels.
   Metrics: nDCG@10, Recall@10, MRR@10 (`docsearch.evaluation.score_run`).
Baseline: "mean" is the same decoder, inputs and pool mask, the latent block left out
(`nv-embed` with `pooling=mean`): exactly what the trained block starts from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
WORD = re.compile(r"\w+")


# ---------------------------------------------------------------------------------------------
# Data


def words_windows(text: str, size: int) -> list[str]:
    words = text.split()
    return [" ".join(words[i : i + size]) for i in range(0, max(1, len(words)), size)]


def bm25_best(query: str, windows: Sequence[str]) -> int:
    """Index of the window BM25 (Okapi, lowercase word tokens) ranks first for `query`."""
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([WORD.findall(w.lower()) or [""] for w in windows])
    scores = bm25.get_scores(WORD.findall(query.lower()))
    return int(max(range(len(windows)), key=lambda i: scores[i]))


@dataclass
class TestSet:
    name: str
    instruction: str
    queries: dict[str, str]
    docs: dict[str, str]
    qrels: dict[str, dict[str, int]]


def sample(items: Sequence[str], n: int, rng: random.Random) -> list[str]:
    items = sorted(items)
    return items if n >= len(items) else rng.sample(items, n)


def scifact_train(n: int, extra: int, rng: random.Random) -> tuple[list[Any], list[Any]]:
    from docsearch.corpora.beir import load_beir
    from docsearch.encoders.nv_embed import TASKS, query_instruction
    from docsearch.training.nv_embed_train import Document, Example

    rset = load_beir(DATA / "scifact", "train")
    instruction = query_instruction(TASKS["scifact"])
    examples = [
        Example(rset.queries[q], rset.corpus[d].body, d, instruction)
        for q in sample(list(rset.queries), n, rng)
        for d, g in rset.qrels[q].items()
        if g > 0 and d in rset.corpus
    ]
    pool = {e.positive_id: e.positive for e in examples}
    for d in sample([d for d in rset.corpus if d not in pool], extra, rng):
        pool[d] = rset.corpus[d].body
    return examples, [Document(d, t) for d, t in pool.items()]


def scifact_test(n_queries: int, n_docs: int, rng: random.Random) -> TestSet:
    from docsearch.corpora.beir import load_beir
    from docsearch.encoders.nv_embed import TASKS, query_instruction

    rset = load_beir(DATA / "scifact", "test")
    queries = {q: rset.queries[q] for q in sample(list(rset.queries), n_queries, rng)}
    judged = {d for q in queries for d, g in rset.qrels[q].items() if g > 0 and d in rset.corpus}
    rest = sample([d for d in rset.corpus if d not in judged], max(0, n_docs - len(judged)), rng)
    docs = {d: rset.corpus[d].body for d in sorted(judged) + rest}
    qrels = {q: {d: g for d, g in rset.qrels[q].items() if d in docs} for q in queries}
    return TestSet("scifact", query_instruction(TASKS["scifact"]), queries, docs, qrels)


def qmsum_windows(split: str, n: int, size: int, rng: random.Random) -> tuple[Any, dict[str, str]]:
    """(retrieval set, query id -> id `meeting#k` of its BM25-best window)."""
    from docsearch.corpora.beir import load_beir

    rset = load_beir(DATA / "qmsum", split)
    best: dict[str, str] = {}
    for q in sample(list(rset.queries), n, rng):
        meeting = next(d for d, g in rset.qrels[q].items() if g > 0 and d in rset.corpus)
        windows = words_windows(rset.corpus[meeting].text, size)
        best[q] = f"{meeting}#{bm25_best(rset.queries[q], windows)}"
    return rset, best


def window_text(rset: Any, window_id: str, size: int) -> str:
    meeting, k = window_id.rsplit("#", 1)
    return words_windows(rset.corpus[meeting].text, size)[int(k)]


def random_windows(
    rset: Any, meetings: Sequence[str], n: int, size: int, rng: random.Random
) -> list[str]:
    counts = {m: len(words_windows(rset.corpus[m].text, size)) for m in meetings}
    every = [f"{m}#{k}" for m, c in counts.items() for k in range(c)]
    return sample(every, n, rng)


def qmsum_train(n: int, extra: int, size: int, rng: random.Random) -> tuple[list[Any], list[Any]]:
    from docsearch.encoders.nv_embed import TASKS, query_instruction
    from docsearch.training.nv_embed_train import Document, Example

    rset, best = qmsum_windows("train", n, size, rng)
    instruction = query_instruction(TASKS["qmsum"])
    examples = [
        Example(rset.queries[q], window_text(rset, w, size), w.rsplit("#", 1)[0], instruction)
        for q, w in best.items()
    ]  # positive_id = the meeting: its other windows are never negatives
    meetings = sorted({e.positive_id for e in examples})
    pool = [Document(e.positive_id, e.positive) for e in examples]
    pool += [
        Document(w.rsplit("#", 1)[0], window_text(rset, w, size))
        for w in random_windows(rset, meetings, extra, size, rng)
    ]
    return examples, pool


def qmsum_test(n_queries: int, n_docs: int, size: int, rng: random.Random) -> TestSet:
    from docsearch.encoders.nv_embed import TASKS, query_instruction

    rset, best = qmsum_windows("test", n_queries, size, rng)
    meetings = sorted({w.rsplit("#", 1)[0] for w in best.values()})
    positives = set(best.values())
    extra = [w for w in random_windows(rset, meetings, n_docs, size, rng) if w not in positives]
    ids = sorted(positives) + extra[: max(0, n_docs - len(positives))]
    docs = {w: window_text(rset, w, size) for w in ids}
    queries = {q: rset.queries[q] for q in best}
    qrels = {q: {w: 1} for q, w in best.items()}
    return TestSet("qmsum (window proxy)", query_instruction(TASKS["qmsum"]), queries, docs, qrels)


# ---------------------------------------------------------------------------------------------
# Evaluation


def score(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    try:
        from docsearch.evaluation import score_run
    except ImportError:  # the evaluation module is newer than this script's first version
        return {"ndcg@10": own_ndcg10(run, qrels)}
    means, _ = score_run(run, qrels)
    return {k: round(v, 4) for k, v in means.items() if k in ("ndcg@10", "recall@10", "mrr@10")}


def own_ndcg10(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> float:
    total = 0.0
    for q, judged in qrels.items():
        dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(run[q][:10]))
        ideal = sorted(judged.values(), reverse=True)[:10]
        total += dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return round(total / len(qrels), 4)


def ranking(embed: Any, test: TestSet, batch_size: int) -> dict[str, list[str]]:
    """query id -> document ids by cosine, best first (top 100)."""
    from docsearch.training.nv_embed_train import embed_all

    doc_ids = list(test.docs)
    docs = embed_all(embed, [test.docs[d] for d in doc_ids], "", batch_size)
    q_ids = list(test.queries)
    queries = embed_all(embed, [test.queries[q] for q in q_ids], test.instruction, batch_size)
    top = (queries @ docs.T).topk(min(100, len(doc_ids)), dim=1).indices.tolist()
    return {q: [doc_ids[j] for j in row] for q, row in zip(q_ids, top, strict=True)}


def evaluate(args: argparse.Namespace, tests: Sequence[TestSet], adapter: Path) -> dict[str, Any]:
    """Both poolings per test set; one pass of the base decoder when it was frozen."""
    from docsearch.encoders.llm2vec import load_decoder
    from docsearch.encoders.nv_embed import NVEmbedEncoder, load_adapter_latent, load_nv_tokenizer
    from docsearch.encoders.weights import resolve_model
    from docsearch.training.nv_embed_train import StateCache, cached_embed

    folder = resolve_model(args.model)
    cache = StateCache(
        load_decoder(folder),
        load_nv_tokenizer(folder, None),
        args.eval_max_length,
        torch.float32,
        args.batch_size,
    )
    baseline = cached_embed(cache, None)
    if args.lora_r > 0:  # the decoder changed too: run the trained encoder itself
        encoder = NVEmbedEncoder(
            args.model,
            adapter=str(adapter),
            max_length=args.eval_max_length,
            batch_size=args.batch_size,
        )
        trained = encoder.embed
    else:
        trained = cached_embed(cache, load_adapter_latent(adapter, torch.float32).eval())
    out: dict[str, Any] = {}
    for test in tests:
        started = time.perf_counter()
        mean = score(ranking(baseline, test, args.batch_size), test.qrels)
        latent = score(ranking(trained, test, args.batch_size), test.qrels)
        out[test.name] = {
            "queries": len(test.queries), "documents": len(test.docs),
            "mean": mean, "nv_embed": latent, "seconds": round(time.perf_counter() - started, 1),
        }  # fmt: skip
        print(f"{test.name}: mean {mean}  nv-embed {latent}", file=sys.stderr)
    return out


# ---------------------------------------------------------------------------------------------
# Run and report


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--train-seconds", type=float, default=240.0)
    p.add_argument("--train-queries", type=int, default=150, help="per data set")
    p.add_argument(
        "--pool-extra", type=int, default=50, help="random mining candidates per data set"
    )
    p.add_argument("--test-queries", type=int, default=100, help="per data set")
    p.add_argument("--test-docs", type=int, default=200, help="per data set")
    p.add_argument("--window-words", type=int, default=120)
    p.add_argument("--max-length", type=int, default=128, help="training tokens per input")
    p.add_argument("--eval-max-length", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--stage1-steps", type=int, default=1000)
    p.add_argument("--stage2-steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument(
        "--head-dim", type=int, default=None, help="default: hidden / heads (72 on SmolLM2)"
    )
    p.add_argument("--lora-r", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: fastest on a shared 2-core box)"
    )
    p.add_argument("--out", default=None, help="keep the trained adapter here")
    p.add_argument("--name", default="nv_embed_train")
    return p.parse_args()


class Progress:
    """The stage names and every tenth step's loss, on stderr."""

    def status(self, message: str) -> None:
        print(message, file=sys.stderr)

    def step(self, report: Any) -> None:
        if report.step % 10 == 0:
            print(f"step {report.step}: loss {report.loss:.4f}", file=sys.stderr)


def train(args: argparse.Namespace, out: Path) -> tuple[Any, dict[str, int]]:
    from docsearch.training.nv_embed_train import TrainConfig, train_nv_embed

    rng = random.Random(args.seed)
    sci, sci_pool = scifact_train(args.train_queries, args.pool_extra, rng)
    qms, qms_pool = qmsum_train(args.train_queries, args.pool_extra, args.window_words, rng)
    hidden_heads = 8
    config = TrainConfig(
        max_length=args.max_length, batch_size=args.batch_size, negatives=args.negatives,
        stage1_steps=args.stage1_steps, stage2_steps=args.stage2_steps, lr=args.lr,
        lora_r=args.lora_r, heads=hidden_heads, head_dim=args.head_dim, seed=args.seed,
        max_seconds=args.train_seconds,
    )  # fmt: skip
    if config.head_dim is None:  # hidden / heads keeps the block cheap on CPU (release: hidden)
        from docsearch.encoders.nv_embed import read_json
        from docsearch.encoders.weights import resolve_model

        config.head_dim = (
            int(read_json(resolve_model(args.model) / "config.json")["hidden_size"]) // hidden_heads
        )

    result = train_nv_embed(
        args.model,
        [*sci, *qms],
        out,
        documents=[*sci_pool, *qms_pool],
        config=config,
        reporter=Progress(),
    )
    sizes = {
        "scifact_examples": len(sci),
        "qmsum_examples": len(qms),
        "pool": len(sci_pool) + len(qms_pool),
    }
    return result, sizes


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# NV-Embed latent-attention pooling trained on CPU vs mean pooling (same frozen decoder)",
        "",
        f"{report['date']}; {report['machine']}; torch {report['torch']}",
        "",
        f"Command: `{report['command']}`",
        "",
        "| test set | queries | docs | mean nDCG@10 | NV-Embed nDCG@10 | mean R@10 | NV-Embed R@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in report["results"].items():
        m, n = row["mean"], row["nv_embed"]
        lines.append(
            f"| {name} | {row['queries']} | {row['documents']} | {m['ndcg@10']:.4f} | "
            f"{n['ndcg@10']:.4f} | {m.get('recall@10', float('nan')):.4f} | {n.get('recall@10', float('nan')):.4f} |"
        )
    t = report["training"]
    lines += [
        "",
        f"Training: {t['examples']} examples ({t['sizes']}), steps {t['steps_done']}, "
        f"seconds {t['seconds']}; total wall time {report['seconds']:.0f} s.",
        "",
        "Settings: " + ", ".join(f"{k}={v}" for k, v in report["settings"].items()),
        "",
        "Baseline `mean`: the same bidirectional decoder, inputs and pool mask without the latent "
        "block. The qmsum set is a window-level proxy with BM25-chosen labels (see the script).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse()
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="nv-embed-train-") as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "adapter"
        result, sizes = train(args, out)
        rng = random.Random(args.seed + 1)
        tests = [
            scifact_test(args.test_queries, args.test_docs, rng),
            qmsum_test(args.test_queries, args.test_docs, args.window_words, rng),
        ]
        results = evaluate(args, tests, out)
    training = result.settings["training"]
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "torch": torch.__version__,
        "command": "python benchmarks/nv_embed_train.py " + " ".join(sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "name")},
        "training": {
            "examples": training["examples"],
            "sizes": sizes,
            "steps_done": training["steps_done"],
            "seconds": {k: round(v, 1) for k, v in training["seconds"].items()},
            "loss_first_last": [result.losses[:5], result.losses[-5:]],
            "head_dim": training["head_dim"],
        },  # fmt: skip
        "results": results,
        "seconds": time.perf_counter() - started,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
