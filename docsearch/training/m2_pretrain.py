"""Mixed-length masked-language-model pretraining for M2-BERT, and the positional warm start.

Holds, top to bottom: `extend_position_table` and `warm_start_state_dict` (grow a checkpoint from
8k to 32k positions: the position table by replication p -> p mod 8192, as in the LoCo paper); BERT
masking at rate 0.30 (80% [MASK], 10% random, 10% kept); the mixed-length sample builder (30% of
samples are one document at its natural length, 70% are documents concatenated to the maximum
length; every sample is right-padded to the maximum length, the M2 padding contract); the MLM head
(`cls.predictions.*`, decoder tied to the word embeddings, the reference's names); the recipe
for the shared loop (`loop.py`: AdamW, warm-up then linear decay) with held-out masked-token
accuracy; and a command line that writes an encoder folder with a model card
(`python -m docsearch.training.m2_pretrain --help`), tiny here, 80M-shape on a GPU.
Leaves out: multi-GPU training, streaming corpora, gradient checkpointing, retrieval fine-tuning.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from docsearch.encoders.m2_bert import (
    TINY_CONFIG,
    M2BertModel,
    M2Config,
    find_weights_file,
    load_released_state_dict,
    load_tokenizer,
    read_config,
    read_state_dict,
    save_checkpoint,
    strip_checkpoint_prefixes,
)
from docsearch.encoders.weights import resolve_model
from docsearch.training.card import run_record, write_card
from docsearch.training.loop import LoopSettings, Recipe, run_loop
from docsearch.training.losses import IGNORE_INDEX as IGNORE
from docsearch.training.masking import Masking
from docsearch.training.masking import mask_tokens as mask_with

# ---------------------------------------------------------------------------------------------
# Positional warm start


def extend_position_table(table: torch.Tensor, new_length: int) -> torch.Tensor:
    """Rows for positions 0..new_length-1 from a (P, d) table by replication: p -> p mod P."""
    index = torch.arange(new_length, device=table.device) % table.shape[0]
    return table[index].clone()  # (new_length, d)


def _stretch(features: torch.Tensor, new_length: int) -> torch.Tensor:
    """(1, L, c) -> (1, new_length, c) by linear interpolation with the end points kept."""
    stretched = F.interpolate(
        features.transpose(1, 2).float(), size=new_length, mode="linear", align_corners=True
    )
    return stretched.transpose(1, 2).to(features.dtype).contiguous()


def warm_start_state_dict(
    state: dict[str, torch.Tensor], new_length: int
) -> dict[str, torch.Tensor]:
    """A copy of an M2 checkpoint's state dict grown to `new_length` positions (any key prefix).

    - `embeddings.position_embeddings.weight`: replication, p -> p mod old length (LoCo paper);
    - `embeddings.position_ids`: arange(new_length);
    - each filter's `pos_emb.z` / `pos_emb.t`: linear interpolation onto the longer grid. Their
      init is a function of p / L (`t = linspace(0, 1, L)`, Fourier features of p / L), so
      interpolation is what a fresh init at the new length would give, learned deviations kept;
      replication would make every implicit filter periodic.
    Everything else is shared unchanged. Set `max_position_embeddings` and `long_conv_l_max` of
    the config to `new_length` before loading the result.
    """
    out = {}
    for key, value in state.items():
        inner = strip_checkpoint_prefixes(key)
        if inner == "embeddings.position_embeddings.weight":
            value = extend_position_table(value, new_length)
        elif inner == "embeddings.position_ids":
            value = torch.arange(new_length, dtype=value.dtype)[None]
        elif inner.endswith(("pos_emb.z", "pos_emb.t")):
            value = _stretch(value, new_length)
        out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# Masking and mixed-length samples


@dataclass(frozen=True)
class TokenIds:
    """The special ids the recipe needs and the size of the real vocabulary."""

    cls: int
    sep: int
    pad: int
    mask: int
    vocab_size: int  # random replacements are drawn below this

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> TokenIds:
        ids = (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
        return cls(*ids, mask=tokenizer.mask_token_id, vocab_size=len(tokenizer))

    @property
    def specials(self) -> list[int]:
        return [self.cls, self.sep, self.pad, self.mask]


def mask_tokens(
    ids: torch.Tensor,
    tokens: TokenIds,
    mask_prob: float = 0.30,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: choose `mask_prob` of the non-special tokens; of those 80% become [MASK],
    10% a random token, 10% stay. Returns (inputs, labels), labels IGNORE where not chosen."""
    eligible = ~torch.isin(ids, torch.tensor(tokens.specials))
    return mask_with(ids, eligible, Masking(mask_prob), tokens.mask, tokens.vocab_size, generator)


