"""One fine-tuning run, end to end: what `docsearch finetune` calls.

1. Build the encoder with the registry and make it trainable (`trainer.make_trainable`).
2. Read pairs (`data.py`), hold some out unless an evaluation set is given, add random and
   mined negatives, and save the prepared pairs so `--resume` trains on the same data.
3. Evaluate before training with the real index pipeline (`docsearch.evaluation`).
4. Train: the pairs recipe (`trainer.pairs_recipe`) in the loop (`loop.py`), resuming from the
   last checkpoint when asked.
5. Save a folder the encoder's `adapter` option accepts, evaluate it, and write
   `training.json` and the model card (`card.py`) next to it.
`mntp` and `simcse` on llm2vec run the LLM2Vec recipe steps (`mntp.py`, `simcse.py`) instead.
Not here: the loop itself, losses, pair building.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from docsearch.corpora.beir import RetrievalSet
from docsearch.encoders.base import Encoder, get_encoder
from docsearch.encoders.device import resolve_device
from docsearch.errors import UsageError
from docsearch.training import data as pairs_data
from docsearch.training.card import run_record, write_card
from docsearch.training.data import Pair, TrainingData
from docsearch.training.loop import QuietReporter, Reporter, bf16_by_default, run_loop
from docsearch.training.trainer import TrainSettings, make_trainable, pairs_recipe

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
RUN_FILE, PAIRS_FILE = "run.json", "pairs.jsonl"
EVAL_MODES = ("vector", "hybrid")
# Settings a resumed run may change; everything else must match the interrupted run.
RESUMABLE_CHANGES = ("max_minutes", "checkpoint_every")


@dataclass
class FinetuneJob:
    """What to train, on what, and where to write it."""

    encoder: str  # registry name: sentence-transformers or llm2vec
    options: dict[str, Any]  # encoder options of the starting point (model, adapter...)
    train: Path  # JSONL pairs, a BEIR folder, or a folder of documents
    output: Path
    settings: TrainSettings = field(default_factory=TrainSettings)
    eval: Path | None = None  # BEIR/LoCoV1 folder or JSONL pairs; default: held-out pairs
    eval_set: RetrievalSet | None = None  # an evaluation set built by the caller
    eval_split: str = "test"
    eval_max_docs: int | None = None
    evaluate: bool = True
    before: dict[str, dict[str, Any]] | None = None  # known "before" metrics: skip that pass
    split: str = "train"
    max_pairs: int | None = None
    pool_size: int = 1000
    collection: str | None = None  # indexed collection of `train` (its chunks and vectors)
    db: str | None = None
    resume: bool = False


# ---------------------------------------------------------------------------------------------
# 5. Data and evaluation for a run


def load_data(job: FinetuneJob, encoder: Encoder, reporter: Reporter) -> TrainingData:
    """Training pairs for `job`, read with the encoder's own chunker (windows match the index)."""
    from docsearch.indexer.chunk import ChunkerSettings
    from docsearch.indexer.collection import chunk_budget, make_chunker

    chunker = make_chunker(encoder, ChunkerSettings(max_tokens=chunk_budget(encoder, None)))
    store = indexed_store(job, encoder)
    reporter.status(f"reading training data from {job.train}")
    return pairs_data.load_training_data(
        job.train, chunker, split=job.split, store=store, max_pairs=job.max_pairs,
        pool_size=job.pool_size, seed=job.settings.seed,
    )  # fmt: skip


def indexed_store(job: FinetuneJob, encoder: Encoder) -> Any:
    """The collection `--collection` names, if any; its vectors only count if the encoder matches."""
    if not job.collection:
        return None
    from docsearch.config import Settings
    from docsearch.encoders.base import same_identity
    from docsearch.store.reads import Store

    store = Store.open(job.db or Settings().db, job.collection)
    if store.meta.encoder is None or not same_identity(store.meta.encoder, encoder.spec()):
        log.info(
            "collection %s was indexed with another encoder: its vectors are not reused", store.name
        )
        store.meta.encoder = None  # read its chunks, re-encode for mining
    return store


def evaluation_set(
    job: FinetuneJob, data: TrainingData, heldout: Sequence[Pair]
) -> RetrievalSet | None:
    if not job.evaluate:
        return None
    if job.eval_set is not None:
        return job.eval_set
    max_docs = job.eval_max_docs or 300
    seed = job.settings.seed
    if job.eval is not None and job.eval.is_file():
        pairs = pairs_data.read_pairs(job.eval)
        return pairs_data.heldout_set(pairs.pairs, pairs.documents, max_docs=max_docs, seed=seed)
    if job.eval is not None:
        from docsearch.evaluation import load_dataset

        return load_dataset(job.eval, job.eval_split).subsample(job.eval_max_docs, seed)
    if heldout:
        return pairs_data.heldout_set(heldout, data.documents, max_docs=max_docs, seed=seed)
    return None


