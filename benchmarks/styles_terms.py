"""Key-term rules, fourth round (issue 37): the key-term rule's own legs, and key terms typed
without separators that keep a joiner ("burden of proof res judicata estoppel").

    python -m benchmarks.styles_terms [--cache DIR]

Reads the legs `python -m benchmarks.styles collect` cached (the `spaced` style is the one these
triggers are for: each original query with its separators dropped and its stop words kept) and
ranks each (query, style) through the product's own fusion (`docsearch.fusion.Fusion`, the
legs as styles.rule_legs hands them), one rule per attempt:
- `rule:` attempts change what a key-term query is ranked by (fusion.TERM_LIST_RULE): the
  lexical legs' weights, each leg weighed by its confidence for the query (`Fusion.confidence`),
  the chunk leg's aggregator, the normalisation, or a dense share;
- `plain:` attempts weigh the short rule's four legs by their confidence for other short queries
  (the dense side's share falling where its best match is less decisive than the lexical one's);
- `words:` attempts change how bare words (fusion.is_bare_words: a search box's words, not key
  terms) are ranked: the short rule's confidence power, or as key terms;
- `gate:` attempts move the point at which bare words whose dense side is unsure are ranked as
  key terms (fusion.UnsureDense: the doc-mean vector leg's confidence against whole-document
  BM25's), or drop it;
- `spread:` attempts move the point at which bare words spread through their best document are
  ranked by whole-document BM25 alone (fusion.SpreadWords: chunk BM25's rank of whole-document
  BM25's best, and the dense side's confidence against BM25's), or drop it;
- `noise:` attempts measure a leg's confidence against what noise alone reaches with as many
  candidates (the typical largest of n normal draws): the excess over it, or the ratio to it;
- `joined:` attempts widen what counts as key terms (fusion.is_key_terms) to queries whose only
  stop words are joiners standing between two content words, as in "burden of proof".
Each is judged as styles.py judges: per set x style cell, the margin over max(lexical mode,
whole-document BM25) on the tuning and test splits, the original queries against the shipped
rule, and leave one corpus group out. Writes results/styles_terms.{json,md}.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import styles as S  # noqa: E402
from benchmarks.eval_sets import RESULTS, machine, machine_lines, write_results  # noqa: E402
from docsearch import fusion  # noqa: E402
from docsearch.fusion import (  # noqa: E402
    DOCUMENT_RULES,
    KEY_TERMS,
    LONG,
    LONG_QUERY_WORDS,
    PLAIN,
    SEARCH_OPERATORS,
    SHORT_RULE_CONFIDENCE,
    TERM_LIST_RULE,
    WHOLE_DOCUMENT_RULE,
    WORDS,
    Fusion,
    form_rule,
    is_bare_words,
    is_key_terms,
)
from docsearch.text import STOPWORDS, WORD  # noqa: E402

Trigger = Callable[[str], bool]
RuleOf = Callable[[str], Fusion]
TOLERANCE = S.TOLERANCE
SHIPPED = "shipped"


def joined_terms(joiners: frozenset[str], max_share: float, words: int = 6) -> Trigger:
    """At least `words` words whose stop words are all `joiners`, each between two words that
    are not stop words, and at most `max_share` of the words."""

    def trigger(text: str) -> bool:
        tokens = text.split()
        stop = [any(p.lower() in STOPWORDS for p in WORD.findall(t)) for t in tokens]
        if len(tokens) < words or sum(stop) > max_share * len(tokens):
            return False
        for i, (token, is_stop) in enumerate(zip(tokens, stop, strict=True)):
            if not is_stop:
                continue
            inside = 0 < i < len(tokens) - 1 and not stop[i - 1] and not stop[i + 1]
            if not inside or token.lower().strip("\"'()") not in joiners:
                return False
        return True

    return trigger


def by_form(
    trigger: Trigger,
    key_rule: Fusion = TERM_LIST_RULE,
    plain_rule: Fusion | None = None,
    words_rule: Fusion | None = None,
) -> RuleOf:
    """The hybrid rule as fusion.form_rule picks it, key terms being `trigger`'s or
    fusion.is_key_terms', ranked by `key_rule`, bare words (fusion.is_bare_words) by
    `words_rule` and other short queries by `plain_rule` (defaults: the shipped rules)."""
    plain = plain_rule or form_rule("hybrid", PLAIN)
    words = words_rule or form_rule("hybrid", WORDS)

    def rule(text: str) -> Fusion:
        if len(text.split()) >= LONG_QUERY_WORDS:
            return form_rule("hybrid", LONG)
        if is_key_terms(text) or trigger(text):
            return key_rule
        return words if is_bare_words(text) else plain

    return rule


def noise_max(n: int) -> float:
    """The z-score the best of n candidates scoring pure noise typically reaches: the location
    of the extreme-value limit of the largest of n standard normal draws, sqrt(2 ln n) less
    (ln ln n + ln 4 pi) / (2 sqrt(2 ln n)); 0 under 3 candidates."""
    if n < 3:
        return 0.0
    root = math.sqrt(2 * math.log(n))
    return max(0.0, root - (math.log(math.log(n)) + math.log(4 * math.pi)) / (2 * root))


def above_noise(scores: fusion.Scores) -> float:
    """fusion.confidence less noise_max of the leg's candidate count, at least 0.05 (a leg no
    better than noise keeps a sliver of its weight); 0 where the leg cannot tell them apart."""
    sure = fusion.confidence(scores)
    return max(0.05, sure - noise_max(len(scores))) if sure else 0.0


def over_noise(scores: fusion.Scores) -> float:
    """fusion.confidence in units of noise_max of the leg's candidate count."""
    sure, noise = fusion.confidence(scores), noise_max(len(scores))
    return sure / noise if noise else sure