class MixedLengthSampler:
    """Samples of the mixed-length recipe from tokenised documents (ids without specials).

    With probability `short_fraction` a sample is one whole document at its natural length,
    `[CLS] doc [SEP]` (cut to `max_len`); otherwise documents are packed, `[CLS] d1 [SEP] d2
    [SEP] ...`, up to exactly `max_len`, and the rest of a cut document opens the next packed
    sample. Documents come in a shuffled order, reshuffled after each pass. Every sample is
    right-padded with the pad id to `max_len`, because M2 outputs depend on the padded length.
    """

    def __init__(
        self,
        documents: Iterable[Sequence[int]],
        tokens: TokenIds,
        max_len: int,
        short_fraction: float = 0.30,
        seed: int = 0,
    ) -> None:
        self.documents = [list(d) for d in documents if len(d)]
        if not self.documents:
            raise ValueError("the sampler needs at least one non-empty document")
        self.tokens, self.max_len, self.short_fraction = tokens, max_len, short_fraction
        self._rng = random.Random(seed)
        self._queue: list[list[int]] = []
        self._carry: list[int] = []  # the rest of the document the last packed sample cut

    def _next_document(self) -> list[int]:
        if not self._queue:
            self._queue = [list(d) for d in self.documents]
            self._rng.shuffle(self._queue)
        return self._queue.pop()

    def _packed(self) -> list[int]:
        ids = [self.tokens.cls]
        while len(ids) < self.max_len:
            room = self.max_len - len(ids) - 1  # keep one slot for the closing [SEP]
            doc, self._carry = (self._carry or self._next_document()), []
            ids += [*doc[:room], self.tokens.sep]
            if len(doc) > room:
                self._carry = doc[room:]
                break
        return ids[: self.max_len]

    def sample(self) -> tuple[list[int], bool]:
        """One unpadded sample and whether it is a short (natural-length) one."""
        if self._rng.random() < self.short_fraction:
            doc = self._next_document()[: self.max_len - 2]
            return [self.tokens.cls, *doc, self.tokens.sep], True
        return self._packed(), False

    def batch(self, size: int) -> torch.Tensor:
        """(size, max_len) ids, right-padded."""
        out = torch.full((size, self.max_len), self.tokens.pad, dtype=torch.long)
        for row in range(size):
            ids, _ = self.sample()
            out[row, : len(ids)] = torch.tensor(ids)
        return out


# ---------------------------------------------------------------------------------------------
# The MLM model (names as the reference's BertForMaskedLM)


class _Transform(nn.Module):
    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class _Predictions(nn.Module):
    def __init__(self, cfg: M2Config, word_embeddings: torch.Tensor) -> None:
        super().__init__()
        self.transform = _Transform(cfg)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        self.decoder.weight = word_embeddings  # tied, as in BERT
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(x))


class _MLMHead(nn.Module):
    def __init__(self, cfg: M2Config, word_embeddings: torch.Tensor) -> None:
        super().__init__()
        self.predictions = _Predictions(cfg, word_embeddings)


class M2ForMaskedLM(nn.Module):
    """M2-BERT with the MLM head; logits are computed only at the labelled positions."""

    def __init__(self, cfg: M2Config) -> None:
        super().__init__()
        self.bert = M2BertModel(cfg)
        self.cls = _MLMHead(cfg, self.bert.embeddings.word_embeddings.weight)

    def forward(
        self, input_ids: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, logits) with logits (n_labelled, vocab) in row-major order of `labels`."""
        hidden, _ = self.bert(input_ids)  # (B, L, d)
        chosen = labels != IGNORE  # (B, L)
        logits = self.cls.predictions(hidden[chosen])  # (n, vocab)
        if logits.shape[0] == 0:  # nothing masked: a zero loss that still has a graph
            return logits.sum(), logits
        return F.cross_entropy(logits.float(), labels[chosen]), logits

    def head_state(self) -> dict[str, torch.Tensor]:
        """The head's tensors under checkpoint names, without the tied decoder weight."""
        state = self.cls.state_dict(prefix="cls.")
        return {k: v for k, v in state.items() if k != "cls.predictions.decoder.weight"}


