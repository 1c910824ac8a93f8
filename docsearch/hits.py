"""The results a search returns: `Hit` (a document or a passage found), `Passage` (a chunk as a
result shows it), `SimilarHit` and `PassagePair` (query by document, explained).

A passage's `snippet` is its best window with the query's terms marked by offsets; its `page`
is the page of the first marked word (a pin cite). `as_dict` gives JSON-ready data (the CLI's
--json, the API, which `docsearch.app.api_models` describes).
Not here: ranking (`docsearch.ranking`), rendering (CLI, UI).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from docsearch.snippets import Snippet, make_snippet
from docsearch.store.schema import CHUNK_VIEW_FIELDS, ChunkView

if TYPE_CHECKING:
    from docsearch.query import ParsedQuery


def passage(found: ChunkView, query: str | ParsedQuery, score: float) -> Passage:
    """`found` as a Passage scored `score`, its snippet made for `query`."""
    snippet = make_snippet(found.text, query, offset=found.char_start)
    # Its attributes set at once, not through the dataclass's __init__ (a field at a time): a
    # search makes ~30 passages.
    made = object.__new__(Passage)
    made.__dict__.update({name: getattr(found, name) for name in CHUNK_VIEW_FIELDS})
    made.__dict__.update(score=score, snippet=snippet)
    return made


@dataclass(frozen=True)
class Passage(ChunkView):
    """A chunk as a result shows it: where it lies, its score and its snippet."""

    score: float  # what passage search ranks it by (the fused chunk legs)
    snippet: Snippet = Snippet("")  # its best window, the query terms marked by offsets

    @property
    def pages(self) -> str:
        if self.page_start == self.page_end:
            return str(self.page_start)
        return f"{self.page_start}-{self.page_end}"

    @property
    def page(self) -> int | None:
        """The page where the snippet's first marked word is (a pin cite), None if unknown."""
        return self.page_of(self.snippet.anchor)

    @property
    def provenance(self) -> str:
        """Where the text comes from beyond path and page, in one line ("" for most files): the
        attachment it is and the message it came in, a sheet's rows or a chapter."""
        parts = []
        if self.part:
            parts.append(f"attachment {self.part}")
        if self.email_subject or self.email_from:
            mail = f"e-mail {self.email_subject!r}" if self.email_subject else "e-mail"
            mail += f" from {self.email_from}" if self.email_from else ""
            mail += f" to {self.email_to}" if self.email_to else ""
            parts.append(mail + (f", {self.email_date}" if self.email_date else ""))
        if self.location:
            parts.append(self.location)
        return " · ".join(parts)

    @property
    def cite(self) -> str:
        """The page as a result shows it: the marked words' page, else the chunk's pages."""
        page = self.page
        return self.pages if page is None else str(page)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data; `snippet` is the marked text (`**term**`)."""
        passage = self.snippet
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "snippet": passage.marked(),
            "snippet_marks": passage.marks,  # spans of the snippet's unmarked text
            "snippet_span": (passage.char_start, passage.char_end),  # in the document's text
            "pages": self.pages,
            "page": self.page,
            "provenance": self.provenance,
        }


# What a Hit reads from its first passage for code written when a hit was its first passage.
_FIRST_PASSAGE = frozenset(f.name for f in fields(Passage) if f.name != "score") | {
    "pages",
    "page",
    "provenance",
    "cite",
    "page_of",
}
_DOCUMENT = ("text", "path", "title", "doc_id")  # what a document's passages need not repeat


@dataclass(frozen=True)
class Hit:
    """One result: a document with its best passages (best first), or, granularity "passage",
    one chunk as its one passage.

    `score` is the hit's fused score; `scores` has each leg's rank and raw score, and `fused`:
    the hit's rank, fused score and, under the agreement guard, the factor its dense weights
    got. `path`, `title` and `doc_id` are the document's. Backwards compatibility: a hit used
    to BE its first passage, so the other fields and properties of a Passage (`text`,
    `snippet`, `pages`, `page`, `cite`, `chunk_id`, `char_start`, ...) still read the first
    passage's (`best`); new code reads `best` or `passages`."""

    score: float
    scores: dict[str, dict[str, float]]
    passages: tuple[Passage, ...]  # never empty
    granularity: str = "document"

    @classmethod
    def of_document(
        cls, passages: Sequence[Passage], score: float, scores: dict[str, dict[str, float]]
    ) -> Hit:
        """A document found, scored `score`, with its best passages (best first)."""
        return cls(score, scores, tuple(passages))

    @classmethod
    def of_passage(cls, found: Passage, scores: dict[str, dict[str, float]]) -> Hit:
        """A passage found (granularity "passage"), scored as passage search ranks it."""
        return cls(found.score, scores, (found,), "passage")

    @property
    def best(self) -> Passage:
        """The first (best) passage: the one a result shows first."""
        return self.passages[0]

    @property
    def path(self) -> str:
        return self.best.path

    @property
    def title(self) -> str:
        return self.best.title

    @property
    def doc_id(self) -> str:
        return self.best.doc_id

    def __getattr__(self, name: str) -> Any:
        # Only for names a Hit lacks; `passages` is read from __dict__, which a copy or an
        # unpickling may not have filled yet.
        passages = self.__dict__.get("passages")
        if name not in _FIRST_PASSAGE or not passages:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(passages[0], name)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data: the first passage's (`Passage.as_dict`) with the hit's `score` and
        `scores`, and a document's `passages` (less what the document already says; a
        passage hit's is empty, the hit being its passage)."""
        passages = [
            {key: value for key, value in p.as_dict().items() if key not in _DOCUMENT}
            for p in (self.passages if self.granularity == "document" else ())
        ]
        return self.best.as_dict() | {
            "score": self.score,
            "scores": self.scores,
            "passages": passages,
        }


@dataclass(frozen=True)
class PassagePair:
    """A passage of the query document and one of a similar document that explain the match.
    `by` "vectors": the two chunks of highest cosine similarity (`score`); "terms": the
    passages holding the most of the shared key terms (`score`: their summed weights in the
    similar document's passage)."""

    query: Passage
    match: Passage
    score: float
    by: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "score": self.score,
            "query": self.query.as_dict(),
            "match": self.match.as_dict(),
        }


@dataclass(frozen=True)
class SimilarHit(Hit):
    """A result of `Retriever.similar`: `terms` are the query document's key terms this
    document also holds (best first, with their weights); `pairs` the passage pairs that
    explain it, best first (by vectors when both documents have them, else by the shared
    terms); `passages` are this document's side of them, `query_passage` the query
    document's side of the first."""

    terms: dict[str, float] = field(default_factory=dict)
    query_passage: Passage | None = None
    pairs: tuple[PassagePair, ...] = ()

    @classmethod
    def of_similar(
        cls,
        passages: Sequence[Passage],
        score: float,
        scores: dict[str, dict[str, float]],
        *,
        terms: dict[str, float],
        pairs: tuple[PassagePair, ...],
    ) -> SimilarHit:
        """A similar document scored `score`, its passages this document's side of `pairs`
        (or its opening passage), explained by `terms` and `pairs`."""
        query = pairs[0].query if pairs else None
        return cls(score, scores, tuple(passages), terms=terms, query_passage=query, pairs=pairs)

    def as_dict(self) -> dict[str, Any]:
        query = self.query_passage.as_dict() if self.query_passage else None
        return super().as_dict() | {
            "terms": list(self.terms),
            "query_passage": query,
            "pairs": [pair.as_dict() for pair in self.pairs],
        }