def never(text: str) -> bool:
    return False


OF = frozenset({"of"})
OF_AND = frozenset({"of", "and"})
OF_TO = frozenset({"of", "to"})
PREPOSITIONS = frozenset({"of", "and", "or", "to", "in", "for", "by", "on", "with", "from", "as"})
ARTICLES = PREPOSITIONS | {"the", "a", "an"}
LEX = "lse@0.1"


def key_rules() -> dict[str, Fusion]:
    """The key-term rules tried in place of TERM_LIST_RULE."""
    four = DOCUMENT_RULES["hybrid"]
    halves = Fusion("zscore", {"doc_lexical": 0.5, "lexical": 0.5}, aggregate={"lexical": LEX})
    thirds = Fusion("zscore", {"doc_lexical": 1 / 3, "lexical": 2 / 3}, aggregate={"lexical": LEX})
    doc_heavy = Fusion(
        "zscore", {"doc_lexical": 2 / 3, "lexical": 1 / 3}, aggregate={"lexical": LEX}
    )
    confident = {}
    for share, base, powers in (
        ("1/2 : 1/2", halves, (0.5, 1.0, 1.5, 2.0, 3.0)),
        ("2/3 : 1/3", doc_heavy, (1.0, 2.0)),
    ):
        for power in powers:
            name = f"rule: zscore {share}, each leg x its confidence^{power}"
            confident[name] = replace(base, confidence=power)
    return confident | {
        "rule: zscore doc BM25 1/2, chunk BM25 1/2, no confidence (the rule of 2026-12-07)": halves,
        "rule: zscore doc BM25 0.4, chunk BM25 0.6": Fusion(
            "zscore", {"doc_lexical": 0.4, "lexical": 0.6}, aggregate={"lexical": LEX}
        ),
        "rule: zscore doc BM25 1/3, chunk BM25 2/3 (the rule before 2026-12-07)": thirds,
        "rule: zscore doc BM25 2/3, chunk BM25 1/3": doc_heavy,
        "rule: zscore doc BM25 3/4, chunk BM25 1/4": Fusion(
            "zscore", {"doc_lexical": 0.75, "lexical": 0.25}, aggregate={"lexical": LEX}
        ),
        "rule: zscore doc BM25 0.85, chunk BM25 0.15": Fusion(
            "zscore", {"doc_lexical": 0.85, "lexical": 0.15}, aggregate={"lexical": LEX}
        ),
        "rule: whole-document BM25 alone": Fusion("maxnorm", {"doc_lexical": 1.0}),
        # named rules, not TERM_LIST_RULE altered: the shipped rule moves under them
        "rule: zscore 1/3 : 2/3, chunk BM25 sum@5": replace(thirds, aggregate={"lexical": "sum@5"}),
        "rule: minmax 1/3 : 2/3": replace(thirds, method="minmax"),
        "rule: the lexical mode's rule": DOCUMENT_RULES["lexical"],
        "rule: zscore 0.3 / 0.6 + dense 0.1": Fusion(
            "zscore",
            {"doc_lexical": 0.3, "lexical": 0.6, "doc_dense": 0.05, "dense": 0.05},
            aggregate={"lexical": LEX},
        ),
        "rule: the four-leg rule with its rare-terms weights": four,
    }


