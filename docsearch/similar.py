"""Query by document: what `Retriever.similar` needs besides the search legs and the fusion.

The query document is a file outside the collection (extracted and chunked as indexing would
do it), text already extracted (`docsearch eval --similar`), or a document of the collection
(named by its path or doc id: its text, chunks and stored doc-mean vector are read back).
A whole document is too long to be a query as it stands (an 8k-word OR query is slow and is
dominated by common words), so the lexical side keeps its key terms: those of highest BM25
weight in the query document against the collection's own statistics (document frequencies and
mean length, counted once per version of the docs table and kept in a file beside the
collection, `.<name>.termstats.cache`, so a fresh process reads them instead of counting).
Each result is explained by the key terms both documents contain and by passage pairs (with
their pages): with vectors, the chunk pairs of highest cosine (`ChunkMatch`, which also scores
the `chunk_dense` leg: each query chunk's best match, averaged); without, the passage of each
document holding most of the shared terms.
Not here: the legs and their fusion (`similar_search.py`, `fusion.SIMILAR_RULES`), reading Lance
(`store/`), rendering (`app/similar_cmd.py`).
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from docsearch.errors import ExtractionError, UsageError
from docsearch.indexer.filters import sql_in
from docsearch.store.database import cache_file
from docsearch.store.documents import mean_vector
from docsearch.store.reads import Store
from docsearch.store.schema import RESULT_COLUMNS, ChunkView
from docsearch.text import index_words

if TYPE_CHECKING:
    from docsearch.encoders.base import Encoder
    from docsearch.indexer.extract import Document

# Query terms kept from the query document: chosen on a seeded half of irled2017-precedent's
# queries (benchmarks/similar.py, results/similar.md).
MAX_TERMS = 150
REPEATS = 4  # how often the best key term is written in the query (see lexical_query)
EXPLAIN_TERMS = 10  # shared key terms a result shows, and that pick its passage pair
MAX_PAIRS = 3  # passage pairs a result shows when both documents have vectors
PAIR_SHARE = 0.75  # ... each at least this share of the best pair's cosine
K1, B = 1.2, 0.75  # the query document's term weights (BM25's usual values)
# A query document outside the collection is embedded through at most this many of its
# chunks, spread evenly over it (always the first and the last): a 10k-word case is 60 MiniLM
# chunks, 2.3 s to embed on 2 cores. The smallest cap whose hybrid nDCG@10 on the tune half
# of irled2017-precedent stayed within 0.005 of embedding every chunk (8: -0.0054, 16: +0.0007,
# 32: +0.0025; benchmarks/similar_dense.py --full, results/similar.md).
MAX_QUERY_CHUNKS = 16
STATS_FORMAT = 1  # of the kept word statistics: bump when `index_words` splits text differently

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TermStats:
    """A collection's word statistics: documents, their mean length in words, and for each
    word the number of documents that hold it."""

    documents: int
    mean_length: float
    df: Mapping[str, int]

    @classmethod
    def of(cls, texts: Iterable[str]) -> TermStats:
        df: Counter[str] = Counter()
        documents = total = 0
        for text in texts:
            tokens = index_words(text)
            documents, total = documents + 1, total + len(tokens)
            df.update(set(tokens))
        return cls(documents, total / documents if documents else 0.0, df)

    def key_terms(self, text: str, limit: int, min_df: int = 1) -> list[tuple[str, float]]:
        """The `limit` words of `text` of highest BM25 weight, with it, best first. A word fewer
        than `min_df` documents hold can match nothing (2 when the query is one of them)."""
        counts = Counter(index_words(text))
        length = sum(counts.values())
        norm = K1 * (1 - B + B * length / (self.mean_length or 1.0))
        weights = {}
        for word, tf in counts.items():
            df = self.df.get(word, 0)
            if df >= min_df:
                idf = math.log(1 + (self.documents - df + 0.5) / (df + 0.5))
                weights[word] = idf * tf * (K1 + 1) / (tf + norm)
        return sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:limit]


def collection_stats(store: Store) -> TermStats:
    """The collection's TermStats, counted once per version of its docs table (7 s per 15M
    words on 2 cores) and kept in a file beside the collection, so a fresh process reads them
    (tenths of a second) instead of counting again."""
    return _stats(store.uri, store.name, store.documents_version())


@lru_cache(maxsize=4)
def _stats(db: str, name: str, version: str) -> TermStats:
    # `version` is only the cache key: a re-indexed collection is counted again.
    key = f"{STATS_FORMAT}:{version}"
    path = cache_file(db, name, "termstats")
    stats = _read_stats(path, key) if path is not None else None
    if stats is None:
        stats = TermStats.of(row["text"] for row in Store.open(db, name).documents(["text"]))
        if path is not None:
            _write_stats(path, key, stats)
    return stats


def _read_stats(path: Path, key: str) -> TermStats | None:
    """The statistics kept in `path` if they were counted for `key`; None when there are none,
    they are another version's, or the file cannot be read (it is then counted again)."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowInvalid):
        return None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if meta.get("key") != key:
        return None
    df = dict(zip(table["word"].to_pylist(), table["df"].to_pylist(), strict=True))
    return TermStats(int(meta["documents"]), float(meta["mean_length"]), df)


