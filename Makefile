# Two entry points for a fresh machine: `make demo` (main job on the default model) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
DATA   ?= $(abspath $(CURDIR)/../shared/data/senteval)
OUT    ?= runs/demo
export SPARSECSE_DATA ?= $(DATA)
# local copies of hub models, found by name (paraphrase-MiniLM-L3-v2, a teacher of the shipped recipes)
export SPARSECSE_MODELS ?= $(abspath $(CURDIR)/../shared/models)
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-fast docs figures bench clean

install: $(VENV)/.installed

# torch==2.13.0 first: a CPU build that lies on disk here; the package itself only asks for torch>=2.1.
$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	touch $@

demo: install
	$(BIN)/sparsecse score --out $(OUT)/scores.safetensors --overwrite
	$(BIN)/sparsecse prune --scores $(OUT)/scores.safetensors --sparsity 0.02 --lambda 0.5 \
		--out $(OUT)/mask-s0.02-l0.5.safetensors --heatmap $(OUT)/head_importance.png --overwrite

test: install
	$(BIN)/lint-imports .importlinter --no-cache
	$(BIN)/python -m pytest -q -n 2 --durations=15

test-fast: install
	$(BIN)/python -m pytest -q -n 2 -m "not integration"

# The figures of the README, the guides, the results pages and the recipes' reached blocks, rewritten from the
# results store (docs/results/store); tests/test_figures_store.py fails when they differ.
figures: install
	$(BIN)/python scripts/figures_docs.py

# The documentation site: warnings are errors and every cross-reference must resolve (-W -n).
docs: install $(VENV)/.docs-installed
	rm -rf docs/_build docs/reference/generated
	$(BIN)/sphinx-build -W -n --keep-going -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

$(VENV)/.docs-installed: setup.cfg
	$(BIN)/pip install -q -e ".[test,docs]"
	touch $@

clean:
	rm -rf $(VENV) runs build *.egg-info docs/_build docs/reference/generated
