"""Metrics against hand-computed values (pytrec_eval conventions: linear gains, mean over qrels)."""

from __future__ import annotations

import math

import pytest

from docsearch.corpora.beir import AnswerSpan
from docsearch.evaluation import (
    dcg,
    mrr_at_k,
    ndcg_at_k,
    query_metrics,
    recall_at_k,
    score_run,
    span_hit,
)

LOG3 = math.log2(3)  # discount at rank 2


def test_dcg_discounts_by_log2_of_rank_plus_one() -> None:
    assert dcg([3, 2]) == pytest.approx(3 + 2 / LOG3)
    assert dcg([0, 0, 1]) == pytest.approx(1 / 2)  # rank 3: log2(4) = 2


def test_ndcg_graded_hand_computed() -> None:
    # ranking d3, d1, d2 with d1 = 1, d2 = 2: DCG = 1/log2(3) + 2/log2(4); ideal = 2 + 1/log2(3)
    judged = {"d1": 1, "d2": 2}
    expected = (1 / LOG3 + 2 / 2) / (2 + 1 / LOG3)
    assert ndcg_at_k(["d3", "d1", "d2"], judged, 10) == pytest.approx(expected)
    assert ndcg_at_k(["d3", "d1", "d2"], judged, 10) == pytest.approx(0.619906, abs=1e-6)


def test_ndcg_cut_at_k_and_perfect_ranking() -> None:
    judged = {"a": 1, "b": 1}
    assert ndcg_at_k(["a", "b"], judged, 10) == pytest.approx(1.0)
    # only one slot: the ideal top-1 is one relevant document
    assert ndcg_at_k(["x", "a"], judged, 1) == 0.0
    assert ndcg_at_k(["a", "x"], judged, 1) == pytest.approx(1.0)


def test_ndcg_ignores_duplicates_and_non_positive_grades() -> None:
    judged = {"a": 1, "n": 0}
    # the duplicate "n" must not push "a" down to rank 3
    assert ndcg_at_k(["n", "n", "a"], judged, 10) == pytest.approx(1 / LOG3)
    assert ndcg_at_k(["a"], {"n": 0}, 10) == 0.0


def test_recall_and_mrr() -> None:
    judged = {"a": 1, "b": 1, "c": 0}
    ranking = ["c", "x", "b", "y", "a"]
    assert recall_at_k(ranking, judged, 3) == pytest.approx(0.5)
    assert recall_at_k(ranking, judged, 5) == pytest.approx(1.0)
    assert mrr_at_k(ranking, judged, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(ranking, judged, 2) == 0.0


def test_query_metrics_names() -> None:
    got = query_metrics(["a"], {"a": 1})
    assert got == {"ndcg@10": 1.0, "recall@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0}


def test_score_run_means_over_judged_queries_and_zero_for_missing() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}  # q3 has nothing relevant: skipped
    run = {"q1": ["x", "a"], "q3": ["c"]}  # q2 missing from the run: scores 0
    means, per_query = score_run(run, qrels)
    assert set(per_query) == {"q1", "q2"}
    assert means["mrr@10"] == pytest.approx((0.5 + 0.0) / 2)
    assert means["ndcg@10"] == pytest.approx((1 / LOG3) / 2)
    assert means["recall@100"] == pytest.approx(0.5)


def test_score_run_empty() -> None:
    means, per_query = score_run({}, {})
    assert per_query == {} and means["ndcg@10"] == 0.0


def test_span_hit_needs_overlap_in_the_same_document() -> None:
    spans = [AnswerSpan("q", "doc", 100, 200)]
    assert span_hit([("doc", 150, 400)], spans, 1)
    assert not span_hit([("doc", 200, 300)], spans, 1)  # touching at the end is no overlap
    assert not span_hit([("other", 100, 200)], spans, 1)
    hits = [("doc", 0, 50), ("doc", 190, 260)]
    assert not span_hit(hits, spans, 1)
    assert span_hit(hits, spans, 2)
