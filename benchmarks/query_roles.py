"""The judged queries of an evaluation group, each with a tune or test role, and the whole-document
BM25 reference (rank-bm25) the studies hold rules against.

Shared by styles.py, calibrate.py and common_words.py. The roles are the ones the document rules
were chosen with (the retired doclevel.py study, results/doclevel.md): a dataset's own split
field or train folder where it has one, else a seeded half of its judged documents, the same
half for every dataset of the group (a paper's variants stay together).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.eval_sets import DATA, Group
from docsearch.corpora.beir import RetrievalSet, load_beir

if TYPE_CHECKING:
    import numpy as np

SPLIT_SEED = 0
_WORD = re.compile(r"\w+")


@dataclass
class Query:
    key: str  # "dataset\0qid"
    dataset: str
    role: str  # "tune" or "test" (calibrate.py adds "pseudo")
    text: str
    qrels: dict[str, int]


def _has_split_field(folder: Path) -> bool:
    with (folder / "queries.jsonl").open(encoding="utf-8") as lines:
        return "split" in json.loads(next(lines))


def doc_roles(docs: set[str]) -> dict[str, str]:
    """A seeded half of the documents are "tune", the rest "test" (sets without a split)."""
    ordered = sorted(docs)
    random.Random(SPLIT_SEED).shuffle(ordered)
    half = len(ordered) // 2
    return {d: ("tune" if i < half else "test") for i, d in enumerate(ordered)}


def group_queries(group: Group, corpus: set[str], data: Path = DATA) -> list[Query]:
    """Every query of the group's datasets whose relevant documents are all in `corpus`."""
    out: list[Query] = []
    unsplit: list[tuple[str, RetrievalSet]] = []
    for name, _ in group.datasets:
        folder = data / name
        if _has_split_field(folder):
            parts: list[tuple[RetrievalSet, str | None]] = [(load_beir(folder, "all"), None)]
        elif (folder / "train").is_dir():
            parts = [(load_beir(folder, "test"), "test"), (load_beir(folder, "train"), "tune")]
        else:
            unsplit.append((name, load_beir(folder, "test").about(corpus)))
            continue
        for rset, role in parts:
            rset = rset.about(corpus)
            for qid, text in rset.queries.items():
                split = role or ("test" if rset.splits.get(qid) == "test" else "tune")
                out.append(Query(f"{name}\0{qid}", name, split, text, dict(rset.qrels[qid])))
    if unsplit:  # one document split for the whole group: a paper's variants stay together
        roles = doc_roles(set().union(*(r.judged() for _, r in unsplit)))
        for name, rset in unsplit:
            for qid, text in rset.queries.items():
                rel = sorted(d for d, g in rset.qrels[qid].items() if g > 0)
                out.append(
                    Query(f"{name}\0{qid}", name, roles[rel[0]], text, dict(rset.qrels[qid]))
                )
    return [q for q in out if q.text.strip()]


def words(text: str) -> list[str]:
    """Lower-case regex words, unstemmed, stop words kept: the reference's tokenizer."""
    return _WORD.findall(text.lower())


def reference_scores(bodies: list[str], queries: list[Query]) -> np.ndarray:
    """quality.py's `bm25-reference` (rank-bm25, k1 0.9, b 0.4) as a Q x D matrix of scores;
    NaN where a document has no query word."""
    import numpy as np
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([words(b) for b in bodies], k1=0.9, b=0.4)
    out = np.full((len(queries), len(bodies)), np.nan, dtype=np.float32)
    for qi, q in enumerate(queries):
        s = np.asarray(bm25.get_scores(words(q.text)), dtype=np.float32)
        out[qi, s != 0] = s[s != 0]  # rank-bm25 scores a document without a query word 0
    return out