def boolean_terms(text: str) -> bool:
    """Terms joined by AND or OR in capitals, as search boxes take them ("income AND capital
    gains AND transfer"): at least TERM_LIST_PARTS terms, none over TERM_WORDS words."""
    parts = [p.split() for p in re.split(r"\b(?:AND|OR)\b", text)]
    terms = [p for p in parts if p]
    return len(terms) >= fusion.TERM_LIST_PARTS and all(len(t) <= fusion.TERM_WORDS for t in terms)


def operators_as_stop_words(shipped: RuleOf, plain: Fusion) -> RuleOf:
    """`shipped`, but bare words joined by AND / OR / NOT in capitals ranked by `plain`, as
    before fusion.is_bare_words read those as operators."""

    def rule(text: str) -> Fusion:
        got = shipped(text)
        if got is form_rule("hybrid", WORDS) and SEARCH_OPERATORS.search(text):
            return plain
        return got

    return rule


def attempts() -> dict[str, RuleOf]:
    out: dict[str, RuleOf] = {SHIPPED: by_form(never)}
    out |= {name: by_form(never, rule) for name, rule in key_rules().items()}
    short = form_rule("hybrid", PLAIN)
    unweighed = replace(short, confidence=None)
    out["before confidence: the rules of 2026-12-07 (ea1a911)"] = by_form(
        never, replace(TERM_LIST_RULE, confidence=None), unweighed, unweighed
    )
    for power in (None, 0.5, 1.0, 2.0):
        how = f"each leg x its confidence^{power}" if power else "no confidence"
        out[f"plain: the short rule, {how}"] = by_form(
            never, plain_rule=replace(short, confidence=power)
        )
    for power in (SHORT_RULE_CONFIDENCE, 0.5, 1.25, 1.5, 2.0, 3.0):
        name = f"words: bare words, each leg x its confidence^{power}"
        out[name] = by_form(never, words_rule=replace(short, confidence=power))
    out["words: bare words as key terms"] = by_form(is_bare_words)
    out["words: search-box operators as stop words (the rule before)"] = operators_as_stop_words(
        by_form(never), short
    )
    words_rule = form_rule("hybrid", WORDS)
    out["gate: bare words never as key terms (the rule before)"] = by_form(
        never, words_rule=replace(words_rule, unsure=None)
    )
    for ratio in (0.4, 0.45, 0.5, 0.6, 0.7):
        unsure = fusion.UnsureDense(ratio, TERM_LIST_RULE)
        name = f"gate: bare words as key terms where doc-mean z < {ratio} x whole-document BM25's"
        out[name] = by_form(never, words_rule=replace(words_rule, unsure=unsure))
    out["spread: bare words never by whole-document BM25 alone (the rule before)"] = by_form(
        never, words_rule=replace(words_rule, spread=None)
    )
    for rank in (10, 12, 13, 14, 15, 20, 30):
        for ratio in (0.85, 1.0, 1.2):
            spread = fusion.SpreadWords(rank, fusion.UnsureDense(ratio, WHOLE_DOCUMENT_RULE))
            name = (
                f"spread: bare words by whole-document BM25 alone where chunk BM25 ranks its "
                f"best >= {rank}th and doc-mean z < {ratio} x BM25's"
            )
            out[name] = by_form(never, words_rule=replace(words_rule, spread=spread))
    noise = {"excess": above_noise, "ratio": over_noise}
    slot = {KEY_TERMS: "key_rule", PLAIN: "plain_rule", WORDS: "words_rule"}
    for label, form, power in (
        ("excess", WORDS, 0.5),
        ("excess", WORDS, 1.0),
        ("excess", WORDS, 2.0),
        ("excess", KEY_TERMS, 1.0),
        ("excess", PLAIN, SHORT_RULE_CONFIDENCE),
        ("ratio", WORDS, 1.5),
        ("ratio", WORDS, 2.0),
        ("ratio", KEY_TERMS, 1.5),
    ):
        # without UnsureDense, as measured before it was chosen (styles.md, seventh round)
        rule = replace(
            form_rule("hybrid", form), confidence=power, measure=noise[label], unsure=None
        )
        name = f"noise: {form} queries, each leg x its confidence {label} over noise^{power}"
        out[name] = by_form(never, **{slot[form]: rule})
    out["boolean: terms joined by AND / OR are key terms"] = by_form(boolean_terms)
    for label, joiners in (
        ("of", OF),
        ("of, and", OF_AND),
        ("of, to", OF_TO),
        ("prepositions, and, or", PREPOSITIONS),
        ("prepositions, and, or, articles", ARTICLES),
    ):
        for share in (0.2, 0.34):
            for words in (6, 8):
                name = f"joined: {words}+ words, joiners {label}, share <= {share}"
                out[name] = by_form(joined_terms(joiners, share, words))
    return out


