#!/usr/bin/env bash
# The loss heads compared on Cranfield (docs/experiments/results.md): BM25, then 5-fold cross-validation of MiniLM with
# pairwise hinge, SmoothI-NDCG, SoftNDCG, LambdaRank and ListNet under one budget (rerank/configs/recipes/default.yaml at the
# demo's size, demo.yaml: rows of 128 tokens and a 500-step stage; 1 epoch, BM25 top 20), then the comparison
# report. Resumable: rerun to finish.
#   HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 IR_DATASETS_HOME=... bash scripts/studies/comparison/cranfield_comparison.sh runs/cv
set -euo pipefail
OUT=${1:-runs/cranfield-cv}
PY=${PYTHON:-python}
[ -f "$OUT/bm25/first_stage.trec" ] || $PY -m rerank bm25 --config cranfield.yaml --output_dir "$OUT/bm25"
BUDGET=(--data.first_stage.backend run --data.first_stage.run "$OUT/bm25/first_stage.trec" --data.rerank_depth 20
        --trainer.max_epochs 1 --last_checkpoint.every_n_train_steps 1000
        --trainer.enable_progress_bar false)
for LOSS in hinge smoothi_ndcg softndcg lambdarank listnet; do
  $PY -m rerank cv --config cranfield.yaml --config demo.yaml --config "losses/$LOSS.yaml" --output_dir "$OUT/$LOSS" "${BUDGET[@]}"
done
$PY -m rerank compare "$OUT/hinge" "$OUT/smoothi_ndcg" "$OUT/softndcg" "$OUT/lambdarank" "$OUT/listnet" \
    --config cranfield.yaml --output "$OUT/report"
