"""The hybrid rule by query length, chosen without test queries: `results/doclevel_length.{json,md}`.

    nice -n 10 python benchmarks/doclevel_length.py [--cache /work/cache/doclevel]

A query of many words (a meeting's summary, a paper's abstract) describes a whole document; a
short one (a question, a claim, a title) asks for a part of one. The candidates here rank long
queries by one rule and short ones by another: long = the product's lexical rule alone or with
a share of dense on top (doclevel.py's "lexical mode + dense" families), short = the four
document-level legs (whole-document BM25, chunk BM25 lse@0.1, doc-mean dense, best-chunk dense)
under z-scores on a 0.1 grid, with or without the agreement guard, or any long candidate. The
length threshold, the long rule and the short rule are chosen together, exhaustively, by the
worst margin over max(whole-document BM25, the best-chunk hybrid from before, each leg the two
rules weigh) across the tuning queries of every set, then leave one corpus group out. A second
pass adds the lexical mode itself to the rivals (the "guard" reading: hybrid never below
`--mode lexical`). Test queries only score the chosen rules.
Legs and splits come from doclevel.py's cache (its step 1); nothing is indexed here.
Not here: product code (docsearch.fusion.document_rule ships the rule chosen here).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import doclevel as D
import numpy as np
from eval_sets import DOCLEVEL_SAMPLES, RESULTS, machine, machine_lines, write_results

WORDS = (16, 24, 32, 40, 48, 64)  # the length threshold's grid (words, whitespace-split)
ROLES = ("tune", "test")
LEGS_SHOWN = (
    "doc:reference",
    "doc:lance-plain",
    "st:bm25-lse@0.1",
    "st:dense-docmean",
    "st:dense-max",
    "st:hybrid-today",
    D.LEXICAL_MODE,
)


@dataclass(frozen=True)
class Switch:
    words: int
    long: D.Rule
    short: D.Rule

    @property
    def name(self) -> str:
        return f"< {self.words} words: `{self.short.name}`; >= {self.words}: `{self.long.name}`"


def long_rules() -> list[D.Rule]:
    return [
        D.single(D.LEXICAL_MODE),
        *D.lexical_plus_dense("minmax"),
        *D.lexical_plus_dense("zscore"),
    ]


def short_rules() -> list[D.Rule]:
    grid = [w for w in D.simplex(4, 0.1) if w[2] + w[3] > 0 and w[0] + w[1] > 0]
    four = [
        D.Rule("short", D.four_legs("doc:lance-plain", "lse@0.1", "max", w), "zscore", tau=tau)
        for w in grid
        for tau in (None, *D.TAUS)
    ]
    return four + long_rules()


def rule_legs(rule: D.Rule) -> list[str]:
    return [leg for leg, w in rule.legs if w and len(rule.legs) > 1]


class Chooser:
    """Per-rule sums of per-query nDCG@10 over each set's long and short queries, so every
    (threshold, long rule, short rule) triple is scored at once as arrays."""

    def __init__(self, scorer: D.Scorer, guard: bool) -> None:
        self.scorer = scorer
        self.words = np.concatenate(
            [[len(q.text.split()) for q in g.queries] for g in scorer.groups]
        )
        self.masks = {
            (d, r): (scorer.dataset == d) & (scorer.role == r) for d in D.DATASETS for r in ROLES
        }
        self.count = np.array([[self.masks[(d, r)].sum() for r in ROLES] for d in D.DATASETS])
        rivals = [D.REFERENCE, D.TODAY_HYBRID] + ([D.single(D.LEXICAL_MODE)] if guard else [])
        self.rival = np.array(
            [[max(self.mean(x, d, r) for x in rivals) for r in ROLES] for d in D.DATASETS]
        )
        self.long, self.short = long_rules(), short_rules()
        self.tables = {w: self._tables(w) for w in WORDS}

    def mean(self, rule: Any, dataset: str, role: str) -> float:
        return float(self.values(rule)[self.masks[(dataset, role)]].mean())

    def values(self, rule: Any) -> np.ndarray:
        if isinstance(rule, Switch):
            return np.where(
                self.words >= rule.words,
                self.scorer.score(rule.long),
                self.scorer.score(rule.short),
            )
        return self.scorer.score(rule)

    def _sums(self, rules: list[D.Rule], regime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sums = np.zeros((len(rules), len(D.DATASETS), len(ROLES)))
        legs = np.zeros_like(sums)
        for i, rule in enumerate(rules):
            per_query = self.scorer.score(rule)
            for j, d in enumerate(D.DATASETS):
                for k, r in enumerate(ROLES):
                    sums[i, j, k] = per_query[self.masks[(d, r)] & regime].sum()
                    legs[i, j, k] = max(
                        (self.mean(D.single(leg), d, r) for leg in rule_legs(rule)), default=0.0
                    )
        return sums, legs

    def _tables(self, words: int) -> tuple[np.ndarray, np.ndarray]:
        """(value, baseline) per long rule x short rule x set x role."""
        long_sums, long_legs = self._sums(self.long, self.words >= words)
        short_sums, short_legs = self._sums(self.short, self.words < words)
        value = (long_sums[:, None] + short_sums[None, :]) / self.count
        base = np.maximum(np.maximum(long_legs[:, None], short_legs[None, :]), self.rival)
        print(f"threshold {words}: {value.shape[0] * value.shape[1]} pairs", file=sys.stderr)
        return value, base

    def choose(self, datasets: list[str]) -> Switch:
        """The triple with the best worst tuning margin over `datasets`, then the best mean (a
        saturated set counts only when the rule drops on it, as in doclevel.py)."""
        cols = [D.DATASETS.index(d) for d in datasets]
        best: tuple[float, float, Switch] | None = None
        for words, (value, base) in self.tables.items():
            v, b = value[:, :, cols, 0], base[:, :, cols, 0]
            margin = v - b
            counted = (b < D.SATURATED) | (margin < -0.005)
            worst = np.where(counted, margin, np.inf).min(axis=2)
            worst = np.round(np.where(np.isinf(worst), 0.0, worst), 4)
            mean = v.mean(axis=2)
            top = worst.max()
            a, s = np.unravel_index(np.argmax(np.where(worst == top, mean, -np.inf)), worst.shape)
            candidate = (float(top), float(mean[a, s]), Switch(words, self.long[a], self.short[s]))
            if best is None or candidate[:2] > best[:2]:
                best = candidate
        assert best is not None
        return best[2]

    def baseline(self, rule: Switch, dataset: str, role: str) -> float:
        j, k = D.DATASETS.index(dataset), ROLES.index(role)
        base = self.tables[rule.words][1]
        return float(base[self.long.index(rule.long), self.short.index(rule.short), j, k])


def study(chooser: Chooser) -> dict[str, Any]:
    shipped = chooser.choose(D.DATASETS)
    groups = sorted({D.GROUP_OF[d] for d in D.DATASETS})
    lodo = {g: chooser.choose([d for d in D.DATASETS if D.GROUP_OF[d] != g]) for g in groups}
    sets = {}
    for d in D.DATASETS:
        held = lodo[D.GROUP_OF[d]]
        sets[d] = {
            "test": chooser.mean(shipped, d, "test"),
            "test_baseline": chooser.baseline(shipped, d, "test"),
            "tune": chooser.mean(shipped, d, "tune"),
            "lodo_rule": held.name,
            "lodo_test": chooser.mean(held, d, "test"),
            "lodo_baseline": chooser.baseline(held, d, "test"),
        }
    return {"shipped": shipped.name, "sets": sets}


def markdown(payload: dict[str, Any]) -> str:
    lines = [
        "# The hybrid rule by query length",
        "",
        *machine_lines(payload["machine"], payload["command"]),
        "- data, legs and tune/test splits: doclevel.md's cache; the triple (threshold, long "
        "rule, short rule) chosen exhaustively on tuning queries, test queries only score it",
        f"- thresholds tried (words): {', '.join(map(str, WORDS))}; query words per set "
        "(median, 5th-95th percentile): "
        + "; ".join(f"{D.SHORT[d]} {v}" for d, v in payload["query_words"].items()),
        "",
        "## Legs alone (test nDCG@10)",
        "",
        "| leg | " + " | ".join(D.SHORT[d] for d in D.DATASETS) + " |",
        "|---|" + "---|" * len(D.DATASETS),
    ]
    for leg, row in payload["legs"].items():
        lines.append(f"| {leg} | " + " | ".join(f"{row[d]:.4f}" for d in D.DATASETS) + " |")
    for key, title in (
        ("default", "Baseline: whole-document BM25, the best-chunk hybrid, the rules' legs"),
        ("guard", "Baseline: the same and the lexical mode"),
    ):
        result = payload["studies"][key]
        lines += [
            "",
            f"## {title}",
            "",
            f"Chosen on all tuning queries: {result['shipped']}",
            "",
            "| set | test | baseline | margin | LODO test | LODO margin | LODO rule |",
            "|---|---|---|---|---|---|---|",
        ]
        for d, row in result["sets"].items():
            lines.append(
                f"| {d} | {row['test']:.4f} | {row['test_baseline']:.4f} | "
                f"{row['test'] - row['test_baseline']:+.4f} | {row['lodo_test']:.4f} | "
                f"{row['lodo_test'] - row['lodo_baseline']:+.4f} | {row['lodo_rule']} |"
            )
    return "\n".join(lines) + "\n"


def query_words(scorer: D.Scorer) -> dict[str, str]:
    out = {}
    for d in D.DATASETS:
        words = [len(q.text.split()) for g in scorer.groups for q in g.queries if q.dataset == d]
        low, mid, high = np.percentile(words, [5, 50, 95]).round().astype(int)
        out[d] = f"{mid} ({low}-{high})"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=D.DEFAULT_DIR)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    info = machine()
    scorer = D.Scorer([D.build_group(g, args.cache) for g in DOCLEVEL_SAMPLES])
    studies = {key: study(Chooser(scorer, guard=key == "guard")) for key in ("default", "guard")}
    payload = {
        "machine": info,
        "command": "python " + " ".join(sys.argv),
        "query_words": query_words(scorer),
        "legs": {
            leg: {d: scorer.mean(D.single(leg), d, "test") for d in D.DATASETS}
            for leg in LEGS_SHOWN
        },
        "studies": studies,
    }
    text = markdown(payload)
    write_results(RESULTS, "doclevel_length", payload, text)
    print(text)


if __name__ == "__main__":
    main()
