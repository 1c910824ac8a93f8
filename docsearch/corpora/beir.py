"""BEIR-format folders -> `RetrievalSet`: a corpus, queries, graded judgements (and answer spans).

A folder holds `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`, optional
`split`) and `qrels.tsv` (header `query-id corpus-id score`). A variant folder (one set of queries
over another folder's documents) may hold only queries and qrels: its corpus is the parent's.
A folder without a `split` field whose sub-folder is named after the split asked for (SciFact's
`train/`) is read as that variant. `spans.jsonl` (CUAD) adds the character span that answers each
query. `RetrievalSet.select` and `.subsample` pick queries and documents.
Not here: indexing and scoring (see `docsearch.evaluation`), LoCoV1 files (`loco.py`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from docsearch.errors import DataFormatError, UsageError

ALL_SPLITS = "all"
DEFAULT_SPLIT = "test"  # queries without a `split` field count as test queries (BEIR convention)


@dataclass(frozen=True)
class CorpusDoc:
    id: str
    title: str
    text: str

    @property
    def body(self) -> str:
        """What gets indexed: the title as a first paragraph, then the text (BEIR's title+text)."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text

    @property
    def text_offset(self) -> int:
        """Where `text` starts inside `body` (answer spans are offsets into `text`)."""
        return len(self.title) + 2 if self.title else 0


@dataclass(frozen=True)
class AnswerSpan:
    """The characters `[start, end)` of document `doc_id`'s text that answer query `query_id`."""

    query_id: str
    doc_id: str
    start: int
    end: int


@dataclass
class RetrievalSet:
    """Everything an evaluation needs; `qrels[qid][doc_id]` is a graded relevance (> 0 relevant)."""

    name: str
    corpus: dict[str, CorpusDoc]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    splits: dict[str, str] = field(default_factory=dict)  # query id -> split, when given
    spans: list[AnswerSpan] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was selected or sampled, for reports

    def relevant(self, qid: str) -> set[str]:
        """The documents judged relevant to query `qid`."""
        return {d for d, g in self.qrels.get(qid, {}).items() if g > 0}

    def judged(self) -> set[str]:
        """Documents relevant to at least one of the set's queries."""
        return {d for qid in self.queries for d in self.relevant(qid)}

    def select(self, split: str | None) -> RetrievalSet:
        """Only the queries of `split` ('all' or None: every query); the corpus is unchanged."""
        if split in (None, ALL_SPLITS):
            return self
        if self.splits:
            keep = {q: t for q, t in self.queries.items() if self.splits.get(q) == split}
            if not keep:
                found = ", ".join(sorted(set(self.splits.values())))
                raise UsageError(f"{self.name} has no {split!r} queries (splits: {found})")
        elif split == DEFAULT_SPLIT:
            keep = dict(self.queries)
        else:
            raise UsageError(
                f"{self.name} has no split field, so its queries are the test split; "
                f"use --split {DEFAULT_SPLIT} or a folder holding {split} queries"
            )
        note = f"split {split}: {len(keep)} of {len(self.queries)} queries"
        return self._with(note, queries=keep)

    def subsample(self, max_docs: int | None, seed: int = 0) -> RetrievalSet:
        """Every judged document plus a seeded random sample of the rest, `max_docs` in all."""
        if not max_docs or max_docs >= len(self.corpus):
            return self
        judged = self.judged() & set(self.corpus)
        rest = sorted(set(self.corpus) - judged)
        extra = random.Random(seed).sample(rest, max(0, min(len(rest), max_docs - len(judged))))
        keep = judged | set(extra)
        corpus = {d: doc for d, doc in self.corpus.items() if d in keep}
        note = (
            f"max-docs {max_docs}: {len(corpus)} of {len(self.corpus)} documents "
            f"({len(judged)} judged + {len(extra)} sampled, seed {seed})"
        )
        return self._with(note, corpus=corpus)

    def sample_queries(self, max_queries: int | None, seed: int = 0) -> RetrievalSet:
        """A seeded random sample of `max_queries` queries (the corpus is unchanged)."""
        if not max_queries or max_queries >= len(self.queries):
            return self
        keep = set(random.Random(seed).sample(sorted(self.queries), max_queries))
        note = (
            f"max-queries {max_queries}: {len(keep)} of {len(self.queries)} queries (seed {seed})"
        )
        return self._with(note, queries={q: t for q, t in self.queries.items() if q in keep})

    def about(self, docs: set[str]) -> RetrievalSet:
        """Only the queries whose relevant documents are all in `docs`."""
        queries = {q: t for q, t in self.queries.items() if self.relevant(q) <= docs}
        if len(queries) == len(self.queries):
            return self
        note = f"{len(queries)} of {len(self.queries)} queries (those about the sampled documents)"
        return self._with(note, queries=queries)

    def with_corpus(self, corpus: dict[str, CorpusDoc], note: str | None = None) -> RetrievalSet:
        """The same queries over another corpus (e.g. one subsampled for several query sets)."""
        return self._with(note, corpus=corpus)

    def _with(self, note: str | None, **changes: Any) -> RetrievalSet:
        """A copy with `changes` and `note` added to the notes; qrels and spans follow."""
        changed = replace(self, notes=[*self.notes, *([note] if note else [])], **changes)
        keep_q, keep_d = set(changed.queries), set(changed.corpus)
        changed.qrels = {q: r for q, r in changed.qrels.items() if q in keep_q}
        changed.spans = [s for s in changed.spans if s.query_id in keep_q and s.doc_id in keep_d]
        return changed


# ---------------------------------------------------------------------------------------------
# Reading files


def numbered_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; bad JSON names the file and line."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise DataFormatError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise DataFormatError(f"{path}:{number}: expected a JSON object")
            yield number, record


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The objects of a JSON-lines file (see `numbered_jsonl`)."""
    return (record for _, record in numbered_jsonl(path))


def _field(record: dict[str, Any], key: str, path: Path, number: int) -> str:
    if key not in record:
        raise DataFormatError(f"{path}:{number}: missing field {key!r}")
    return str(record[key])


def read_corpus(path: Path) -> dict[str, CorpusDoc]:
    corpus: dict[str, CorpusDoc] = {}
    for number, rec in numbered_jsonl(path):
        doc_id = _field(rec, "_id", path, number)
        corpus[doc_id] = CorpusDoc(
            doc_id, str(rec.get("title") or ""), _field(rec, "text", path, number)
        )
    return corpus


def read_queries(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(query id -> text, query id -> split for the queries that carry one)."""
    queries: dict[str, str] = {}
    splits: dict[str, str] = {}
    for number, rec in numbered_jsonl(path):
        qid = _field(rec, "_id", path, number)
        queries[qid] = _field(rec, "text", path, number)
        if rec.get("split"):
            splits[qid] = str(rec["split"])
    return queries, splits


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """`query-id<TAB>corpus-id<TAB>score` lines (a header line is skipped)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise DataFormatError(f"{path}:{number}: expected query-id, corpus-id, score")
            try:
                score = int(float(parts[2]))
            except ValueError as exc:
                raise DataFormatError(
                    f"{path}:{number}: score {parts[2]!r} is not a number"
                ) from exc
            qrels.setdefault(parts[0], {})[parts[1]] = score
    return qrels


def read_spans(path: Path) -> list[AnswerSpan]:
    spans = []
    for number, rec in numbered_jsonl(path):
        try:
            spans.append(
                AnswerSpan(
                    str(rec["query-id"]), str(rec["corpus-id"]), int(rec["start"]), int(rec["end"])
                )
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise DataFormatError(
                f"{path}:{number}: expected query-id, corpus-id, start, end"
            ) from exc
    return spans


# ---------------------------------------------------------------------------------------------
# Folders


def corpus_file(folder: Path) -> Path:
    """`corpus.jsonl` in the folder, else in its parent (a variant folder)."""
    for candidate in (folder / "corpus.jsonl", folder.parent / "corpus.jsonl"):
        if candidate.is_file():
            return candidate
    raise DataFormatError(f"no corpus.jsonl in {folder} or its parent; is it a BEIR folder?")


def is_beir_folder(folder: Path) -> bool:
    return (folder / "queries.jsonl").is_file() and (folder / "qrels.tsv").is_file()


def load_beir(folder: Path | str, split: str | None = DEFAULT_SPLIT) -> RetrievalSet:
    """Read a BEIR folder and keep the queries of `split` that have a relevant document."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"no such folder: {folder}")
    if _split_folder(folder, split):
        folder, split = folder / str(split), ALL_SPLITS  # SciFact-style: train/ is a variant
    if not is_beir_folder(folder):
        raise DataFormatError(f"{folder} needs queries.jsonl and qrels.tsv (BEIR layout)")
    queries, splits = read_queries(folder / "queries.jsonl")
    qrels = read_qrels(folder / "qrels.tsv")
    spans_path = folder / "spans.jsonl"
    rset = RetrievalSet(
        name=_display_name(folder),
        corpus=read_corpus(corpus_file(folder)),
        queries=queries,
        qrels=qrels,
        splits=splits,
        spans=read_spans(spans_path) if spans_path.is_file() else [],
    )
    return drop_unjudged(rset.select(split))


def _split_folder(folder: Path, split: str | None) -> bool:
    """Is `split` served by a sub-folder of that name (queries here carry no split field)?"""
    if not split or split in (DEFAULT_SPLIT, ALL_SPLITS) or not is_beir_folder(folder / split):
        return False
    return "split" not in next(read_jsonl(folder / "queries.jsonl"), {})


def _display_name(folder: Path) -> str:
    if (folder / "corpus.jsonl").is_file():
        return folder.name
    return f"{folder.parent.name}/{folder.name}"


def drop_unjudged(rset: RetrievalSet) -> RetrievalSet:
    """Queries without a relevant document in the corpus cannot be scored (BEIR skips them too)."""
    keep = {q: t for q, t in rset.queries.items() if rset.relevant(q) & rset.corpus.keys()}
    if len(keep) == len(rset.queries):
        return rset
    note = f"{len(rset.queries) - len(keep)} queries without a relevant document dropped"
    return rset._with(note, queries=keep)
