"""BEIR loader on the tiny in-repo fixture (never on ../shared/data)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from docsearch.corpora.beir import CorpusDoc, load_beir, read_qrels
from docsearch.errors import DataFormatError, UsageError
from tests.conftest import FIXTURES

TINY = FIXTURES / "beir_tiny"


def test_reads_corpus_queries_graded_qrels_and_spans() -> None:
    rset = load_beir(TINY)
    assert rset.name == "beir_tiny"
    assert len(rset.corpus) == 6
    assert rset.corpus["d1"].title == "Termination for cause"
    assert rset.qrels["q2"] == {"d3": 2, "d1": 0}
    # q4 has no judgement: it cannot be scored, so it is dropped (and said so)
    assert set(rset.queries) == {"q1", "q2", "q3"}
    assert any("dropped" in note for note in rset.notes)
    assert [(s.query_id, s.doc_id, s.start, s.end) for s in rset.spans] == [
        ("q1", "d1", 0, 44),
        ("q2", "d3", 0, 60),
    ]


def test_body_puts_the_title_first_and_offsets_follow() -> None:
    doc = CorpusDoc("x", "Title", "Body text")
    assert doc.body == "Title\n\nBody text"
    assert doc.body[doc.text_offset :] == "Body text"
    untitled = CorpusDoc("y", "", "Only text")
    assert untitled.body == "Only text" and untitled.text_offset == 0


def test_variant_folder_takes_the_parent_corpus_and_splits() -> None:
    test = load_beir(TINY / "variant", "test")
    assert test.name == "beir_tiny/variant"
    assert len(test.corpus) == 6
    assert set(test.queries) == {"v2"}
    assert set(load_beir(TINY / "variant", "train").queries) == {"v1"}
    assert set(load_beir(TINY / "variant", "all").queries) == {"v1", "v2", "v3"}
    with pytest.raises(UsageError, match="no 'dev' queries"):
        load_beir(TINY / "variant", "dev")


def test_train_subfolder_serves_the_train_split_when_queries_have_no_split_field() -> None:
    train = load_beir(TINY, "train")
    assert set(train.queries) == {"t1", "t2"}
    assert train.qrels["t1"] == {"d6": 1}
    assert len(train.corpus) == 6  # the parent's corpus


def test_no_split_field_and_no_such_folder_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    shutil.copytree(TINY, folder, ignore=shutil.ignore_patterns("train", "variant"))
    with pytest.raises(UsageError, match="no split field"):
        load_beir(folder, "val")


def test_subsample_keeps_judged_documents_and_is_seeded() -> None:
    rset = load_beir(TINY)
    judged = rset.judged()
    assert judged == {"d1", "d3", "d4"}  # d1 at grade 0 for q2 but relevant to q1
    small = rset.subsample(4, seed=1)
    assert judged <= set(small.corpus) and len(small.corpus) == 4
    assert set(small.corpus) == set(rset.subsample(4, seed=1).corpus)
    assert "max-docs 4" in small.notes[-1]
    assert rset.subsample(2).corpus.keys() == judged  # never drops a judged document
    assert rset.subsample(None) is rset


def test_bad_json_names_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    shutil.copytree(TINY, folder)
    with (folder / "queries.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(DataFormatError, match=r"queries\.jsonl:5"):
        load_beir(folder)


def test_missing_corpus_and_bad_qrels(tmp_path: Path) -> None:
    lonely = tmp_path / "a" / "b"
    lonely.mkdir(parents=True)
    shutil.copy(TINY / "queries.jsonl", lonely)
    shutil.copy(TINY / "qrels.tsv", lonely)
    with pytest.raises(DataFormatError, match="no corpus.jsonl"):
        load_beir(lonely)
    bad = tmp_path / "qrels.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(DataFormatError, match=r"qrels\.tsv:2"):
        read_qrels(bad)
    with pytest.raises(UsageError, match="no such folder"):
        load_beir(tmp_path / "missing")
