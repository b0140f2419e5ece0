#!/usr/bin/env bash
# The ablation of docs/experiments/README.md: on Cranfield, 5 folds, the same candidates (BM25 top 30) and model (MiniLM),
# qrels only (the recipe of earlier releases) / + pseudo-queries / + teacher distillation (distill) / all (the
# default of earlier releases), each pure and interpolated with BM25, beside BM25 and the bi-encoder teacher, then
# the default recipe of rerank/configs/recipes/default.yaml (default); then the report.
# Resumable: rerun to finish (finished folds and cached stages are reused).
#   HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 IR_DATASETS_HOME=... bash scripts/studies/ablation/cranfield_ablation.sh runs/ablation
set -euo pipefail
OUT=${1:-runs/ablation}
RERANK=${RERANK:-rerank}
COMMON=(--trainer.enable_progress_bar false --last_checkpoint.every_n_train_steps 1000)
[ -f "$OUT/bi-encoder/teacher.trec" ] || $RERANK teacher --config cranfield.yaml --output_dir "$OUT/bi-encoder"
[ -f "$OUT/ensemble-teacher/teacher.trec" ] || $RERANK teacher --config cranfield.yaml --output_dir "$OUT/ensemble-teacher" \
    --teacher '{bi_encoder: sentence-transformers/all-MiniLM-L6-v2, first_stage_weight: 0.4}'
for VARIANT in qrels pseudo distill all; do
  $RERANK cv --config cranfield.yaml --config "$(dirname "$0")/configs/$VARIANT.yaml" --output_dir "$OUT/$VARIANT" "${COMMON[@]}"
done
$RERANK cv --config cranfield.yaml --output_dir "$OUT/default" "${COMMON[@]}"
$RERANK compare "$OUT/qrels" "$OUT/pseudo" "$OUT/distill" "$OUT/all" "$OUT/default" "$OUT/bi-encoder/teacher.trec" \
    "$OUT/ensemble-teacher/teacher.trec" --config cranfield.yaml --output "$OUT/report"
