"""Retrieval metrics and the eval runner behind `docsearch eval` and `benchmarks/quality.py`.

Metrics (document level, the way BEIR/pytrec_eval compute them): nDCG@k with linear gains
(the graded relevance itself), Recall@k, MRR@k; a query's ranking is a list of document ids,
best first, duplicates ignored. Averages are over the queries that have a relevant document.
The runner indexes a `RetrievalSet` into a temporary collection through the real pipeline
(extract -> chunk -> embed -> LanceDB), then asks the real `Retriever` (documents ranked as
search ranks them, or, with `similar`, as `Retriever.similar` ranks the documents like each
query read as a document). For sets with answer spans (CUAD), it also scores passages: does one of the
top-k chunks overlap the span that answers the query?
Not here: reading datasets (`docsearch.corpora`), tables and plots (`benchmarks/`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docsearch.config import Settings
from docsearch.corpora.beir import AnswerSpan, RetrievalSet
from docsearch.defaults import MODES
from docsearch.errors import UsageError

if TYPE_CHECKING:
    from docsearch.encoders.base import Encoder
    from docsearch.fusion import Fusion
    from docsearch.indexer.pipeline import ProgressSink
    from docsearch.retriever import Retriever

log = logging.getLogger(__name__)

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
SPAN_KS = (1, 5, 10)
RUN_DEPTH = 100  # documents retrieved per query: enough for Recall@100

Qrels = Mapping[str, Mapping[str, int]]  # query id -> doc id -> graded relevance
Run = Mapping[str, Sequence[str]]  # query id -> doc ids, best first


# ---------------------------------------------------------------------------------------------
# Metrics: pure functions of one ranking and one query's judgements


def _unique(ranking: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def dcg(gains: Sequence[float]) -> float:
    """sum of gain_i / log2(i + 1) over 1-based ranks i: [3, 2] -> 3 + 2 / log2(3)."""
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """DCG of the top k over the DCG of the ideal top k; 0 when nothing is relevant."""
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    gains = [max(0, judged.get(doc, 0)) for doc in _unique(ranking)[:k]]
    return dcg(gains) / dcg(ideal)


def recall_at_k(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top k."""
    relevant = {d for d, g in judged.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_unique(ranking)[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the top k, else 0."""
    for rank, doc in enumerate(_unique(ranking)[:k], start=1):
        if judged.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def query_metrics(ranking: Sequence[str], judged: Mapping[str, int]) -> dict[str, float]:
    return {
        "ndcg@10": ndcg_at_k(ranking, judged, 10),
        "recall@10": recall_at_k(ranking, judged, 10),
        "recall@100": recall_at_k(ranking, judged, 100),
        "mrr@10": mrr_at_k(ranking, judged, 10),
    }


def score_run(run: Run, qrels: Qrels) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(mean of each metric, per-query metrics) over the queries with a relevant document.

    A judged query missing from `run` scores 0, as in pytrec_eval's averaging over qrels.
    """
    per_query = {
        qid: query_metrics(run.get(qid, []), judged)
        for qid, judged in qrels.items()
        if any(g > 0 for g in judged.values())
    }
    if not per_query:
        return dict.fromkeys(METRICS, 0.0), {}
    means = {m: sum(q[m] for q in per_query.values()) / len(per_query) for m in METRICS}
    return means, per_query


def span_hit(hits: Sequence[tuple[str, int, int]], spans: Sequence[AnswerSpan], k: int) -> bool:
    """Does one of the first k passages `(doc_id, char_start, char_end)` overlap an answer span?"""
    return any(
        doc == s.doc_id and start < s.end and s.start < end
        for doc, start, end in hits[:k]
        for s in spans
    )


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class EvalResult:
    """One dataset x encoder x mode: metrics, sizes and timings."""

    dataset: str
    encoder: str  # describe(spec), or "none" for a lexical-only index
    mode: str
    metrics: dict[str, float]
    queries: int
    documents: int
    chunks: int
    index_seconds: float
    search_seconds: float
    span_hits: dict[str, float] = field(default_factory=dict)  # "hit@5" -> share of queries
    notes: list[str] = field(default_factory=list)
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data, less the per-query metrics (one row per query)."""
        return {key: value for key, value in asdict(self).items() if key != "per_query"}

    def summary(self) -> str:
        """Human-readable lines for the terminal."""
        lines = [
            f"{self.dataset}  encoder: {self.encoder}  mode: {self.mode}",
            f"{self.queries} queries, {self.documents} documents, {self.chunks} chunks; "
            f"index {self.index_seconds:.1f} s, search {self.search_seconds:.1f} s",
        ]
        lines += [f"{name:<11} {value:.4f}" for name, value in self.metrics.items()]
        lines += [f"span {name:<6} {value:.4f}" for name, value in self.span_hits.items()]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The runner


def corpus_fingerprint(rset: RetrievalSet, *parts: Any) -> str:
    """A short hash of the documents (ids and text) and of whatever else shapes the index."""
    digest = hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode())
    for doc_id in sorted(rset.corpus):
        body = rset.corpus[doc_id].body.encode("utf-8", "surrogatepass")
        digest.update(f"{doc_id}\0{hashlib.sha256(body).hexdigest()}\0".encode())
    return digest.hexdigest()[:16]


class EvalIndex:
    """A collection holding one `RetrievalSet`'s corpus; search it in any mode.

    Use as a context manager. Without `cache` the database is temporary and deleted on exit;
    with `cache` (a folder) the collection is named after the corpus, encoder and chunk cap and
    kept, so a later run with the same documents and encoder searches it without re-embedding.
    """

    def __init__(
        self,
        rset: RetrievalSet,
        *,
        encoder: str | None = None,
        options: Mapping[str, Any] | None = None,
        cap: int | None = None,
        settings: Settings | None = None,
        progress: ProgressSink | None = None,
        cache: str | Path | None = None,
    ) -> None:
        """What is left open (the encoder when none is named and its model, the chunk cap,
        overlap, token budget) comes from `settings` (default: the environment's), as for
        `docsearch index`; `cap`, when given, caps the chunks instead."""
        self.rset = rset
        settings = settings or Settings()
        self.settings = settings if cap is None else settings.model_copy(update={"max_tokens": cap})
        self.encoder_name = encoder
        self.options = self.settings.with_default_model(encoder, options or {})
        self.progress = progress
        self.persistent = cache is not None
        self.db = str(cache) if cache is not None else tempfile.mkdtemp(prefix="docsearch-eval-")
        chunking = (self.settings.max_tokens, self.settings.overlap)
        key = (encoder or self.settings.encoder, self.options, *chunking)
        self.name = "eval-" + corpus_fingerprint(rset, *key) if self.persistent else "eval"
        self.encoder: Encoder | None = None
        self.encoder_label = "none"
        self.chunks = 0
        self.index_seconds = 0.0
        self.cached = False

    def __enter__(self) -> EvalIndex:
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.persistent:
            shutil.rmtree(self.db, ignore_errors=True)

    @property
    def _sidecar(self) -> Path:
        return Path(self.db) / f"{self.name}.json"

    def build(self) -> None:
        """Extract, chunk, embed and write every document, then build the full-text index."""
        from docsearch.encoders.base import describe
        from docsearch.indexer.extract import build_document
        from docsearch.indexer.service import index_documents, writing

        started = time.perf_counter()
        with writing(
            self.name,
            settings=self.settings,
            db=self.db,
            encoder=self.encoder_name,
            options=self.options,
            source=self.rset.name,
            progress=self.progress,
        ) as job:
            self.encoder = job.encoder
            self.encoder_label = describe(self.encoder.spec()) if self.encoder else "none"
            done = len(job.store.file_records()) == len(self.rset.corpus)
            if self.persistent and done and self._sidecar.is_file():
                self.cached = True
                self.index_seconds = float(json.loads(self._sidecar.read_text())["index_seconds"])
            else:
                corpus = self.rset.corpus.values()
                index_documents(job, [build_document(d.id, d.title, [d.body]) for d in corpus])
                self.index_seconds = time.perf_counter() - started
                if self.persistent:
                    self._sidecar.write_text(json.dumps({"index_seconds": self.index_seconds}))
            self.chunks = job.store.count_chunks()

    def retriever(self, fusion: Fusion | None = None) -> Retriever:
        from docsearch.retriever import Retriever

        return Retriever(self.name, db=self.db, encoder=self.encoder, fusion=fusion)

    def evaluate(
        self,
        mode: str,
        *,
        queries: RetrievalSet | None = None,
        fusion: Fusion | None = None,
        similar: bool = False,
    ) -> EvalResult:
        """Run the queries (of `queries`, default the indexed set) in `mode` and score them;
        `similar`: each query is a document, searched for as `Retriever.similar` does."""
        rset = queries or self.rset
        retriever = self.retriever(fusion)
        started = time.perf_counter()
        if similar:
            run, span_hits = similar_run(retriever, rset.queries, mode), {}
        else:
            run = document_run(retriever, rset.queries, mode)
            span_hits = passage_span_hits(retriever, rset, mode)  # {} without answer spans
        searched = time.perf_counter() - started
        means, per_query = score_run(run, {q: rset.qrels.get(q, {}) for q in rset.queries})
        return EvalResult(
            dataset=rset.name,
            encoder=self.encoder_label,
            mode=f"similar {mode}" if similar else mode,
            metrics=means,
            queries=len(per_query),
            documents=len(self.rset.corpus),
            chunks=self.chunks,
            index_seconds=round(self.index_seconds, 2),
            search_seconds=round(searched, 2),
            span_hits=span_hits,
            notes=list(rset.notes),
            per_query=per_query,
        )


def document_run(
    retriever: Retriever, queries: Mapping[str, str], mode: str, depth: int = RUN_DEPTH
) -> dict[str, list[str]]:
    """query id -> the ids (paths) of the top `depth` documents (none for a blank query)."""
    return {
        qid: [h.path for h in retriever.search(text, k=depth, mode=mode, granularity="document")]
        if text.strip()
        else []
        for qid, text in queries.items()
    }


def similar_run(
    retriever: Retriever, queries: Mapping[str, str], mode: str, depth: int = RUN_DEPTH
) -> dict[str, list[str]]:
    """query id -> the ids (paths) of the top `depth` documents like the query, read as a
    document (none for a blank query)."""
    from docsearch.indexer.extract import build_document

    return {
        qid: [
            h.path
            for h in retriever.similar(
                build_document(qid, "", [text]), k=depth, mode=mode, explain=False
            )
        ]
        if text.strip()
        else []
        for qid, text in queries.items()
    }


def passage_span_hits(retriever: Retriever, rset: RetrievalSet, mode: str) -> dict[str, float]:
    """Share of span-judged queries with an answer-overlapping chunk in the top k passages, for
    each k of SPAN_KS."""
    by_query: dict[str, list[AnswerSpan]] = {}
    for s in rset.spans:  # spans index `text`; chunks index `body` (title first)
        shift = rset.corpus[s.doc_id].text_offset
        by_query.setdefault(s.query_id, []).append(
            replace(s, start=s.start + shift, end=s.end + shift)
        )
    scored = [q for q in rset.queries if q in by_query and rset.queries[q].strip()]
    if not scored:
        return {}
    found = dict.fromkeys(SPAN_KS, 0)
    for qid in scored:
        hits = retriever.search(rset.queries[qid], k=max(SPAN_KS), mode=mode, granularity="passage")
        located = [(h.path, h.char_start, h.char_end) for h in hits]
        for k in SPAN_KS:
            found[k] += span_hit(located, by_query[qid], k)
    return {f"hit@{k}": found[k] / len(scored) for k in SPAN_KS}


# ---------------------------------------------------------------------------------------------
# One call for the command line


def default_mode(encoder: str | None, mode: str | None) -> tuple[str | None, str]:
    """(encoder to index with, mode): lexical without an encoder needs no model at all."""
    from docsearch.indexer.collection import LEXICAL_ONLY

    if mode is None:
        mode = "lexical" if encoder == LEXICAL_ONLY else "hybrid"
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; use hybrid, vector or lexical")
    if mode == "lexical" and encoder is None:
        encoder = LEXICAL_ONLY
    if mode != "lexical" and encoder == LEXICAL_ONLY:
        raise UsageError(f"--mode {mode} needs an encoder; use --mode lexical with --encoder none")
    return encoder, mode


def evaluate_dataset(
    rset: RetrievalSet,
    *,
    encoder: str | None = None,
    options: Mapping[str, Any] | None = None,
    mode: str | None = None,
    settings: Settings | None = None,
    progress: ProgressSink | None = None,
    similar: bool = False,
    cache: str | Path | None = None,
) -> list[EvalResult]:
    """Index `rset` once into a temporary store (settings as for `EvalIndex`; kept in `cache`
    and reused from there, when given), search it in `mode`, or in every mode the index
    answers when `mode` is "all" (one index, one embedding pass), and score each run
    (`similar`: each query read as a document)."""
    from docsearch.indexer.collection import LEXICAL_ONLY

    every = mode == "all"
    if every:
        mode = "lexical" if encoder == LEXICAL_ONLY else None
    encoder, mode = default_mode(encoder, mode)
    with EvalIndex(
        rset, encoder=encoder, options=options, settings=settings, progress=progress, cache=cache
    ) as index:
        if index.encoder is None and mode != "lexical":
            log.warning("no encoder could be loaded; evaluating lexical search instead")
            mode = "lexical"
        modes = MODES if every and index.encoder is not None else (mode,)
        return [index.evaluate(m, similar=similar) for m in modes]


def load_dataset(
    path: Path | str, split: str | None = "test", task: str | None = None
) -> RetrievalSet:
    """A BEIR folder, or a LoCoV1 folder (with `task`), as a `RetrievalSet`."""
    from docsearch.corpora import beir, loco

    path = Path(path)
    if beir.is_beir_folder(path) or beir.is_beir_folder(path / (split or "")):
        if task:
            raise UsageError(f"{path} is a BEIR folder; --task is only for LoCoV1 folders")
        return beir.load_beir(path, split)
    if loco.is_loco_folder(path):
        return loco.load_loco(path, task)
    raise UsageError(
        f"{path} is neither a BEIR folder (corpus.jsonl, queries.jsonl, qrels.tsv) "
        "nor a LoCoV1 folder (query and document files with qid/pid fields)"
    )
