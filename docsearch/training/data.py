"""Training pairs for `docsearch finetune`: from labels, or from the user's own documents.

Three sources give one shape (`TrainingData`: (query, positive, negatives) pairs, the documents
they come from, and a pool of passages that negatives are drawn from):
(a) a JSONL file of `{"query": ..., "positive": ..., "negatives": [...]?}` lines;
(b) a BEIR folder's train split (`docsearch.corpora.beir` reads variant folders, `split` fields
    and SciFact's `train/`); a relevant document longer than the encoder's window is cut with the
    indexer's chunker, and its window that matches the query best (BM25) is the positive;
(c) documents without labels (a folder, or an indexed collection): pseudo-queries from headings
    and titles to the section they open, and sentences to the window around them with the
    sentence cut out (`docsearch.training.pseudo`).
Negatives are passages of other documents, drawn at random and mined with the current encoder,
keeping only candidates scoring below 0.95 x the positive (NV-Retriever's positive-aware rule:
what scores as high as the positive is likely an unlabelled positive).
Bad input raises `DataFormatError` naming the file and line.
Not here: models and the training loop (`docsearch.training.loop`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from docsearch.corpora.beir import (
    CorpusDoc,
    RetrievalSet,
    corpus_file,
    is_beir_folder,
    load_beir,
    numbered_jsonl,
    read_corpus,
    read_queries,
)
from docsearch.encoders.base import Encoder
from docsearch.errors import DataFormatError, ExtractionError, UsageError
from docsearch.indexer.chunk import Chunker
from docsearch.indexer.extract import build_document, extract
from docsearch.indexer.plan import walk
from docsearch.store.reads import Store
from docsearch.text import WORD
from docsearch.training import pseudo

MARGIN = 0.95  # mined negatives must score below MARGIN x the positive


@dataclass(frozen=True)
class Passage:
    """A window of a document, as the indexer would cut it."""

    doc_id: str
    text: str


@dataclass(frozen=True)
class Pair:
    """One training example; negatives are filled in by `add_negatives` unless given."""

    query: str
    positive: str
    doc_id: str  # the positive's document: negatives never come from it
    negatives: tuple[str, ...] = ()
    origin: str = ""  # "file:line", "heading", "title", "span"
    negative_docs: tuple[str, ...] = ()  # the negatives' documents, when known (in-batch OPL)


@dataclass
class TrainingData:
    """Pairs plus what evaluation and negative sampling need."""

    source: str  # what was read, in words (for the model card)
    kind: str  # "pairs" (JSONL), "beir" or "corpus" (no labels)
    pairs: list[Pair]
    documents: dict[str, CorpusDoc]  # doc id -> whole document
    pool: list[Passage]  # candidate negatives
    notes: list[str] = field(default_factory=list)
    pool_vectors: np.ndarray | None = None  # (pool, dim) from the index, when it matches


# ---------------------------------------------------------------------------------------------
# Small helpers


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def text_id(text: str) -> str:
    """A stable id for a bare text (JSONL positives carry no document id)."""
    return "t" + hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:15]


def window_texts(chunker: Chunker, doc_id: str, title: str, text: str) -> list[str]:
    """The windows the indexer would cut from one document (title first, as BEIR bodies are)."""
    return [c.text for c in chunker.chunk(build_document(doc_id, title, [text]))]


# ---------------------------------------------------------------------------------------------
# (a) JSONL pairs


def _required_text(record: dict[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(f"{where}: {key!r} must be a non-empty string")
    return value


def _negatives(record: dict[str, Any], where: str) -> tuple[str, ...]:
    value = record.get("negatives", [])
    if not isinstance(value, list) or not all(isinstance(n, str) and n.strip() for n in value):
        raise DataFormatError(f"{where}: 'negatives' must be a list of non-empty strings")
    return tuple(value)


def read_pairs(path: Path) -> TrainingData:
    """(a): one `{"query", "positive", "negatives"?}` object per line."""
    pairs = []
    for number, record in numbered_jsonl(path):
        where = f"{path}:{number}"
        query = _required_text(record, "query", where)
        positive = _required_text(record, "positive", where)
        negatives = _negatives(record, where)
        negative_docs = tuple(text_id(n) for n in negatives)
        pairs.append(Pair(query, positive, text_id(positive), negatives, where, negative_docs))
    if not pairs:
        raise DataFormatError(
            f"{path}: no training pairs; expected JSON lines with 'query' and 'positive'"
        )
    texts = sorted({p.positive for p in pairs} | {n for p in pairs for n in p.negatives})
    documents = {text_id(t): CorpusDoc(text_id(t), "", t) for t in texts}
    pool = [Passage(d, doc.text) for d, doc in documents.items()]
    return TrainingData(f"pairs file {path}", "pairs", pairs, documents, pool)


# ---------------------------------------------------------------------------------------------
# (b) A BEIR folder's train split


def beir_split_folder(folder: Path, split: str) -> tuple[Path, str]:
    """(folder holding the split's queries and qrels, split to select in it)."""
    if split not in ("test", "all") and is_beir_folder(folder / split):
        return folder / split, "all"  # SciFact-style `train/` variant folder
    if not is_beir_folder(folder):
        raise DataFormatError(f"{folder} needs queries.jsonl and qrels.tsv (BEIR layout)")
    return folder, split


def check_qrels(folder: Path, corpus: Mapping[str, CorpusDoc]) -> None:
    """Every judgement must name a known query and document; the first bad line is reported."""
    queries, _ = read_queries(folder / "queries.jsonl")
    path = folder / "qrels.tsv"
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise DataFormatError(f"{path}:{number}: expected query-id, corpus-id, score")
            if parts[0] not in queries:
                raise DataFormatError(f"{path}:{number}: unknown query id {parts[0]!r}")
            if parts[1] not in corpus:
                raise DataFormatError(f"{path}:{number}: unknown document id {parts[1]!r}")


def best_window(query: str, windows: Sequence[str]) -> int:
    """Index of the window that matches the query best (BM25 among the document's windows)."""
    if len(windows) == 1:
        return 0
    from rank_bm25 import BM25Okapi

    scores = BM25Okapi([words(w) or [""] for w in windows]).get_scores(words(query))
    return int(np.argmax(scores))


def _sample(items: Sequence[Any], n: int | None, seed: int) -> list[Any]:
    if n is None or n >= len(items):
        return list(items)
    return random.Random(seed).sample(list(items), n)


def read_beir(
    folder: Path, split: str, chunker: Chunker, *, max_queries: int | None = None, seed: int = 0
) -> TrainingData:
    """(b): each (query, relevant document) of `split` gives a pair; long documents are windowed."""
    used, select = beir_split_folder(folder, split)
    corpus = read_corpus(corpus_file(used))
    check_qrels(used, corpus)
    rset = load_beir(used, select)
    if not rset.queries:
        raise DataFormatError(f"{used}: no {split!r} queries with a relevant document")
    chosen = _sample(sorted(rset.queries), max_queries, seed)
    cache: dict[str, list[str]] = {}
    pairs = []
    for qid in chosen:
        query = rset.queries[qid]
        for doc_id, grade in sorted(rset.qrels[qid].items()):
            if grade <= 0 or doc_id not in corpus:
                continue
            doc = corpus[doc_id]
            if doc_id not in cache:
                cache[doc_id] = window_texts(chunker, doc_id, doc.title, doc.text) or [doc.body]
            windows = cache[doc_id]
            pairs.append(Pair(query, windows[best_window(query, windows)], doc_id, (), qid))
    pool = [Passage(d, w) for d, ws in cache.items() for w in ws]
    note = f"{len(chosen)} of {len(rset.queries)} {split} queries, {len(pairs)} pairs"
    return TrainingData(f"BEIR {used} ({split})", "beir", pairs, dict(corpus), pool, [note])


def extend_pool(data: TrainingData, chunker: Chunker, size: int, seed: int = 0) -> TrainingData:
    """Add windows of randomly chosen other documents until the pool holds `size` passages."""
    have = {p.doc_id for p in data.pool}
    others = [d for d in sorted(data.documents) if d not in have]
    random.Random(seed).shuffle(others)
    pool = list(data.pool)
    for doc_id in others:
        if len(pool) >= size:
            break
        doc = data.documents[doc_id]
        pool += [Passage(doc_id, w) for w in window_texts(chunker, doc_id, doc.title, doc.text)]
    return replace(data, pool=pool, pool_vectors=None)


# ---------------------------------------------------------------------------------------------
# (c) Documents without labels: pseudo-queries (made by `docsearch.training.pseudo`)


def pseudo_pairs(
    docs: Mapping[str, Sequence[Passage]],
    titles: Mapping[str, str],
    *,
    spans_per_doc: int = 2,
    seed: int = 0,
) -> list[Pair]:
    """(c): title, heading and span pairs for every document (`pseudo.py`), without duplicates."""
    texts = {doc_id: [p.text for p in passages] for doc_id, passages in docs.items()}
    generic = pseudo.generic_headings(texts)
    rng = random.Random(seed)
    pairs: dict[tuple[str, str], Pair] = {}
    for doc_id, windows in texts.items():
        title = titles.get(doc_id, "")
        found = pseudo.title_query(title, Path(doc_id).stem, windows, generic)
        found += pseudo.heading_queries(windows, generic)
        found += pseudo.span_queries(windows, rng, spans_per_doc)
        for query, body, origin in found:
            pairs.setdefault((query.lower(), doc_id), Pair(query, body, doc_id, (), origin))
    return list(pairs.values())


def folder_documents(
    root: Path, chunker: Chunker
) -> tuple[dict[str, list[Passage]], dict[str, CorpusDoc], list[str]]:
    """Extract and chunk every supported file under `root` (unreadable files are skipped)."""
    docs: dict[str, list[Passage]] = {}
    documents: dict[str, CorpusDoc] = {}
    skipped = []
    for path in walk(root):
        try:
            doc = extract(path)
        except ExtractionError as exc:
            skipped.append(f"{path}: {exc}")
            continue
        doc_id = str(path.relative_to(root)) if path != root else path.name
        chunks = chunker.chunk(doc)
        if chunks:
            docs[doc_id] = [Passage(doc_id, c.text) for c in chunks]
            documents[doc_id] = CorpusDoc(doc_id, doc.title, doc.text)
    return docs, documents, skipped


def store_documents(store: Store) -> tuple[dict[str, list[Passage]], dict[str, CorpusDoc], Any]:
    """The chunks of an indexed collection, per document in order, and their stored vectors."""
    columns = ["path", "title", "text", "ordinal"] + (["vector"] if store.has_vectors else [])
    rows = sorted(store.rows("ordinal >= 0", columns), key=lambda r: (r["path"], r["ordinal"]))
    docs: dict[str, list[Passage]] = {}
    titles: dict[str, str] = {}
    for row in rows:
        docs.setdefault(row["path"], []).append(Passage(row["path"], row["text"]))
        titles[row["path"]] = row["title"] or ""
    documents = {
        d: CorpusDoc(d, titles[d], "\n\n".join(p.text for p in ps)) for d, ps in docs.items()
    }
    vectors = (
        np.asarray([r["vector"] for r in rows], dtype=np.float32) if store.has_vectors else None
    )
    return docs, documents, vectors


def read_corpus_folder(
    root: Path,
    chunker: Chunker,
    *,
    store: Store | None = None,
    max_pairs: int | None = None,
    seed: int = 0,
) -> TrainingData:
    """(c): pseudo-pairs from a folder's documents (or from `store`, the folder's collection)."""
    vectors = None
    if store is not None:
        docs, documents, vectors = store_documents(store)
        notes = [f"documents and vectors from the indexed collection {store.name!r}"]
    else:
        docs, documents, skipped = folder_documents(root, chunker)
        notes = [f"skipped {s}" for s in skipped]
    if not docs:
        raise DataFormatError(
            f"{root}: no readable documents to make training pairs from "
            "(supported: PDF, .txt, .md, .html, .docx)"
        )
    titles = {d: doc.title for d, doc in documents.items()}
    pairs = pseudo_pairs(docs, titles, seed=seed)
    if not pairs:
        raise DataFormatError(
            f"{root}: found no headings or sentences to make pseudo-queries from; "
            "give labelled pairs (JSONL) instead"
        )
    counts = {o: sum(p.origin == o for p in pairs) for o in ("title", "heading", "span")}
    notes.append(f"{len(docs)} documents -> pseudo-pairs {counts}")
    pairs = _sample(pairs, max_pairs, seed)
    pool = [p for passages in docs.values() for p in passages]
    source = f"documents in {root} (no labels: pseudo-queries)"
    return TrainingData(source, "corpus", pairs, documents, pool, notes, vectors)


# ---------------------------------------------------------------------------------------------
# Negatives


def positive_aware_keep(scores: np.ndarray, positive: float, margin: float = MARGIN) -> np.ndarray:
    """True for candidates scoring below `margin` x the positive's score (for a positive score;
    below `positive - (1 - margin) |positive|` in general, so the bound stays under it)."""
    return np.asarray(scores < positive - (1.0 - margin) * abs(positive))


def mine(
    query_vectors: np.ndarray,
    positive_vectors: np.ndarray,
    pool_vectors: np.ndarray,
    pool_docs: Sequence[str],
    excluded: Sequence[set[str]],
    k: int,
    margin: float = MARGIN,
) -> list[list[int]]:
    """For each query, the `k` best-scoring pool passages that pass the positive-aware rule.

    Vectors are unit-norm rows: queries and positives (n, dim), pool (m, dim). Passages of the
    query's own documents (`excluded[i]`) are never negatives.
    """
    scores = query_vectors @ pool_vectors.T  # (n, m)
    positives = (query_vectors * positive_vectors).sum(1)  # (n,)
    chosen = []
    for i in range(len(query_vectors)):
        keep = positive_aware_keep(scores[i], float(positives[i]), margin)
        order = np.argsort(-scores[i], kind="stable")
        picked = [int(j) for j in order if keep[j] and pool_docs[j] not in excluded[i]]
        chosen.append(picked[:k])
    return chosen


def random_negatives(
    pool: Sequence[Passage], excluded: set[str], avoid: set[str], k: int, rng: random.Random
) -> list[Passage]:
    """Up to `k` distinct pool passages from documents not in `excluded`, texts not in `avoid`."""
    picked: list[Passage] = []
    for _ in range(k * 20):
        if len(picked) >= k or not pool:
            break
        passage = pool[rng.randrange(len(pool))]
        if passage.doc_id not in excluded and passage.text not in avoid | {p.text for p in picked}:
            picked.append(passage)
    return picked


def relevant_docs(pairs: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """query text -> every document some (query, document id) pair marks relevant to it."""
    out: dict[str, set[str]] = {}
    for query, doc_id in pairs:
        out.setdefault(query, set()).add(doc_id)
    return out


def add_negatives(
    data: TrainingData,
    n: int,
    *,
    mined: int | None = None,
    encoder: Encoder | None = None,
    seed: int = 0,
    margin: float = MARGIN,
) -> TrainingData:
    """Give each pair without negatives `n`: `mined` (default half) mined with `encoder`, the
    rest random (all random without an encoder).

    Pairs that brought their own negatives keep exactly those. Pool vectors stored in `data`
    (from the index) are used when present; otherwise the pool is encoded once.
    """
    todo = [i for i, p in enumerate(data.pairs) if not p.negatives]
    if n <= 0 or not todo:
        return data
    relevant = relevant_docs((p.query, p.doc_id) for p in data.pairs)
    k = min(n, n // 2 if mined is None else mined)
    hard_by_pair: dict[int, list[Passage]] = {}
    if encoder is not None and k > 0 and data.pool:
        hard_by_pair = _mined(data, todo, relevant, k, encoder, margin)
    rng = random.Random(seed)
    pairs = list(data.pairs)
    for i in todo:
        pair = pairs[i]
        hard = hard_by_pair.get(i, [])
        avoid = {pair.positive, *(p.text for p in hard)}
        chosen = hard + random_negatives(data.pool, relevant[pair.query], avoid, n - len(hard), rng)
        pairs[i] = replace(
            pair,
            negatives=tuple(p.text for p in chosen),
            negative_docs=tuple(p.doc_id for p in chosen),
        )
    how = (
        f"up to {k} mined below {margin} x the positive, the rest random"
        if hard_by_pair
        else "random"
    )
    note = f"negatives: {n} per pair ({how})"
    return replace(data, pairs=pairs, notes=[*data.notes, note])


def _mined(
    data: TrainingData,
    todo: Sequence[int],
    relevant: Mapping[str, set[str]],
    k: int,
    encoder: Encoder,
    margin: float,
) -> dict[int, list[Passage]]:
    pool_vectors = data.pool_vectors
    if pool_vectors is None or len(pool_vectors) != len(data.pool):
        pool_vectors = encoder.encode_documents([p.text for p in data.pool])  # (pool, dim)
    pairs = [data.pairs[i] for i in todo]
    queries = encoder.encode_queries([p.query for p in pairs])  # (n, dim)
    positives = encoder.encode_documents([p.positive for p in pairs])  # (n, dim)
    excluded = [relevant[p.query] for p in pairs]
    docs = [p.doc_id for p in data.pool]
    picks = mine(queries, positives, pool_vectors, docs, excluded, k, margin)
    return {i: [data.pool[j] for j in js] for i, js in zip(todo, picks, strict=True)}


# ---------------------------------------------------------------------------------------------
# Held-out evaluation split


def split_heldout(
    data: TrainingData, fraction: float = 0.1, limit: int = 200, seed: int = 0
) -> tuple[TrainingData, list[Pair]]:
    """(training data, held-out pairs): whole queries (labelled) or whole documents (no labels).

    Holding out documents for pseudo-pairs keeps a held-out section's text out of training.
    """

    def group(p: Pair) -> str:
        return p.doc_id if data.kind == "corpus" else p.query

    groups = sorted({group(p) for p in data.pairs})
    random.Random(seed).shuffle(groups)
    want = min(limit, int(len(data.pairs) * fraction))
    held: set[str] = set()
    count = 0
    for g in groups:
        if count >= want or len(held) + 1 >= len(groups):
            break
        held.add(g)
        count += sum(group(p) == g for p in data.pairs)
    train = [p for p in data.pairs if group(p) not in held]
    heldout = [p for p in data.pairs if group(p) in held]
    keep = [i for i, p in enumerate(data.pool) if data.kind != "corpus" or p.doc_id not in held]
    unit = "documents" if data.kind == "corpus" else "queries"
    note = f"held out {len(heldout)} pairs ({len(held)} {unit})"
    data = replace(data, pairs=train, notes=[*data.notes, note])
    return select_pool(data, keep), heldout


def select_pool(data: TrainingData, keep: Sequence[int]) -> TrainingData:
    """Only the pool passages at `keep` (with their stored vectors, if any)."""
    vectors = data.pool_vectors[list(keep)] if data.pool_vectors is not None else None
    return replace(data, pool=[data.pool[i] for i in keep], pool_vectors=vectors)


def heldout_set(
    pairs: Sequence[Pair],
    documents: Mapping[str, CorpusDoc],
    *,
    max_docs: int = 300,
    seed: int = 0,
    name: str = "held-out",
) -> RetrievalSet:
    """Held-out pairs as a retrieval task: their documents plus random others, `max_docs` in all."""
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    ids: dict[str, str] = {}
    for pair in pairs:
        qid = ids.setdefault(pair.query, f"h{len(ids)}")
        queries[qid] = pair.query
        qrels.setdefault(qid, {})[pair.doc_id] = 1
    judged = {d for r in qrels.values() for d in r}
    rest = sorted(set(documents) - judged)
    extra = random.Random(seed).sample(rest, max(0, min(len(rest), max_docs - len(judged))))
    corpus = {d: documents[d] for d in sorted(judged | set(extra))}
    note = f"{len(queries)} held-out queries over {len(corpus)} documents ({len(judged)} judged)"
    return RetrievalSet(name, corpus, queries, qrels, notes=[note])


# ---------------------------------------------------------------------------------------------
# One entry point


def load_training_data(
    source: Path,
    chunker: Chunker,
    *,
    split: str = "train",
    store: Store | None = None,
    max_pairs: int | None = None,
    pool_size: int = 1000,
    seed: int = 0,
) -> TrainingData:
    """Pairs from a JSONL file, a BEIR folder's `split`, or a folder of unlabelled documents.

    `store` is the collection indexed from `source`, if any (its chunks and vectors are reused).
    `max_pairs` samples queries (BEIR) or pairs (the others); `pool_size` caps the passages
    negatives are drawn from.
    """
    if not source.exists():
        raise UsageError(f"no such training data: {source}")
    if source.is_file():
        if source.suffix.lower() not in (".jsonl", ".json"):
            raise UsageError(
                f"{source}: training data is a .jsonl file of pairs, a BEIR folder or a folder "
                "of documents"
            )
        data = read_pairs(source)
        data = replace(data, pairs=_sample(data.pairs, max_pairs, seed))
    elif is_beir_folder(source) or is_beir_folder(source / split):
        data = read_beir(source, split, chunker, max_queries=max_pairs, seed=seed)
        data = extend_pool(data, chunker, pool_size, seed)
    else:
        data = read_corpus_folder(source, chunker, store=store, max_pairs=max_pairs, seed=seed)
    if len(data.pool) > pool_size:
        data = select_pool(
            data, sorted(random.Random(seed).sample(range(len(data.pool)), pool_size))
        )
    return data
