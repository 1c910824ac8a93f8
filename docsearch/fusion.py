"""Combining search legs into one ranking, and the rules that do it by default.

Pure functions over `{key: score}` dicts (higher is better). `blend` sums each leg's normalised
scores times its weight: `maxnorm` divides by the leg's best score (Bruch et al., 2023, "An
Analysis of Fusion Functions for Hybrid Retrieval"), `minmax` maps the leg onto [0, 1], `zscore`
uses (score - mean) / std over the leg's candidates (a key the leg did not return gets its lowest
z; under the others it gets 0; a leg whose candidates all score alike gives every key 1 under
both), `rrf` is reciprocal-rank fusion (Cormack et al., 2009).
`aggregate` turns a document's chunk scores into one (max, sum@m of its m best, lse@T a soft
maximum in units of the query's best chunk). A `Fusion` is a rule: method, per-leg weights, the
chunk legs' aggregators, optionally the agreement guard (dense weights x min(1, overlap@10 of
the lexical and dense sides / tau)), and optionally `RareTerms` (other weights for the lexical
legs where the legs returned show the query's words to be rare in the collection), and
optionally `UnsureDense` (another rule where the dense side is unsure of its answer). Legs:
`lexical` and `dense` are chunk legs (BM25, cosine), `doc_lexical` and `doc_dense` document
legs (whole-document BM25, doc-mean vector cosine), `chunk_dense` a document's chunks matched
with a query document's (query by document). The document rules were chosen by the doclevel
studies (retired; their numbers stay in benchmarks/results/doclevel*.md), the key-term rule and
RARE_TERMS by benchmarks/styles.py, which scores through these definitions. Not here: choosing
weights (benchmarks/fusion.py, styles.py), running legs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from docsearch.text import STOPWORDS, WORD

Scores = Mapping[str, float]
METHODS = ("maxnorm", "rrf", "minmax", "zscore")


def best_first(scores: Scores) -> list[str]:
    """The keys of {key: score} by score, highest first, ties by key (for determinism)."""
    # Keys sorted, then a stable sort by score alone (reverse keeps equals in key order): the
    # order a (-score, key) tuple key gives, without a Python call per key (2-3x faster; a
    # short query sorts six pools of up to 500).
    return sorted(sorted(scores), key=scores.__getitem__, reverse=True)


def ranks(scores: Scores) -> dict[str, int]:
    """{key: score} -> {key: 1-based rank}, ties broken by key for determinism."""
    return {key: i + 1 for i, key in enumerate(best_first(scores))}


def _normalised(scores: Scores, method: str, k: int) -> tuple[dict[str, float], float]:
    """A leg's scores as `method` normalises them, and the value of a key the leg lacks."""
    values = list(scores.values())
    if method in ("minmax", "zscore") and min(values) == max(values):
        # One candidate, or all tied: the leg cannot tell keys apart, so it adds its weight to
        # every key alike. The ranking is the other legs', and a lone hit scores the sum of its
        # legs' weights (1 under the default rules), not the 0 of (s - mean) / 1.
        return dict.fromkeys(scores, 1.0), 1.0
    if method == "maxnorm":  # a leg whose best score is not positive contributes nothing
        scale = 1.0 / max(values) if max(values) > 0 else 0.0
        return {key: s * scale for key, s in scores.items()}, 0.0
    if method == "minmax":
        low = min(values)
        span = (max(values) - low) or 1.0
        return {key: (s - low) / span for key, s in scores.items()}, 0.0
    if method == "zscore":
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((s - mean) ** 2 for s in values) / len(values)) or 1.0
        z = {key: (s - mean) / std for key, s in scores.items()}
        return z, min(z.values())
    if method == "rrf":
        return {key: 1.0 / (k + rank) for key, rank in ranks(scores).items()}, 0.0
    raise ValueError(f"unknown fusion method {method!r} ({', '.join(METHODS)})")


