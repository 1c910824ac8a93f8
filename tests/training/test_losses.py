"""Losses: hand-computed values, equality with the textbook formulas, and where gradients go."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from docsearch.training.losses import cached_mnrl, mnrl, mntp, opl, opl_all_pairs, simcse


def test_opl_hand_computed() -> None:
    q = torch.tensor([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0], [1.0, 0.0]])
    d = torch.tensor([[2.0, 0.0], [0.0, 1.0], [4.0, 3.0], [-1.0, 0.0]])
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
    # cosines 1, 1/sqrt(2), 24/25, -1 -> squared errors 0, 1/2, 0.0016, 1
    expected = (0.0 + 0.5 + 0.04**2 + 1.0) / 4
    assert opl(q, d, labels).item() == pytest.approx(expected, abs=1e-6)
    assert opl(q[:1], d[:1], labels[:1]).item() == pytest.approx(0.0, abs=1e-7)


def test_opl_does_not_depend_on_batch_composition() -> None:
    torch.manual_seed(0)
    q, d = torch.randn(6, 8), torch.randn(6, 8)
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    per_pair = [opl(q[i : i + 1], d[i : i + 1], labels[i : i + 1]) for i in range(6)]
    assert opl(q, d, labels).item() == pytest.approx(torch.stack(per_pair).mean().item(), abs=1e-6)


def test_opl_all_pairs_hand_computed_and_skips_unlabelled_cells() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, -3.0]])
    # cosines: row 0 [1, 1/sqrt(2), 0], row 1 [0, 1/sqrt(2), -1]
    labels = torch.tensor([[1.0, 0.0, 0.0], [0.0, float("nan"), 1.0]])
    expected = (0.0 + 0.5 + 0.0 + 0.0 + 4.0) / 5  # the NaN cell is not counted
    assert opl_all_pairs(q, d, labels).item() == pytest.approx(expected, abs=1e-6)


def test_opl_all_pairs_with_only_the_diagonal_labelled_is_opl() -> None:
    torch.manual_seed(3)
    q, d = torch.randn(4, 8), torch.randn(4, 8)
    diagonal = torch.tensor([1.0, 0.0, 1.0, 0.0])
    labels = torch.full((4, 4), float("nan"))
    labels[range(4), range(4)] = diagonal
    assert opl_all_pairs(q, d, labels).item() == pytest.approx(opl(q, d, diagonal).item(), abs=1e-6)
    with pytest.raises(ValueError, match="labelled"):
        opl_all_pairs(q, d, torch.full((4, 4), float("nan")))


def test_mnrl_hand_computed() -> None:
    eye = torch.eye(2)
    # scores [[1, 0], [0, 1]] at scale 1: loss = -log(e / (e + 1)) for both rows
    assert mnrl(eye, eye, scale=1.0).item() == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)


def test_mnrl_is_cross_entropy_over_the_score_matrix() -> None:
    torch.manual_seed(1)
    q, d, neg = torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 2, 16)
    candidates = torch.cat([d, neg.reshape(-1, 16)])
    scores = 20.0 * F.normalize(q, dim=-1) @ F.normalize(candidates, dim=-1).T  # (4, 12)
    by_hand = -(scores.diagonal() - scores.logsumexp(dim=1)).mean()
    assert mnrl(q, d, neg).item() == pytest.approx(by_hand.item(), abs=1e-5)
    assert mnrl(q, d, neg.reshape(-1, 16)).item() == pytest.approx(by_hand.item(), abs=1e-5)
    assert mnrl(q, d, neg).item() > mnrl(q, d).item()  # more negatives, harder task


def test_simcse_is_mnrl_between_views() -> None:
    torch.manual_seed(2)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    assert simcse(a, b, scale=20.0).item() == pytest.approx(mnrl(a, b, scale=20.0).item())
    assert simcse(a, a).item() < simcse(a, b).item()


def test_mntp_scores_token_i_from_position_i_minus_1() -> None:
    logits = torch.zeros(1, 3, 2)
    logits[0, 0] = torch.tensor([0.0, math.log(3.0)])  # softmax [1/4, 3/4] at position 0
    logits[0, 1] = torch.tensor([5.0, 0.0])  # would give ~5.0 if position 1 scored itself
    labels = torch.tensor([[-100, 1, -100]])  # token 1 is masked at position 1
    assert mntp(logits, labels).item() == pytest.approx(-math.log(0.75), abs=1e-6)


def test_mntp_without_masked_tokens_is_zero_and_differentiable() -> None:
    logits = torch.randn(2, 4, 5, requires_grad=True)
    loss = mntp(logits, torch.full((2, 4), -100))
    loss.backward()
    assert loss.item() == 0.0 and logits.grad is not None


def test_gradients_reach_only_trainable_parameters() -> None:
    """A LoRA-wrapped tiny decoder: base weights frozen, LoRA B matrices get gradients."""
    from peft import get_peft_model
    from transformers import LlamaConfig, LlamaModel

    from docsearch.encoders.llm2vec import (
        bidirectional_hidden_states,
        lora_config,
        make_bidirectional,
    )

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    model = get_peft_model(make_bidirectional(LlamaModel(config)), lora_config(r=4, alpha=8))
    ids = torch.randint(3, 50, (4, 6))
    mask = torch.ones_like(ids)
    pooled = bidirectional_hidden_states(model, ids, mask).mean(1)  # (4, dim)
    loss = mnrl(pooled[:2], pooled[2:]) + opl(pooled[:2], pooled[2:], torch.tensor([1.0, 0.0]))
    loss.backward()
    named = dict(model.named_parameters())
    assert all(p.grad is None for p in named.values() if not p.requires_grad)
    assert all(p.grad is not None for p in named.values() if p.requires_grad)
    assert any(
        "lora_B" in n and p.grad.abs().sum() > 0 for n, p in named.items() if p.requires_grad
    )
    assert not any("lora_" not in n for n, p in named.items() if p.requires_grad)


def _encoder() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 8)
    )


def test_cached_mnrl_matches_full_batch_gradients_with_dropout() -> None:
    torch.manual_seed(4)
    q, d, neg = torch.randn(6, 6), torch.randn(6, 6), torch.randn(3, 6)
    chunks = {"q": [q[:2], q[2:4], q[4:]], "d": [d[:3], d[3:]], "n": [neg]}

    full = _encoder().train()
    torch.manual_seed(5)  # embed chunk by chunk in the cached order, so dropout masks coincide
    reps = [torch.cat([full(c) for c in chunks[k]]) for k in ("q", "d", "n")]
    expected = mnrl(*reps, scale=20.0)
    expected.backward()

    cached = _encoder().train()
    torch.manual_seed(5)
    loss = cached_mnrl(cached, chunks["q"], chunks["d"], chunks["n"], scale=20.0)
    assert all(p.grad is None for p in cached.parameters())  # the replay waits for backward
    loss.backward()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    for (name, p_full), p_cached in zip(full.named_parameters(), cached.parameters(), strict=True):
        assert p_full.grad is not None and p_cached.grad is not None
        torch.testing.assert_close(p_cached.grad, p_full.grad, atol=1e-6, rtol=1e-5, msg=name)
