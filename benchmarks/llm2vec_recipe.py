"""The LLM2Vec recipe on a real small decoder, on CPU: MNTP, then SimCSE on top.

    python benchmarks/llm2vec_recipe.py [--model smollm2-135m] [--mntp-steps 120]
        [--simcse-steps 80] [--out ~/.cache/docsearch/llm2vec-recipe]

Writes two adapter folders (`OUT/mntp`, `OUT/simcse`) that `docsearch index --encoder llm2vec
--model smollm2-135m --adapter OUT/simcse` loads, and benchmarks/results/llm2vec_recipe.{json,md}
with the steps, batch, losses and time of each stage. The quality of the four rungs (Uni, Bi, Bi
+ MNTP, Bi + MNTP + SimCSE) is measured by `benchmarks/decoder_quality.py --suite llm2vec`.

Training text is unlabelled and comes from ../shared/data, kept apart from what the quality
benchmark evaluates on: SciFact abstracts judged only for train queries, and the transcripts of
QMSum meetings that have no test query. Paragraphs are the units (MNTP packs them into blocks;
SimCSE embeds each one twice under dropout). The reference trains 1000 MNTP steps of 32 x 512
tokens and 1000 SimCSE steps of 128 sentences on a GPU; this is a few minutes of that, so read
the results as "does the training path move quality at all here", not as the paper's numbers.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA, RESULTS, machine, machine_lines, write_results  # noqa: E402
from docsearch.corpora.beir import load_beir  # noqa: E402


def paragraphs(text: str, min_words: int = 12, max_words: int = 160) -> list[str]:
    """Non-trivial paragraphs of `text`, long ones cut into pieces of at most max_words."""
    out = []
    for block in text.split("\n"):
        words = block.split()
        for start in range(0, len(words), max_words):
            piece = words[start : start + max_words]
            if len(piece) >= min_words:
                out.append(" ".join(piece))
    return out


def training_texts(limit: int, seed: int) -> list[str]:
    """Paragraphs of documents that no test query judges (SciFact train, QMSum non-test)."""
    texts: list[str] = []
    scifact_test = load_beir(DATA / "scifact", "test")
    scifact_train = load_beir(DATA / "scifact" / "train", "all")
    test_docs = {d for judged in scifact_test.qrels.values() for d in judged}
    train_docs = {d for judged in scifact_train.qrels.values() for d in judged} - test_docs
    for doc_id in sorted(train_docs):
        texts += paragraphs(scifact_train.corpus[doc_id].body)
    qmsum_test = load_beir(DATA / "qmsum", "test")
    qmsum_all = load_beir(DATA / "qmsum", "all")
    test_meetings = {d for judged in qmsum_test.qrels.values() for d in judged}
    for doc_id in sorted(set(qmsum_all.corpus) - test_meetings):
        texts += paragraphs(qmsum_all.corpus[doc_id].body)
    random.Random(seed).shuffle(texts)
    return texts[:limit]


class StageLog:
    """Every step's loss of one recipe stage, on stderr."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def status(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def step(self, report: Any) -> None:
        print(
            f"{self.stage} step {report.step}: loss {report.loss:.4f}", file=sys.stderr, flush=True
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from docsearch.training.mntp import train_mntp
    from docsearch.training.simcse import train_simcse

    torch.set_num_threads(args.threads)
    texts = training_texts(args.texts, args.seed)
    print(f"{len(texts)} training paragraphs", file=sys.stderr)
    dtype = torch.bfloat16 if args.bf16 else torch.float32

    started = time.perf_counter()
    mntp = train_mntp(
        args.model,
        texts,
        args.out / "mntp",
        steps=args.mntp_steps,
        batch_size=args.mntp_batch,
        block_size=args.block_size,
        lr=args.mntp_lr,
        seed=args.seed,
        dtype=dtype,
        reporter=StageLog("mntp"),
    )
    simcse = train_simcse(
        args.model,
        texts,
        args.out / "simcse",
        steps=args.simcse_steps,
        mntp_adapter=str(args.out / "mntp"),
        batch_size=args.simcse_batch,
        max_length=args.block_size,
        lr=args.simcse_lr,
        seed=args.seed,
        dtype=dtype,
        reporter=StageLog("simcse"),
    )
    return {
        "texts": len(texts),
        "total_seconds": round(time.perf_counter() - started, 1),
        "stages": {
            name: stage_record(result) for name, result in (("mntp", mntp), ("simcse", simcse))
        },
    }


def stage_record(result: Any) -> dict[str, Any]:
    losses = result.losses
    head, tail = losses[: max(1, len(losses) // 10)], losses[-max(1, len(losses) // 10) :]
    return {
        "adapter": str(result.out_dir),
        "steps": len(losses),
        "seconds": round(result.seconds, 1),
        "loss_first_tenth": round(sum(head) / len(head), 4),
        "loss_last_tenth": round(sum(tail) / len(tail), 4),
        "settings": {k: v for k, v in result.settings.items() if k != "texts"},
    }


def markdown(payload: dict[str, Any]) -> str:
    lines = ["# LLM2Vec recipe on CPU: MNTP, then SimCSE", ""]
    lines += machine_lines(payload["machine"], payload["command"])
    lines += [
        f"- model: {payload['args']['model']}; {payload['texts']} unlabelled training paragraphs "
        "(SciFact train-only abstracts, QMSum meetings without test queries)",
        f"- total time: {payload['total_seconds']} s",
        "",
        "| stage | steps | batch | tokens per text | lr | seconds | loss, first tenth | "
        "loss, last tenth |",
        "|---|---|---|---|---|---|---|---|",
    ]
    args = payload["args"]
    batches = {"mntp": args["mntp_batch"], "simcse": args["simcse_batch"]}
    lrs = {"mntp": args["mntp_lr"], "simcse": args["simcse_lr"]}
    for name, stage in payload["stages"].items():
        lines.append(
            f"| {name} | {stage['steps']} | {batches[name]} | {args['block_size']} | {lrs[name]} | "
            f"{stage['seconds']} | {stage['loss_first_tenth']} | {stage['loss_last_tenth']} |"
        )
    lines += [
        "",
        "Adapters: `" + payload["stages"]["simcse"]["adapter"] + "` (holds its MNTP parent in "
        "`mntp/`). Quality of the rungs: `benchmarks/results/decoder_quality_llm2vec_smollm2-135m.md`.",
    ]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--out", type=Path, default=Path.home() / ".cache" / "docsearch" / "llm2vec-recipe"
    )
    parser.add_argument("--texts", type=int, default=4000, help="training paragraphs at most")
    parser.add_argument("--mntp-steps", type=int, default=120)
    parser.add_argument("--mntp-batch", type=int, default=8)
    parser.add_argument("--mntp-lr", type=float, default=5e-5)
    parser.add_argument("--simcse-steps", type=int, default=80)
    parser.add_argument("--simcse-batch", type=int, default=16)
    parser.add_argument("--simcse-lr", type=float, default=3e-5)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=RESULTS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    payload = run(args)
    payload |= {
        "machine": machine(),
        "command": "python " + " ".join(sys.argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    write_results(args.results, "llm2vec_recipe", payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