def _write_stats(path: Path, key: str, stats: TermStats) -> None:
    """Keep `stats` in `path` (written aside, then renamed over it: a reader never sees half
    a file). A database folder this process may not write to keeps no cache."""
    import pyarrow as pa

    meta = {"key": key, "documents": str(stats.documents), "mean_length": repr(stats.mean_length)}
    table = pa.table(
        {"word": list(stats.df), "df": list(stats.df.values())}
    ).replace_schema_metadata(meta)
    aside = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with pa.OSFile(str(aside), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        os.replace(aside, path)
    except OSError as exc:
        aside.unlink(missing_ok=True)
        log.info("word statistics of %s not kept (%s); they are counted again next time", path, exc)


@dataclass(frozen=True)
class QueryDocument:
    """The document results must resemble. `doc_id` is set when it is in the collection (it is
    then left out of the results); `vector` is its doc-mean vector when one was asked for."""

    path: str
    text: str
    chunks: Sequence[ChunkView]
    doc_id: str | None = None
    vector: np.ndarray | None = None
    chunk_vectors: np.ndarray | None = None  # (embedded chunks, dim), in the order of `embedded`
    embedded: Sequence[ChunkView] = ()  # the chunks `chunk_vectors` has a row for

    @property
    def needs_vectors(self) -> bool:
        """A document from outside the collection, not embedded yet (see `embed`)."""
        return self.doc_id is None and self.chunk_vectors is None

    def embed(self, encoder: Encoder) -> QueryDocument:
        """This document with the vectors of (a spread of at most MAX_QUERY_CHUNKS of) its
        chunks and their normalised mean, as its doc-mean vector."""
        picked = [self.chunks[i] for i in spread(len(self.chunks), MAX_QUERY_CHUNKS)]
        vectors = np.asarray(encoder.encode_documents([c.text for c in picked]), np.float32)
        vector = mean_vector(vectors.sum(axis=0, dtype=np.float64), len(vectors))
        return replace(self, vector=vector, chunk_vectors=vectors, embedded=picked)


def spread(count: int, limit: int) -> list[int]:
    """`limit` indices of `range(count)` spread evenly from the first to the last (all of
    them when there are no more than `limit`)."""
    if count <= limit:
        return list(range(count))
    if limit == 1:
        return [0]
    return sorted({round(i * (count - 1) / (limit - 1)) for i in range(limit)})


@dataclass(frozen=True)
class InCollection:
    """A query document named by its doc id that must be one of the collection's: never read
    as a file (what a server takes from a client, who may not name files on it)."""

    doc_id: str


def query_document(
    store: Store, source: str | Path | Document | InCollection, encoder: Encoder | None
) -> QueryDocument:
    """`source` as a QueryDocument: a Document (already extracted), a file (in the collection
    or not), the path or doc id of a document of the collection, or an InCollection. With an
    `encoder` (None: lexical only), a document of the collection comes with its stored vectors;
    one from outside is chunked as the collection was, to be embedded (`QueryDocument.embed`)."""
    from docsearch.indexer.extract import Document, extract

    if isinstance(source, Document):
        return _outside(store, source, encoder)
    if isinstance(source, InCollection):
        held = _stored(store, [source.doc_id], encoder is not None)
        if held is None:
            raise UsageError(f"no document {source.doc_id} in collection {store.name!r}")
        return held
    file = Path(source).expanduser()
    names = [str(source)]
    if file.is_file():
        names = [str(file.absolute()), str(file.resolve()), str(source)]
    found = _stored(store, names, encoder is not None)
    if found is not None:
        return found
    if file.is_dir():
        raise UsageError(f"{source} is a folder; give one file as the query document")
    if not file.exists():
        raise UsageError(
            f"{source} is neither a file nor a document of collection {store.name!r} "
            "(give a file, or a path or doc id as `docsearch search --json` shows them)"
        )
    try:
        doc = extract(file, display_path=str(file.absolute()))
    except ExtractionError as exc:
        raise UsageError(f"cannot read the query document {source}: {exc}") from None
    return _outside(store, doc, encoder)


def _stored(store: Store, names: Sequence[str], with_vector: bool) -> QueryDocument | None:
    """The collection's document whose path or doc id is one of `names`, if any."""
    where = f"{sql_in('path', names)} OR {sql_in('doc_id', names)}"
    columns = ["doc_id", "path", "text", *(["vector"] if with_vector else [])]
    rows = list(store.documents(columns, where))
    if not rows:
        return None
    row = rows[0]
    views, vectors = document_chunks(store, [row["doc_id"]], with_vector)[row["doc_id"]]
    vector = np.asarray(row["vector"], dtype=np.float32) if with_vector else None
    return QueryDocument(row["path"], row["text"], views, row["doc_id"], vector, vectors, views)


def document_chunks(
    store: Store, doc_ids: Sequence[str], with_vectors: bool
) -> dict[str, tuple[list[ChunkView], np.ndarray | None]]:
    """doc_id -> its chunks in reading order, and their vectors (one row each) when asked for;
    one read for all of `doc_ids`."""
    if not doc_ids:
        return {}
    where = sql_in("doc_id", doc_ids)
    if with_vectors:
        rows, all_vectors = store.rows_and_vectors(where, RESULT_COLUMNS)
    else:
        rows, all_vectors = store.rows(where, RESULT_COLUMNS), None
    by_doc: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_doc.setdefault(row["doc_id"], []).append(i)
    out = {}
    for doc, at in by_doc.items():
        at.sort(key=lambda i: rows[i]["ordinal"])
        vectors = all_vectors[at] if all_vectors is not None else None
        out[doc] = ([chunk_view(rows[i]) for i in at], vectors)
    return out


def _outside(store: Store, doc: Document, encoder: Encoder | None) -> QueryDocument:
    """A document the collection does not hold, chunked as the collection was (by the
    encoder's tokens; by words without one)."""
    from docsearch.indexer.chunk import ChunkerSettings
    from docsearch.indexer.collection import make_chunker
    from docsearch.indexer.pipeline import chunk_rows

    chunker = make_chunker(encoder, ChunkerSettings(**store.meta.chunker))
    rows = chunk_rows(doc, chunker.chunk(doc), file_sha="")
    if not rows or not index_words(doc.text):
        raise UsageError(f"the query document {doc.path} has no words to compare")
    return QueryDocument(doc.path, doc.text, [chunk_view(row) for row in rows])


def chunk_view(row: Mapping[str, Any]) -> ChunkView:
    """A chunk row (its id as `id`) as a ChunkView; a collection from before OCR has no `ocr`
    column, and none of its chunks was read by OCR."""
    names = [f.name for f in fields(ChunkView) if f.name != "ocr"]
    values = {n: row["id" if n == "chunk_id" else n] for n in names}
    return ChunkView(**values, ocr=bool(row.get("ocr", False)))


def lexical_query(terms: Sequence[tuple[str, float]]) -> str:
    """The whole-document BM25 query for the key terms (best first): the index adds up a term's
    score once per time it is written, so each is written in proportion to its weight, the best
    REPEATS times, every one at least once."""
    if not terms:
        return ""
    best = terms[0][1]
    return " ".join(" ".join([t] * max(1, round(REPEATS * w / best))) for t, w in terms)


def best_passage(
    chunks: Sequence[ChunkView], weights: Mapping[str, float]
) -> tuple[ChunkView, float]:
    """The chunk holding the most of the weighted terms (their weights summed; the first of
    equals), and that sum."""
    scored = [
        (sum(weights[w] for w in set(index_words(c.text)) & weights.keys()), c) for c in chunks
    ]
    score, chunk = max(scored, key=lambda pair: (pair[0], -pair[1].ordinal))
    return chunk, score


def shared_terms(
    terms: Sequence[tuple[str, float]], chunks: Sequence[ChunkView], limit: int = EXPLAIN_TERMS
) -> dict[str, float]:
    """The first `limit` key terms (best first) that `chunks` (one document) contain."""
    held = {w for c in chunks for w in index_words(c.text)}
    return dict([(term, weight) for term, weight in terms if term in held][:limit])


@dataclass(frozen=True)
class ChunkMatch:
    """How the chunks of the query document meet those of one other document: the cosine
    similarity of every pair (rows: query chunks, columns: the document's; vectors are unit
    norm, so a dot product)."""

    similarity: np.ndarray

    @classmethod
    def of(cls, query: np.ndarray, document: np.ndarray) -> ChunkMatch:
        return cls(query @ document.T)

    def score(self) -> float:
        """How much of the query document the other one covers: each query chunk's best match,
        averaged (a long document is not favoured for holding many chunks)."""
        return float(self.similarity.max(axis=1).mean())

    def pairs(self, limit: int = MAX_PAIRS) -> list[tuple[int, int, float]]:
        """The `limit` best (query chunk, document chunk, cosine) pairs, best first, no chunk
        of either document in two of them (three views of one passage explain nothing more),
        none below PAIR_SHARE of the best one's cosine."""
        order = np.argsort(-self.similarity, axis=None, kind="stable")
        rows, cols = np.unravel_index(order, self.similarity.shape)
        used_rows: set[int] = set()
        used_cols: set[int] = set()
        out: list[tuple[int, int, float]] = []
        for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
            if row in used_rows or col in used_cols:
                continue
            if out and self.similarity[row, col] < PAIR_SHARE * out[0][2]:
                break  # far weaker than the best pair: it would explain nothing
            out.append((row, col, float(self.similarity[row, col])))
            used_rows.add(row)
            used_cols.add(col)
            if len(out) == limit:
                break
        return out