def load_masked_lm(folder: Path, max_len: int | None = None) -> M2ForMaskedLM:
    """An M2ForMaskedLM from a checkpoint folder (its MLM head if it has one, else a new one),
    warm-started to `max_len` positions when that is longer than the checkpoint's."""
    cfg = read_config(folder)
    state = read_state_dict(find_weights_file(folder))
    if max_len and max_len > cfg.max_position_embeddings:
        state = warm_start_state_dict(state, max_len)
        cfg = M2Config(
            **{**asdict(cfg), "max_position_embeddings": max_len, "long_conv_l_max": max_len}
        )
    model = M2ForMaskedLM(cfg)
    load_released_state_dict(model.bert, state)
    head = {
        strip_checkpoint_prefixes(k)[len("cls.") :]: v
        for k, v in state.items()
        if strip_checkpoint_prefixes(k).startswith("cls.")
    }
    model.cls.load_state_dict(head, strict=False)
    return model


# ---------------------------------------------------------------------------------------------
# Training


@dataclass
class PretrainConfig:
    """Knobs of `pretrain`; defaults are the recipe's (rates) and a tiny CPU run (sizes)."""

    max_len: int = 128
    short_fraction: float = 0.30
    mask_prob: float = 0.30
    batch_size: int = 16
    steps: int = 300
    time_budget_s: float | None = None  # stop earlier when this many seconds have passed
    lr: float = 2e-3
    pos_emb_lr: float = 1e-5  # the learned filter features z (reference: hyena_lr_pos_emb)
    weight_decay: float = 0.01
    warmup_fraction: float = 0.06
    max_grad_norm: float = 1.0
    eval_batches: int = 8
    seed: int = 0


@dataclass
class PretrainResult:
    steps: int
    seconds: float
    accuracy_before: float
    accuracy_after: float
    losses: list[float] = field(default_factory=list)


def _param_groups(model: nn.Module, cfg: PretrainConfig) -> list[dict[str, Any]]:
    """z at its own small lr; no weight decay on biases, norms, freq and 1-d tensors."""
    groups: dict[str, list[nn.Parameter]] = {"z": [], "decay": [], "no_decay": []}
    for name, param in model.named_parameters():  # shared tensors (tied, freq) appear once
        if name.endswith("pos_emb.z"):
            groups["z"].append(param)
        elif param.ndim < 2 or name.endswith("freq") or "LayerNorm" in name or "layernorm" in name:
            groups["no_decay"].append(param)
        else:
            groups["decay"].append(param)
    return [
        {"params": groups["decay"], "lr": cfg.lr, "weight_decay": cfg.weight_decay},
        {"params": groups["no_decay"], "lr": cfg.lr, "weight_decay": 0.0},
        {"params": groups["z"], "lr": cfg.pos_emb_lr, "weight_decay": 0.0},
    ]


