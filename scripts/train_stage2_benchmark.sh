#!/usr/bin/env bash
# Stage-2 benchmark runs of issue 3 (one CPU thread each, so two run side by side).
#   bash scripts/train_stage2_benchmark.sh label TEACHER LANG [LIMIT] [INFERENCE_TAU] [OUT]
#       pseudo-label the first LIMIT sentences of corpus/LANG-train.spacy -> OUT
#       (default runs/pseudo-LANG)
#   bash scripts/train_stage2_benchmark.sh train NAME LANG [STEPS] [TARGET_DOCS] [overrides...]
#       train a student on en-train + $PSEUDO (default runs/pseudo-LANG) -> runs/NAME
# Plain self-training: add --components.maral_ner.adaptation.refine false
#                          --components.maral_ner.adaptation.use_anchors false
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p runs logs
case "$1" in
  label)
    TEACHER=$2 L=$3 LIMIT=${4:-4000} TAU=${5:-1.5} OUT=${6:-runs/pseudo-$3}
    exec .venv/bin/python -m spacy_maral pseudo-label "$TEACHER" corpus/$L-train.spacy "$OUT" --limit "$LIMIT" --inference-tau "$TAU" ;;
  train)
    NAME=$2 L=$3 STEPS=${4:-1000} DOCS=${5:-2000}; shift 5 || shift $#
    EPOCHS=$(( (STEPS * 8 + DOCS - 1) / DOCS ))
    # evaluate 4 times, the last time at the last step: spaCy evaluates only at multiples of
    # eval_frequency, so with a frequency that does not divide STEPS the final model could
    # never be selected (session 4: 1,200 steps evaluated every 250)
    EVAL=$(( STEPS / 4 > 0 ? STEPS / 4 : 1 ))
    exec /usr/bin/time -v -o logs/$NAME.time .venv/bin/python -m spacy train configs/adapt.cfg --output runs/$NAME \
      --paths.source corpus/en-train.spacy --paths.target "${PSEUDO:-runs/pseudo-$L}" --paths.dev corpus/en-dev.spacy \
      --paths.encoder encoders/multilingual-e5-small --paths.diagnostics runs/$NAME/diagnostics.jsonl \
      --paths.checkpoint runs/$NAME/checkpoint --corpora.train.max_target_docs "$DOCS" \
      --components.maral_ner.adaptation.n_epochs "$EPOCHS" --training.max_steps "$STEPS" \
      --training.eval_frequency "$EVAL" --corpora.dev.limit 1000 "$@" ;;
  *) echo "usage: $0 label|train ..." >&2; exit 2 ;;
esac
