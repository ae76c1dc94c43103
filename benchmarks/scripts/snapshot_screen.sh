#!/bin/bash
# A final run's student trained again with snapshots, each snapshot checked by the guard
# and scored on the target language's dev set: the runs behind stop_screen.py and
# mindrop_screen.py (benchmarks/PROTOCOL.md, "Candidate STOP" and "Candidate MINDROP").
#
#   bash benchmarks/scripts/snapshot_screen.sh PROJECT SEED LANG DATA OUT [EXTRA_MODEL=PATH ...]
#
# PROJECT: the final run's project folder (its teacher, pseudo-labels and student-LANG);
# SEED: its stage-2 seed; LANG: the target language; DATA: the CoNLL folder (LANG/train.conll
# for the guard's target text, LANG/dev.conll scored); OUT: the screen folder (adapt/,
# snapshots/, guard/sSTEP.json, LANG-dev.json). EXTRA_MODEL=PATH: more pipelines scored
# beside them (e.g. fallback=training/fallback-fi/model). PY: the Python (python.sh: the
# repository's .venv by default).
set -euo pipefail
PROJECT=$1; SEED=$2; L=$3; DATA=$4; OUT=$(realpath -m "$5"); shift 5
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"  # PY
mkdir -p "$OUT/guard"
cd "$PROJECT"
echo "$(date -u +%T) train seed $SEED ($L)"
"$PY" -m spacy_maral train-students ../configs/adapt.cfg "$OUT/adapt" --seeds "$SEED" --gpu-id -1 \
  --paths.source corpus/en-train.spacy --paths.target "corpus/$L-pseudo" --paths.dev corpus/en-dev.spacy \
  --paths.encoder encoders/multilingual-e5-small --corpora.train.max_target_docs 800 \
  --components.maral_ner.adaptation.n_epochs 8 --training.max_steps 800 --training.eval_frequency 200 \
  --corpora.dev.limit 1000 --nlp.tokenizer.lang "$L" --corpora.train.source_lang en \
  --paths.init_from training/teacher/model-best --components.transformer.model.precision auto \
  --initialize.after_init.encoder_layers 0 --corpora.train.agreed_only false \
  --training.before_update.snapshot_dir "$OUT/snapshots" --training.before_update.snapshot_every 100
SNAPSHOTS=()
for step in 100 200 300 400 500 600 700; do SNAPSHOTS+=("s$step=$OUT/snapshots/step-$(printf %06d $step)"); done
SNAPSHOTS+=("s800=$OUT/adapt/student-s$SEED/model-last")
for m in "${SNAPSHOTS[@]}"; do
  echo "$(date -u +%T) guard ${m%%=*}"
  "$PY" -m spacy_maral guard training/teacher/model-best "${m#*=}" corpus/en-dev.spacy "$DATA/$L/train.conll" \
    --output "$OUT/guard/${m%%=*}.json" --source-lang en --target-lang "$L" --dev-limit 1000 --package-choice auto \
    --gpu-id -1 --precision auto --max-label-shift 0.2 --max-dev-drop 5.0 > "$OUT/guard/${m%%=*}.log" 2>&1
done
echo "$(date -u +%T) evaluate on $L/dev"
"$PY" -m spacy_maral evaluate "$DATA/$L/dev.conll" teacher=training/teacher/model-best "stored=training/student-$L/model" \
  "$@" "${SNAPSHOTS[@]}" --output "$OUT/$L-dev.json" --lang "$L" --gpu-id -1 --precision auto > "$OUT/$L-dev.log" 2>&1
echo "$(date -u +%T) done"