def rows(cache: Path) -> list[dict[str, Any]]:
    """One row per (query, style): its cell, text, qrels, legs and the bar's two modes."""
    out = []
    for part in S.load_all(cache):
        for style, got in part["styles"].items():
            for q, text, legs in zip(part["queries"], got["texts"], got["legs"], strict=True):
                out.append(
                    {
                        "group": part["sample"],
                        "cell": (q.dataset, style),
                        "role": q.role,
                        "text": text,
                        "qrels": q.qrels,
                        "legs": legs,
                        "BM25": S.ndcg10(legs["reference"], q.qrels),
                        "lexical": S.ndcg10(S.fuse(DOCUMENT_RULES["lexical"], legs), q.qrels),
                    }
                )
    return out


def cell_means(rows: list[dict[str, Any]], values: list[float], role: str) -> dict[Any, float]:
    acc: dict[Any, list[float]] = {}
    for row, value in zip(rows, values, strict=True):
        if row["role"] == role:
            acc.setdefault(row["cell"], []).append(value)
    return {cell: float(np.mean(v)) for cell, v in acc.items()}


def study(rows: list[dict[str, Any]], tried: dict[str, RuleOf] | None = None) -> dict[str, Any]:
    """Per attempt (`tried`, default `attempts()`, SHIPPED among them) and role: worst margin,
    fails, mean, the original queries and the cell lost most against the shipped rule, the
    `spaced` cells; and the LODO choice."""
    tried = tried if tried is not None else attempts()
    values = {
        name: [S.ndcg10(S.fuse(rule(r["text"]), r["legs"]), r["qrels"]) for r in rows]
        for name, rule in tried.items()
    }
    shipped_rule = tried[SHIPPED]
    touched = {
        name: [rule(r["text"]) is not shipped_rule(r["text"]) for r in rows]
        for name, rule in tried.items()
    }
    bars = {}
    for role in ("tune", "test"):
        bm25 = cell_means(rows, [r["BM25"] for r in rows], role)
        lexical = cell_means(rows, [r["lexical"] for r in rows], role)
        bars[role] = {c: max(bm25[c], lexical[c]) for c in bm25}
    summary: dict[str, Any] = {}
    for name, vals in values.items():
        summary[name] = {"touched": sum(touched[name]), "caught": caught(rows, touched[name])}
        for role in ("tune", "test"):
            means = cell_means(rows, vals, role)
            shipped = cell_means(rows, values[SHIPPED], role)
            margins = {c: m - bars[role][c] for c, m in means.items()}
            versus = {c: m - shipped[c] for c, m in means.items()}
            worst, lost = min(margins, key=margins.__getitem__), min(versus, key=versus.__getitem__)
            summary[name][role] = {
                "worst": [*worst, margins[worst]],
                "fails": [f"{c[0]} / {c[1]}" for c, m in margins.items() if m < -TOLERANCE],
                "shortfall": sum(min(0.0, m + TOLERANCE) for m in margins.values()),
                "mean": float(np.mean(list(means.values()))),
                "original": min(v for c, v in versus.items() if c[1] == "original"),
                "most lost": [*lost, versus[lost]],
                "spaced": {c[0]: means[c] for c in means if c[1] == "spaced"},
                "margins": {f"{c[0]} / {c[1]}": margins[c] for c in margins},
            }
    return {"summary": summary, "lodo": lodo(rows, values, bars)}


def caught(rows: list[dict[str, Any]], touched: list[bool]) -> dict[str, str]:
    """How many rows the attempt ranks otherwise: the legal key-term lists typed without
    separators that the shipped rule misses (irled2017-precedent `spaced`, short, not
    fusion.is_key_terms) and every set's original queries."""

    def missed(r: dict[str, Any]) -> bool:
        short = len(r["text"].split()) < LONG_QUERY_WORDS
        return r["cell"] == (S.IRLED, "spaced") and short and not is_key_terms(r["text"])

    out = {}
    for label, wanted in (
        ("legal spaced", missed),
        ("original", lambda r: r["cell"][1] == "original"),
    ):
        got = [t for r, t in zip(rows, touched, strict=True) if wanted(r)]
        out[label] = f"{sum(got)} / {len(got)}"
    return out


