#!/usr/bin/env bash
# Prepares .gpu/ (ignored by git, at most 64 MiB) with what scripts/benchmarks/bench_gpu.py needs on a lent GPU machine,
# which reaches neither PyPI nor the Hugging Face hub and runs Python 3.12 with torch, transformers, lightning and
# sentence-transformers of its own: the wheels rerank imports beyond those (datasets, dill and multiprocess read
# collections from local files: the H200 image of 2026-11-25 had pyarrow but not these), MiniLM in half precision
# (45 MB instead of 91; the convergence part compares two precisions from the same start, so the rounding is
# shared), and Cranfield's files of the ir_datasets cache. Run here, once:
#   HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 IR_DATASETS_HOME=~/.cache/rerank/irds_home bash scripts/benchmarks/gpu_prepare.sh
# then on the device, with .gpu carried (see the docstring of scripts/benchmarks/bench_gpu.py for the command).
set -euo pipefail
OUT=${1:-.gpu}
PY=${PYTHON:-.venv/bin/python}
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/irds_home"
PLATFORMS=()
for N in 2_28 2_27 2_17 2014 1; do PLATFORMS+=(--platform "manylinux${N/#2_/_2_}_x86_64"); done
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d "$OUT/wheels" \
    "jsonargparse==4.53.0" "docstring-parser==0.18.0" "typeshed-client==2.14.0" "pytrec-eval-terrier==0.5.11" \
    "ir_datasets==0.6.3" "lz4==4.4.5" "bm25s==0.3.16" "PyStemmer==3.1.0" "allRank==1.4.3" \
    "datasets==5.2.0" "dill==0.4.1" "multiprocess==0.70.19"
"$PY" - "$OUT/minilm" <<'PYTHON'
import sys
import torch
from transformers import AutoModel, AutoTokenizer

name = "sentence-transformers/all-MiniLM-L6-v2"
AutoModel.from_pretrained(name).to(torch.float16).save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(name).save_pretrained(sys.argv[1])
PYTHON
cp -r "${IR_DATASETS_HOME:?set IR_DATASETS_HOME to a copy of the ir_datasets cache}/cranfield" "$OUT/irds_home/"
du -sh "$OUT" "$OUT"/*
