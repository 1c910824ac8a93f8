"""Can a collection's own pseudo-queries tell how much dense weight its short queries want?

    nice -n 10 python -m benchmarks.calibrate [--cache DIR] [--indexes DIR] [--pseudo 200]

For every corpus of the quality table (full size) and 250 seeded cases of irled2017-precedent
(Indian Supreme Court judgments: the domain of the maintainers' held-out catchphrase set),
through the real store of a MiniLM index (`--indexes`: quality.py's cache, shared): the four
hybrid legs of every real query (tuning and test roles as query_roles.py assigns them) and of
pseudo-queries the corpus yields itself (KINDS: a chunk's highest tf-idf words, the document's,
its subject terms, a sentence, its first line), whose own document is their one relevant
document. Legs are cached per query list in `--cache`. Scored offline: the short-query rule at
each dense share d (shipped: 0.4), the lexical rule, each leg alone and the product's default,
per corpus and query kind; the share each collection's pseudo-queries would pick, on its real
queries; and every (length threshold, short share, long rule) against the shipped one on
tuning queries, with each corpus group left out. Writes results/calibrate.{json,md}, keeping
the notes below its marker.
Not here: product code (nothing here is shipped; see the notes in the results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pickle
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import (  # noqa: E402
    DATA,
    DEFAULT_CACHE,
    RESULTS,
    TABLE,
    Group,
    cache_dir,
    load_group,
    machine,
    machine_lines,
    write_results,
)
from benchmarks.query_roles import Query, group_queries  # noqa: E402
from docsearch.corpora.beir import RetrievalSet, load_beir  # noqa: E402
from docsearch.evaluation import EvalIndex, ndcg_at_k  # noqa: E402
from docsearch.fusion import DOCUMENT_RULES, LONG_QUERY_WORDS, Fusion, aggregate  # noqa: E402
from docsearch.indexer.filters import ChunkFilter  # noqa: E402

ENCODER = "sentence-transformers"
POOL = 500
SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
KINDS = ("keywords", "catchphrases", "concepts", "concepts30", "sentence", "heading")
IRLED = Group("irled2017-precedent", (), max_docs=250)  # a seeded sample, judged or not
# The shipped hybrid rule (fusion.document_rule) as (length threshold, short rule, long rule), and
# the neighbours the length study holds it against.
SHIPPED_LENGTH = (LONG_QUERY_WORDS, "d=0.4", "lexical rule")
THRESHOLDS = (16, 24, 32, 40, 48, 64, 10**9)
LONG_RULES = ("lexical rule", "d=0.0", "d=0.1", "d=0.2", "d=0.3", "d=0.4")
STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers him his how i if in into is it its itself just me more most my
    no nor not now of off on once only or other our ours out over own same she should so some such
    than that the their theirs them then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours also
    said shall may upon whether within without one two three""".split()
)
WORD = re.compile(r"[^\W\d_]{3,}")
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def share_rule(d: float) -> Fusion:
    """The shipped short-query rule's legs with dense share `d` (0.4 is the shipped rule)."""
    lexical = 1.0 - d
    weights = {"doc_lexical": lexical / 3, "lexical": 2 * lexical / 3}
    weights |= {"doc_dense": d / 2, "dense": d / 2}
    return Fusion("zscore", weights, aggregate={"lexical": "lse@0.1"})


# ---------------------------------------------------------------------------------------------
# Pseudo-queries


