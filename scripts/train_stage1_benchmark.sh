#!/usr/bin/env bash
# Stage-1 benchmark of issue 2: maral_ner vs spaCy's `ner` on the same encoder, trained
# side by side on en/train (one CPU thread each, the same step budget), selected on
# en/dev. Logs and models go to runs/ (git-ignored). Usage:
#   bash scripts/train_stage1_benchmark.sh [MAX_STEPS] [EVAL_EVERY] [DEV_LIMIT]
#   bash scripts/train_stage1_benchmark.sh tau0 [MAX_STEPS]
#       maral_ner without the logit adjustment (loss tau = 0), for the margin comparison
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "tau0" ]; then
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
  exec /usr/bin/time -v -o logs/stage1-maral-tau0.time .venv/bin/python -m spacy train configs/source.cfg \
    --output runs/stage1-maral-tau0 --paths.train corpus/en-train.spacy --paths.dev corpus/en-dev.spacy \
    --paths.encoder encoders/multilingual-e5-small --training.max_steps "${2:-1800}" \
    --training.eval_frequency "${2:-1800}" --corpora.dev.limit 1000 --components.maral_ner.loss.tau 0 \
    --corpora.train.gold_preproc false --corpora.dev.gold_preproc false \
    > logs/stage1-maral-tau0.log 2>&1
fi
STEPS=${1:-1800}
EVAL=${2:-450}
DEVLIM=${3:-1000}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs logs
COMMON=(--paths.train corpus/en-train.spacy --paths.dev corpus/en-dev.spacy
        --paths.encoder encoders/multilingual-e5-small
        --training.max_steps "$STEPS" --training.eval_frequency "$EVAL" --corpora.dev.limit "$DEVLIM")
/usr/bin/time -v -o logs/stage1-maral.time .venv/bin/python -m spacy train configs/source.cfg \
  --output runs/stage1-maral "${COMMON[@]}" > logs/stage1-maral.log 2>&1 &
/usr/bin/time -v -o logs/stage1-ner.time .venv/bin/python -m spacy train configs/ner_baseline.cfg \
  --output runs/stage1-ner "${COMMON[@]}" > logs/stage1-ner.log 2>&1 &
wait
