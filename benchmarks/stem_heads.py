"""Snippets' stem heads, checked on the shared data: the bound they rest on, and the words they find.

    python -m benchmarks.stem_heads [--queries 400] [--docs 300] [--chunks 5] [--out DIR]

A snippet finds the words of a query term by its stem's head, the stem less its last
`snippets.STEM_REWRITE` characters, instead of stemming every word of the chunk
(`snippets._term_words`; `_stemmed_words` is the way it replaced, kept for short stems). That is
exact if every word starts with its stem less that many characters (lower-cased). Here:
1. every distinct word (`\\w+`) of every JSON-lines file of the evaluation data (corpora and
   queries): how many characters of its stem differ from the word's own start, as a histogram,
   with the words at the largest count;
2. the two ways side by side on each set's first `--queries` queries, cut to 4 and to 10 words,
   each against `--chunks` random 1,200-character pieces of its first `--docs` documents
   (seeded): pairs where they differ, and how many query variants took the head path.
Writes benchmarks/results/stem_heads.{md,json}. Not here: snippet speed (short_queries.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import eval_sets  # noqa: E402

WORD = re.compile(r"\w+")
CHUNK_CHARS = 1200


def vocabulary(data: Path) -> set[str]:
    """The distinct words of every JSON-lines file under `data`."""
    words: set[str] = set()
    for path in sorted(data.rglob("*.jsonl")):
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                words.update(WORD.findall(line))
    return words


def rewrites(words: set[str]) -> tuple[Counter[int], dict[int, list[str]]]:
    """How many of each stem's characters differ from its word's start, and examples of each."""
    from docsearch.text import stems

    ordered = sorted(words)
    counts: Counter[int] = Counter()
    examples: dict[int, list[str]] = {}
    for word, stem in zip(ordered, stems(ordered), strict=True):
        rewritten = len(stem) - len(os.path.commonprefix([word.lower(), stem]))
        counts[rewritten] += 1
        shown = examples.setdefault(rewritten, [])
        if len(shown) < 12:
            shown.append(f"{word} -> {stem}")
    return counts, examples


def side_by_side(data: Path, args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """Per set: (query, chunk) pairs, those where the two ways differ, query variants that took
    the head path."""
    from docsearch.query import ParsedQuery
    from docsearch.snippets import _stemmed_words, _term_words, stem_heads

    rng = random.Random(0)
    out = {}
    for folder in sorted(p for p in data.iterdir() if (p / "corpus.jsonl").exists()):
        docs = _texts(folder / "corpus.jsonl", args.docs, ("title", "text"))
        queries = _texts(folder / "queries.jsonl", args.queries, ("text", "query"))
        pairs = differ = heads = 0
        for query in queries:
            for cut in (4, 10):
                terms = ParsedQuery.parse(" ".join(query.split()[:cut]) or "-").stems
                if not terms:
                    continue
                heads += stem_heads(terms) is not None
                for doc in rng.sample(docs, min(args.chunks, len(docs))):
                    start = rng.randrange(max(1, len(doc) - CHUNK_CHARS))
                    chunk = doc[start : start + CHUNK_CHARS]
                    pairs += 1
                    differ += _term_words(chunk, terms) != _stemmed_words(chunk, terms)
        out[folder.name] = {"pairs": pairs, "differ": differ, "head_path_queries": heads}
    return out


def _texts(path: Path, limit: int, fields: tuple[str, ...]) -> list[str]:
    found = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if len(found) >= limit:
                break
            row = json.loads(line)
            found.append("\n".join(str(row.get(f) or "") for f in fields).strip())
    return [text for text in found if text]


def report(payload: dict[str, Any], command: str) -> str:
    info, counts, sets = payload["machine"], payload["rewritten"], payload["side_by_side"]
    lines = ["# Snippets' stem heads on the shared data", ""]
    lines += eval_sets.machine_lines(info, command) + [""]
    lines += [
        f"Distinct words: {payload['words']:,}; STEM_REWRITE = {payload['stem_rewrite']} "
        f"(the largest count seen: {max(int(k) for k in counts)}).",
        "",
        "| characters of the stem rewritten | words | examples |",
        "|---|---|---|",
    ]
    for k in sorted(counts, key=int):
        lines.append(f"| {k} | {counts[k]:,} | {', '.join(payload['examples'][k][:6])} |")
    lines += ["", "| set | (query, chunk) pairs | differ | query variants on the head path |"]
    lines.append("|---|---|---|---|")
    for name, row in sets.items():
        lines.append(
            f"| {name} | {row['pairs']:,} | {row['differ']} | {row['head_path_queries']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--out", type=Path, default=eval_sets.RESULTS)
    args = parser.parse_args()
    from docsearch.snippets import STEM_REWRITE

    words = vocabulary(eval_sets.DATA)
    counts, examples = rewrites(words)
    payload = {
        "machine": eval_sets.machine(),
        "words": len(words),
        "stem_rewrite": STEM_REWRITE,
        "rewritten": {str(k): v for k, v in sorted(counts.items())},
        "examples": {str(k): v for k, v in sorted(examples.items())},
        "side_by_side": side_by_side(eval_sets.DATA, args),
    }
    command = "python -m benchmarks.stem_heads " + " ".join(sys.argv[1:])
    eval_sets.write_results(args.out, "stem_heads", payload, report(payload, command.strip()))
    print((args.out / "stem_heads.md").read_text())
    if max(counts) > STEM_REWRITE or any(row["differ"] for row in payload["side_by_side"].values()):
        sys.exit(1)  # the bound the snippets rest on does not hold on this data


if __name__ == "__main__":
    main()
