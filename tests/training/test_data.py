"""Training pairs: JSONL, BEIR train splits, pseudo-queries from documents, negatives, held-out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from docsearch.corpora.beir import CorpusDoc
from docsearch.encoders.base import get_encoder
from docsearch.errors import DataFormatError, UsageError
from docsearch.indexer.chunk import Chunker, ChunkerSettings
from docsearch.indexer.collection import word_count, word_spans
from docsearch.training.data import (
    Pair,
    Passage,
    TrainingData,
    add_negatives,
    heldout_set,
    load_training_data,
    mine,
    positive_aware_keep,
    pseudo_pairs,
    read_pairs,
    split_heldout,
)
from tests.training.tiny_st import write_beir, write_documents, write_pairs


def word_chunker(max_tokens: int = 20) -> Chunker:
    return Chunker(ChunkerSettings(max_tokens=max_tokens), word_count, word_spans)


def jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# (a) JSONL


def test_jsonl_pairs_keep_their_negatives_and_name_their_line(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "pairs.jsonl",
        [
            json.dumps({"query": "late fees", "positive": "Interest on late payment."}),
            "",
            json.dumps({"query": "cure", "positive": "Thirty days to cure.", "negatives": ["x"]}),
        ],
    )
    data = read_pairs(path)
    assert [p.query for p in data.pairs] == ["late fees", "cure"]
    assert data.pairs[1].negatives == ("x",) and data.pairs[0].negatives == ()
    assert data.pairs[1].origin == f"{path}:3"  # the blank line counts
    assert {d.text for d in data.documents.values()} == {
        "Interest on late payment.",
        "Thirty days to cure.",
        "x",
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"query": "q"}), "'positive' must be a non-empty string"),
        (json.dumps({"query": " ", "positive": "p"}), "'query' must be a non-empty string"),
        (json.dumps({"query": "q", "positive": "p", "negatives": "n"}), "'negatives' must be"),
    ],
)
def test_bad_jsonl_names_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    good = json.dumps({"query": "q", "positive": "p"})
    path = jsonl(tmp_path / "pairs.jsonl", [good, line])
    with pytest.raises(DataFormatError, match=f"pairs.jsonl:2: .*{message}"):
        read_pairs(path)


def test_an_empty_pairs_file_is_refused(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "empty.jsonl", ["", "  "])
    with pytest.raises(DataFormatError, match="empty.jsonl: no training pairs"):
        load_training_data(path, word_chunker())


def test_unusable_sources_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such training data"):
        load_training_data(tmp_path / "missing", word_chunker())
    (tmp_path / "pairs.csv").write_text("q,p\n")
    with pytest.raises(UsageError, match="jsonl file of pairs"):
        load_training_data(tmp_path / "pairs.csv", word_chunker())
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match="no readable documents"):
        load_training_data(tmp_path / "empty", word_chunker())


# ---------------------------------------------------------------------------------------------
# (b) BEIR


def test_beir_train_split_pairs_take_the_best_window_of_long_documents(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "beir")
    data = load_training_data(folder, word_chunker(20), seed=0)
    assert data.kind == "beir"
    assert len(data.pairs) == 18  # 6 topics x 3 train queries; the test query is left out
    assert {p.origin for p in data.pairs} == {f"q{t}-{i}" for t in range(6) for i in range(3)}
    pair = next(p for p in data.pairs if p.origin == "q0-1")
    assert pair.doc_id == "termination-1"
    assert len(pair.positive.split()) <= 20  # a window, not the whole 8-sentence document
    assert set(pair.query.split()) & set(pair.positive.lower().split())
    assert len(data.pool) > len({p.positive for p in data.pairs})  # other windows to sample


def test_beir_variant_folder_takes_the_parent_corpus(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "beir")
    train = folder / "train"
    train.mkdir()
    (train / "queries.jsonl").write_text(json.dumps({"_id": "t1", "text": "pump valve"}) + "\n")
    (train / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nt1\tpump-2\t1\n")
    data = load_training_data(folder, word_chunker(), split="train")
    assert [(p.query, p.doc_id) for p in data.pairs] == [("pump valve", "pump-2")]


def test_beir_unknown_ids_name_the_qrels_line(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "beir")
    lines = (folder / "qrels.tsv").read_text().splitlines()
    lines[3] = "q0-2\tno-such-doc\t1"
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"qrels.tsv:4: unknown document id 'no-such-doc'"):
        load_training_data(folder, word_chunker())
    lines[3] = "q-missing\ttermination-0\t1"
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"qrels.tsv:4: unknown query id 'q-missing'"):
        load_training_data(folder, word_chunker())


# ---------------------------------------------------------------------------------------------
# (c) Pseudo-queries


def passages(doc_id: str, texts: list[str]) -> list[Passage]:
    return [Passage(doc_id, t) for t in texts]


def test_headings_point_to_their_sections_without_the_heading_line() -> None:
    body = "The supplier shall repair or replace defective goods within twelve months " * 2
    docs = {
        f"d{i}": passages(f"d{i}", [f"## Introduction\n{body}", f"## Warranty claims {i}\n{body}"])
        for i in range(4)
    }
    pairs = pseudo_pairs(docs, {}, spans_per_doc=0)
    queries = sorted(p.query for p in pairs)
    assert queries == [f"Warranty claims {i}" for i in range(4)]  # "Introduction" is everywhere
    assert all("Warranty" not in p.positive and p.positive == body.strip() for p in pairs)
    assert all(p.origin == "heading" for p in pairs)


def test_list_items_and_table_rows_are_not_headings_worth_asking() -> None:
    body = "Either party may terminate this agreement on ninety days written notice " * 2
    text = "5 (d) returns the minimum tree spanning a bigram, in this case the word saw and\n"
    text += "7 12.5 30.1 44.2\n" + body
    assert pseudo_pairs({"d": passages("d", [text])}, {}, spans_per_doc=0) == []


def test_a_heading_at_the_end_of_a_window_points_to_the_next_window() -> None:
    body = "Either party may terminate this agreement on ninety days written notice " * 2
    docs = {"d": passages("d", ["Some intro text here.\n\n3.2 Termination rights", body])}
    (pair,) = pseudo_pairs(docs, {}, spans_per_doc=0)
    assert (pair.query, pair.positive) == ("Termination rights", body)


def test_spans_are_cut_out_of_their_window() -> None:
    sentences = [
        f"Sentence number {i} talks about the pump valve and the alarm battery." for i in range(6)
    ]
    docs = {"d": passages("d", [" ".join(sentences)])}
    (pair,) = pseudo_pairs(docs, {}, spans_per_doc=1, seed=3)
    assert pair.origin == "span" and pair.query in sentences
    assert pair.query not in pair.positive and len(pair.positive.split()) >= 50


def test_titles_point_to_the_first_window() -> None:
    text = "Master services agreement\nThis agreement between Acme and Globex covers services."
    docs = {"msa.pdf": passages("msa.pdf", [text])}
    (pair,) = pseudo_pairs(docs, {"msa.pdf": "Master services agreement"}, spans_per_doc=0)
    assert pair.origin == "title" and pair.positive.startswith("This agreement")


def test_a_folder_of_documents_gives_pseudo_pairs(tmp_path: Path) -> None:
    folder = write_documents(tmp_path / "docs")
    data = load_training_data(folder, word_chunker(60))
    assert data.kind == "corpus" and data.pool
    origins = {p.origin for p in data.pairs}
    assert {"heading", "span"} <= origins
    clause_queries = {p.query for p in data.pairs if p.query.endswith("clause")}
    # every topic clause heading occurs in at most 2 of the 4 documents: specific enough
    assert "termination clause" in clause_queries
    assert set(data.documents) == {f"doc{i}.md" for i in range(4)}


# ---------------------------------------------------------------------------------------------
# Negatives


def test_positive_aware_rule_keeps_only_candidates_below_95_percent() -> None:
    scores = np.array([0.9, 0.77, 0.75, 0.5])
    assert positive_aware_keep(scores, 0.8).tolist() == [False, False, True, True]
    # a negative positive score still puts the bound below the positive
    assert positive_aware_keep(np.array([-0.2, -0.205, -0.3]), -0.2).tolist() == [
        False,
        False,
        True,
    ]


def test_mining_skips_near_duplicates_and_the_querys_own_documents() -> None:
    def unit(angle: float) -> list[float]:
        return [float(np.cos(angle)), float(np.sin(angle))]

    q = np.array([unit(0.0)])
    positive = np.array([unit(0.6)])  # score cos(0.6) = 0.825
    pool = np.array([unit(0.1), unit(0.5), unit(0.7), unit(0.9), unit(1.2)])
    docs = ["other", "other", "own", "other", "other"]
    picked = mine(q, positive, pool, docs, [{"own"}], k=2)
    # 0.1 and 0.5 score above 0.95 x 0.825; 0.7 is the query's own document
    assert picked == [[3, 4]]


def test_add_negatives_mixes_mined_and_random_and_keeps_given_ones() -> None:
    encoder = get_encoder("hashing", dim=64)
    pool = [Passage(f"d{i}", f"payment invoice fee number {i} and more words") for i in range(8)]
    pool += [Passage("own", "late payment interest accrues monthly")]
    pairs = [
        Pair("late payment interest", "late payment interest accrues monthly", "own"),
        Pair("given", "given positive", "g", ("keep me",)),
    ]
    data = TrainingData("test", "pairs", pairs, {}, pool)
    out = add_negatives(data, 4, encoder=encoder, seed=0)
    first, second = out.pairs
    assert second.negatives == ("keep me",)
    assert len(first.negatives) == 4 and len(set(first.negatives)) == 4
    assert first.positive not in first.negatives
    assert any("up to 2 mined below 0.95" in note for note in out.notes)
    random_only = add_negatives(data, 4, mined=0, encoder=encoder, seed=0)
    assert random_only.notes[-1] == "negatives: 4 per pair (random)"
    assert "late payment interest accrues monthly" not in random_only.pairs[0].negatives
    by_text = {p.text: p.doc_id for p in pool}
    for pair in (first, random_only.pairs[0]):  # each negative's document, for in-batch OPL
        assert pair.negative_docs == tuple(by_text[n] for n in pair.negatives)


def test_jsonl_negatives_know_their_documents(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    lines = [{"query": "a", "positive": "text a", "negatives": ["text b"]},
             {"query": "b", "positive": "text b"}]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = read_pairs(path).pairs
    assert first.negative_docs == (second.doc_id,)  # the same text is the same document


def test_heldout_split_keeps_whole_documents_out_of_training() -> None:
    pairs = [
        Pair(f"q{d}-{i}", f"text {d} {i}", f"doc{d}", (), "span")
        for d in range(10)
        for i in range(3)
    ]
    documents = {f"doc{d}": CorpusDoc(f"doc{d}", "", f"doc {d}") for d in range(10)}
    pool = [Passage(p.doc_id, p.positive) for p in pairs]
    data = TrainingData("test", "corpus", pairs, documents, pool)
    train, held = split_heldout(data, fraction=0.2, seed=1)
    held_docs = {p.doc_id for p in held}
    assert len(held) == 6 and len(held_docs) == 2
    assert not held_docs & {p.doc_id for p in train.pairs}
    assert not held_docs & {p.doc_id for p in train.pool}
    rset = heldout_set(held, documents, max_docs=5)
    assert len(rset.corpus) == 5 and held_docs <= set(rset.corpus)
    assert all(set(r) <= held_docs for r in rset.qrels.values())


def test_jsonl_fixture_reads(tmp_path: Path) -> None:
    data = read_pairs(write_pairs(tmp_path / "p.jsonl", n_per_topic=2))
    assert len(data.pairs) == 12 and len(data.pool) == len(data.documents)


def test_an_indexed_collection_lends_its_chunks_and_vectors(tmp_path: Path) -> None:
    from docsearch.store.reads import Store
    from tests.helpers import index_into

    folder = write_documents(tmp_path / "docs")
    db = str(tmp_path / "db")
    index_into(db, folder, "docs", options={"max_tokens": 60})
    data = load_training_data(folder, word_chunker(), store=Store.open(db, "docs"))
    assert data.pool_vectors is not None and len(data.pool_vectors) == len(data.pool)
    again = get_encoder("hashing", max_tokens=60).encode_documents([p.text for p in data.pool])
    assert np.allclose(data.pool_vectors, again, atol=1e-6)
    assert {p.origin for p in data.pairs} >= {"heading", "span"}
