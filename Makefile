# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make demo   - environment, install, index the bundled samples, search them
#   make test   - environment, install, the default test suite
# CI (.ci/run) also runs `make test-ray`: the Ray engine against the local one on a small local
# cluster, after installing the `ray` extra into the same environment.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DB ?= .docsearch/demo
QUERY ?= when can either party terminate the agreement for cause

.PHONY: install demo test test-all test-browser test-ray lint bench clean

$(VENV)/.installed: pyproject.toml scripts/install.sh
	PYTHON=$(PYTHON) VENV=$(VENV) EXTRAS=test,dev,ui,ocr,office,onnx scripts/install.sh
	touch $@

install: $(VENV)/.installed

$(VENV)/.installed-ray: $(VENV)/.installed
	PYTHON=$(PYTHON) VENV=$(VENV) EXTRAS=test,dev,ui,ocr,office,onnx,ray scripts/install.sh
	touch $@

demo: install
	$(BIN)/docsearch index docsearch/corpora/samples --collection samples --db $(DEMO_DB)
	$(BIN)/docsearch search "$(QUERY)" --collection samples --db $(DEMO_DB) -k 3

test: install
	$(BIN)/python -m pytest -q

test-all: install
	$(BIN)/python -m pytest -q -m "not gpu"

test-browser: install
	$(BIN)/python -m pytest -q -m browser

# The Ray tests skip themselves where Ray is missing; here that must fail instead, hence the import.
test-ray: $(VENV)/.installed-ray
	$(BIN)/python -c "import ray, lance_ray"
	$(BIN)/python -m pytest -q -m ray

lint: install
	$(BIN)/ruff check docsearch tests benchmarks
	$(BIN)/ruff format --check docsearch tests benchmarks
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/speed.py

clean:
	rm -rf $(VENV) .docsearch .pytest_cache .mypy_cache .ruff_cache
