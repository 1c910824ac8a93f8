"""LoCoV1 loader (JSONL release layout and Parquet exports) and the needle probe builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from docsearch.corpora.beir import load_beir
from docsearch.corpora.loco import is_loco_folder, load_loco
from docsearch.corpora.needle import SEPARATOR, choose_haystacks, haystack_text, needle_sets
from docsearch.errors import DataFormatError, UsageError
from docsearch.evaluation import load_dataset
from tests.conftest import FIXTURES

LOCO = FIXTURES / "loco_tiny"


def test_loco_jsonl_layout_filters_by_task() -> None:
    assert is_loco_folder(LOCO)
    rset = load_loco(LOCO, "qmsum")
    assert rset.name == "loco/qmsum"
    assert set(rset.corpus) == {"qmsum_Passage_0", "qmsum_Passage_1", "qmsum_Passage_2"}
    assert rset.qrels["qmsum_Query_1"] == {"qmsum_Passage_1": 1}
    assert rset.corpus["qmsum_Passage_0"].title == ""


def test_loco_drops_missing_passages_and_their_queries() -> None:
    rset = load_loco(LOCO, "qasper_title")
    assert set(rset.corpus) == {"qasper_title_Passage_0"}
    assert set(rset.queries) == {"qasper_title_Query_0"}


def test_loco_parquet_export(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = pa.table(
        {"pid": ["p0", "p1"], "passage": ["alpha beta", "gamma"], "dataset": ["gov_report"] * 2}
    )
    queries = pa.table(
        {"qid": ["g0"], "query": ["beta"], "answer_pids": [["p0"]], "dataset": ["gov_report"]}
    )
    pq.write_table(docs, tmp_path / "documents.parquet")
    pq.write_table(queries, tmp_path / "queries.parquet")
    rset = load_dataset(tmp_path, task="gov_report")
    assert rset.queries == {"g0": "beta"} and rset.qrels == {"g0": {"p0": 1}}
    assert len(rset.corpus) == 2


def test_loco_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--task"):
        load_loco(LOCO, None)
    with pytest.raises(DataFormatError, match="no documents or queries"):
        load_loco(LOCO, "stackoverflow")
    with pytest.raises(DataFormatError, match="no LoCoV1"):
        load_loco(tmp_path, "qmsum")
    with pytest.raises(UsageError, match="neither a BEIR folder"):
        load_dataset(tmp_path)


def _without(text: str, offset: int, needle: str) -> str:
    rest = text[:offset] + text[offset + len(needle) :]
    return rest.replace(SEPARATOR + SEPARATOR, SEPARATOR).strip("\n")


def test_needle_moves_only_the_needle() -> None:
    source = load_beir(FIXTURES / "beir_tiny", "all")
    stacks = choose_haystacks(source, passages=3, queries=2, seed=0)
    assert len(stacks) == 2
    for stack in stacks:
        needle = source.corpus[stack.needle].body
        placed = [haystack_text(source, stack, p) for p in (1, 2, 3)]
        assert placed[0][1] == 0 and placed[2][0].endswith(needle)
        for text, offset in placed:
            assert text[offset : offset + len(needle)] == needle
        # the same fillers in the same order, wherever the needle goes
        assert len({_without(text, offset, needle) for text, offset in placed}) == 1


def test_needle_sets_one_per_position_with_own_haystack_judged() -> None:
    source = load_beir(FIXTURES / "beir_tiny", "all")
    sets = needle_sets(source, passages=3, queries=2, seed=0)
    assert [s.name for s in sets] == [f"needle/beir_tiny@{p}" for p in (1, 2, 3)]
    assert sets[0].queries == sets[2].queries
    for qid, judged in sets[1].qrels.items():
        assert judged == {f"haystack-{qid}": 1}
    assert "position 3" in sets[2].notes[0]


def test_needle_fillers_are_never_relevant_to_a_chosen_query() -> None:
    source = load_beir(FIXTURES / "beir_tiny", "all")
    stacks = choose_haystacks(source, passages=3, queries=3, seed=1)
    relevant = {d for s in stacks for d, g in source.qrels[s.query_id].items() if g > 0}
    assert len({s.needle for s in stacks}) == len(stacks)
    for stack in stacks:
        assert not relevant & set(stack.fillers)
    with pytest.raises(UsageError, match="at least one passage"):
        choose_haystacks(source, passages=0, queries=3, seed=1)
