"""Training losses for embedding models, as pure tensor functions.

`opl` (LoCo / M2-BERT orthogonal projection loss), `mnrl` (InfoNCE over in-batch and hard
negatives), `simcse` (unsupervised SimCSE: two dropout views of one batch), `mntp` (LLM2Vec's
masked next-token prediction), and `cached_mnrl`, the GradCache form of `mnrl` whose memory does
not grow with the batch, for long inputs. Each docstring says what the loss optimises, what it
requires, its inputs and where it comes from.
Not here: models, data, optimisers and the training loop (`docsearch.training.loop`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # label of positions the MNTP loss skips (Hugging Face convention)


def opl(q: torch.Tensor, d: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Orthogonal projection loss: `mean((cos(q_i, d_i) - label_i) ** 2)`.

    Pulls the cosine of relevant pairs towards 1 and of irrelevant pairs towards 0 (orthogonal,
    not opposite). Each pair is scored on its own, so the loss does not depend on the batch size
    and works with the tiny batches long documents allow.

    Requirements: (query, document) pairs with a label: 1.0 relevant, 0.0 irrelevant (random or
    mined negatives, e.g. 32 per query as in the paper).

    Inputs:
        q: (batch, dim) query embeddings (not necessarily normalised).
        d: (batch, dim) document embeddings, row i paired with q[i].
        labels: (batch,) float targets for the cosine, usually 1.0 / 0.0.

    References: Saad-Falcon et al., "Benchmarking and Building Long-Context Retrieval Models with
    LoCo and M2-BERT", ICML 2024 (the fine-tuning loss of M2-BERT-32k-retrieval).
    """
    cosine = F.cosine_similarity(q, d, dim=-1)  # (batch,)
    return ((cosine - labels.to(cosine.dtype)) ** 2).mean()


