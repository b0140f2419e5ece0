# Two entry points for a fresh machine (see README.md): `make run` and `make test`.
# Both create ./.venv on first use, install what they need into it, and are cheap to repeat.
#
#   TORCH_SPEC   the PyTorch requirement (default: the CPU build this project is developed on)
#   TORCH_INDEX  a package index for it, e.g. https://download.pytorch.org/whl/cu124 for a CUDA build
#   PYTHON       the interpreter that creates the environment

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test bench-losses

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[all]"
	# allRank is only a benchmark reference; it pins torch<=1.8, so it comes without its dependencies
	$(BIN)/python -m pip install --quiet --no-deps "allRank==1.4.3"
	touch $(STAMP)

setup: $(STAMP)

# The main job. Until training lands, it is the loss benchmark (scripts/bench_losses.py).
run: bench-losses

bench-losses: setup
	$(BIN)/python scripts/bench_losses.py --output outputs/bench_losses.json

test: setup
	$(BIN)/python -m pytest