def blend(
    legs: Mapping[str, Scores], weights: Mapping[str, float], method: str, k: int = 60
) -> dict[str, float]:
    """sum over legs of weight x normalised score, over every key any leg returned."""
    keys = {key for scores in legs.values() for key in scores}
    fused = dict.fromkeys(keys, 0.0)
    for leg, scores in legs.items():
        if not scores:
            continue
        weight = weights.get(leg, 1.0)
        norm, missing = _normalised(scores, method, k)
        for key in keys:
            fused[key] += weight * norm.get(key, missing)
    return fused


def aggregate(per_doc: Mapping[str, Sequence[float]], how: str) -> dict[str, float]:
    """Each document's score from its chunks' scores: `max`, `sum@m` (its m best), or `lse@T`
    = T ln sum exp(s / (T s_best)), s_best the best chunk score of all (1 if not positive)."""
    kind, _, arg = how.partition("@")
    if kind == "max":
        return {doc: max(scores) for doc, scores in per_doc.items()}
    if kind == "sum" and arg.isdigit():
        top = int(arg)
        return {doc: math.fsum(sorted(s, reverse=True)[:top]) for doc, s in per_doc.items()}
    if kind == "lse" and arg:
        temp = float(arg)
        best = max((s for scores in per_doc.values() for s in scores), default=0.0)
        unit = temp * (best if best > 0 else 1.0)
        return {
            doc: temp * math.log(math.fsum(math.exp(s / unit) for s in scores))
            for doc, scores in per_doc.items()
        }
    raise ValueError(f"unknown chunk aggregator {how!r} (max, sum@m, lse@T)")


def overlap_at_10(a: Scores, b: Scores) -> float:
    """Share of the two rankings' top 10 keys that they have in common (out of 10)."""
    top_a, top_b = (set(best_first(s)[:10]) for s in (a, b))
    return len(top_a & top_b) / 10.0


def is_dense(leg: str) -> bool:
    return "dense" in leg


def confidence(scores: Scores) -> float:
    """How decisively a leg picks its best candidate: that candidate's z-score over the leg's
    candidates, (best - mean) / std; 0 for a leg that cannot tell its candidates apart (one
    candidate, or all tied)."""
    values = list(scores.values())
    if len(values) < 2 or min(values) == max(values):
        return 0.0
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in values) / len(values))
    return (max(values) - mean) / std if std else 0.0


best_z = confidence  # the name Fusion's `measure` defaults to (its own `confidence` is a field)


def scaled_by(
    weights: Mapping[str, float], confidences: Mapping[str, float], power: float
) -> dict[str, float]:
    """`weights` each times its leg's confidence to `power`, scaled back to their total so a
    fused score keeps its range; `weights` unchanged where every confidence is 0."""
    scaled = {leg: w * confidences[leg] ** power for leg, w in weights.items()}
    total = math.fsum(scaled.values())
    if total <= 0:
        return dict(weights)
    factor = math.fsum(weights.values()) / total
    return {leg: w * factor for leg, w in scaled.items()}


def weighed_by_confidence(
    legs: Mapping[str, Scores],
    weights: Mapping[str, float],
    power: float,
    measure: Callable[[Scores], float] = confidence,
) -> dict[str, float]:
    """`weights` scaled by their legs' confidence for this query, as `measure` reads it from
    the leg's scores (`scaled_by`)."""
    return scaled_by(weights, {leg: measure(legs[leg]) for leg in weights}, power)


@dataclass(frozen=True)
class RareTerms:
    """Weights for the lexical legs when the query's words are rare in the collection: whole-
    document BM25 matched fewer than `share` of the documents the doc-mean vector leg returned.
    That leg returns every document up to its pool (and the lexical leg its matches up to the
    same pool), so the ratio is the share of documents holding any of the words, read from
    what the legs returned (no collection statistics kept). Without the vector leg, no change."""

    share: float
    weights: dict[str, float]

    def holds(self, legs: Mapping[str, Scores]) -> bool:
        matched, every = legs.get("doc_lexical"), legs.get("doc_dense")
        if matched is None or not every:
            return False
        return len(matched) < self.share * len(every)


