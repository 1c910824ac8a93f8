"""A collection's indexes: full-text (BM25) and scalar ones on the chunks, full-text on the
documents, and the ANN vector index a table gets once it holds VECTOR_INDEX_MIN_ROWS vectors;
their health for `docsearch doctor`.

Lexical search is LanceDB's native BM25 full-text index (built before the first rows are
committed); vector search is cosine, exact in memory below the ANN index's size.
Not here: when a run builds them (`writes.Writer.ensure_search_indexes`, `refresh_indexes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docsearch.store.tables import VECTOR_INDEX_MIN_ROWS, last_write

if TYPE_CHECKING:
    from docsearch.store.reads import Store

# Whole documents are matched on their words as written: measured best by the retired doclevel study
# ("lance-plain"); the chunks keep the stemmed index. No positions: BM25 does not read them (the
# same scores), they only serve phrase queries, and they made the index 3.7 times larger (qmsum).
DOC_FTS: dict[str, Any] = {"with_position": False, "stem": False, "remove_stop_words": False}


@dataclass(frozen=True)
class IndexBuild:
    """How `Writer.refresh_indexes` builds the indexes a table lacks. With `workers`, on the Ray
    cluster this process is connected to (lance-ray): the fragments are compacted before a first
    full-text build, and the vector index is trained and built by the workers."""

    vector_min_rows: int = VECTOR_INDEX_MIN_ROWS  # no vector index on a table with fewer rows
    vector_params: dict[str, Any] | None = None  # default: vector_index_params(rows); both tables
    workers: int = 0
    worker_cpus: float = 0.25

    def on_ray(self) -> dict[str, Any]:
        return {"num_workers": self.workers, "ray_remote_args": {"num_cpus": self.worker_cpus}}


def vector_index_params(rows: int) -> dict[str, Any]:
    """The ANN index built above VECTOR_INDEX_MIN_ROWS (local and Ray engines alike)."""
    partitions = min(8, max(1, rows // 100_000))  # all of them are probed (reads.ANN_SEARCH)
    return {"index_type": "IVF_HNSW_SQ", "metric": "cosine", "num_partitions": partitions}


def index_documents(table: Any) -> Any:
    """A LanceDB docs table's full-text index (words as written, DOC_FTS)."""
    from lancedb.index import FTS

    table.create_index("text", config=FTS(**DOC_FTS), replace=True)
    return table


def create_search_indexes(chunks: Any, docs: Any) -> None:
    """The chunks' full-text index (stemmed, with positions for phrases) and scalar indexes on
    `path` and `text_sha`; the documents' full-text index."""
    from lancedb.index import FTS, BTree

    chunks.create_index("text", config=FTS(with_position=True), replace=True)
    for column in ("path", "text_sha"):
        chunks.create_index(column, config=BTree(), replace=True)
    index_documents(docs)


def index_health(store: Store) -> dict[str, Any]:
    """FTS coverage, versions and sizes of a collection's version, for `docsearch doctor`."""
    db = store.database.connection
    chunks = db.open_table(f"{store.prefix}__chunks")
    files = db.open_table(f"{store.prefix}__files")
    names = {cfg.name for cfg in chunks.list_indices()}
    fts = chunks.index_stats("text_idx") if "text_idx" in names else None
    return {
        "chunks": store.count_chunks(),
        "files": int(files.count_rows()),
        "fts_index": fts is not None,
        "fts_unindexed_rows": fts.num_unindexed_rows if fts else store.count_chunks(),
        "documents": store.count_documents() if store.has_documents else None,
        "versions": len(chunks.list_versions()),
        "last_write": last_write(store.database.dataset(f"{store.prefix}__chunks")),
    }
