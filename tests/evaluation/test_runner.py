"""The eval runner end to end on the tiny fixture: real pipeline, real store, hashing encoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from docsearch.app.eval_cmd import eval_command
from docsearch.corpora.beir import load_beir
from docsearch.errors import UsageError
from docsearch.evaluation import EvalIndex, default_mode, evaluate_dataset
from tests.conftest import FIXTURES

TINY = FIXTURES / "beir_tiny"


def test_lexical_eval_finds_the_judged_documents() -> None:
    [result] = evaluate_dataset(load_beir(TINY), mode="lexical")
    assert result.encoder == "none" and result.mode == "lexical"
    assert result.queries == 3 and result.documents == 6
    # every tiny query shares distinctive words with its document only
    assert result.metrics["mrr@10"] == pytest.approx(1.0)
    assert result.metrics["ndcg@10"] == pytest.approx(1.0)
    # spans: q1's span is the title + opening of d1 (shifted past the title), q2's in d3
    assert result.span_hits["hit@1"] == pytest.approx(1.0)


def test_one_index_serves_every_mode_and_the_cache_is_reused(tmp_path: Path) -> None:
    rset = load_beir(TINY)
    with EvalIndex(rset, encoder="hashing", cache=tmp_path) as index:
        assert not index.cached and index.chunks >= 6
        modes = {m: index.evaluate(m) for m in ("lexical", "vector", "hybrid")}
    assert all(0.0 < r.metrics["ndcg@10"] <= 1.0 for r in modes.values())
    assert modes["vector"].encoder.startswith("hashing")
    with EvalIndex(rset, encoder="hashing", cache=tmp_path) as again:
        assert again.cached and again.chunks == index.chunks
        assert again.evaluate("vector").metrics == modes["vector"].metrics
    smaller = rset.subsample(4, seed=3)
    with EvalIndex(smaller, encoder="hashing", cache=tmp_path) as other:
        assert not other.cached and other.name != index.name


def test_train_queries_evaluated_on_an_index_of_the_same_corpus() -> None:
    test, train = load_beir(TINY), load_beir(TINY, "train")
    with EvalIndex(test, encoder="none") as index:
        result = index.evaluate("lexical", queries=train)
    assert result.dataset == "beir_tiny/train"
    assert result.queries == 2 and result.metrics["recall@10"] == pytest.approx(1.0)


def test_default_mode_rules() -> None:
    assert default_mode(None, "lexical") == ("none", "lexical")
    assert default_mode(None, None) == (None, "hybrid")
    assert default_mode("none", None) == ("none", "lexical")
    with pytest.raises(UsageError, match="needs an encoder"):
        default_mode("none", "vector")
    with pytest.raises(UsageError, match="unknown mode"):
        default_mode(None, "fuzzy")


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("eval")(eval_command)  # exactly how cli.py registers it
    app.command("noop")(lambda: None)  # a second command keeps `eval` a named subcommand
    return app


def test_cli_eval_json_and_errors() -> None:
    runner = CliRunner()
    out = runner.invoke(_app(), ["eval", str(TINY), "--mode", "lexical", "--json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["metrics"]["ndcg@10"] == pytest.approx(1.0)
    assert "per_query" not in payload
    bad = runner.invoke(_app(), ["eval", str(TINY / "missing"), "--mode", "lexical"])
    assert bad.exit_code == 2 and "error:" in bad.output
    split = runner.invoke(
        _app(), ["eval", str(TINY / "variant"), "--split", "dev", "--mode", "lexical"]
    )
    assert split.exit_code == 2 and "no 'dev' queries" in split.output


def test_cli_eval_text_output_with_max_docs() -> None:
    out = CliRunner().invoke(
        _app(), ["eval", str(TINY), "--mode", "lexical", "--max-docs", "4", "--seed", "2"]
    )
    assert out.exit_code == 0, out.output
    assert "ndcg@10" in out.stdout and "max-docs 4" in out.stdout
    assert "4 documents" in out.stdout


def test_eval_indexes_with_the_same_settings_as_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCSEARCH_ENCODER and DOCSEARCH_MAX_TOKENS reach eval as they reach index."""
    monkeypatch.setenv("DOCSEARCH_ENCODER", "hashing")
    default = json.loads(CliRunner().invoke(_app(), ["eval", str(TINY), "--json"]).stdout)
    assert default["encoder"].startswith("hashing") and default["mode"] == "hybrid"
    monkeypatch.setenv("DOCSEARCH_MAX_TOKENS", "8")
    capped = json.loads(CliRunner().invoke(_app(), ["eval", str(TINY), "--json"]).stdout)
    assert capped["chunks"] > default["chunks"]


def test_mode_all_scores_every_mode_from_one_index() -> None:
    results = evaluate_dataset(load_beir(TINY), encoder="hashing", mode="all")
    assert [r.mode for r in results] == ["hybrid", "vector", "lexical"]
    # one build: the index time and chunks each result reports are that one index's
    assert len({(r.index_seconds, r.chunks) for r in results}) == 1
    with EvalIndex(load_beir(TINY), encoder="hashing") as index:
        assert results[1].metrics == index.evaluate("vector").metrics
    [lexical] = evaluate_dataset(load_beir(TINY), encoder="none", mode="all")
    assert lexical.mode == "lexical" and lexical.encoder == "none"


def test_cli_eval_mode_all_prints_a_result_per_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSEARCH_ENCODER", "hashing")
    out = CliRunner().invoke(_app(), ["eval", str(TINY), "--mode", "all", "--json"])
    assert out.exit_code == 0, out.output
    assert [r["mode"] for r in json.loads(out.stdout)] == ["hybrid", "vector", "lexical"]
    text = CliRunner().invoke(_app(), ["eval", str(TINY), "--mode", "all"]).stdout
    assert text.count("mode: ") == 3


def test_cli_eval_cache_keeps_the_index_and_searches_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSEARCH_ENCODER", "hashing")
    args = ["eval", str(TINY), "--mode", "all", "--json", "--cache", str(tmp_path / "kept")]
    first = CliRunner().invoke(_app(), args)
    assert first.exit_code == 0, first.output
    assert any(p.name.endswith("__chunks.lance") for p in (tmp_path / "kept").iterdir())

    def no_indexing(*_: object, **__: object) -> None:
        raise AssertionError("indexed again")

    monkeypatch.setattr("docsearch.indexer.service.index_documents", no_indexing)
    again = CliRunner().invoke(_app(), args)
    assert again.exit_code == 0, again.output
    kept = ("mode", "metrics", "chunks", "index_seconds")  # the same index, the same scores
    assert [{k: r[k] for k in kept} for r in json.loads(again.stdout)] == [
        {k: r[k] for k in kept} for r in json.loads(first.stdout)
    ]
    (tmp_path / "file").write_text("x")
    bad = CliRunner().invoke(_app(), [*args[:-1], str(tmp_path / "file")])
    assert bad.exit_code == 2
