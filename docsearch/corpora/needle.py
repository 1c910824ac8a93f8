"""The needle-in-a-haystack probe (as in the M2-BERT / LoCo paper): does position matter?

From a labelled set of short passages (a `RetrievalSet`, e.g. SciFact), build long documents of
`passages` passages each: for every chosen query, a haystack holding its relevant passage (the
needle) among `passages - 1` unrelated fillers. One `RetrievalSet` per needle position 1..N, the
fillers and their order fixed across positions, so only the needle's position changes. A query
must find its own haystack among the others (which hold other queries' needles). An encoder that
reads only its first window loses needles placed after it; one that reads the whole document
(or a pipeline that chunks it) keeps them.
Not here: running encoders over the sets (`benchmarks/needle.py`, `docsearch.evaluation`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from docsearch.corpora.beir import CorpusDoc, RetrievalSet
from docsearch.errors import UsageError

SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Haystack:
    query_id: str
    needle: str  # source document id of the relevant passage
    fillers: tuple[str, ...]  # source document ids, in order


def _needle_of(judged: dict[str, int]) -> str:
    """The most relevant judged document (ties: the smallest id, for determinism)."""
    return min((d for d, g in judged.items() if g > 0), key=lambda d: (-judged[d], d))


def choose_haystacks(
    source: RetrievalSet, passages: int, queries: int, seed: int
) -> list[Haystack]:
    """Queries with distinct needles, each with fillers relevant to none of the chosen queries."""
    if passages < 1:
        raise UsageError("a haystack needs at least one passage")
    rng = random.Random(seed)
    candidates = sorted(q for q in source.queries if source.relevant(q))
    rng.shuffle(candidates)
    chosen: dict[str, str] = {}  # query -> needle
    for qid in candidates:
        needle = _needle_of(dict(source.qrels[qid]))
        if needle in source.corpus and needle not in chosen.values():
            chosen[qid] = needle
        if len(chosen) == queries:
            break
    relevant = {d for q in chosen for d in source.relevant(q)}
    pool = sorted(set(source.corpus) - relevant)
    need = len(chosen) * (passages - 1)
    if not chosen or (passages > 1 and not pool):
        raise UsageError(
            f"{source.name} has too few judged queries or documents for a needle probe"
        )
    draws = rng.sample(pool, need) if need <= len(pool) else [rng.choice(pool) for _ in range(need)]
    step = passages - 1
    return [
        Haystack(qid, needle, tuple(draws[i * step : (i + 1) * step]))
        for i, (qid, needle) in enumerate(sorted(chosen.items()))
    ]


def haystack_text(source: RetrievalSet, stack: Haystack, position: int) -> tuple[str, int]:
    """The document with the needle at 1-based `position`, and the needle's character offset."""
    ids = list(stack.fillers)
    ids.insert(position - 1, stack.needle)
    parts = [source.corpus[d].body for d in ids]
    offset = sum(len(p) + len(SEPARATOR) for p in parts[: position - 1])
    return SEPARATOR.join(parts), offset


def needle_sets(
    source: RetrievalSet, *, passages: int = 8, queries: int = 50, seed: int = 0
) -> list[RetrievalSet]:
    """One `RetrievalSet` per needle position 1..passages (index i holds position i + 1)."""
    stacks = choose_haystacks(source, passages, queries, seed)
    sets = []
    for position in range(1, passages + 1):
        placed = {f"haystack-{s.query_id}": haystack_text(source, s, position) for s in stacks}
        corpus = {doc_id: CorpusDoc(doc_id, "", text) for doc_id, (text, _) in placed.items()}
        mean_offset = sum(offset for _, offset in placed.values()) // len(placed)
        sets.append(
            RetrievalSet(
                name=f"needle/{source.name}@{position}",
                corpus=corpus,
                queries={s.query_id: source.queries[s.query_id] for s in stacks},
                qrels={s.query_id: {f"haystack-{s.query_id}": 1} for s in stacks},
                notes=[
                    f"{len(stacks)} haystacks of {passages} passages from {source.name}; "
                    f"needle at position {position} (mean character offset {mean_offset})"
                ],
            )
        )
    return sets