@dataclass(frozen=True)
class Fusion:
    """A fusion rule: `method` from METHODS over the legs `weights` names (a leg it does not
    name, or weighs 0, is left out); `aggregate` says how a chunk leg scores a document (max
    when not named); `tau` turns on the agreement guard; `rare` reweighs the lexical legs of a
    query whose words are rare (RareTerms); `confidence` weighs each leg by how decisively it
    picks its best candidate for this query (`weighed_by_confidence`, that power), as `measure`
    reads it (the product's rules keep `confidence`; studies try others); `spread` hands a
    query whose words are spread through its best document to another rule (SpreadWords), and
    `unsure` one whose dense side is unsure (UnsureDense). One weighted leg ranks by its own
    scores. The bare constructor is unweighted RRF over the two chunk legs."""

    method: str = "rrf"
    weights: dict[str, float] = field(default_factory=lambda: {"dense": 1.0, "lexical": 1.0})
    k: int = 60
    aggregate: dict[str, str] = field(default_factory=dict)
    tau: float | None = None
    rare: RareTerms | None = None
    confidence: float | None = None
    measure: Callable[[Scores], float] = best_z
    unsure: UnsureDense | None = None
    spread: SpreadWords | None = None

    @property
    def uses_dense(self) -> bool:
        """Whether the rule weighs a dense leg (which needs the query encoded)."""
        return any(w and is_dense(leg) for leg, w in self.weights.items())

    @property
    def uses_documents(self) -> bool:
        """Whether the rule weighs a document leg (which needs the collection's document table)."""
        return any(w and leg.startswith("doc_") for leg, w in self.weights.items())

    def __call__(self, legs: Mapping[str, Scores]) -> dict[str, float]:
        return self.fuse(legs)[0]

    def resolved(self, legs: Mapping[str, Scores]) -> Fusion:
        """The rule that ranks `legs`: `spread`'s rule where it holds (SpreadWords), else
        `unsure`'s where that holds (UnsureDense), else this one. A search reports its name
        (docsearch.results.rule_name)."""
        if self.spread is not None and self.spread.holds(legs):
            return self.spread.unsure.rule.resolved(legs)
        if self.unsure is not None and self.unsure.holds(legs):
            return self.unsure.rule.resolved(legs)
        return self

    def fuse(self, legs: Mapping[str, Scores]) -> tuple[dict[str, float], float | None]:
        """(fused scores, the agreement factor, None without the guard), by the rule that
        ranks these legs (`resolved`)."""
        self._check_method()
        return self.resolved(legs).fuse_as_is(legs)

    def fuse_as_is(self, legs: Mapping[str, Scores]) -> tuple[dict[str, float], float | None]:
        """`fuse` by this rule's own weights, its switches (`spread`, `unsure`) not read again:
        for a rule already `resolved` for these legs (a search resolves once, then fuses)."""
        self._check_method()
        weights = {leg: self.weights[leg] for leg in legs if self.weights.get(leg)}
        if self.rare and self.rare.holds(legs):
            weights = {leg: self.rare.weights.get(leg, w) for leg, w in weights.items()}
        if len(weights) == 1:
            return dict(legs[next(iter(weights))]), None
        if self.confidence:
            weights = weighed_by_confidence(legs, weights, self.confidence, self.measure)
        agreement = self._agreement(legs, weights) if self.tau else None
        if agreement is not None:
            weights = {leg: w * agreement if is_dense(leg) else w for leg, w in weights.items()}
        return blend({leg: legs[leg] for leg in weights}, weights, self.method, self.k), agreement

    def _check_method(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown fusion method {self.method!r} ({', '.join(METHODS)})")

    def _agreement(self, legs: Mapping[str, Scores], weights: dict[str, float]) -> float | None:
        """min(1, overlap@10(lexical side, dense side) / tau), each side its legs fused; 1 when
        a side found nothing (there is nothing to disagree with), None without both sides."""
        lexical = {leg: w for leg, w in weights.items() if not is_dense(leg)}
        dense = {leg: w for leg, w in weights.items() if is_dense(leg)}
        if not lexical or not dense:
            return None
        sides = [
            blend({leg: legs[leg] for leg in s}, s, self.method, self.k) for s in (lexical, dense)
        ]
        if not all(sides):
            return 1.0
        return min(1.0, overlap_at_10(*sides) / (self.tau or 1.0))


@dataclass(frozen=True)
class UnsureDense:
    """Rank by `rule` instead where the dense side is unsure of its answer: the doc-mean vector
    leg picks its best document less decisively than `ratio` times whole-document BM25 picks
    its own (`confidence` of each). Read from what the legs returned; without either leg, or
    where BM25 cannot tell its candidates apart, it does not hold. `rule` must aggregate the
    chunk legs as the rule it stands in for does: it is handed the same legs."""

    ratio: float
    rule: Fusion

    def holds(self, legs: Mapping[str, Scores]) -> bool:
        lexical, dense = legs.get("doc_lexical"), legs.get("doc_dense")
        if not lexical or not dense:
            return False
        return self.unsure(confidence(lexical), confidence(dense))

    def unsure(self, lexical: float, dense: float) -> bool:
        """Whether a doc-mean vector leg this sure of its best (`dense`, its confidence) is
        unsure beside whole-document BM25 this sure (`lexical`)."""
        return lexical > 0 and dense < self.ratio * lexical


@dataclass(frozen=True)
class SpreadWords:
    """Rank by `unsure.rule` instead where the query's words are spread through its best
    document rather than together in a passage, and the dense side is unsure beside BM25:
    chunk BM25 ranks whole-document BM25's best document `rank`th or lower (or never found a
    passage of it), and `unsure` holds (UnsureDense: the doc-mean vector leg less decisive than
    its ratio times BM25). Read from what the legs returned; without both BM25 legs and the
    doc-mean vector leg it does not hold."""

    rank: int
    unsure: UnsureDense

    def holds(self, legs: Mapping[str, Scores]) -> bool:
        whole, chunks, dense = legs.get("doc_lexical"), legs.get("lexical"), legs.get("doc_dense")
        if not whole or chunks is None or not dense:
            return False
        return self.spread(rank_of_best(whole, chunks), confidence(whole), confidence(dense))

    def spread(self, rank: float, lexical: float, dense: float) -> bool:
        """Whether a query whose whole-document BM25 best is `rank`th in chunk BM25, with the
        doc-mean vector leg this sure of its best (`dense`) beside BM25 this sure (`lexical`),
        is ranked by `unsure.rule`."""
        return rank >= self.rank and self.unsure.unsure(lexical, dense)


def rank_of_best(by: Scores, among: Scores) -> float:
    """The 1-based rank in `among` of `by`'s best key (best_first's order), inf where `among`
    lacks it."""
    return ranks(among).get(best_first(by)[0], math.inf)


# Chunk level: passages, and documents when no document leg can answer (a collection without a
# document table, a `where` on chunk columns), a document scoring as its best chunk in each leg.
# Chosen by benchmarks/fusion.py (train/val queries, all-MiniLM-L6-v2; results/fusion.md).
CHUNK_FUSION = Fusion("maxnorm", {"dense": 0.4, "lexical": 0.6})
# Document level, per search mode: chosen by leave-one-corpus-out on tuning queries only
# (the retired benchmarks/doclevel.py: results/doclevel.md and doclevel_hybrid.md). Chunk BM25 there is plain
# BM25 over the 500-chunk pool (no identifier lift); vector mode keeps each document's best chunk.
# Hybrid has two rules: a short query (a question, a title, a claim) needs the dense side, a
# long one (a summary or an abstract, text that describes a whole document) is best ranked by
# the lexical rule; the rule and the length were chosen together (document_rule).
# A short query whose words are rare (whole-document BM25 matched under half the documents the
# vector leg returned: a few key words and no stop word, which whole-document BM25 keeps) weighs
# the two lexical legs alike: there chunk BM25's 2 : 1 lead let a document with a passage dense
# in the words pass the one whole-document BM25 ranks first (irled2017-precedent's 3-5-word
# queries, test split: 0.9866 -> 0.9958, whole-document BM25's own score). Chosen on the
# query-style suite's tuning split (benchmarks/styles.py, results/styles.md "Leg evidence"):
# worst cell -0.0040 -> -0.0009, no cell below the bar, the original queries unchanged. The
# signals on the dense legs tried there (the two sides' agreement, raw or above chance, the
# best doc-mean cosine, the legs' score spread) cost the original queries, put cells below the
# bar or fixed no cell below it; restoring the dense legs to key terms needs every list encoded.
RARE_TERMS = RareTerms(0.5, {"doc_lexical": 0.3, "lexical": 0.3})
# Each leg of the short rule is weighed by the fourth root of its confidence for the query (how
# far its best candidate stands above the rest, in standard deviations: `confidence`): a dense
# side that finds no document clearly better than the others cedes some weight to lexical legs
# that do. Where MiniLM is weak (the legal key-term lists' first words, typed into a search box)
# its best doc-mean match stands ~3 sd out against whole-document BM25's ~5.5; on scifact's
# claims both stand ~6-9 out. Chosen on the query-style suite's tuning split together with the
# key-term rule's power (benchmarks/styles_terms.py, results/styles_terms_choice.md): the pair
# that cuts the cells' shortfall below the bar most (-0.808 -> -0.619) among those that cost no
# cell more than 0.015 (qmsum/summary2meeting first words -0.0149, at that bound) and the
# original queries no more than 0.005 (-0.0002); a square root cut more (-0.574) but cost that
# cell 0.0153. Bare words take a stronger power (BARE_WORDS_RULE).
SHORT_RULE_CONFIDENCE = 0.25
DOCUMENT_RULES = {
    "lexical": Fusion(
        "minmax", {"doc_lexical": 0.7, "lexical": 0.3}, aggregate={"lexical": "sum@5"}
    ),
    "hybrid": Fusion(
        "zscore",
        {"doc_lexical": 0.2, "lexical": 0.4, "doc_dense": 0.2, "dense": 0.2},
        aggregate={"lexical": "lse@0.1"},
        rare=RARE_TERMS,
        confidence=SHORT_RULE_CONFIDENCE,
    ),
    "vector": Fusion("maxnorm", {"dense": 1.0}),
}
# From this many words on, a hybrid query takes the lexical rule: on tuning queries that long,
# no share of dense (0 to 50% over the lexical rule, with or without the agreement guard)
# ranked better, and it saves encoding the query.
LONG_QUERY_WORDS = 24


# A short hybrid query written as a list of key terms ("capital gains; transfer; agricultural
# land") ranks by the lexical legs alone, whole-document and chunk BM25 z-scored and weighed
# alike. Such lists are how legal experts write catchphrases, and where the dense side is weak
# (a held-out set of 400 Indian Supreme Court judgments: MiniLM's vector mode 0.30 nDCG@10 on
# its short lists against 0.73 lexical) its 40% share cost 0.06; the rule also skips encoding.
# Equal weights, not chunk BM25's 2 : 1 lead of the short rule: a list that names a judgment's
# topics, spread through it, is matched by the whole document rather than by one passage (the
# suite's legal lists drawn from the judgments' own terms, irled2017-precedent/scattered and
# /passing: their cells' shortfall below max(lexical mode, whole-document BM25) summed -1.07 ->
# -0.81 on the tuning split), while a list that keys one passage (qmsum's questions as key
# words) still gets half its weight from the passages. Chosen on the suite's tuning split
# (benchmarks/styles_terms.py, results/styles_terms.md) as the rule that lifts the worst cells
# most among those that cost no cell more than 0.015 against 1 : 2; doc-heavier rules lift the
# legal cells further but cost qmsum's key words 0.03-0.05.
# Each of the two legs is then weighed by its confidence for the query to the power 1.5 (see
# SHORT_RULE_CONFIDENCE): a legal list's judgment stands ~8 sd above the rest in whole-document
# BM25 and ~4 in chunk BM25, which finds passages in other judgments holding a few of the terms,
# while a list keyed to one passage (qmsum's key words) stands ~3 sd out in both and keeps 1 : 1.
# Chosen with SHORT_RULE_CONFIDENCE; the power alone cut the tuning shortfall -0.808 -> -0.707
# (0.5: -0.757, 1: -0.733; 2 and 3 cost scisummnet-acl's quoted titles 0.0175-0.0184), on test
# -0.566 -> -0.501, two legal cells back above the bar, qmsum's key words -0.0276 (above its bar).
TERM_LIST_CONFIDENCE = 1.5
TERM_LIST_RULE = Fusion(
    "zscore",
    {"doc_lexical": 0.5, "lexical": 0.5},
    aggregate={"lexical": "lse@0.1"},
    confidence=TERM_LIST_CONFIDENCE,
)
TERM_LIST_PARTS = 3  # at least this many terms, separated by commas, semicolons or lines
TERM_WORDS = 6  # and none longer than this many words (a clause is not a term)
_TERM_SEPARATORS = re.compile(r"[,;\n]")


def is_term_list(query: str) -> bool:
    """Whether `query` is a list of key terms: TERM_LIST_PARTS or more parts between commas,
    semicolons or line breaks, none of them longer than TERM_WORDS words."""
    parts = [part.split() for part in _TERM_SEPARATORS.split(query)]
    terms = [words for words in parts if words]
    return len(terms) >= TERM_LIST_PARTS and all(len(words) <= TERM_WORDS for words in terms)


# Key terms typed without separators ("capital gains agricultural land income tax exemption")
# are told by the absence of function words: KEYWORD_WORDS or more words, not one of them a stop
# word. On the query-style suite (benchmarks/styles.py, results/styles.md) every floor from 2 to
# 8 words kept all tuning cells above max(lexical mode, whole-document BM25) - 0.005; a floor of
# 3 to 5 also takes the words typed into a search box and short titles, where the dense side
# helps on half the shared sets (a 4-word title lost 0.37 on its own); 6 keeps nearly all the
# key-term lists that 3 catches (79 of 85 of irled2017-precedent's, commas dropped).
KEYWORD_WORDS = 6
# A key term may hold a joiner inside it ("burden of proof res judicata estoppel"): one of
# KEY_TERM_JOINERS between two words that are not stop words, at most one word in three. Chosen
# on the suite's tuning split (benchmarks/styles_terms.py, results/styles_terms.md): "of" alone
# catches 20 of the 45 short legal lists typed without separators that the rule missed and
# moves no cell (tune or test); adding "to" (32 of 45) or the other prepositions (38) takes
# more claims such as "N348I mutations reduce resistance to nevirapine" (prepositions: scifact's
# claims -0.0120 on the tuning split); "and" catches no more lists and more sentences.
KEY_TERM_JOINERS = frozenset({"of"})


def is_keyword_query(query: str) -> bool:
    """Whether `query` is key terms without separators: KEYWORD_WORDS or more words, none of
    them a stop word but joiners (KEY_TERM_JOINERS), each between two words that are not stop
    words, at most one word in three."""
    tokens = query.lower().split()
    if len(tokens) < KEYWORD_WORDS:
        return False
    joiners, after_stop = 0, False
    for i, token in enumerate(tokens):
        # the pieces of "E-MOT-21" are words, but one word long; "it's" holds a stop word
        words = WORD.findall(token)
        stop = any(w in STOPWORDS for w in words)
        if stop and (after_stop or not 0 < i < len(tokens) - 1):
            return False  # a stop word at an edge or beside another: not inside a term
        if stop and (len(words) != 1 or words[0] not in KEY_TERM_JOINERS):
            return False  # a function word of prose: a sentence or a question
        joiners += stop
        after_stop = stop
    return 3 * joiners <= len(tokens)


def is_key_terms(query: str) -> bool:
    """Whether `query` is key terms, in a list (is_term_list) or without separators
    (is_keyword_query)."""
    return is_term_list(query) or is_keyword_query(query)


# Search-box operators: in capitals they join words ("income AND capital gains"), they are not
# the stop words "and", "or", "not" of a sentence.
SEARCH_OPERATORS = re.compile(r"\b(?:AND|OR|NOT)\b|[()]")


def without_operators(query: str) -> str:
    """`query` without its search-box operators (SEARCH_OPERATORS), single-spaced."""
    return " ".join(SEARCH_OPERATORS.sub(" ", query).split())


def is_bare_words(query: str) -> bool:
    """Whether `query` is two or more words and none of them a stop word, operators (AND, OR,
    NOT in capitals, parentheses) aside: what a search box gets ("capital gains agricultural
    land", "Improved Statistical Alignment Models", "income AND (capital gains OR transfer)")."""
    words = without_operators(query)
    return len(words.split()) >= 2 and not any(w.lower() in STOPWORDS for w in WORD.findall(words))


# A short query of bare words that are not key terms (two to five words without a stop word, or
# words joined by search-box operators: typed into a search box) weighs the four legs by their
# confidence to the power 1, not SHORT_RULE_CONFIDENCE: such words carry no sentence for the
# dense side to read, and where it is weak (the legal lists' first words: vector mode 0.13-0.34
# against 0.80-0.93 lexical) its best match stands out less than the lexical legs'. Chosen on the query-style suite's tuning split
# (benchmarks/styles_terms.py, results/styles_terms.md) as the power that cuts the shortfall most
# (-0.619 -> -0.555) without costing a cell more than 0.015 (1.25 cost cuad's first words 0.0207);
# no original query of the shared sets is such words (none moved). On test -0.457 -> -0.370.
# Operators then counted as joiners, not stop words (the suite's boolean style, the same power):
# tuning -0.555 -> -0.491, test -0.370 -> -0.315, no cell down more than 0.0090 (tuning) and
# 0.0105 (test, title2paper boolean); as key terms instead they cost scifact's boolean 0.06.
BARE_WORDS_CONFIDENCE = 1.0
# Bare words whose dense side is unsure of its answer are ranked as key terms (TERM_LIST_RULE,
# the lexical legs alone): where the doc-mean vector leg's best document stands out less than
# UNSURE_DENSE_RATIO times as far as whole-document BM25's, the power above still leaves the
# dense legs a share, and where MiniLM is weak even a small share costs (the legal lists' first
# words: vector mode 0.13-0.34 against whole-document BM25's 0.85-0.96). Chosen on the query-
# style suite's tuning split by the rule of the rounds before (benchmarks/styles_terms.py,
# "gate:" rows; results/styles.md "Seventh round"): 0.55 cuts the shortfall most (-0.485 ->
# -0.379) among the ratios that cost no cell more than 0.015 (cuad first words -0.0135; 0.6
# cost qmsum's first words 0.0155); no original query is bare words. On test -0.305 -> -0.239,
# qmsum's first words -0.048 (19 queries; 0.0035 above their bar).
UNSURE_DENSE_RATIO = 0.55
# Bare words spread through their best document are ranked by whole-document BM25 alone
# (WHOLE_DOCUMENT_RULE): where chunk BM25 ranks whole-document BM25's best document
# SPREAD_WORDS_RANK-th or lower, no passage of it holds the words together though the document
# holds them (the legal lists' first words typed into a search box: their words are named
# through a judgment, and chunk BM25 and the passage-level dense leg favour judgments with one
# passage holding two of them; even the lexical mode is 0.02-0.05 below whole-document BM25
# there), and where the dense side is also less sure of its answer than BM25 (UnsureDense at
# ratio 1) nothing else speaks for another document. Read from the legs, no text read. Chosen on
# the query-style suite's tuning split by the rule of the rounds before (results/styles.md,
# "Eighth round"; ranks 10-30, ratios 0.85-1.2): ranks 13 and 14 at ratio 1 cut the shortfall
# most (-0.379 -> -0.250) among those that cost no cell more than 0.015 (scisummnet-acl first
# words -0.0147) and put no cell below the bar (12 cost that cell 0.0184, ratio 1.2 0.0184);
# the larger of the two moves fewer queries. No original query is bare words. On test -0.239 ->
# -0.186, the legal first words +0.023 / +0.025, cells below the bar 12 -> 8 (the four lifted
# are one query's two-word forms); costs: qmsum boolean -0.046 (19 queries), scisummnet-acl
# boolean -0.021 (both above their bars).
SPREAD_WORDS_RANK = 14
WHOLE_DOCUMENT_RULE = Fusion("zscore", {"doc_lexical": 1.0})
BARE_WORDS_RULE = replace(
    DOCUMENT_RULES["hybrid"],
    confidence=BARE_WORDS_CONFIDENCE,
    unsure=UnsureDense(UNSURE_DENSE_RATIO, TERM_LIST_RULE),
    spread=SpreadWords(SPREAD_WORDS_RANK, UnsureDense(1.0, WHOLE_DOCUMENT_RULE)),
)

# The forms of a query the document rules tell apart (`query_form`).
LONG, KEY_TERMS, WORDS, PLAIN = "long", "key-terms", "words", "plain"


def query_form(query: str) -> str:
    """LONG (LONG_QUERY_WORDS or more words), KEY_TERMS (is_key_terms), WORDS (is_bare_words)
    or PLAIN."""
    if len(query.split()) >= LONG_QUERY_WORDS:
        return LONG
    if is_key_terms(query):
        return KEY_TERMS
    return WORDS if is_bare_words(query) else PLAIN


def form_rule(mode: str, form: str) -> Fusion:
    """The document rule `mode` ranks a query of `form` (`query_form`) by: DOCUMENT_RULES; in
    hybrid, a long query the lexical rule, a short query of key terms TERM_LIST_RULE, bare
    words BARE_WORDS_RULE."""
    if mode == "hybrid" and form == LONG:
        return DOCUMENT_RULES["lexical"]
    if mode == "hybrid" and form == KEY_TERMS:
        return TERM_LIST_RULE
    if mode == "hybrid" and form == WORDS:
        return BARE_WORDS_RULE
    return DOCUMENT_RULES[mode]


def document_rule(mode: str, query: str) -> Fusion:
    """The document rule `mode` ranks `query` by (`form_rule` of its `query_form`); a search
    reads the form from its ParsedQuery instead, worked out once."""
    return form_rule(mode, query_form(query))


# Query by document (`Retriever.similar`): the document legs, the query being the query
# document's key terms (their number chosen on irled2017-precedent, benchmarks/similar.py) and
# its doc-mean vector, and `chunk_dense` (each query chunk's best match in a candidate, averaged).
# Dense sides chosen on a 20-query, 150-case subsample of that set (MiniLM; benchmarks/
# similar_dense.py, results/similar.md): chunk matches lifted vector mode by 0.06 nDCG@10 over
# the doc-mean vector alone; in hybrid the z-score families lie within 0.01 of each other (noise
# at 20 queries, which both chose and scored them: in-sample), all 0.06 above lexical; the best
# of them is kept.
SIMILAR_RULES = {
    "lexical": Fusion("maxnorm", {"doc_lexical": 1.0}),
    "hybrid": Fusion("zscore", {"doc_lexical": 0.5, "doc_dense": 0.25, "chunk_dense": 0.25}),
    "vector": Fusion("zscore", {"doc_dense": 0.5, "chunk_dense": 0.5}),
}
