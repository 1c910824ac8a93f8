"""Are a short query's terms together in one passage, or spread through the document? A
candidate signal for the next key-term rule, measured on the query-style suite.

    python -m benchmarks.styles_coverage [--cache DIR] [--indexes DIR]

For every short query (under fusion.LONG_QUERY_WORDS words, at least two content stems) of
every set x style that `python -m benchmarks.styles collect` cached: `passage`, the largest
share of the query's content stems that one of the 3 best chunk BM25 hits holds; `document`,
the share the best whole-document BM25 hit holds; `spread`, passage / document (under 1: the
best document holds terms that no single good passage holds). The suite's legal lists drawn
from terms spread through a judgment (irled2017-precedent/scattered, /passing) are where the
key-term rule needs whole-document BM25 most (results/styles.md, "Fifth round"); a signal that
tells them from the other sets' queries could weigh the lexical legs per query. Writes
results/styles_coverage.{json,md}: medians and the share of queries under 0.75, per set and
per set x style. With `--rules`, also scores rules that give a key-term query whose spread is
under a bound more whole-document BM25, and rules that rank bare words (fusion.is_bare_words)
by whole-document BM25 where their spread (or passage share) is under a bound, with or without
the dense side also unsure of its answer (fusion.UnsureDense's test at another ratio)
(styles_terms.study: tuning and test margins, summed shortfall, the most any cell loses against
the shipped rule, the cells it puts below the bar). Nothing here is used by the product.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import styles as S  # noqa: E402
from benchmarks.eval_sets import RESULTS, machine, machine_lines, write_results  # noqa: E402
from docsearch.common_words import common_words  # noqa: E402
from docsearch.fusion import (  # noqa: E402
    BARE_WORDS_RULE,
    KEY_TERMS,
    LONG,
    TERM_LIST_RULE,
    WORDS,
    Fusion,
    UnsureDense,
    query_form,
)  # noqa: E402
from docsearch.indexer.filters import ChunkFilter  # noqa: E402
from docsearch.query import ParsedQuery, clean_query  # noqa: E402
from docsearch.text import content_stems  # noqa: E402

PASSAGES = 3  # chunk hits looked at for the best passage
LOW = 0.75  # "under LOW": the share of queries whose measure is below this


def coverage(store: Any, text: str, doc_text: dict[str, str]) -> dict[str, float] | None:
    """The query's passage, document and spread measures (module docstring), or None for a
    long query, one of under two content stems, or one nothing matched."""
    text = clean_query(text)
    stems = content_stems(text)
    if query_form(text) == LONG or len(stems) < 2:
        return None
    words = ParsedQuery.parse(text, partial(common_words, store)).words
    chunks = store.search_text(words, PASSAGES, ChunkFilter(), text=True)
    docs = store.search_documents_text(words, 1, ChunkFilter())
    if not chunks or not docs:
        return None
    passage = max(len(stems & content_stems(c.text)) / len(stems) for c in chunks)
    document = len(stems & content_stems(doc_text[docs[0].doc_id])) / len(stems)
    return {"passage": passage, "document": document, "spread": passage / max(document, 1e-9)}


def measure(
    cache: Path, indexes: Path, by_text: dict[str, dict[str, float]] | None = None
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """Per (set, style), each short query's measures; `by_text` gets each key-term or bare-words
    query's measures by its text."""
    out: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for sample in S.SAMPLES:
        path = cache / f"{sample.name}.pkl"
        if not path.is_file():
            continue
        saved = S.unpickled(path)
        with S.sample_index(sample.index_set(), indexes, None) as index:
            store = index.retriever().store
            rows = store.database.dataset(f"{store.prefix}__docs").to_table(
                columns=["doc_id", "text"]
            )
            ids, texts = (rows.column(c).to_pylist() for c in ("doc_id", "text"))
            doc_text = dict(zip(ids, texts, strict=True))
            for style, got in saved["styles"].items():
                for q, text in zip(saved["queries"], got["texts"], strict=True):
                    found = coverage(store, text, doc_text)
                    if found is not None:
                        out[(q.dataset, style)].append(found)
                        form = query_form(clean_query(text))
                        if by_text is not None and form in (KEY_TERMS, WORDS):
                            by_text.setdefault(text, found)
        print(f"{sample.name}: measured", file=sys.stderr, flush=True)
    return out


def doc_heavy(w: float) -> Fusion:
    """Whole-document BM25 weighing `w`, chunk BM25 1 - w (z-scored); 1: BM25 alone."""
    if w == 1.0:
        return Fusion("zscore", {"doc_lexical": 1.0})
    return Fusion("zscore", {"doc_lexical": w, "lexical": 1 - w}, aggregate={"lexical": "lse@0.1"})


