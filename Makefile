# Two entry points for a fresh machine (see README.md): `make run` and `make test`.
# Both create ./.venv on first use, install what they need into it, and are cheap to repeat.
#
#   TORCH_SPEC   the PyTorch requirement (default: the CPU build this project is developed on)
#   TORCH_INDEX  a package index for it, e.g. https://download.pytorch.org/whl/cu130 for a CUDA build
#   PYTHON       the interpreter that creates the environment
#   SHARED       read-only caches seeded for offline use: hf_home (MiniLM) and irds_home (ir_datasets)
#   OUTPUT       the run directory of `make run`

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
SHARED ?= ../shared
OUTPUT ?= runs/cranfield
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Seeded caches, when $(SHARED) has them: Hugging Face's is read in place (offline), ir_datasets' is copied once to
# a writable place, made writable (ir_datasets writes doc stores into its home). Without them, the normal downloads.
IRDS_HOME := $(HOME)/.cache/rerank/irds_home
CACHES := $(if $(wildcard $(SHARED)/hf_home),HF_HOME=$${HF_HOME:-$(abspath $(SHARED))/hf_home} HF_HUB_OFFLINE=1) \
          $(if $(wildcard $(SHARED)/irds_home),IR_DATASETS_HOME=$${IR_DATASETS_HOME:-$(IRDS_HOME)})

.PHONY: setup run test test-minimum bench-losses bench-serve bench-cpu

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[all]"
	# allRank is only a benchmark reference; it pins torch<=1.8, so it comes without its dependencies
	$(BIN)/python -m pip install --quiet --no-deps "allRank==1.4.3"
	touch $(STAMP)

setup: $(STAMP)

# The main job: train MiniLM on Cranfield with the default recipe (rerank/configs/recipes/default.yaml) at the demo's size
# (rerank/configs/recipes/demo.yaml: 128-token rows, a 500-step stage, about 12 minutes on 2 cores), test it, export it to
# $(OUTPUT)/model.
run: setup
	test -d $(IRDS_HOME) || ! test -d $(SHARED)/irds_home || (mkdir -p $(dir $(IRDS_HOME)) && cp -r $(SHARED)/irds_home $(IRDS_HOME) && chmod -R u+w $(IRDS_HOME))
	$(CACHES) $(BIN)/rerank fit --config cranfield.yaml --config demo.yaml --output_dir $(OUTPUT)

bench-losses: setup
	$(BIN)/python scripts/benchmarks/bench_losses.py --output outputs/bench_losses.json

# Serving under load (docs/experiments/benchmarks.md): `rerank serve` against `rerank predict` offline and against
# Infinity serving $(OUTPUT)/model (a `make run` export). Infinity pins libraries rerank cannot have (numpy<2,
# sentence-transformers<4), so it gets an environment of its own.
INFINITY_VENV ?= .venv-infinity
bench-serve: setup
	test -x $(INFINITY_VENV)/bin/python || $(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(INFINITY_VENV)/bin/python -m pip install --quiet "infinity-emb[server,torch]==0.0.78" "transformers<4.58"
	$(CACHES) $(BIN)/python scripts/benchmarks/bench_serve.py --model $(OUTPUT)/model --infinity $(INFINITY_VENV)/bin/python \
		--output outputs/bench_serve.json

# Scoring on a CPU (docs/experiments/benchmarks.md): rerank's float32, bf16 and int8 against sentence-transformers'
# torch, ONNX and OpenVINO backends on $(OUTPUT)/model (a `make run` export). Optimum, which those backends need,
# imports against transformers 4.x, so the run gets an environment of its own with rerank on the transformers it takes.
BACKENDS_VENV ?= .venv-backends
bench-cpu:
	test -x $(BACKENDS_VENV)/bin/python || $(PYTHON) -m venv $(BACKENDS_VENV)
	$(BACKENDS_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BACKENDS_VENV)/bin/python -m pip install --quiet -e ".[all]" "sentence-transformers[onnx,openvino]"
	$(CACHES) $(BACKENDS_VENV)/bin/python scripts/benchmarks/bench_cpu_scoring.py --model $(OUTPUT)/model \
		--config $(OUTPUT)/config.yaml --run $(OUTPUT)/first_stage.trec --queries 6 --repeats 2 \
		--json outputs/bench_cpu_scoring.json

# The tests, after the linter (ruff, configured in pyproject.toml).
test: setup
	$(BIN)/ruff check rerank tests scripts
	$(BIN)/python -m pytest

# The test suite on the lower bounds of pyproject.toml (.ci/minimum.txt), in a venv of its own.
MINIMUM_VENV ?= .venv-minimum
test-minimum:
	test -x $(MINIMUM_VENV)/bin/python || $(PYTHON) -m venv $(MINIMUM_VENV)
	$(MINIMUM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MINIMUM_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(MINIMUM_VENV)/bin/python -m pip install --quiet -c .ci/minimum.txt -e ".[all]"
	$(MINIMUM_VENV)/bin/python -m pip install --quiet --no-deps "allRank==1.4.3"
	$(MINIMUM_VENV)/bin/python -m pytest