def evaluate(
    encoder: str, options: dict[str, Any], rset: RetrievalSet, reporter: Reporter, label: str
) -> dict[str, dict[str, Any]]:
    """nDCG@10 and friends per search mode (and nDCG@10 per query), via the real pipeline."""
    from docsearch.evaluation import EvalIndex

    reporter.status(
        f"evaluating {label} on {rset.name}: {len(rset.queries)} queries, {len(rset.corpus)} documents"
    )
    results: dict[str, dict[str, Any]] = {}
    with EvalIndex(rset, encoder=encoder, options=options) as index:
        for mode in EVAL_MODES:
            result = index.evaluate(mode)
            per_query = {q: m["ndcg@10"] for q, m in result.per_query.items()}
            results[mode] = {**result.metrics, "per_query_ndcg@10": per_query}
    summary = ", ".join(f"{m} nDCG@10 {r['ndcg@10']:.4f}" for m, r in results.items())
    reporter.status(f"{label}: {summary}")
    return results


# ---------------------------------------------------------------------------------------------
# 6. The run


def write_pairs(path: Path, pairs: Sequence[Pair]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(asdict(pair)) + "\n")


def read_saved_pairs(path: Path) -> list[Pair]:
    pairs = []
    for _, record in pairs_data.numbered_jsonl(path):
        record.update({k: tuple(record.get(k, ())) for k in ("negatives", "negative_docs")})
        pairs.append(Pair(**record))
    return pairs


def identity(job: FinetuneJob) -> dict[str, Any]:
    """What a resumed run must share with the interrupted one."""
    settings = {k: v for k, v in asdict(job.settings).items() if k not in RESUMABLE_CHANGES}
    return {
        "encoder": job.encoder, "options": job.options, "train": str(job.train.resolve()),
        "split": job.split, "max_pairs": job.max_pairs, "settings": settings,
    }  # fmt: skip


def check_output(job: FinetuneJob) -> dict[str, Any] | None:
    """The saved run to resume (None for a new run); refuses to overwrite a used folder."""
    run_file = job.output / CHECKPOINTS / RUN_FILE
    if job.resume:
        if not run_file.exists():
            raise UsageError(f"nothing to resume in {job.output}: it holds no unfinished run")
        run: dict[str, Any] = json.loads(run_file.read_text())
        expected = json.loads(json.dumps(identity(job), default=str))
        changed = sorted(k for k in expected if run["identity"].get(k) != expected[k])
        if changed:
            raise UsageError(
                f"--resume needs the interrupted run's settings; these differ: {', '.join(changed)}"
            )
        return run
    if job.output.exists() and any(job.output.iterdir()):
        hint = " or --resume to continue it" if run_file.exists() else ""
        raise UsageError(f"{job.output} is not empty; choose a new --output folder{hint}")
    return None


def prepare_run(
    job: FinetuneJob, encoder: Encoder, reporter: Reporter
) -> tuple[TrainingData, RetrievalSet | None]:
    """Pairs (with negatives) and the evaluation set; saves the pairs for --resume."""
    data = load_data(job, encoder, reporter)
    heldout: list[Pair] = []
    if job.evaluate and job.eval is None and job.eval_set is None and len(data.pairs) >= 20:
        data, heldout = pairs_data.split_heldout(data, seed=job.settings.seed)
    rset = evaluation_set(job, data, heldout)
    run_dir = job.output / CHECKPOINTS
    saved = run_dir / PAIRS_FILE
    if job.resume and saved.exists():
        return replace(data, pairs=read_saved_pairs(saved)), rset
    if job.settings.loss in ("opl", "mnrl"):
        reporter.status(f"adding {job.settings.negatives} negatives to {len(data.pairs)} pairs")
        data = pairs_data.add_negatives(
            data, job.settings.negatives, mined=job.settings.mined_negatives(), encoder=encoder,
            seed=job.settings.seed,
        )  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    write_pairs(saved, data.pairs)
    return data, rset


def finetune(job: FinetuneJob, reporter: Reporter | None = None) -> dict[str, Any]:
    """Run `job` end to end and return its record (also saved as `training.json`)."""
    reporter = reporter or QuietReporter()
    job.settings.check()
    run = check_output(job) or {"identity": identity(job), "before": job.before}
    reporter.status(f"loading {job.encoder} {job.options.get('model') or ''}".rstrip())
    s = job.settings
    recipe_step = s.loss == "mntp" or (s.loss == "simcse" and job.encoder == "llm2vec")
    train = train_recipe_step if recipe_step else train_pairs
    options = {**job.options, "device": resolve_device(job.options.get("device"))}
    # no local name for the encoder: a recipe step loads its own model and frees this one
    data, rset, trained = train(job, get_encoder(job.encoder, **options), run, reporter)
    after = evaluate(job.encoder, trained["load"], rset, reporter, "after") if rset else None
    evaluation = {
        "set": f"{rset.name} ({'; '.join(rset.notes)})" if rset else None,
        "modes": list(EVAL_MODES), "before": run.get("before"), "after": after,
    }  # fmt: skip
    about = {"source": data.source, "notes": data.notes, "pairs": len(data.pairs)}
    record = run_record(
        title=f"{job.encoder} fine-tuned with {s.loss}", encoder=job.encoder, recipe=s.loss,
        start=job.options, data=about, evaluation=evaluation, **trained,
    )  # fmt: skip
    write_card(job.output, record)
    shutil.rmtree(job.output / CHECKPOINTS, ignore_errors=True)
    return record


