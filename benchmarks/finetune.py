"""Does `docsearch finetune` help? Before/after nDCG@10 of the offline default encoder, OPL vs MNRL.

    flock /tmp/docsearch-heavy.lock timeout 3000 python benchmarks/finetune.py --dataset scifact
    (also --dataset qmsum, --dataset scisummnet; --dry-run prints sample pairs and sizes only)

Per dataset, on seeded CPU-sized samples of ../shared/data (all-MiniLM-L6-v2, packaged):
- qmsum: train on the train split (query -> the BM25-best window of its meeting); evaluate the
  test queries of a sample of test meetings, over those meetings plus random others.
- scifact: train on scifact/train; evaluate the test queries over a sampled corpus.
- scisummnet: no labels. The sampled papers are written out as .txt files and the encoder is
  trained on pseudo-queries made from their text only (headings -> sections, sentences ->
  their windows); evaluated with the title2paper queries over the same papers.
"Before" is measured once per dataset. Each loss gets the same pairs and negatives and the same
training-time budget (`--minutes`; the learning-rate decay is aimed at the deadline).
Writes benchmarks/results/finetune.json (one entry per dataset, merged) and finetune.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from docsearch.corpora.beir import RetrievalSet, load_beir
from docsearch.training.finetune import CHECKPOINTS, FinetuneJob, finetune
from docsearch.training.loop import StepReport
from docsearch.training.trainer import TrainSettings

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DATA = REPO.parent / "shared" / "data"
ENCODER, MODEL = "sentence-transformers", "all-MiniLM-L6-v2"


class Printer:
    """Status lines and one progress line every 20 s, on stdout (this is a script)."""

    def __init__(self) -> None:
        self.last = 0.0

    def status(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    def step(self, r: StepReport) -> None:
        if time.monotonic() - self.last > 20 or r.step == r.total:
            self.last = time.monotonic()
            print(f"  step {r.step}/{r.total} loss {r.loss:.4f} (mean {r.mean_loss:.4f}) "
                  f"lr {r.lr:.1e} {r.seconds:.0f} s", flush=True)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Evaluation sets


def keep_queries(rset: RetrievalSet, qids: set[str], note: str) -> RetrievalSet:
    queries = {q: t for q, t in rset.queries.items() if q in qids}
    qrels = {q: r for q, r in rset.qrels.items() if q in qids}
    return replace(rset, queries=queries, qrels=qrels, notes=[*rset.notes, note])


def qmsum_eval(meetings: int, extra: int, seed: int, data: Path = DATA / "qmsum") -> RetrievalSet:
    """Test queries of `meetings` sampled test meetings, over them plus `extra` other meetings."""
    rset = load_beir(data, "test")
    chosen = set(random.Random(seed).sample(sorted(rset.judged()), meetings))
    qids = {q for q in rset.queries if {d for d, g in rset.qrels[q].items() if g > 0} <= chosen}
    rset = keep_queries(rset, qids, f"test queries of {meetings} sampled test meetings")
    return rset.subsample(meetings + extra, seed)


def scifact_eval(max_docs: int, seed: int) -> RetrievalSet:
    return load_beir(DATA / "scifact", "test").subsample(max_docs, seed)


def title2paper_eval(queries: int, extra: int, seed: int) -> RetrievalSet:
    rset = load_beir(DATA / "scisummnet-acl" / "title2paper", "test")
    qids = set(random.Random(seed).sample(sorted(rset.queries), queries))
    rset = keep_queries(rset, qids, f"{queries} sampled title2paper queries")
    return rset.subsample(len(rset.judged()) + extra, seed)


def write_papers(rset: RetrievalSet, folder: Path) -> Path:
    """The evaluation corpus as plain .txt files: the unlabelled folder a user would have."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc in rset.corpus.values():
        (folder / f"{doc.id}.txt").write_text(doc.text, encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------
# Runs


def plan(args: argparse.Namespace, work: Path) -> tuple[Path, RetrievalSet, dict[str, Any]]:
    """(training source, evaluation set, job keywords) for the chosen dataset."""
    if args.dataset == "qmsum":
        rset = qmsum_eval(args.eval_meetings, args.extra_docs, args.seed)
        return DATA / "qmsum", rset, {"split": "train", "max_pairs": args.train_queries}
    if args.dataset == "scifact":
        rset = scifact_eval(args.eval_docs, args.seed)
        return DATA / "scifact", rset, {"split": "train", "max_pairs": args.train_queries}
    rset = title2paper_eval(args.eval_queries, args.extra_docs, args.seed)
    return write_papers(rset, work / "papers"), rset, {"max_pairs": args.train_queries}


def command_line(args: argparse.Namespace, train: Path, loss: str) -> str:
    """The equivalent `docsearch finetune` call (the script builds its evaluation set itself)."""
    return (
        f"docsearch finetune --encoder {ENCODER} --model {MODEL} --loss {loss} "
        f"--train {train} --output OUT --max-pairs {args.train_queries} "
        f"--negatives {args.negatives} --batch-size {args.batch_size} --grad-accum "
        f"{args.grad_accum} --epochs {args.epochs} --max-minutes {args.minutes} --seed {args.seed}"
        + (" --in-batch" if args.in_batch and loss == "opl" else "")
    )


def run_loss(
    args: argparse.Namespace, loss: str, train: Path, rset: RetrievalSet, kw: dict[str, Any],
    before: dict[str, Any] | None, work: Path,
) -> dict[str, Any]:  # fmt: skip
    settings = TrainSettings(
        loss=loss, epochs=args.epochs, batch_size=args.batch_size, grad_accum=args.grad_accum,
        negatives=args.negatives, mined=args.mined, max_minutes=args.minutes, seed=args.seed,
        lr=args.lr, in_batch=args.in_batch,
    )  # fmt: skip
    job = FinetuneJob(
        ENCODER, {"model": MODEL}, train, work / f"out-{loss}", settings, eval_set=rset,
        before=before, pool_size=args.pool, **kw,
    )  # fmt: skip
    started = time.perf_counter()
    record = finetune(job, Printer())
    record["wall_seconds"] = round(time.perf_counter() - started, 1)
    record["command"] = command_line(args, train, loss)
    mined = settings.mined_negatives()
    record["name"] = f"{loss} ({mined} mined + {args.negatives - mined} random negatives)"
    if args.in_batch and loss == "opl":
        record["name"] += ", in-batch"
    if args.label:
        record["name"] += f", {args.label}"
    if args.keep:  # the trained model, for other evaluations (finetune_gpu.py screen)
        kept = args.keep / re.sub(r"\W+", "_", record["name"]).strip("_")
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(job.output, kept, ignore=shutil.ignore_patterns(CHECKPOINTS))
        print(f"kept the trained model in {kept}", flush=True)
    return record


PER_QUERY = "per_query_ndcg@10"


def strip(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """Metrics without the per-query scores (kept out of the results file)."""
    if metrics is None:
        return None
    return {mode: {k: v for k, v in m.items() if k != PER_QUERY} for mode, m in metrics.items()}


def paired(before: dict[str, float], after: dict[str, float], seed: int = 0) -> dict[str, Any]:
    """Queries better / worse / equal after training, and a bootstrap 95% CI of the mean change."""
    diffs = [after[q] - before[q] for q in before if q in after]
    rng = random.Random(seed)
    means = sorted(
        sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(1000)
    )  # fmt: skip
    return {
        "better": sum(d > 1e-9 for d in diffs), "worse": sum(d < -1e-9 for d in diffs),
        "same": sum(abs(d) <= 1e-9 for d in diffs),
        "mean_change": sum(diffs) / len(diffs), "ci95": [means[25], means[974]],
    }  # fmt: skip


def summarise(record: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    keep = ("name", "loss", "steps", "planned_steps", "stopped", "seconds", "wall_seconds")
    keep += ("command",)
    out = {k: record.get(k) for k in keep}
    out["settings"] = record["settings"]
    out["data"] = record["data"]
    before, after = record["evaluation"]["before"], record["evaluation"]["after"]
    out["before"], out["after"] = strip(before), strip(after)  # hybrid depends on the fusion
    out["paired"] = {
        mode: paired(before[mode][PER_QUERY], after[mode][PER_QUERY]) for mode in after
    }
    out["loss_first_last"] = [record["losses"][:3], record["losses"][-3:]]
    out["benchmark"] = benchmark_command(args)
    out["threads"] = torch.get_num_threads()
    out["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return out


def benchmark_command(args: argparse.Namespace) -> str:
    options = sorted((k, v) for k, v in vars(args).items() if v is not None and v is not False)
    return "python benchmarks/finetune.py " + " ".join(
        f"--{k.replace('_', '-')}" if v is True
        else f"--{k.replace('_', '-')} {' '.join(v) if isinstance(v, list) else v}"
        for k, v in options
    )  # fmt: skip


def dry_run(train: Path, rset: RetrievalSet, kw: dict[str, Any], args: argparse.Namespace) -> None:
    from docsearch.encoders.base import get_encoder
    from docsearch.indexer.chunk import ChunkerSettings
    from docsearch.indexer.collection import chunk_budget, make_chunker
    from docsearch.training.data import load_training_data

    encoder = get_encoder(ENCODER, model=MODEL)
    chunker = make_chunker(encoder, ChunkerSettings(max_tokens=chunk_budget(encoder, None)))
    data = load_training_data(train, chunker, pool_size=args.pool, seed=args.seed, **kw)
    print(data.source, data.notes, len(data.pairs), "pairs,", len(data.pool), "pool passages")
    for pair in random.Random(1).sample(data.pairs, min(5, len(data.pairs))):
        print(f"- [{pair.origin}] {pair.query[:100]!r}\n    -> {pair.positive[:160]!r}")
    tokens = sum(encoder.count_tokens([d.body for d in rset.corpus.values()]))
    print(
        f"eval: {len(rset.queries)} queries, {len(rset.corpus)} docs, {tokens:,} tokens;",
        rset.notes,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=("qmsum", "scifact", "scisummnet"), required=True)
    parser.add_argument("--losses", nargs="+", default=None, help="default: opl mnrl (labelled)")
    parser.add_argument("--train-queries", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=4.0, help="training time per loss")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--negatives", type=int, default=4)
    parser.add_argument("--mined", type=int, default=None, help="default: 0 opl, half mnrl")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--grad-accum", type=int, default=8)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--in-batch", action="store_true", help="opl: in-batch negatives too")
    parser.add_argument("--keep", type=Path, help="copy each trained model into this folder")
    parser.add_argument("--pool", type=int, default=600, help="passages negatives come from")
    parser.add_argument("--eval-meetings", type=int, default=12, help="qmsum")
    parser.add_argument("--eval-docs", type=int, default=800, help="scifact")
    parser.add_argument("--eval-queries", type=int, default=80, help="scisummnet")
    parser.add_argument("--extra-docs", type=int, default=12, help="qmsum, scisummnet")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--label", help="added to the run names, to keep runs of other settings")
    parser.add_argument("--from-gpu", type=Path, help="sweep.json of benchmarks/finetune_gpu.py")
    parser.add_argument("--gpu-model", type=Path, help="the model `finetune_gpu.py apply` wrote")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    losses = args.losses or (["opl"] if args.dataset == "scisummnet" else ["opl", "mnrl"])
    work = Path(tempfile.mkdtemp(prefix="docsearch-finetune-"))
    try:
        train, rset, kw = plan(args, work)
        if args.dry_run:
            dry_run(train, rset, kw, args)
            return
        if args.from_gpu:
            entry = gpu_entry(args, rset)
        else:
            entry = run_dataset(args, losses, train, rset, kw, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save(args.dataset, entry)


def run_dataset(
    args: argparse.Namespace, losses: list[str], train: Path, rset: RetrievalSet,
    kw: dict[str, Any], work: Path,
) -> dict[str, Any]:  # fmt: skip
    eval_set = eval_set_label(rset)
    before = known_before(args.dataset, eval_set)
    runs = []
    for loss in losses:
        record = run_loss(args, loss, train, rset, kw, before, work)
        before = record["evaluation"]["before"]
        runs.append(summarise(record, args))
    per_query = {mode: m[PER_QUERY] for mode, m in (before or {}).items()}
    return {
        "dataset": args.dataset, "eval_set": eval_set, "before": strip(before),
        "before_per_query": per_query, "runs": runs,
        "hardware": f"{platform.machine()} CPU ({platform.processor() or 'unknown'})",
    }  # fmt: skip


def eval_set_label(rset: RetrievalSet) -> str:
    return f"{rset.name}: {len(rset.queries)} queries, {len(rset.corpus)} documents; " + "; ".join(
        rset.notes
    )


def gpu_entry(args: argparse.Namespace, rset: RetrievalSet) -> dict[str, Any]:
    """The chosen run of a GPU sweep (benchmarks/finetune_gpu.py), evaluated here with the real
    pipeline: "before" is its fp16-rounded start (the weights that travelled), "after" the
    rebuilt model."""
    from docsearch.training.finetune import evaluate

    if args.gpu_model is None:
        raise SystemExit("--from-gpu needs --gpu-model (the folder `finetune_gpu.py apply` wrote)")
    sweep = json.loads(args.from_gpu.read_text())
    chosen = next(r for r in sweep["runs"] if r["name"] == sweep["delta"]["run"])
    start = args.gpu_model.with_name(args.gpu_model.name + "-start")
    printer = Printer()
    before = evaluate(ENCODER, {"model": str(start)}, rset, printer, "before (fp16 start)")
    after = evaluate(
        ENCODER, {"model": MODEL, "adapter": str(args.gpu_model)}, rset, printer, "after"
    )
    record = {
        **chosen, "name": f"{chosen['name']} [{sweep['device']}, {chosen['data']['pairs']} pairs]",
        "loss": chosen["settings"]["loss"], "wall_seconds": chosen["seconds"],
        "evaluation": {"before": before, "after": after},
        "command": "python benchmarks/finetune_gpu.py sweep (see its docstring)",
    }  # fmt: skip
    run = summarise(record, args)
    run["hardware"] = chosen["hardware"]
    label = eval_set_label(rset)
    old = known_before(args.dataset, label)
    return {
        "dataset": args.dataset, "eval_set": label, "before": strip(old or before),
        "before_per_query": {m: v[PER_QUERY] for m, v in (old or before).items()},
        "runs": [run], "hardware": f"{platform.machine()} CPU ({platform.processor() or 'unknown'})",
    }  # fmt: skip


def known_before(dataset: str, eval_set: str) -> dict[str, Any] | None:
    """ "Before" metrics of an earlier run on the same evaluation set (skips that evaluation)."""
    path = RESULTS / "finetune.json"
    entry = (json.loads(path.read_text()) if path.exists() else {}).get(dataset) or {}
    if entry.get("eval_set") != eval_set or not entry.get("before_per_query"):
        return None
    return {
        mode: {**metrics, PER_QUERY: entry["before_per_query"][mode]}
        for mode, metrics in entry["before"].items()
    }


# ---------------------------------------------------------------------------------------------
# Results


def save(dataset: str, entry: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "finetune.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    old = results.get(dataset) or {}
    if old.get("eval_set") == entry["eval_set"]:  # same evaluation: keep the other runs
        names = {run["name"] for run in entry["runs"]}
        entry["runs"] = [r for r in old["runs"] if r["name"] not in names] + entry["runs"]
    results[dataset] = entry
    path.write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "finetune.md").write_text(render(results))
    print((RESULTS / "finetune.md").read_text())


def _cell(metrics: dict[str, Any] | None, mode: str) -> str:
    return f"{metrics[mode]['ndcg@10']:.4f}" if metrics else ""


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Fine-tuning all-MiniLM-L6-v2 with `docsearch finetune`",
        "",
        "nDCG@10 before and after, document level (a document scores as its best chunk), on",
        "seeded CPU-sized samples. `vector` is the dense leg alone, `hybrid` the default search.",
        "Within a dataset every run trained on the same sampled pairs for the same training-time",
        "budget (`--minutes`), on a 2-core machine shared with other jobs (step times vary).",
        "better/worse: queries whose nDCG@10 rose / fell; CI: paired bootstrap 95% interval of",
        "the mean change. Each run's `before` was measured with the search defaults of its day:",
        "runs whose hybrid before differs used plain RRF fusion (the default until 2026-11-30),",
        "later ones the tuned maxnorm fusion; compare each run's after with its own before.",
        "",
        "| dataset | run | steps | train s | vector before | after | better/worse | CI | "
        "hybrid before | after | better/worse | CI |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in results.items():
        for run in entry["runs"]:
            cells = [name, run["name"], str(run["steps"]), f"{run['seconds']:.0f}"]
            for mode in ("vector", "hybrid"):
                p = run["paired"][mode]
                cells += [
                    _cell(run.get("before") or entry["before"], mode), _cell(run["after"], mode),
                    f"{p['better']}/{p['worse']}", f"[{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}]",
                ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    for name, entry in results.items():
        lines += ["", f"## {name}", "", f"- evaluation: {entry['eval_set']}"]
        for run in entry["runs"]:
            settings = run["settings"]
            lines += [
                f"- **{run['name']}**: {run['data']['pairs']} training pairs "
                f"({'; '.join(run['data']['notes'])}); lr {settings['lr']}, batch "
                f"{settings['batch_size']} x {settings['grad_accum']}, bf16 {settings['bf16']}; "
                f"{run['steps']} steps in {run['seconds']:.0f} s ({run['stopped'] or 'finished'}),"
                f" {run['wall_seconds']:.0f} s with data and evaluation; loss (first, last 3 "
                f"steps) {_losses(run['loss_first_last'])}; {_where(run, entry)}, {run['date']}",
                f"  - `{run['benchmark']}`",
                f"  - equivalent CLI: `{run['command']}`",
            ]
    return "\n".join(lines) + "\n"


def _where(run: dict[str, Any], entry: dict[str, Any]) -> str:
    return run.get("hardware") or f"{entry['hardware']}, {run['threads']} threads"


def _losses(pair: list[list[float]]) -> str:
    return " / ".join(", ".join(f"{x:.3f}" for x in part) for part in pair)


if __name__ == "__main__":
    main()