def make_eval_set(
    documents: Sequence[Sequence[int]], tokens: TokenIds, cfg: PretrainConfig, seed: int = 1234
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed (inputs, labels) batches from held-out documents, same recipe, own seeds."""
    sampler = MixedLengthSampler(documents, tokens, cfg.max_len, cfg.short_fraction, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    return [
        mask_tokens(sampler.batch(cfg.batch_size), tokens, cfg.mask_prob, generator)
        for _ in range(cfg.eval_batches)
    ]


@torch.no_grad()
def masked_accuracy(
    model: M2ForMaskedLM, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]
) -> float:
    """Share of masked positions whose argmax prediction is the original token."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = total = 0
    for inputs, labels in batches:
        labels = labels.to(device)
        _, logits = model(inputs.to(device), labels)
        correct += int((logits.argmax(-1) == labels[labels != IGNORE]).sum())
        total += int((labels != IGNORE).sum())
    model.train(was_training)
    return correct / max(1, total)


def pretrain(
    model: M2ForMaskedLM,
    train_documents: Sequence[Sequence[int]],
    eval_set: Sequence[tuple[torch.Tensor, torch.Tensor]],
    tokens: TokenIds,
    cfg: PretrainConfig,
) -> PretrainResult:
    """Train `model` in place on the mixed-length MLM recipe; report held-out accuracy."""
    device = next(model.parameters()).device
    sampler = MixedLengthSampler(train_documents, tokens, cfg.max_len, cfg.short_fraction, cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    before = masked_accuracy(model, eval_set)

    def batches(step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [mask_tokens(sampler.batch(cfg.batch_size), tokens, cfg.mask_prob, generator)]

    def loss(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return model(batch[0].to(device), batch[1].to(device))[0]

    model.train()
    minutes = None if cfg.time_budget_s is None else cfg.time_budget_s / 60
    settings = LoopSettings(
        cfg.steps, cfg.lr, cfg.warmup_fraction, decay=True, weight_decay=cfg.weight_decay,
        betas=(0.9, 0.98), eps=1e-6, max_grad_norm=cfg.max_grad_norm, max_minutes=minutes,
        seed=cfg.seed,
    )  # fmt: skip
    state = run_loop(Recipe(_param_groups(model, cfg), batches, loss), settings)
    after = masked_accuracy(model, eval_set)
    return PretrainResult(state.step, state.seconds, before, after, state.losses)


# ---------------------------------------------------------------------------------------------
# Command line


def read_corpus(path: Path) -> list[str]:
    """Documents of a JSONL file (`title` + `text` fields, BEIR style) or of a text file
    (blank-line-separated)."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
        return [f"{r.get('title') or ''} {r.get('text') or ''}".strip() for r in rows]
    return [block.strip() for block in raw.split("\n\n") if block.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m docsearch.training.m2_pretrain", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--corpus", type=Path, required=True, help="JSONL (title/text) or text file")
    p.add_argument("--out", type=Path, required=True, help="folder to write (encoder layout)")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder or Hub id")
    p.add_argument("--init", type=Path, help="checkpoint folder to continue from (warm start)")
    p.add_argument("--shape", choices=("tiny", "80M"), default="tiny", help="new model's shape")
    p.add_argument("--hidden-size", type=int, help="override the shape's hidden size")
    p.add_argument("--layers", type=int, help="override the shape's number of layers")
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--minutes", type=float, help="stop after this many minutes of training")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--eval-fraction", type=float, default=0.05, help="held-out documents")
    p.add_argument("--max-docs", type=int, help="use only the first N documents")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    return p


def _new_model(args: argparse.Namespace, vocab_size: int) -> M2ForMaskedLM:
    shape: dict[str, Any] = dict(TINY_CONFIG) if args.shape == "tiny" else {}
    if args.hidden_size:
        shape.update(hidden_size=args.hidden_size, intermediate_size=4 * args.hidden_size)
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    length = {"max_position_embeddings": args.max_len, "long_conv_l_max": args.max_len}
    return M2ForMaskedLM(M2Config(**{**shape, **length, "vocab_size": -(-vocab_size // 8) * 8}))


def majority_baseline(batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Accuracy of always predicting the most frequent masked token (context-free)."""
    labels = torch.cat([lab[lab != IGNORE] for _, lab in batches])
    return float(torch.bincount(labels).max()) / max(1, labels.numel())


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Pretrain, evaluate on held-out documents, write the folder and `pretrain_report.json`."""
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tokenizer = load_tokenizer(resolve_model(args.tokenizer))
    tokens = TokenIds.from_tokenizer(tokenizer)
    docs = read_corpus(args.corpus)[: args.max_docs]
    random.Random(args.seed).shuffle(docs)
    n_eval = max(1, int(len(docs) * args.eval_fraction))
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
    model = (
        load_masked_lm(args.init, args.max_len) if args.init else _new_model(args, len(tokenizer))
    )
    model.to(args.device)
    budget = args.minutes * 60 if args.minutes else None
    cfg = PretrainConfig(
        args.max_len, batch_size=args.batch_size, steps=args.steps, time_budget_s=budget,
        lr=args.lr, seed=args.seed,
    )  # fmt: skip
    eval_set = make_eval_set(ids[:n_eval], tokens, cfg)
    result = pretrain(model, ids[n_eval:], eval_set, tokens, cfg)
    save_checkpoint(model.bert, args.out, tokenizer=tokenizer, extra=model.head_state())
    report = {
        "corpus": str(args.corpus),
        "documents": {"train": len(docs) - n_eval, "held_out": n_eval},
        "config": asdict(model.bert.config),
        "recipe": asdict(cfg),
        "result": {**asdict(result), "losses": result.losses[:: max(1, len(result.losses) // 50)]},
        "majority_baseline": majority_baseline(eval_set),
    }
    (args.out / "pretrain_report.json").write_text(json.dumps(report, indent=2) + "\n")
    write_card(args.out, run_record(
        title="M2-BERT pretrained by masked language modelling", encoder="m2-bert",
        method="all weights", recipe="mixed-length MLM",
        start={"init": str(args.init)} if args.init else f"random weights ({args.shape} shape)",
        load={"model": str(args.out)}, losses=result.losses, planned=cfg.steps,
        seconds=result.seconds, device=args.device, settings=asdict(cfg),
    ))  # fmt: skip
    summary = {k: v for k, v in asdict(result).items() if k != "losses"}
    summary["majority_baseline"] = report["majority_baseline"]
    print(json.dumps(summary, indent=2))
    return report


if __name__ == "__main__":
    main()