def train_pairs(
    job: FinetuneJob, encoder: Encoder, run: dict[str, Any], reporter: Reporter
) -> tuple[TrainingData, RetrievalSet | None, dict[str, Any]]:
    """opl, mnrl or simcse over the pairs in the loop, with checkpoints and --resume; returns
    the data, the evaluation set and the `run_record` fields of the training."""
    s = job.settings
    trainable = make_trainable(encoder, job.options, s.lora_r, s.lora_alpha)
    data, rset = prepare_run(job, encoder, reporter)
    before_metrics(job, rset, run, reporter)
    planned = s.planned_steps(len(data.pairs))
    lr = s.lr or (2e-5 if trainable.method == "full fine-tuning" else 1e-4)
    device = str(trainable.encoder.device)
    bf16 = bf16_by_default(device) if s.bf16 is None else s.bf16
    state = run_loop(
        pairs_recipe(trainable, data.pairs, s), s.loop_settings(planned, lr, bf16), reporter,
        job.output / CHECKPOINTS, job.resume,
    )  # fmt: skip
    trained = {
        "method": trainable.method, "load": trainable.save(job.output), "losses": state.losses,
        "planned": planned, "seconds": state.seconds, "device": device, "stopped": state.stopped,
        "settings": asdict(s) | {"lr": lr, "bf16": bf16},
    }  # fmt: skip
    return data, rset, trained


def before_metrics(
    job: FinetuneJob, rset: RetrievalSet | None, run: dict[str, Any], reporter: Reporter
) -> None:
    """Keep the saved or given "before" metrics in `run`, else a fresh evaluation; `run` is
    saved for --resume."""
    run_file = job.output / CHECKPOINTS / RUN_FILE
    run_file.parent.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(run, indent=2, default=str))
    if rset is not None and run.get("before") is None:
        run["before"] = evaluate(job.encoder, job.options, rset, reporter, "before")
        run_file.write_text(json.dumps(run, indent=2, default=str))


# ---------------------------------------------------------------------------------------------
# 7. The LLM2Vec recipe steps (mntp, simcse on llm2vec): fixed-length runs, no --resume


def recipe_texts(data: TrainingData, loss: str) -> list[str]:
    """Raw texts for an unsupervised step: the pool passages (MNTP), or the positives (SimCSE)."""
    texts = [p.text for p in data.pool] if loss == "mntp" else [p.positive for p in data.pairs]
    return list(dict.fromkeys(t for t in texts if t.strip()))


def train_recipe_step(
    job: FinetuneJob, encoder: Encoder, run: dict[str, Any], reporter: Reporter
) -> tuple[TrainingData, RetrievalSet | None, dict[str, Any]]:
    """`mntp` or `simcse` on llm2vec through `train_mntp` / `train_simcse`."""
    from docsearch.training.mntp import train_mntp
    from docsearch.training.simcse import train_simcse

    if job.encoder != "llm2vec":
        raise UsageError("mntp trains decoder LLMs: use it with --encoder llm2vec")
    if job.resume:
        raise UsageError("--resume is for opl, mnrl and sentence-transformers simcse runs")
    data = load_data(job, encoder, reporter)
    rset = evaluation_set(job, data, [])
    del encoder  # the recipe loads its own copy of the model
    before_metrics(job, rset, run, reporter)
    s = job.settings
    texts = recipe_texts(data, s.loss)
    steps = s.steps or max(1, math.ceil(s.epochs * len(texts) / s.batch_size))
    lr = s.lr or (5e-5 if s.loss == "mntp" else 3e-5)
    common: dict[str, Any] = {"batch_size": s.batch_size, "lr": lr, "seed": s.seed}
    model, out = job.options["model"], job.output
    if s.loss == "mntp":
        result = train_mntp(model, texts, out, steps, reporter=reporter, **common)
    else:
        adapter = job.options.get("adapter")
        result = train_simcse(
            model, texts, out, steps, mntp_adapter=adapter, reporter=reporter, **common
        )
    trained = {
        "method": "LoRA (LLM2Vec recipe)", "device": result.settings["device"],
        "load": {"model": result.settings["base"], "adapter": str(out.resolve())},
        "losses": result.losses, "planned": steps, "seconds": result.seconds,
        "settings": asdict(s) | {"lr": lr, "bf16": False},
    }  # fmt: skip
    return data, rset, trained