def pseudo_queries(chunks: list[dict[str, Any]], count: int, seed: int) -> list[Query]:
    """Up to `count` pseudo-queries of each kind from a seeded sample of documents' chunks."""
    df: Counter[str] = Counter()  # chunks holding each word
    doc_words: dict[str, set[str]] = {}
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for row in chunks:
        words = set(WORD.findall(row["text"].lower()))
        df.update(words)
        doc_words.setdefault(row["path"], set()).update(words)
        by_doc.setdefault(row["path"], []).append(row)
    n = len(chunks)
    doc_df = Counter(w for words in doc_words.values() for w in words)
    rng = random.Random(seed)
    docs = sorted(by_doc)
    rng.shuffle(docs)
    out: list[Query] = []
    for doc in docs[:count]:
        rows = sorted(by_doc[doc], key=lambda r: r["ordinal"])
        chunk = rng.choice(rows)["text"]
        whole = " ".join(r["text"] for r in rows)
        texts = {
            "keywords": _keywords(chunk, df, n),
            "catchphrases": _keywords(whole, df, n, top=30),
            "concepts": _concepts(whole, doc_df, len(by_doc), 10),
            "concepts30": _concepts(whole, doc_df, len(by_doc), 30),
            "sentence": _sentence(chunk, rng),
            "heading": _heading(rows[0]["text"]),
        }
        for kind, text in texts.items():
            if text:
                out.append(Query(f"{kind}\0{doc}", kind, "pseudo", text, {doc: 1}))
    return out


def _keywords(text: str, df: Counter[str], n: int, top: int = 8) -> str:
    words = [w for w in WORD.findall(text.lower()) if w not in STOP]
    tf = Counter(words)
    score = {w: c * math.log(n / (1 + df[w])) for w, c in tf.items()}
    best = set(sorted(score, key=lambda w: (-score[w], w))[:top])
    seen: list[str] = []
    for w in words:
        if w in best and w not in seen:
            seen.append(w)
    return " ".join(seen) if len(seen) >= 3 else ""


def _concepts(text: str, doc_df: Counter[str], docs: int, top: int) -> str:
    """The document's most frequent words among those 2-20% of the collection's documents hold:
    its subject's terms rather than its names (what catchphrases read like)."""
    low, high = max(2, 0.02 * docs), 0.2 * docs
    words = [w for w in WORD.findall(text.lower()) if w not in STOP and low <= doc_df[w] <= high]
    best = [w for w, _ in sorted(Counter(words).items(), key=lambda x: (-x[1], x[0]))[:top]]
    return " ".join(best) if len(best) >= 3 else ""


def _sentence(text: str, rng: random.Random) -> str:
    fits = [s for s in SENTENCE.split(text) if 8 <= len(s.split()) < LONG_QUERY_WORDS]
    return rng.choice(fits).strip() if fits else ""