def lodo(rows: list[dict[str, Any]], values: dict[str, list[float]], bars: dict) -> dict:
    """Per corpus group: the attempt the other groups' tuning cells choose (worst margin, then
    mean) among those that lose at most TOLERANCE on their original queries against the shipped
    rule, and its test margins on the group left out."""
    group_of = {r["cell"][0]: r["group"] for r in rows}
    tune = {name: cell_means(rows, vals, "tune") for name, vals in values.items()}
    test = {name: cell_means(rows, vals, "test") for name, vals in values.items()}
    out = {}
    for held in sorted(set(group_of.values())):
        kept = [c for c in tune[SHIPPED] if group_of[c[0]] != held]
        if not kept:  # one group collected: nothing to choose by
            continue

        def objective(name: str, kept: list = kept) -> tuple[float, float]:
            margins = [tune[name][c] - bars["tune"][c] for c in kept]
            return min(margins), float(np.mean([tune[name][c] for c in kept]))

        def safe(name: str, kept: list = kept) -> bool:
            return all(
                tune[name][c] - tune[SHIPPED][c] >= -TOLERANCE for c in kept if c[1] == "original"
            )

        chosen = max((n for n in values if safe(n)), key=objective)
        margins = {
            f"{c[0]} / {c[1]}": test[chosen][c] - bars["test"][c]
            for c in test[chosen]
            if group_of[c[0]] == held
        }
        out[held] = {"chosen": chosen, "margins": margins}
    return out


def markdown(payload: dict[str, Any], command: str) -> str:
    lines = [
        "# Key-term rules: the rule's legs, and key terms without separators (issue 37)",
        "",
        *machine_lines(payload["machine"], command),
        "- legs: the query-style suite's cache (benchmarks/styles.py, results/styles.md), the "
        "`spaced` style included (each original query with its commas, semicolons and line "
        "breaks dropped, stop words kept); every ranking through docsearch.fusion",
        f"- shipped: fusion.document_rule at this commit (fusion.py crc {payload['fusion_crc']})",
        "- bar: max(lexical mode, whole-document BM25) per set x style; fails: cells below "
        "bar - 0.005; original: the lowest difference on a set's original queries against the "
        "shipped rule; touched: (query, style) rows whose rule differs from the shipped one; "
        "shortfall: the cells' margins below -0.005 summed (how far below the bar in all)",
        "",
        "| attempt | touched | tune worst | tune fails | tune shortfall | tune mean "
        "| tune original | tune most lost | test worst | test fails | test shortfall | test mean "
        "| test original | test most lost | irled spaced tune / test | legal spaced caught "
        "| original caught |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, got in payload["study"]["summary"].items():
        cells = [str(got["touched"])]
        for role in ("tune", "test"):
            r = got[role]
            cells += [
                f"{r['worst'][0]} / {r['worst'][1]} {r['worst'][2]:+.4f}",
                str(len(r["fails"])),
                f"{r['shortfall']:+.3f}",
                f"{r['mean']:.4f}",
                f"{r['original']:+.4f}",
                f"{r['most lost'][0]} / {r['most lost'][1]} {r['most lost'][2]:+.4f}",
            ]
        irled = [got[role]["spaced"].get(S.IRLED, float("nan")) for role in ("tune", "test")]
        cells.append(f"{irled[0]:.4f} / {irled[1]:.4f}")
        cells += [got["caught"]["legal spaced"], got["caught"]["original"]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Leave one corpus group out",
        "",
        "The attempt the other groups' tuning cells choose (best worst margin, then best mean) "
        "among those losing at most 0.005 on those groups' original queries against the shipped "
        "rule, and its test margins on the group left out.",
        "",
        "| left out | chosen | worst test margin | cells below -0.005 |",
        "|---|---|---|---|",
    ]
    for held, got in payload["study"]["lodo"].items():
        worst = min(got["margins"].items(), key=lambda kv: kv[1])
        below = ", ".join(f"{c} {m:+.4f}" for c, m in got["margins"].items() if m < -TOLERANCE)
        lines.append(
            f"| {held} | {got['chosen']} | {worst[0]} {worst[1]:+.4f} | {below or 'none'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=S.CACHE)
    args = parser.parse_args()
    started = time.perf_counter()
    got = rows(args.cache)
    payload = {
        "machine": machine(),
        "fusion_crc": f"{zlib.crc32(Path(fusion.__file__).read_bytes()):08x}",
        "rows": len(got),
        "study": study(got),
    }
    command = "python -m benchmarks.styles_terms (after styles.py build and collect)"
    write_results(RESULTS, "styles_terms", payload, markdown(payload, command))
    print(markdown(payload, command))
    print(f"{len(got)} rows, {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