def opl_all_pairs(q: torch.Tensor, d: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`opl` over every (query, document) cell of a batch: `mean((cos(q_i, d_j) - label_ij) ** 2)`.

    The same loss as `opl`, applied to all cells of the score matrix instead of the diagonal:
    every document embedded for one query is also a random negative for the others, so a
    micro-batch of b pairs with k negatives each gives every query b(1 + k) - 1 negatives for the
    cost of b(1 + k) document embeddings (the paper's 32 negatives per query, 1/8 of the
    encoding at b = 8, k = 3). Cells labelled NaN are left out: a document that may be relevant
    to the query (another pair's window of the query's own document) is neither pulled nor pushed.

    Requirements: labels 1.0 (relevant), 0.0 (irrelevant) or NaN (unknown), at least one known.

    Inputs:
        q: (b, dim) query embeddings.
        d: (n, dim) document embeddings.
        labels: (b, n) float targets for the cosine of each cell.

    References: Saad-Falcon et al., ICML 2024 (LoCo / M2-BERT), as `opl`; in-batch reuse of
    documents as negatives as in `mnrl`.
    """
    cosine = F.normalize(q, dim=-1) @ F.normalize(d, dim=-1).T  # (b, n)
    known = ~torch.isnan(labels)
    if not bool(known.any()):
        raise ValueError("opl_all_pairs needs at least one labelled cell")
    return ((cosine[known] - labels[known].to(cosine.dtype)) ** 2).mean()


def mnrl(
    q: torch.Tensor,
    d: torch.Tensor,
    hard_negatives: torch.Tensor | None = None,
    scale: float = 20.0,
) -> torch.Tensor:
    """Multiple negatives ranking loss (InfoNCE): cross-entropy over the in-batch score matrix.

    For query i the positive is document i; every other document of the batch, and every hard
    negative of every row, is a negative. The loss is `CE(scale * cos(q, [d; negatives]), i)`,
    averaged over queries. More negatives (bigger batches) make it stronger, which is what
    `cached_mnrl` is for.

    Requirements: (query, positive) pairs with no duplicates in a batch; optional hard negatives.

    Inputs:
        q: (batch, dim) query embeddings.
        d: (batch, dim) positive document embeddings, row i paired with q[i].
        hard_negatives: (n, dim) or (batch, k, dim) extra negative documents, shared by all
            queries as extra columns (k per query in the second form, flattened row-major).
        scale: inverse temperature; 20 in LLM2Vec SimCSE, 50 in its supervised stage.

    References: Henderson et al. 2017, "Efficient Natural Language Response Suggestion for Smart
    Reply"; van den Oord et al. 2018 (InfoNCE); sentence-transformers
    `MultipleNegativesRankingLoss`; LLM2Vec `HardNegativeNLLLoss`.
    """
    candidates = d  # the documents, then the hard negatives
    if hard_negatives is not None:
        candidates = torch.cat([d, hard_negatives.reshape(-1, d.shape[-1])], dim=0)
    q, candidates = F.normalize(q, dim=-1), F.normalize(candidates, dim=-1)
    scores = scale * q @ candidates.T  # (batch, batch + n_negatives)
    targets = torch.arange(q.shape[0], device=q.device)
    return F.cross_entropy(scores, targets)


def simcse(view_a: torch.Tensor, view_b: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """Unsupervised SimCSE: `mnrl` between two dropout views of the same sentences.

    The same batch goes through the model twice with dropout on; view_a[i] must find its own
    other view view_b[i] among the batch. Dropout is the only augmentation (LLM2Vec: attention
    dropout 0.3 plus LoRA dropout 0.05).

    Requirements: raw sentences only, no labels; the model in training mode so the views differ.

    Inputs:
        view_a: (batch, dim) embeddings of the first pass.
        view_b: (batch, dim) embeddings of the second pass over the same texts.
        scale: inverse temperature (20, as in LLM2Vec's SimCSE stage).

    References: Gao et al., "SimCSE: Simple Contrastive Learning of Sentence Embeddings", EMNLP
    2021; BehnamGhader et al., "LLM2Vec", COLM 2024.
    """
    return mnrl(view_a, view_b, scale=scale)


def mntp(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked next-token prediction: the logits at position i-1 score the masked token at i.

    LLM2Vec's adaptation step for a decoder made bidirectional: some input tokens are masked,
    and the original token at a masked position i is predicted from the output at i-1 (the
    causal LM head's usual shift), so the pretrained next-token head is reused as is.
    Returns the mean cross-entropy over the masked positions, or 0 (with a graph) if none.

    Requirements: a masked batch, labels holding the original id at masked positions and
    `IGNORE_INDEX` (-100) elsewhere; the first position cannot be a target.

    Inputs:
        logits: (batch, seq, vocab) LM-head outputs of the masked input.
        labels: (batch, seq) original token ids at masked positions, -100 elsewhere.

    References: BehnamGhader et al., "LLM2Vec: Large Language Models Are Secretly Powerful Text
    Encoders", COLM 2024, section 2 (MNTP).
    """
    shifted_logits = logits[:, :-1].reshape(-1, logits.shape[-1])  # (batch*(seq-1), vocab)
    shifted_labels = labels[:, 1:].reshape(-1)  # (batch*(seq-1),)
    if not bool((shifted_labels != IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(shifted_logits, shifted_labels, ignore_index=IGNORE_INDEX)


# ---------------------------------------------------------------------------------------------
# GradCache: mnrl over a large batch with the memory of one mini-batch


def _embed_detached(
    embed: Callable[[Any], torch.Tensor], chunks: Sequence[Any]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Embed every chunk without a graph, keeping each chunk's RNG state for the replay."""
    states, outputs = [], []
    for chunk in chunks:
        states.append(torch.get_rng_state())
        with torch.no_grad():
            outputs.append(embed(chunk))
    return torch.cat(outputs).requires_grad_(True), states


def _replay(
    embed: Callable[[Any], torch.Tensor],
    chunks: Sequence[Any],
    states: Sequence[torch.Tensor],
    grads: torch.Tensor,
) -> None:
    """Re-embed each chunk with a graph (same dropout) and push its cached gradient through it."""
    end_state = torch.get_rng_state()
    start = 0
    for chunk, state in zip(chunks, states, strict=True):
        torch.set_rng_state(state)
        reps = embed(chunk)  # (chunk, dim)
        reps.backward(grads[start : start + reps.shape[0]])
        start += reps.shape[0]
    torch.set_rng_state(end_state)


def cached_mnrl(
    embed: Callable[[Any], torch.Tensor],
    query_chunks: Sequence[Any],
    document_chunks: Sequence[Any],
    negative_chunks: Sequence[Any] = (),
    scale: float = 20.0,
) -> torch.Tensor:
    """`mnrl` over the whole batch, with gradients computed one mini-batch at a time (GradCache).

    Same loss and same parameter gradients as `mnrl` on the full batch, but peak activation
    memory is that of one chunk: (1) every chunk is embedded without a graph; (2) the loss and
    its gradient with respect to the embeddings are computed on the small (batch, dim) matrix,
    in float32; (3) when the caller back-propagates the returned loss, each chunk is embedded
    again with a graph (under the autocast of step 1) and the cached gradient, times the
    incoming one, is back-propagated through it. The CPU RNG state is replayed per chunk so
    dropout masks match between passes.

    Requirements: `embed` maps one chunk (whatever the caller batches: texts, tensors) to a
    (chunk, dim) tensor with a graph to the trainable parameters, and is deterministic given the
    RNG state (CPU dropout; CUDA RNG is not replayed). Call `backward` on the result once.

    Inputs:
        embed: chunk -> (chunk, dim) embeddings.
        query_chunks / document_chunks: the batch split into mini-batches; concatenated in order
            they give the rows of q and d in `mnrl`.
        negative_chunks: hard negatives, concatenated in order into the `(n, dim)` form.
        scale: inverse temperature, as in `mnrl`.

    References: Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory Limited
    Setup" (GradCache), RepL4NLP 2021; sentence-transformers `CachedMultipleNegativesRankingLoss`.
    """
    if not query_chunks or not document_chunks:
        raise ValueError("cached_mnrl needs at least one query chunk and one document chunk")
    groups = [c for c in (query_chunks, document_chunks, negative_chunks) if c]
    cached = [_embed_detached(embed, chunks) for chunks in groups]  # [(reps (n, dim), states)]
    reps = [r for r, _ in cached]
    device = reps[0].device.type
    autocast = (torch.get_autocast_dtype(device), torch.is_autocast_enabled(device))
    with torch.autocast(device, enabled=False):
        loss = mnrl(reps[0], reps[1], reps[2] if len(reps) > 2 else None, scale=scale)
        grads = torch.autograd.grad(loss, reps)

    def embed_again(chunk: Any) -> torch.Tensor:  # under the autocast of the first pass
        with torch.autocast(device, dtype=autocast[0], enabled=autocast[1]):
            return embed(chunk)

    def replay(incoming: torch.Tensor) -> None:  # runs inside backward, where grad mode is off
        with torch.enable_grad():
            for chunks, (_, states), grad in zip(groups, cached, grads, strict=True):
                _replay(embed_again, chunks, states, grad * incoming)

    out = loss.detach().requires_grad_(True)
    out.register_hook(replay)
    return out
