"""NV-Embed training: the latent-attention block, optionally a LoRA on the decoder, two stages.

Stage 1 (retrieval): InfoNCE (`losses.mnrl`) over the in-batch documents plus mined hard
negatives. Stage 2: no in-batch negatives; each query is scored against its own positive and
its own hard negatives only. NV-Embed turns in-batch negatives off in stage 2 because it blends
in non-retrieval data (classification, clustering, STS), where other rows' documents are often
not negatives at all. That data is not here: stage 2 runs on the pairs it is given.

Hard negatives are mined positive-aware (NV-Retriever's "TopK-PercPos"): a teacher scores the
candidate documents for each query and keeps only those scoring below `margin` (0.95) x the
query's positive score, best first; most false negatives score close to the positive and drop
out. The teacher is the frozen decoder's masked mean pooling, the baseline this training must
beat, and a document with the positive's id is never a negative.

With the decoder frozen (`lora_r=0`) its hidden states are computed once per text and cached,
so a step costs only the latent block: what makes a CPU run worth doing. With a LoRA (the paper
uses r=16, alpha=32 [unverified here]) the decoder runs every step. The block starts as the
identity (`LatentAttentionModel.start_as_identity`): training starts from mean pooling.
Each stage is a recipe for the shared loop (`loop.py`): AdamW at a constant learning rate per
parameter group. Output: a folder that `get_encoder("nv-embed", model=<base>, adapter=<out>)`
loads, with a model card (`card.py`).
Not here: turning data sets into examples (`benchmarks/nv_embed_train.py` does that for
../shared/data), evaluation, checkpoints and resume.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from docsearch.encoders.llm2vec import bidirectional_hidden_states, load_decoder, lora_config
from docsearch.encoders.nv_embed import (
    DEFAULT_QUERY_INSTRUCTION,
    LatentAttentionConfig,
    LatentAttentionModel,
    build_inputs,
    embed_batch,
    is_released_layout,
    load_nv_tokenizer,
    load_released,
    pool_hidden,
    save_adapter_folder,
)
from docsearch.encoders.weights import resolve_model
from docsearch.errors import UsageError
from docsearch.training.card import run_record, write_card
from docsearch.training.data import mine, relevant_docs
from docsearch.training.loop import (
    LoopSettings,
    Recipe,
    Reporter,
    TrainResult,
    local_ref,
    run_loop,
)
from docsearch.training.losses import mnrl

Embed = Callable[[Sequence[str], str], torch.Tensor]  # (texts, instruction) -> (n, dim) unit


@dataclass(frozen=True)
class Example:
    """One training query with its positive document; negatives are filled in by mining."""

    query: str
    positive: str
    positive_id: str  # documents with this id are never negatives for this query
    instruction: str = DEFAULT_QUERY_INSTRUCTION
    negatives: tuple[str, ...] = ()
    negative_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    """A candidate for hard-negative mining."""

    id: str
    text: str


@dataclass
class TrainConfig:
    """Settings of a run. `max_seconds` bounds the two optimisation stages together (state
    caching and mining come first and are timed apart); a stage also stops at its step count."""

    max_length: int = 256  # tokens per input, BOS, instruction and EOS included
    batch_size: int = 16
    negatives: int = 1  # mined hard negatives per query
    margin: float = 0.95  # keep negatives scoring below margin x the positive
    scale: float = 50.0  # inverse temperature of the InfoNCE logits
    stage1_steps: int = 300
    stage2_steps: int = 100
    lr: float = 2e-4  # latent block
    lora_r: int = 0  # 0: frozen decoder (states cached)
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_lr: float = 2e-5
    latents: int = 512
    heads: int = 8
    head_dim: int | None = None  # None: the decoder width, as released
    max_seconds: float | None = None
    stage1_share: float = 0.75  # of max_seconds
    query_instruction: str = DEFAULT_QUERY_INSTRUCTION  # what the saved encoder defaults to
    document_instruction: str = ""
    cache_dtype: str = "bfloat16"  # cached decoder states (halves the memory)
    seed: int = 0


@dataclass
class Timings:
    cache: float = 0.0
    mining: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Pure helpers: batching, the stage-2 loss


def batches(examples: Sequence[Example], batch_size: int, seed: int) -> Iterator[list[Example]]:
    """Endless shuffled batches in which no two rows share a query or a positive document
    (either would make a row's own positive an in-batch negative of another)."""
    rng = random.Random(seed)
    pending: list[Example] = []
    while True:
        if len(pending) < 2 * batch_size:
            order = list(examples)
            rng.shuffle(order)
            pending += order
        batch: list[Example] = []
        rest: list[Example] = []
        for example in pending:
            clash = any(
                e.positive_id == example.positive_id or e.query == example.query for e in batch
            )
            if len(batch) < batch_size and not clash:
                batch.append(example)
            else:
                rest.append(example)
        pending = rest
        yield batch


def own_negatives_loss(
    q: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    present: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Stage 2: `CE(scale * cos(q_i, [p_i, n_i1..n_ik]), 0)`, no other row's documents.

    Inputs: q, positives (batch, dim); negatives (batch, k, dim); present (batch, k) bool,
    False where a row has fewer than k negatives (that logit is left out).
    """
    q = F.normalize(q, dim=-1)
    pos = (q * F.normalize(positives, dim=-1)).sum(-1, keepdim=True)  # (batch, 1)
    neg = torch.einsum("bd,bkd->bk", q, F.normalize(negatives, dim=-1))  # (batch, k)
    neg = neg.masked_fill(~present, float("-inf"))
    logits = scale * torch.cat([pos, neg], dim=1)  # (batch, 1 + k)
    return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long, device=q.device))


# ---------------------------------------------------------------------------------------------
# Embedding: cached decoder states (frozen decoder) or the live decoder (LoRA)


class StateCache:
    """Decoder hidden states and pool masks per (instruction, text), computed once.

    Only the real (non-pad) positions are kept; the latent block is per-token, so re-padding a
    batch from the cache gives the same pooled vectors as running the decoder on it.
    """

    def __init__(
        self,
        decoder: Any,
        tokenizer: Any,
        max_length: int,
        dtype: torch.dtype,
        batch_size: int = 16,
    ) -> None:
        self.decoder, self.tokenizer = decoder, tokenizer
        self.max_length, self.dtype, self.batch_size = max_length, dtype, batch_size
        self.states: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def fill(self, texts: Sequence[str], instruction: str) -> None:
        todo = sorted({t for t in texts if (instruction, t) not in self.states}, key=len)
        with torch.no_grad():
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                enc = build_inputs(self.tokenizer, chunk, instruction, self.max_length)
                hidden = bidirectional_hidden_states(
                    self.decoder, enc["input_ids"], enc["attention_mask"]
                )
                for row, text in enumerate(chunk):
                    n = int(enc["attention_mask"][row].sum())
                    self.states[(instruction, text)] = (
                        hidden[row, :n].to(self.dtype),
                        enc["pool_mask"][row, :n],
                    )

    def batch(self, texts: Sequence[str], instruction: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden (batch, seq, dim) float32, pool mask (batch, seq)), right-padded with zeros."""
        self.fill(texts, instruction)
        rows = [self.states[(instruction, t)] for t in texts]
        hidden = pad_sequence([h.float() for h, _ in rows], batch_first=True)
        return hidden, pad_sequence([m for _, m in rows], batch_first=True)


def cached_embed(cache: StateCache, pooler: LatentAttentionModel | None) -> Embed:
    def embed(texts: Sequence[str], instruction: str) -> torch.Tensor:
        hidden, mask = cache.batch(texts, instruction)
        return pool_hidden(pooler, hidden, mask)

    return embed


def live_embed(
    decoder: Any, pooler: LatentAttentionModel | None, tokenizer: Any, max_length: int
) -> Embed:
    def embed(texts: Sequence[str], instruction: str) -> torch.Tensor:
        return embed_batch(decoder, pooler, tokenizer, texts, instruction, max_length)

    return embed


def embed_all(
    embed: Embed, texts: Sequence[str], instruction: str, batch_size: int
) -> torch.Tensor:
    """Vectors for many texts without gradients, in order."""
    with torch.no_grad():
        parts = [
            embed(texts[i : i + batch_size], instruction) for i in range(0, len(texts), batch_size)
        ]
    return torch.cat(parts) if parts else torch.zeros(0)


def embed_queries(embed: Embed, batch: Sequence[Example]) -> torch.Tensor:
    """Query vectors in batch order; rows may carry different instructions (mixed data sets)."""
    groups: dict[str, list[int]] = {}
    for row, example in enumerate(batch):
        groups.setdefault(example.instruction, []).append(row)
    parts = {ins: embed([batch[r].query for r in rows], ins) for ins, rows in groups.items()}
    order = [(row, ins, i) for ins, rows in groups.items() for i, row in enumerate(rows)]
    return torch.stack([parts[ins][i] for _, ins, i in sorted(order)])  # (batch, dim)


# ---------------------------------------------------------------------------------------------
# Mining


def mine_negatives(
    examples: Sequence[Example],
    documents: Sequence[Document],
    teacher: Embed,
    config: TrainConfig,
) -> list[Example]:
    """Examples with `config.negatives` positive-aware hard negatives from `documents`; those
    that bring negatives of their own keep them."""
    todo = [e for e in examples if not e.negatives]
    if config.negatives <= 0 or not todo:
        return list(examples)
    instruction, size = config.document_instruction, config.batch_size
    doc_vectors = embed_all(teacher, [d.text for d in documents], instruction, size)
    positives = embed_all(teacher, [e.positive for e in todo], instruction, size)
    queries = torch.cat([embed_all(teacher, [e.query], e.instruction, 1) for e in todo])
    own = relevant_docs((e.query, e.positive_id) for e in todo)
    picks = mine(
        queries.numpy(), positives.numpy(), doc_vectors.numpy(), [d.id for d in documents],
        [own[e.query] for e in todo], config.negatives, config.margin,
    )  # fmt: skip
    mined = iter(
        replace(
            e,
            negatives=tuple(documents[c].text for c in cols),
            negative_ids=tuple(documents[c].id for c in cols),
        )
        for e, cols in zip(todo, picks, strict=True)
    )
    return [e if e.negatives else next(mined) for e in examples]


# ---------------------------------------------------------------------------------------------
# The two stages


def batch_negatives(batch: Sequence[Example]) -> list[tuple[str, str]]:
    """Stage 1: every row's negatives as shared columns, minus any batch positive, no repeats."""
    positives = {e.positive_id for e in batch}
    found: dict[str, str] = {}
    for example in batch:
        for doc_id, text in zip(example.negative_ids, example.negatives, strict=True):
            if doc_id not in positives:
                found.setdefault(doc_id, text)
    return list(found.items())


def stage1_loss(embed: Embed, batch: Sequence[Example], config: TrainConfig) -> torch.Tensor:
    q = embed_queries(embed, batch)
    docs = embed([e.positive for e in batch], config.document_instruction)
    negatives = [text for _, text in batch_negatives(batch)]
    hard = embed(negatives, config.document_instruction) if negatives else None
    return mnrl(q, docs, hard, scale=config.scale)


def stage2_loss(embed: Embed, batch: Sequence[Example], config: TrainConfig) -> torch.Tensor:
    k = max(len(e.negatives) for e in batch)
    q = embed_queries(embed, batch)
    docs = embed([e.positive for e in batch], config.document_instruction)
    if k == 0:  # nothing to contrast in this batch (mining found no negative below the margin)
        return (q * docs).sum() * 0.0
    texts = [
        e.negatives[j] if j < len(e.negatives) else e.positive for e in batch for j in range(k)
    ]
    negatives = embed(texts, config.document_instruction).view(len(batch), k, -1)
    present = torch.tensor([[j < len(e.negatives) for j in range(k)] for e in batch])
    return own_negatives_loss(q, docs, negatives, present, config.scale)


def stage_batches(
    examples: Sequence[Example], batch_size: int, seed: int
) -> Callable[[int], list[list[Example]]]:
    """The loop's batches of one stage: step -> [the next batch of `batches`]."""
    stream = batches(examples, batch_size, seed)
    return lambda step: [next(stream)]


# ---------------------------------------------------------------------------------------------
# The run


def load_start(base: str, config: TrainConfig) -> tuple[Any, LatentAttentionModel, Any]:
    """(bidirectional decoder, latent block to train, tokenizer) for `base`.

    A released NV-Embed folder is fine-tuned from its own block; a plain decoder gets a new
    block of the release's shape (latents, heads, head size = width) starting as the identity.
    """
    folder = resolve_model(base)
    tokenizer = load_nv_tokenizer(folder, None)
    if is_released_layout(folder):
        decoder, latent = load_released(folder)
        return decoder, latent.train(), tokenizer
    decoder = load_decoder(folder)
    torch.manual_seed(config.seed)
    shape = LatentAttentionConfig.for_decoder(
        int(decoder.config.hidden_size),
        latents=config.latents,
        heads=config.heads,
        head_dim=config.head_dim,
    )
    return decoder, LatentAttentionModel(shape).start_as_identity().train(), tokenizer


def attach_lora(decoder: Any, config: TrainConfig) -> Any:
    """The decoder with a trainable LoRA (peft), or frozen when `lora_r` is 0."""
    if config.lora_r <= 0:
        for p in decoder.parameters():
            p.requires_grad_(False)
        return decoder
    from peft import get_peft_model

    lora = lora_config(r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout)
    return get_peft_model(decoder, lora).train()


def train_nv_embed(
    base: str,
    examples: Sequence[Example],
    out_dir: str | Path,
    *,
    documents: Sequence[Document] | None = None,
    stage2: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    reporter: Reporter | None = None,
) -> TrainResult:
    """Train the latent block (and a LoRA if `config.lora_r`) on `examples`; save to `out_dir`.

    `documents` is the mining pool (default: every example's positive); `stage2` the stage-2
    examples (default: the stage-1 ones); both get mined negatives when they have none.
    """
    config = config or TrainConfig()
    if len({e.positive_id for e in examples}) < 2:
        raise UsageError("NV-Embed training needs at least two different positive documents")
    start, timings = time.perf_counter(), Timings()
    decoder, latent, tokenizer = load_start(base, config)
    decoder = attach_lora(decoder, config)
    both = [*examples, *(stage2 or [])]
    embed, teacher = make_embedders(
        decoder, latent, tokenizer, config, both, documents or [], timings
    )
    pool = list(documents) if documents is not None else unique_positives(examples)
    first, second = mine_stages(examples, stage2, pool, teacher, config, timings)
    losses = train_stages(embed, decoder, latent, first, second, config, timings, reporter)
    latent.eval()
    settings = run_settings(base, config, len(first), timings)
    lora_model = decoder if config.lora_r > 0 else None
    ref = local_ref(base)
    out = save_adapter_folder(
        out_dir, base=ref, latent=latent, tokenizer=tokenizer, settings=settings,
        lora_model=lora_model,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    method = "latent-attention block" + (
        " and a decoder LoRA" if lora_model else ", decoder frozen"
    )
    write_card(out, run_record(
        title="NV-Embed adapter (latent-attention pooling)", encoder="nv-embed", method=method,
        recipe="nv-embed two-stage", start={"model": ref}, load={"model": ref, "adapter": str(out)},
        losses=losses, planned=config.stage1_steps + config.stage2_steps, seconds=seconds,
        device="cpu", settings=settings["training"],
    ))  # fmt: skip
    return TrainResult(out, losses, seconds, settings)


def unique_positives(examples: Sequence[Example]) -> list[Document]:
    return list({e.positive_id: Document(e.positive_id, e.positive) for e in examples}.values())


def mine_stages(
    examples: Sequence[Example],
    stage2: Sequence[Example] | None,
    pool: Sequence[Document],
    teacher: Embed,
    config: TrainConfig,
    timings: Timings,
) -> tuple[list[Example], list[Example]]:
    """(stage-1, stage-2 examples) with mined negatives; refuses a stage 2 with none at all."""
    started = time.perf_counter()
    first = mine_negatives(examples, pool, teacher, config)
    second = first if stage2 is None else mine_negatives(stage2, pool, teacher, config)
    timings.mining = time.perf_counter() - started
    if config.stage2_steps > 0 and not any(e.negatives for e in second):
        raise UsageError(
            "stage 2 needs hard negatives (it has no in-batch negatives): set negatives > 0, "
            "give a larger mining pool, or stage2_steps=0"
        )
    return first, second


def make_embedders(
    decoder: Any,
    latent: LatentAttentionModel,
    tokenizer: Any,
    config: TrainConfig,
    examples: Sequence[Example],
    documents: Sequence[Document],
    timings: Timings,
) -> tuple[Embed, Embed]:
    """(trainable embed, teacher embed). Frozen decoder: the state cache is filled first with
    every text of `examples` (both stages) and `documents`."""
    if config.lora_r > 0:
        return live_embed(decoder, latent, tokenizer, config.max_length), live_embed(
            decoder, None, tokenizer, config.max_length
        )
    t0 = time.perf_counter()
    cache = StateCache(
        decoder, tokenizer, config.max_length, getattr(torch, config.cache_dtype), config.batch_size
    )
    for instruction in {e.instruction for e in examples}:
        cache.fill([e.query for e in examples if e.instruction == instruction], instruction)
    docs = [e.positive for e in examples] + [n for e in examples for n in e.negatives]
    cache.fill(docs + [d.text for d in documents], config.document_instruction)
    timings.cache = time.perf_counter() - t0
    return cached_embed(cache, latent), cached_embed(cache, None)


def train_stages(
    embed: Embed,
    decoder: Any,
    latent: LatentAttentionModel,
    first: Sequence[Example],
    second: Sequence[Example],
    config: TrainConfig,
    timings: Timings,
    reporter: Reporter | None,
) -> list[float]:
    """Stage 1 then stage 2 in the loop, each for its steps or until its part of the time
    budget is spent; returns all step losses."""
    lora = [p for p in decoder.parameters() if p.requires_grad]
    groups = [{"params": list(latent.parameters()), "lr": config.lr}]
    groups += [{"params": lora, "lr": config.lora_lr}] if lora else []
    budget = config.max_seconds
    limits = (None, None) if budget is None else (budget * config.stage1_share, budget)
    stages = (
        ("stage1", stage1_loss, first, config.stage1_steps),
        ("stage2", stage2_loss, second, config.stage2_steps),
    )
    losses: list[float] = []
    for (name, stage_loss, data, steps), limit in zip(stages, limits, strict=True):
        minutes = None if limit is None else (limit - sum(timings.stages.values())) / 60
        if reporter is not None:
            reporter.status(f"NV-Embed {name}: {steps} steps")
        loss = partial(stage_loss, embed, config=config)
        recipe = Recipe(groups, stage_batches(data, config.batch_size, config.seed), loss)
        settings = LoopSettings(steps, config.lr, max_minutes=minutes, seed=config.seed)
        t0 = time.perf_counter()
        done = run_loop(recipe, settings, reporter).losses
        timings.stages[name], timings.steps[name] = time.perf_counter() - t0, len(done)
        losses += done
    return losses


def run_settings(
    base: str, config: TrainConfig, n_examples: int, timings: Timings
) -> dict[str, Any]:
    """What `nv_embed_config.json` records: encoder defaults and how the block was trained."""
    return {
        "max_length": config.max_length,
        "query_instruction": config.query_instruction,
        "document_instruction": config.document_instruction,
        "training": {
            "base": base,
            "recipe": "nv-embed two-stage",
            "examples": n_examples,
            **asdict(config),
            "steps_done": timings.steps,
            "seconds": {"cache": timings.cache, "mining": timings.mining, **timings.stages},
        },
    }
