"""Benchmarks: the scripts that measure quality and speed, and write benchmarks/results/.

A package, so scripts share code by import (`from benchmarks.eval_sets import TABLE`). Run one
from the checkout as `python -m benchmarks.NAME ...` (or `python benchmarks/NAME.py ...`). Data
and caches come from options or the environment, never a machine's own paths: DOCSEARCH_EVAL_DATA
(the evaluation sets, default ../shared/data next to the checkout), DOCSEARCH_BENCH_CACHE (caches
and scratch folders, default .bench-cache/ in the checkout) and DOCSEARCH_EVAL_CACHE (the
evaluation indexes, default DOCSEARCH_BENCH_CACHE/eval). Ranking always goes through
docsearch.fusion; a faster twin of it (styles.py's weighted sums) is checked against it by a test.
"""