def _heading(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if 3 <= len(line.split()) <= 15 else ""


# ---------------------------------------------------------------------------------------------
# Legs through the real store


def legs_of(store: Any, encoder: Any, queries: list[Query]) -> list[dict[str, dict[str, float]]]:
    """Each query's four hybrid legs: {leg: {path: score}} as the retriever would fuse them."""
    flt = ChunkFilter()
    vectors = encoder.encode_queries([q.text for q in queries])
    out = []
    for q, vector in zip(queries, vectors, strict=True):
        bm25 = store.search_text(q.text, POOL, flt, text=False)
        near = store.search_vector(vector, POOL, flt, text=False)
        legs = {
            "lexical": aggregate(_per_path(bm25), "lse@0.1"),
            "lexical_sum5": aggregate(_per_path(bm25), "sum@5"),
            "dense": aggregate(_per_path(near), "max"),
            "doc_lexical": {
                d.path: d.score for d in store.search_documents_text(q.text, POOL, flt)
            },
            "doc_dense": {
                d.path: d.score for d in store.search_documents_vector(vector, POOL, flt)
            },
        }
        out.append(legs)
    return out


def _per_path(found: list[Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for one in found:
        out.setdefault(one.path, []).append(one.score)
    return out


def collect(name: str, index_set: Any, queries: list[Query], args: argparse.Namespace) -> dict:
    """{"queries", "legs"}: the real queries' and the pseudo-queries' legs, each cached under a
    hash of its query texts (so new pseudo-query kinds search only themselves)."""
    with EvalIndex(index_set, encoder=ENCODER, cache=args.indexes) as index:
        print(
            f"{name}: {index.chunks} chunks ({'cached' if index.cached else 'built'})",
            file=sys.stderr,
        )
        store = index.retriever().store
        chunks = store.rows(ChunkFilter(), ["path", "ordinal", "text"])
        fake = pseudo_queries(chunks, args.pseudo, seed=0)
        legs = []
        for part in (queries, fake):
            tag = hashlib.sha1(json.dumps([q.key + q.text for q in part]).encode()).hexdigest()
            path = args.cache / f"{name.replace('/', '_')}-{tag[:12]}.pkl"
            if not path.is_file():
                started = time.perf_counter()
                found = legs_of(store, index.encoder, part)
                print(
                    f"  {len(part)} queries: {time.perf_counter() - started:.0f} s", file=sys.stderr
                )
                path.write_bytes(pickle.dumps(found))
            legs += pickle.loads(path.read_bytes())
    return {"queries": queries + fake, "legs": legs}


# ---------------------------------------------------------------------------------------------
# Scoring


def ndcg10(scores: dict[str, float], qrels: dict[str, int]) -> float:
    return ndcg_at_k(sorted(scores, key=lambda k: (-scores[k], k)), qrels, 10)


def rules() -> dict[str, Any]:
    """The share rules, the lexical rule and whole-document BM25 alone, as functions of legs."""
    lexical = DOCUMENT_RULES["lexical"]
    out: dict[str, Any] = {f"d={d}": share_rule(d) for d in SHARES}
    out["lexical rule"] = lambda legs: lexical(
        {"doc_lexical": legs["doc_lexical"], "lexical": legs["lexical_sum5"]}
    )
    out["doc BM25"] = lambda legs: legs["doc_lexical"]
    for leg in ("lexical", "doc_dense", "dense"):  # the hybrid rule's other legs, each alone
        out[f"{leg} alone"] = lambda legs, leg=leg: legs[leg]
    return out


def default_name(words: int) -> str:
    """The rule the product's hybrid mode ranks a query of `words` words by."""
    threshold, short, long = SHIPPED_LENGTH
    return long if words >= threshold else short


@dataclass
class Scored:
    """One query's nDCG@10 under every rule of rules()."""

    dataset: str  # a real set, or a pseudo-query kind
    role: str  # tune, test or pseudo
    words: int
    ndcg: dict[str, float]


def score_all(saved: dict[str, Any]) -> list[Scored]:
    named = rules()
    return [
        Scored(
            q.dataset,
            q.role,
            len(q.text.split()),
            {name: ndcg10(rule(legs), q.qrels) for name, rule in named.items()},
        )
        for q, legs in zip(saved["queries"], saved["legs"], strict=True)
    ]


def score_table(scored: list[Scored]) -> dict[tuple[str, str], np.ndarray]:
    """{(dataset or kind, role[ long]): queries x (rules(), the product's default) nDCG@10}."""
    rows: dict[tuple[str, str], list[list[float]]] = {}
    for one in scored:
        long = one.words >= LONG_QUERY_WORDS
        per = [*one.ndcg.values(), one.ndcg[default_name(one.words)]]
        rows.setdefault((one.dataset, f"{one.role}{' long' if long else ''}"), []).append(per)
    return {key: np.asarray(v) for key, v in rows.items()}


def main() -> None:
    args = parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    table: dict[str, dict[tuple[str, str], np.ndarray]] = {}
    real: dict[str, list[Scored]] = {}
    for group in (*TABLE, IRLED):
        if args.corpora and group.corpus not in args.corpora.split(","):
            continue
        if group is IRLED:
            corpus = load_beir(DATA / IRLED.corpus, "test").corpus
            kept = random.Random(0).sample(sorted(corpus), IRLED.max_docs or len(corpus))
            index_set = RetrievalSet(IRLED.corpus, {d: corpus[d] for d in kept}, {}, {})
            queries: list[Query] = []
        else:
            index_set, _ = load_group(group, 100000, 100000)
            queries = group_queries(group, set(index_set.corpus))
        scored = score_all(collect(group.corpus, index_set, queries, args))
        table[group.corpus] = score_table(scored)
        real[group.corpus] = [one for one in scored if one.role != "pseudo"]
    from benchmarks.peers import NOTES, kept_notes

    payload = analyse(table) | {"length_rule": length_study(real)}
    info = machine()
    notes = kept_notes(args.out / "calibrate.md")
    text = markdown(payload, info) + f"\n{NOTES}\n{notes}"
    write_results(args.out, "calibrate", payload | {"machine": info}, text)


def length_study(real: dict[str, list[Scored]]) -> dict[str, Any]:
    """Every (threshold, short share, long rule) scored per set and role as its change from
    the shipped triple; the one with the best worst change over the sets' tuning queries
    (ties: best mean), on all corpora and leaving each corpus group out."""
    shorts = [f"d={d}" for d in SHARES if d <= 0.6]
    triples = [(t, s, lg) for t in THRESHOLDS for s in shorts for lg in LONG_RULES]
    by_set: dict[tuple[str, str], list[Scored]] = {}
    for corpus, scored in real.items():
        for one in scored:
            by_set.setdefault((f"{corpus}\0{one.dataset}", one.role), []).append(one)

    def mean(triple: tuple[int, str, str], key: tuple[str, str]) -> float:
        t, short, long = triple
        return float(np.mean([q.ndcg[short if q.words < t else long] for q in by_set[key]]))

    shipped = {key: mean(SHIPPED_LENGTH, key) for key in by_set}
    change = {tr: {key: mean(tr, key) - shipped[key] for key in by_set} for tr in triples}

    def pick(without: str | None) -> tuple[int, str, str]:
        tune = [k for k in by_set if k[1] == "tune" and not k[0].startswith(f"{without}\0")]
        return max(
            triples,
            key=lambda tr: (
                min(change[tr][k] for k in tune),
                float(np.mean([change[tr][k] for k in tune])),
                tr == SHIPPED_LENGTH,
            ),
        )

    def row(tr: tuple[int, str, str]) -> dict[str, Any]:
        return {
            "triple": list(tr),
            "change": {
                f"{k[0].split(chr(0))[1]}:{k[1]}": round(v, 4) for k, v in change[tr].items()
            },
        }

    chosen = pick(None)
    ranked = sorted(
        triples,
        key=lambda tr: -min(v for k, v in change[tr].items() if k[1] == "tune"),
    )
    return {
        "shipped": {f"{k[0].split(chr(0))[1]}:{k[1]}": round(v, 4) for k, v in shipped.items()},
        "chosen": row(chosen),
        "top": [row(tr) for tr in ranked if tr != chosen][:6],
        "lodo": {corpus: row(pick(corpus)) for corpus, scored in real.items() if scored},
    }


def analyse(table: dict[str, dict[tuple[str, str], np.ndarray]]) -> dict[str, Any]:
    means = {
        corpus: {
            f"{name}:{role}": m.mean(axis=0).round(4).tolist() for (name, role), m in t.items()
        }
        for corpus, t in table.items()
    }
    counts = {
        corpus: {f"{name}:{role}": len(m) for (name, role), m in t.items()}
        for corpus, t in table.items()
    }
    payload = {"rules": [*rules(), "default"], "means": means, "counts": counts}
    return payload | {"calibrated": calibrated(payload)}


SHIPPED = "d=0.4"


def calibrated(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pseudo-query kind and real short-query set: the share a collection's own short
    pseudo-queries of that kind pick (the shipped one unless another ranks them strictly
    better) and the real queries' nDCG@10 at it, beside the shipped rule's."""
    names = payload["rules"]
    shares = [n for n in names if n.startswith("d=")]
    out = []
    for corpus, rows in payload["means"].items():
        real = [k for k in rows if k.endswith((":tune", ":test"))]
        for kind in KINDS:
            pseudo = rows.get(f"{kind}:pseudo")
            if pseudo is None:
                continue
            at = {n: pseudo[names.index(n)] for n in shares}
            best = max(at.values())
            chosen = SHIPPED if at[SHIPPED] >= best else max(shares, key=lambda n: at[n])
            for key in sorted(real):
                values = rows[key]
                out.append(
                    {
                        "corpus": corpus,
                        "kind": kind,
                        "queries": key,
                        "chosen": chosen,
                        "calibrated": values[names.index(chosen)],
                        "shipped": values[names.index(SHIPPED)],
                    }
                )
    return out


def markdown(payload: dict[str, Any], info: dict[str, Any]) -> str:
    names = payload["rules"]
    shares = [i for i, name in enumerate(names) if name.startswith("d=")]
    lines = [
        "# Calibrating the dense share per collection from its own pseudo-queries",
        "",
        *machine_lines(info, "python benchmarks/calibrate.py"),
        "",
        "nDCG@10 of the short-query hybrid rule by dense share d (d = 0.4 is the shipped rule).",
        "",
        "| corpus | queries | n | " + " | ".join(names) + " | best d |",
        "|---|---|---|" + "---|" * len(names) + "---|",
    ]
    for corpus, rows in payload["means"].items():
        for key, values in sorted(rows.items()):
            best = names[max(shares, key=lambda i: values[i])]
            cells = " | ".join(f"{v:.4f}" for v in values)
            lines.append(
                f"| {corpus} | {key} | {payload['counts'][corpus][key]} | {cells} | {best} |"
            )
    lines += [
        "",
        "## Calibrated per collection: the share its own pseudo-queries pick, on real queries",
        "",
        "Short real queries (< 24 words) only; the shipped share is kept unless another ranks "
        "the collection's short pseudo-queries of that kind strictly better.",
        "",
        "| corpus | pseudo-queries | real queries | chosen | nDCG@10 calibrated | shipped d=0.4 "
        "| change |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in payload["calibrated"]:
        change = row["calibrated"] - row["shipped"]
        lines.append(
            f"| {row['corpus']} | {row['kind']} | {row['queries']} | {row['chosen']} | "
            f"{row['calibrated']:.4f} | {row['shipped']:.4f} | {change:+.4f} |"
        )
    return "\n".join(lines + length_lines(payload["length_rule"])) + "\n"


def _triple(row: dict[str, Any]) -> str:
    t, short, long = row["triple"]
    words = "never" if t >= 10**9 else f"{t}+ words"
    return f"short {short}, long ({words}) {long}"


def length_lines(study: dict[str, Any]) -> list[str]:
    sets = list(study["shipped"])
    tune = [k for k in sets if k.endswith(":tune")]
    lines = [
        "",
        "## The length rule re-chosen on the full corpora (real queries, tuning roles)",
        "",
        "Every (threshold, short share, long rule) scored as its change from the shipped one "
        f"({_triple({'triple': list(SHIPPED_LENGTH)})}); chosen by the best worst change over "
        "the sets' tuning queries, on all sets and leaving each corpus group out.",
        "",
        "| rule | worst tuning change | " + " | ".join(sets) + " |",
        "|---|---|" + "---|" * len(sets),
        "| shipped (nDCG@10) | | " + " | ".join(f"{study['shipped'][k]:.4f}" for k in sets) + " |",
    ]
    for label, row in [("chosen", study["chosen"])] + [("top", r) for r in study["top"]]:
        worst = min(row["change"][k] for k in tune)
        cells = " | ".join(f"{row['change'][k]:+.4f}" for k in sets)
        lines.append(f"| {label}: {_triple(row)} | {worst:+.4f} | {cells} |")
    for corpus, row in study["lodo"].items():
        cells = " | ".join(f"{row['change'][k]:+.4f}" for k in sets)
        lines.append(f"| without {corpus}: {_triple(row)} | | {cells} |")
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=cache_dir("calibrate"))
    parser.add_argument("--indexes", type=Path, default=DEFAULT_CACHE, help="quality.py's --cache")
    parser.add_argument("--pseudo", type=int, default=200, help="documents per corpus")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--corpora", help="comma-separated corpus groups (default: all)")
    return parser.parse_args()


if __name__ == "__main__":
    main()
