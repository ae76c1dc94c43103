#!/usr/bin/env bash
# Issue 12: calibrate and evaluate the teachers of scripts/train_stage1_tokenization.sh.
# Each teacher: the score temperature fitted on the first 1,000 en/dev sentences (as the
# workflow does), then gold-token and raw-text scores on the full en/dev (English rules),
# de/test and es/test (the target language's rules; the raw-text teacher also with
# spaCy's xx rules, the tokenizer the package had before). Results in runs/eval-*.json.
#   bash scripts/eval_stage1_tokenization.sh NAME [NAME ...]     (e.g. t-raw-s0 t-gold-s0)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=.venv/bin/python
for NAME in "$@"; do
  M=runs/$NAME/model-best
  $PY -m spacy_maral calibrate "$M" corpus/en-dev.spacy --limit 1000 --report "runs/calibration-$NAME.json"
  $PY -m spacy_maral evaluate corpus/en-dev.spacy "$NAME=$M" --lang en -o "runs/eval-$NAME-en.json" --reliability "runs/reliability-$NAME-en.png"
  for L in de es; do
    $PY -m spacy_maral evaluate corpus/$L-test.spacy "$NAME=$M" --lang $L -o "runs/eval-$NAME-$L.json" --reliability "runs/reliability-$NAME-$L.png"
    if [ "$NAME" != "${NAME#t-raw}" ]; then
      $PY -m spacy_maral evaluate corpus/$L-test.spacy "$NAME-xx=$M" --lang xx -o "runs/eval-$NAME-$L-xx.json"
    fi
  done
done