def spread_rules(by_text: dict[str, dict[str, float]]) -> dict[str, Any]:
    """styles_terms attempts: the shipped rule; key terms whose spread is under a bound ranked
    with whole-document BM25 weighing `w` (chunk BM25 1 - w); bare words whose spread is under
    a bound ranked so; and bare words whose spread (or passage share) is under a bound and whose
    dense side is unsure of its answer beside BM25 at `ratio` (UnsureDense) ranked by
    whole-document BM25 alone, the other bare words as shipped."""
    from benchmarks import styles_terms as T

    shipped = T.by_form(T.never)

    def gated(form_rule: Fusion, bound: float, then: Fusion, key: str = "spread") -> Any:
        def rule(text: str) -> Fusion:
            chosen = shipped(text)
            if chosen is form_rule and by_text.get(text, {}).get(key, 1.0) < bound:
                return then
            return chosen

        return rule

    out = {T.SHIPPED: shipped}
    for bound in (0.5, 0.6, 0.7, 0.8):
        for w in (0.75, 0.85, 1.0):
            name = f"spread < {bound}: whole-document BM25 {w}"
            out[name] = gated(TERM_LIST_RULE, bound, doc_heavy(w))
    for bound in (0.5, 0.6, 0.7, 0.8, 0.9):
        for w in (0.5, 0.75, 0.85, 1.0):
            name = f"bare words, spread < {bound}: whole-document BM25 {w}"
            out[name] = gated(BARE_WORDS_RULE, bound, doc_heavy(w))
    for key in ("spread", "passage"):
        for bound in (0.6, 0.7, 0.8):
            for ratio in (0.85, 1.0, 1.2):
                unsure = replace(BARE_WORDS_RULE, unsure=UnsureDense(ratio, doc_heavy(1.0)))
                name = f"bare words, {key} < {bound}, dense unsure < {ratio}: BM25 alone"
                out[name] = gated(BARE_WORDS_RULE, bound, unsure, key)
    return out


def score_rules(cache: Path, by_text: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Each spread rule's margins per role, as styles_terms judges its attempts."""
    from benchmarks import styles_terms as T

    found = T.study(T.rows(cache), spread_rules(by_text))["summary"]
    shipped = found[T.SHIPPED]
    out: dict[str, Any] = {}
    for name, got in found.items():
        out[name] = {}
        for role in ("tune", "test"):
            mine, theirs = got[role]["margins"], shipped[role]["margins"]
            lost = min(mine, key=lambda c: mine[c] - theirs[c])
            below = [c for c in mine if mine[c] < -T.TOLERANCE <= theirs[c]]
            out[name][role] = {
                "new below": below,
                "fails": len(got[role]["fails"]),
                "shortfall": got[role]["shortfall"],
                "mean": got[role]["mean"],
                "most lost": [lost, mine[lost] - theirs[lost]],
            }
    return out


def summary(values: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {"n": len(values)}
    for key in ("passage", "document", "spread"):
        got = np.array([v[key] for v in values])
        out[f"{key} median"] = float(np.median(got))
        out[f"{key} < {LOW}"] = float(np.mean(got < LOW))
    return out


def markdown(payload: dict[str, Any], command: str) -> str:
    keys = [f"{k} {s}" for k in ("passage", "document", "spread") for s in ("median", f"< {LOW}")]
    head = "| {} | n | " + " | ".join(keys) + " |"
    rule = "|---|---|" + "---|" * len(keys)

    def table(rows: dict[str, dict[str, float]], what: str) -> list[str]:
        lines = [head.format(what), rule]
        for name, got in rows.items():
            cells = " | ".join(f"{got[k]:.2f}" for k in keys)
            lines.append(f"| {name} | {int(got['n'])} | {cells} |")
        return lines

    return "\n".join(
        [
            "# Where a short query's terms are: one passage or the whole document",
            "",
            *machine_lines(payload["machine"], command),
            f"- passage: the largest share of the query's content stems in one of the "
            f"{PASSAGES} best chunk BM25 hits; document: the share in the best whole-document "
            "BM25 hit; spread: passage / document. Short queries of the suite's cache, every "
            "style and role.",
            "",
            "## Per set",
            "",
            *table(payload["sets"], "set"),
            "",
            "## Per set x style",
            "",
            *table(payload["cells"], "set / style"),
            *rules_table(payload.get("rules")),
        ]
    )


def rules_table(rules: dict[str, Any] | None) -> list[str]:
    if not rules:
        return []
    lines = [
        "",
        "## Rules gated by spread (`--rules`)",
        "",
        "Margins over max(lexical mode, whole-document BM25) per set x style, as "
        "styles_terms.py judges; shortfall: margins below -0.005 summed; most lost: the cell "
        "that loses most against the shipped rule; new below: cells below -0.005 that pass "
        "under the shipped rule.",
        "",
        "| rule | tune fails | tune shortfall | tune mean | tune most lost | tune new below "
        "| test fails | test shortfall | test mean | test most lost | test new below |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, got in rules.items():
        cells = []
        for role in ("tune", "test"):
            r = got[role]
            cell, lost = r["most lost"]
            cells += [str(r["fails"]), f"{r['shortfall']:+.3f}", f"{r['mean']:.4f}"]
            cells.append(f"{cell} {lost:+.4f}")
            cells.append(", ".join(r.get("new below", [])) or "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=S.CACHE)
    parser.add_argument("--indexes", type=Path, default=S.INDEXES)
    parser.add_argument("--rules", action="store_true", help="also score spread-gated rules")
    args = parser.parse_args()
    by_text: dict[str, dict[str, float]] = {}
    measured = measure(args.cache, args.indexes, by_text)
    per_set: dict[str, list[dict[str, float]]] = defaultdict(list)
    for (dataset, _), values in measured.items():
        per_set[dataset] += values
    payload = {
        "machine": machine(),
        "sets": {name: summary(v) for name, v in sorted(per_set.items())},
        "cells": {f"{d} / {s}": summary(v) for (d, s), v in sorted(measured.items())},
    }
    if args.rules:
        payload["rules"] = score_rules(args.cache, by_text)
    command = "python -m benchmarks.styles_coverage --rules (after styles.py build and collect)"
    write_results(RESULTS, "styles_coverage", payload, markdown(payload, command))


if __name__ == "__main__":
    main()
