"""OPL and MNRL on the whole qmsum train split, on a CUDA GPU, in the LoCo paper's settings.

    python benchmarks/finetune_gpu.py pack --to .carry/minilm          # here: an fp16 copy to carry
    python benchmarks/finetune_gpu.py sweep --data DIR --model .carry/minilm --out $OUT  # on the GPU
    python benchmarks/finetune_gpu.py apply --model .carry/minilm --delta DIR --to FOLDER  # here
    python benchmarks/finetune.py --dataset qmsum --from-gpu DIR --gpu-model FOLDER ...    # here
    python benchmarks/finetune_gpu.py screen --data DIR --models BEFORE AFTER... --out F.json  # CPU

Why a GPU: on the 2-core CPU, benchmarks/finetune.py trains on 200 pairs for minutes (9-33
optimiser steps). The paper's recipe over all 1,081 qmsum training queries (32 random negatives
each, lr 5e-6, effective batch 32, one epoch, gradient norm 1.0) is about 36,000 window
encodings per epoch: hours there, a minute on one GPU.

`sweep` trains each configuration with `docsearch.training.finetune` (as `docsearch finetune`
does; the effective batch of 32 pairs is one micro-batch here, 1,056 windows, where the CPU
accumulates) and screens it in memory: the encoder's own chunker, one vector per window, a document
scores as its best window, exact cosine, nDCG@10 by `docsearch.evaluation.score_run`. That is
the vector leg of the real pipeline without LanceDB, which the GPU machine lacks. Screening
sets: the qmsum sample benchmarks/finetune.py uses, and the whole test split. It writes
`sweep.json` and the weight change (trained minus start) of the best OPL run as fp16
safetensors parts: a delta that small keeps its precision in fp16, where a whole fp16 model
would round it away. The real evaluation (vector and hybrid, with LanceDB) runs on the CPU from
the rebuilt model. The start weights travel in fp16 (the 64 MiB carry limit), so the "before" of
these runs is that fp16-rounded start, measured too.
`screen` runs the same whole-test-split screening on any model folders, on the CPU (about 6
minutes a model on 2 cores), e.g. those `benchmarks/finetune.py --keep DIR` keeps.
Not here: LoRA (MiniLM is fine-tuned whole), the other datasets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.eval_sets import cache_dir  # noqa: E402
from docsearch.corpora.beir import RetrievalSet, load_beir  # noqa: E402
from docsearch.encoders.base import Encoder  # noqa: E402

WEIGHTS = "model.safetensors"
PART_BYTES = 15 * 2**20  # the device returns files of at most 16 MiB
BUDGET_S = 330.0  # start no configuration after this many seconds


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------------
# Weights: an fp16 copy to carry, fp32 again on arrival, deltas in parts


def copy_with_weights(src: Path, dst: Path, weights: dict[str, torch.Tensor]) -> None:
    """The model folder `src` (configs, tokenizer, pooling) at `dst`, with other weights."""
    from safetensors.torch import save_file

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(WEIGHTS, "*.md", ".gitattributes"))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(dst / WEIGHTS))


def read_weights(folder: Path, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = load_file(str(folder / WEIGHTS))
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}


PIECE = "#piece"  # a tensor larger than a part travels as row blocks: name#piece0, name#piece1...


def in_pieces(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in tensors.items():
        n = -(-tensor.numel() * tensor.element_size() // PART_BYTES)
        if n <= 1:
            out[name] = tensor
            continue
        for i, block in enumerate(tensor.chunk(n, dim=0)):
            out[f"{name}{PIECE}{i}"] = block
    return out


def from_pieces(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out, pieces = {}, {}
    for name, tensor in tensors.items():
        if PIECE in name:
            base, index = name.split(PIECE)
            pieces.setdefault(base, {})[int(index)] = tensor
        else:
            out[name] = tensor
    for base, blocks in pieces.items():
        out[base] = torch.cat([blocks[i] for i in sorted(blocks)])
    return out


def save_parts(tensors: dict[str, torch.Tensor], folder: Path, stem: str) -> list[Path]:
    """`tensors` as safetensors files of at most about PART_BYTES each."""
    from safetensors.torch import save_file

    parts: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in in_pieces(tensors).items():
        nbytes = tensor.numel() * tensor.element_size()
        if parts[-1] and size + nbytes > PART_BYTES:
            parts.append({})
            size = 0
        parts[-1][name], size = tensor.contiguous(), size + nbytes
    paths = [folder / f"{stem}-{i}.safetensors" for i in range(len(parts))]
    for part, path in zip(parts, paths, strict=True):
        save_file(part, str(path))
    return paths


def read_parts(folder: Path, stem: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob(f"{stem}-*.safetensors")):
        out.update(load_file(str(path)))
    if not out:
        raise SystemExit(f"no {stem}-*.safetensors in {folder}")
    return from_pieces(out)


def pack(to: Path) -> None:
    from docsearch.encoders.weights import resolve_model

    src = resolve_model("all-MiniLM-L6-v2")
    copy_with_weights(src, to, read_weights(src, torch.float16))
    log(f"fp16 copy of {src} in {to}")


def apply(model: Path, delta: Path, to: Path) -> None:
    """`to`: start + delta, in fp32; `to`-start: the start alone in fp32 (the runs' "before")."""
    start, change = read_weights(model), read_parts(delta, "delta")
    trained = {k: v + change[k].float() if k in change else v for k, v in start.items()}
    copy_with_weights(model, to, trained)
    copy_with_weights(model, to.with_name(to.name + "-start"), start)
    log(f"{model} + {delta} -> {to} (and the start alone in {to.name}-start)")


# ---------------------------------------------------------------------------------------------
# Screening: the vector leg in memory


Windows = dict[str, tuple[list[str], list[str]]]  # set name -> (window texts, their documents)
_CHUNKER: Any = None  # set before the pool forks: the workers inherit it


def _chunk_texts(item: tuple[str, str, str]) -> list[str]:
    from docsearch.indexer.extract import build_document

    doc_id, title, body = item
    document = build_document(path=doc_id, title=title, page_texts=[body])
    return [chunk.text for chunk in _CHUNKER.chunk(document)]


def chunk_sets(start: Path, sets: dict[str, RetrievalSet]) -> Windows:
    """Each set's windows, cut once by the encoder's own chunker (the tokenizer decides them,
    training does not change them) on every CPU core, before CUDA starts (the pool forks)."""
    global _CHUNKER
    from docsearch.encoders.base import get_encoder
    from docsearch.indexer.chunk import ChunkerSettings
    from docsearch.indexer.collection import chunk_budget, make_chunker

    encoder = get_encoder("sentence-transformers", model=str(start), device="cpu")
    _CHUNKER = make_chunker(encoder, ChunkerSettings(max_tokens=chunk_budget(encoder, None)))
    docs = {d.id: d for rset in sets.values() for d in rset.corpus.values()}
    with multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:
        items = [(d.id, d.title, d.body) for d in docs.values()]
        cut = dict(zip(docs, pool.map(_chunk_texts, items, chunksize=1), strict=True))
    return {
        name: ([t for d in rset.corpus for t in cut[d]], [d for d in rset.corpus for _ in cut[d]])
        for name, rset in sets.items()
    }


def screen(encoder: Encoder, rset: RetrievalSet, texts: list[str], owners: list[str]) -> dict:
    """nDCG@10 of dense search (document = its best window), as the vector mode ranks."""
    from docsearch.evaluation import score_run

    windows = torch.from_numpy(encoder.encode_documents(texts))
    qids = list(rset.queries)
    queries = torch.from_numpy(encoder.encode_queries([rset.queries[q] for q in qids]))
    doc_ids = sorted(set(owners))
    position = {d: i for i, d in enumerate(doc_ids)}
    owner_index = torch.tensor([position[o] for o in owners])
    scores = queries @ windows.T  # (queries, windows)
    best = torch.full((len(qids), len(doc_ids)), -2.0).scatter_reduce(
        1, owner_index.expand(len(qids), -1), scores, reduce="amax"
    )
    run = {
        q: [doc_ids[i] for i in best[n].argsort(descending=True)[:100].tolist()]
        for n, q in enumerate(qids)
    }
    means, per_query = score_run(run, {q: rset.qrels.get(q, {}) for q in qids})
    return {
        "ndcg@10": means["ndcg@10"],
        "queries": len(per_query),
        "windows": len(texts),
        "per_query": {q: m["ndcg@10"] for q, m in per_query.items()},
    }


def screen_model(folder: Path, sets: dict[str, RetrievalSet], windows: Windows) -> dict:
    from docsearch.encoders.base import get_encoder

    encoder = get_encoder("sentence-transformers", model=str(folder), batch_size=256)
    return {name: screen(encoder, rset, *windows[name]) for name, rset in sets.items()}


# ---------------------------------------------------------------------------------------------
# The sweep


CONFIGS: list[dict[str, Any]] = [
    # The LoCo paper's OPL recipe and MNRL for the same wall-clock time (`same_time_as`), then
    # OPL with more steps and a larger learning rate, and MNRL again for its time.
    {"name": "opl paper (lr 5e-6, 1 epoch)", "loss": "opl", "lr": 5e-6, "epochs": 1.0},
    {"name": "mnrl, time of opl paper", "loss": "mnrl", "lr": 2e-5, "epochs": 3.0,
     "same_time_as": "opl paper (lr 5e-6, 1 epoch)"},
    {"name": "opl lr 2e-5, 3 epochs", "loss": "opl", "lr": 2e-5, "epochs": 3.0},
    {"name": "mnrl, time of opl 3 epochs", "loss": "mnrl", "lr": 2e-5, "epochs": 3.0,
     "same_time_as": "opl lr 2e-5, 3 epochs"},
    {"name": "opl lr 2e-5, 1 epoch", "loss": "opl", "lr": 2e-5, "epochs": 1.0},
]  # fmt: skip


def train_one(
    config: dict[str, Any], start: Path, data: Path, work: Path, minutes: float | None,
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    from benchmarks.finetune import Printer  # benchmarks/finetune.py: the same progress lines
    from docsearch.training.finetune import FinetuneJob, finetune
    from docsearch.training.trainer import TrainSettings

    settings = TrainSettings(
        loss=config["loss"], lr=config["lr"], epochs=config["epochs"], batch_size=args.batch,
        grad_accum=1, negatives=args.negatives, max_grad_norm=1.0, max_minutes=minutes, seed=0,
        checkpoint_every=1000,
    )  # fmt: skip
    out = work / re.sub(r"\W+", "_", config["name"]).strip("_")
    job = FinetuneJob("sentence-transformers", {"model": str(start)}, data, out, settings,
                      evaluate=False, pool_size=5000, max_pairs=args.max_pairs)  # fmt: skip

    record = finetune(job, Printer())
    record["folder"] = str(out)
    return record


def sweep(args: argparse.Namespace) -> None:
    data, model, out, budget_s = args.data, args.model, args.out, args.budget_s
    from benchmarks.finetune import qmsum_eval  # benchmarks/finetune.py: the same evaluation sample

    started = time.monotonic()
    work = cache_dir("finetune-gpu")
    shutil.rmtree(work, ignore_errors=True)
    start = work / "start-fp32"
    copy_with_weights(model, start, read_weights(model))  # train from fp32 master weights
    test = load_beir(data, "test").subsample(args.test_docs, 0)
    sets = {"sample": qmsum_eval(12, 12, 0, data=data), "test": test}
    for name, rset in sets.items():
        log(f"screening set {name}: {len(rset.queries)} queries, {len(rset.corpus)} documents")
    windows = chunk_sets(start, sets)
    log(f"windows: { {name: len(w[0]) for name, w in windows.items()} }")
    results: dict[str, Any] = {"device": device_name(), "runs": []}
    results["before"] = screen_model(start, sets, windows)
    log(f"before: { {k: round(v['ndcg@10'], 4) for k, v in results['before'].items()} }")
    save_json(out, results)
    for config in CONFIGS:
        if args.only and config["name"] not in args.only:
            continue
        if time.monotonic() - started > budget_s:
            log(f"skipped {config['name']}: past the {budget_s:.0f} s budget")
            continue
        minutes = None
        if "same_time_as" in config:
            ref = next((r for r in results["runs"] if r["name"] == config["same_time_as"]), None)
            if ref is None:
                continue
            minutes = ref["seconds"] / 60
        record = train_one(config, start, data, work, minutes, args)
        after = screen_model(Path(record["folder"]), sets, windows)
        results["runs"].append(summary(config, record, after))
        log(f"{config['name']}: {record['steps']} steps in {record['seconds']:.0f} s; after "
            f"{ {k: round(v['ndcg@10'], 4) for k, v in after.items()} }")  # fmt: skip
        if config["loss"] == "opl":  # the best OPL run so far: what a kill would leave
            write_delta(results, start, out)
        save_json(out, results)


def screen_folders(args: argparse.Namespace) -> None:
    """Screen model folders on the whole test split (here, on the CPU): the first is "before",
    each other is compared with it query by query (benchmarks/finetune.py's paired bootstrap)."""
    from benchmarks.finetune import paired

    sets = {"test": load_beir(args.data, "test").subsample(args.test_docs, 0)}
    windows = chunk_sets(Path(args.models[0]), sets)
    log(f"test split: {len(sets['test'].queries)} queries, {len(windows['test'][0])} windows")
    rows: list[dict[str, Any]] = []
    for model in args.models:
        started = time.monotonic()
        result = screen_model(Path(model), sets, windows)["test"]
        row = {"model": model, "ndcg@10": result["ndcg@10"], "queries": result["queries"],
               "seconds": round(time.monotonic() - started)}  # fmt: skip
        if rows:
            row["paired"] = paired(rows[0]["per_query"], result["per_query"])
        rows.append({**row, "per_query": result["per_query"]})
        log(f"{model}: nDCG@10 {result['ndcg@10']:.4f} ({row['seconds']} s)")
        args.out.write_text(json.dumps({"data": str(args.data), "runs": rows}, indent=1) + "\n")


def summary(config: dict[str, Any], record: dict[str, Any], after: dict[str, Any]) -> dict:
    keep = ("steps", "planned_steps", "stopped", "seconds", "settings", "data", "hardware")
    return {"name": config["name"], **{k: record[k] for k in keep}, "after": after,
            "losses": record["losses"], "folder": record["folder"]}  # fmt: skip


def write_delta(results: dict[str, Any], start: Path, out: Path) -> None:
    """The best OPL run's weight change (by the whole-test screening) as fp16 parts."""
    opl = [r for r in results["runs"] if r["settings"]["loss"] == "opl"]
    best = max(opl, key=lambda r: r["after"]["test"]["ndcg@10"])
    if results.get("delta", {}).get("run") == best["name"]:
        return
    trained, base = read_weights(Path(best["folder"])), read_weights(start)
    delta = {k: (trained[k] - v).half() for k, v in base.items() if v.is_floating_point()}
    paths = save_parts(delta, out, "delta")
    delta_max = max(float(d.abs().max()) for d in delta.values())
    results["delta"] = {"run": best["name"], "parts": [p.name for p in paths], "max_abs": delta_max}
    log(f"delta of {best['name']}: {len(paths)} parts, max |change| {delta_max:.2e}")


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"


def save_json(out: Path, results: dict[str, Any]) -> None:
    (out / "sweep.json").write_text(json.dumps(results, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="an fp16 copy of the packaged MiniLM, to carry")
    p.add_argument("--to", type=Path, required=True)
    s = sub.add_parser("sweep", help="train and screen every configuration (GPU)")
    s.add_argument("--data", type=Path, required=True, help="the qmsum BEIR folder")
    s.add_argument("--model", type=Path, required=True, help="the folder `pack` wrote")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--budget-s", type=float, default=BUDGET_S)
    s.add_argument("--only", nargs="+", help="configuration names (default: all)")
    s.add_argument("--max-pairs", type=int, help="training queries (default: all; smoke runs)")
    s.add_argument("--test-docs", type=int, help="sample the test corpus (default: all)")
    s.add_argument("--negatives", type=int, default=32, help="per query, as in LoCo")
    s.add_argument("--batch", type=int, default=32, help="pairs per step (one micro-batch)")
    c = sub.add_parser("screen", help="screen model folders on the whole test split (CPU)")
    c.add_argument("--data", type=Path, required=True, help="the qmsum BEIR folder")
    c.add_argument("--models", nargs="+", required=True, help="the first is the baseline")
    c.add_argument("--out", type=Path, required=True, help="a JSON file")
    c.add_argument("--test-docs", type=int, help="sample the test corpus (default: all)")
    a = sub.add_parser("apply", help="start weights + a returned delta -> a model folder")
    a.add_argument("--model", type=Path, required=True)
    a.add_argument("--delta", type=Path, required=True)
    a.add_argument("--to", type=Path, required=True)
    args = parser.parse_args()
    commands: dict[str, Callable[[], None]] = {
        "pack": lambda: pack(args.to),
        "sweep": lambda: sweep(args),
        "screen": lambda: screen_folders(args),
        "apply": lambda: apply(args.model, args.delta, args.to),
    }
    commands[args.command]()


if __name__ == "__main__":
    main()
