"""LoCoV1 (Saad-Falcon et al., 2024) from local files -> one `RetrievalSet` per task.

The release is two datasets, `hazyresearch/LoCoV1-Queries` (`qid`, `query`, `answer_pids`,
`dataset`) and `hazyresearch/LoCoV1-Documents` (`pid`, `passage`, `dataset`), stored as JSONL
files (`documents/<task>_test.jsonl` in each repository) or as Parquet exports. Point the loader
at any folder holding both: every `*.jsonl` and `*.parquet` file under it is read and sorted into
queries or documents by its fields, then filtered by the `dataset` column. Relevance is binary
(each answer pid). As in the reference evaluation, qasper queries and passages whose passage is
missing are dropped, and documents are indexed with an empty title.
Not here: downloading (the Hub is not reachable offline; fetch the files yourself).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docsearch.corpora.beir import CorpusDoc, RetrievalSet, drop_unjudged, read_jsonl
from docsearch.errors import DataFormatError, UsageError

TASKS = (
    "summ_screen_fd",
    "gov_report",
    "qmsum",
    "qasper_title",
    "qasper_abstract",
    "multifieldqa",
    "2wikimqa",
    "passage_retrieval",
    "legal_case_reports",
    "courtlistener_HTML",
    "courtlistener_Plain_Text",
    "stackoverflow",
)
QUERY_FIELDS = frozenset({"qid", "query", "answer_pids"})
DOCUMENT_FIELDS = frozenset({"pid", "passage"})


def _records(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            yield from batch.to_pylist()
    else:
        yield from read_jsonl(path)


def _kind(path: Path) -> str | None:
    """'queries', 'documents' or None, from the fields of the file's first record."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        names = set(pq.read_schema(path).names)
    else:
        names = set(next(read_jsonl(path), {}))
    if names >= QUERY_FIELDS:
        return "queries"
    if names >= DOCUMENT_FIELDS:
        return "documents"
    return None


def loco_files(folder: Path) -> dict[str, list[Path]]:
    """{'queries': [...], 'documents': [...]} for the JSONL and Parquet files under `folder`."""
    found: dict[str, list[Path]] = {"queries": [], "documents": []}
    for path in sorted([*folder.rglob("*.jsonl"), *folder.rglob("*.parquet")]):
        kind = _kind(path)
        if kind:
            found[kind].append(path)
    return found


def is_loco_folder(folder: Path) -> bool:
    return folder.is_dir() and all(loco_files(folder).values())


def _task_rows(paths: list[Path], task: str) -> Iterator[dict[str, Any]]:
    for path in paths:
        for rec in _records(path):
            if rec.get("dataset") == task:
                yield rec


def load_loco(folder: Path | str, task: str | None) -> RetrievalSet:
    """The LoCoV1 task `task` from the query and document files under `folder`."""
    folder = Path(folder)
    if task not in TASKS:
        raise UsageError(f"choose a LoCoV1 task with --task: {', '.join(TASKS)}")
    files = loco_files(folder)
    if not all(files.values()):
        raise DataFormatError(f"no LoCoV1 query and document files under {folder}")
    corpus = {
        str(r["pid"]): CorpusDoc(str(r["pid"]), "", str(r["passage"]))
        for r in _task_rows(files["documents"], task)
        if r.get("passage") is not None
    }
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for r in _task_rows(files["queries"], task):
        qid = str(r["qid"])
        if r.get("query") is None:
            continue
        queries[qid] = str(r["query"])
        qrels[qid] = {str(pid): 1 for pid in (r.get("answer_pids") or [])}
    if not corpus or not queries:
        raise DataFormatError(f"LoCoV1 task {task!r} has no documents or queries under {folder}")
    return drop_unjudged(RetrievalSet(f"loco/{task}", corpus, queries, qrels))
