"""Numbered instruments: "Amendment No. 3", "the Second Amendment", "Schedule B", "Exhibit 10.1".

Contracts come in families: an agreement, its amendments, their schedules and exhibits share
parties, defined terms and most of their words, so BM25 and embeddings rank the siblings alike
and only the number tells them apart. A query that names an instrument wants the document that
*is* that instrument, and a document says what it is in its opening, where its heading stands.
`in_query` reads the instruments a query names as documents ("Amendment No. 3", "the Second
Amendment to ..."); `own` what a document's opening names itself (the first of each kind: an
amendment's opening may go on to cite the earlier ones); `matches` says whether a document is
one the query names.
Not here: reordering results (the Retriever lifts matching documents), clause references such as
"Section 7.2(a)" (those are `text.identifiers`, matched verbatim inside chunks).
"""

from __future__ import annotations

import re
from typing import NamedTuple

KINDS = (
    "amendment",
    "addendum",
    "supplement",
    "modification",
    "change order",
    "task order",
    "work order",
    "statement of work",
    "schedule",
    "exhibit",
    "annex",
    "appendix",
    "attachment",
    "rider",
)
# Attachments are numbered bare ("Schedule 2", "Exhibit 10.1"); an amendment named so in an
# opening is most often a contents line ("22. Amendment .... 35"), not a heading.
ATTACHMENTS = frozenset(("schedule", "exhibit", "annex", "appendix", "attachment", "rider"))
ORDINALS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
    "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
# The heading and the first lines: long enough for a filing's cover lines ("Exhibit 10.1",
# a confidentiality legend) before the heading, short enough to stay out of the body's
# cross-references.
OPENING_CHARS = 1000

_KIND = "|".join(kind.replace(" ", r"\s+") for kind in KINDS) + "|sow"
_ORDINAL = "|".join(ORDINALS) + r"|\d{1,2}(?:st|nd|rd|th)"
# "Amendment No. 3", "AMENDMENT #2", "Amendment n° 01", "Exhibit 10.1", "Schedule B"; the
# letter form only as a capital standing alone, so "a schedule a party signs" names nothing.
_NUMBERED = re.compile(
    rf"\b(?P<kind>{_KIND})s?\s*(?P<marker>(?:no\.?|number|nr\.?|n°|#)\s*)?"
    r"(?P<number>\d+(?:\.\d+)*(?:\([a-z0-9]+\))?|(?-i:[A-Z])(?:-?\d+)?)(?![\w-])"
    r"(?P<to>\s+(?:to|of)\b)?",
    re.IGNORECASE,
)
_ORDERED = re.compile(
    rf"\b(?P<ordinal>{_ORDINAL})\s+(?P<kind>{_KIND})\b(?P<to>\s+(?:to|of)\b)?", re.IGNORECASE
)


class Instrument(NamedTuple):
    """One kind and number: ("amendment", "3"), ("schedule", "B"), ("exhibit", "10.1")."""

    kind: str
    number: str


def _kind(text: str) -> str:
    kind = " ".join(text.lower().split())
    return "statement of work" if kind == "sow" else kind


def _number(text: str) -> str:
    """'03' -> '3', 'b' stays 'B' (letters are capitals by the pattern), '10.1' as it is."""
    return str(int(text)) if text.isdigit() else text.upper()


def _ordinal(text: str) -> str:
    text = text.lower()
    return str(ORDINALS.index(text) + 1) if text in ORDINALS else str(int(text[:-2]))


def named(text: str, form: str) -> list[tuple[int, Instrument]]:
    """The instruments `text` names in `form`, with where each starts, in order of position.
    "heading": the forms a document's heading uses ("Amendment No. 3", "Third Amendment",
    "Amendment 3 to", "Schedule 2"). "reference": the forms that name a document, with its number
    marker or what it amends or belongs to ("Amendment No. 3", "Amendment 3 to", "the Second
    Amendment to", "Schedule B of"); a bare "Ninth Schedule" or "Seventeenth Amendment" in a
    query is more often a statute's part than a document of the collection."""
    heading = form == "heading"
    found = [
        (m.start(), Instrument(_kind(m["kind"]), _number(m["number"])))
        for m in _NUMBERED.finditer(text)
        if m["marker"] or m["to"] or (heading and _kind(m["kind"]) in ATTACHMENTS)
    ]
    found += [
        (m.start(), Instrument(_kind(m["kind"]), _ordinal(m["ordinal"])))
        for m in _ORDERED.finditer(text)
        if heading or m["to"]
    ]
    return sorted(found)


def in_query(query: str) -> frozenset[Instrument]:
    """The instruments a query names as documents ("reference" forms)."""
    return frozenset(one for _, one in named(query, "reference"))


def own(opening: str) -> dict[str, str]:
    """kind -> number of the instruments a document's opening names itself: the first of each
    kind in its first OPENING_CHARS characters."""
    first: dict[str, str] = {}
    for _, one in named(opening[:OPENING_CHARS], "heading"):
        first.setdefault(one.kind, one.number)
    return first


def matches(wanted: frozenset[Instrument], opening: str) -> frozenset[Instrument]:
    """The instruments of `wanted` that the document with this opening is."""
    mine = own(opening)
    return frozenset(one for one in wanted if mine.get(one.kind) == one.number)
