#!/usr/bin/env bash
# Issue 12: the teacher trained on the tokenization of the raw text (gold_preproc false,
# the English rules of spacy_maral.tokenizer.v1: configs/source.cfg as shipped) and on
# the gold CoNLL tokens (gold_preproc true), side by side, one CPU thread each, the
# workflow's CoNLL budget (1,800 steps), selected on en/dev. Logs and models in runs/
# and logs/ (git-ignored). Needs corpus/en-{train,dev}.spacy (python -m spacy_maral convert).
#   bash scripts/train_stage1_tokenization.sh [STEPS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-1800}
SEED=${2:-0}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs logs
COMMON=(--paths.train corpus/en-train.spacy --paths.dev corpus/en-dev.spacy
        --paths.encoder encoders/multilingual-e5-small --system.seed "$SEED"
        --training.max_steps "$STEPS" --training.eval_frequency $((STEPS / 4)) --corpora.dev.limit 1000)
/usr/bin/time -v -o "logs/t-raw-s$SEED.time" .venv/bin/python -m spacy train configs/source.cfg \
  --output "runs/t-raw-s$SEED" --paths.log "runs/t-raw-s$SEED.jsonl" "${COMMON[@]}" > "logs/t-raw-s$SEED.log" 2>&1 &
/usr/bin/time -v -o "logs/t-gold-s$SEED.time" .venv/bin/python -m spacy train configs/source.cfg \
  --output "runs/t-gold-s$SEED" --paths.log "runs/t-gold-s$SEED.jsonl" "${COMMON[@]}" \
  --corpora.train.gold_preproc true --corpora.dev.gold_preproc true > "logs/t-gold-s$SEED.log" 2>&1 &
wait
