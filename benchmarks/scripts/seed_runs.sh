#!/usr/bin/env bash
# The runs of the protocol (benchmarks/PROTOCOL.md), one step at a time, with the product
# workflow's commands and CoNLL budget. Models, logs and JSON go to $RUNS (git-ignored);
# nothing here reads a target test set except `evaluate`. Run from anywhere; paths are
# relative to benchmarks/ (this project's folder).
#
#   bash scripts/seed_runs.sh all "SEEDS" "LANGS"     everything below, in the protocol's order:
#                                                     corpora, then per seed the teacher, per
#                                                     language pseudo-labels and the students P,
#                                                     W, ST, ST-W, then each test set read once
#                                                     (`spacy project run protocol` runs this)
#   bash scripts/seed_runs.sh corpora "LANGS"         the product's `convert` (../project) for
#                                                     each target language -> $CORPUS
#   bash scripts/seed_runs.sh teacher SEED            stage 1 (1,800 steps), then calibrate
#   bash scripts/seed_runs.sh pseudo SEED LANG        the teacher labels LANG/train (first 4,000);
#                                                     ENSEMBLE="1 2": with the teachers of those
#                                                     seeds too (pseudo-label --ensemble)
#   bash scripts/seed_runs.sh student SEED LANG V     stage 2, V = P (paper: from the pretrained
#                                                     encoder), W (warm start from the teacher),
#                                                     ST (plain self-training) or ST-W (self-training
#                                                     warm-started from the teacher) or W2 (W with
#                                                     stage-2 seed SEED + 100: a soup's second
#                                                     ingredient); calibrate, guard.
#                                                     The score temperature: STUDENT_TEMPERATURE, or
#                                                     the workflow's rule (`calibrate --target-lang`)
#   bash scripts/seed_runs.sh soup SEED LANG         S: the mean of the weights of W and W2 of the
#                                                     seed (`average`), calibrated as a student
#   bash scripts/seed_runs.sh dev SEED LANG "V..."    DEV_LANG's dev set (the development set, for
#                                                     choices): the seed's students V (and
#                                                     `teacher`), raw text -> dev-sSEED-LANG.json
#   bash scripts/seed_runs.sh evaluate SEED LANG      LANG/test, read once: teacher and every
#                                                     student of the seed, raw text + gold tokens.
#                                                     VARIANTS="ST-W" evaluates only those students
#                                                     (no teacher) into eval-sSEED-LANG-ST-W.json
#
# Environment: RUNS (runs/protocol), DATA (the CoNLL folder, LANG/{train,dev,test}.conll:
# the Makefile's DATA; default ../project/sample, the sample corpus, for a smoke test),
# CORPUS (../project/corpus, where the product's convert writes), PY (the repository's .venv python),
# ENCODER (../project/encoders/multilingual-e5-small), GPU (-1), THREADS (1: torch threads
# a run); the budgets default to the protocol's (a smoke test may shrink them): STEPS1
# (1800), EVAL1 (450), STEPS2 (800), EVAL2 (200), TARGET_DOCS (800), EPOCHS2 (8),
# PSEUDO_LIMIT (4000), DEV_LIMIT (1000), TEST_LIMIT (0 = all). DEV_LANG (en): the language
# whose dev set ($CORPUS/DEV_LANG-dev.spacy) calibrates the scores, as the workflow's
# dev_lang (the amended protocol: es). STUDENT_TEMPERATURE (0, the workflow's): a student's
# score temperature; 0 is the workflow's rule, fitted on DEV_LANG's dev set when LANG is
# DEV_LANG, else 2.0 (benchmarks/PROTOCOL.md). TRAIN_ARGS: more
# `spacy train` overrides for both stages (e.g. "--system.gpu_allocator null").
# Stage-1 seed 0 may be an existing teacher: RUNS/teacher-s0 can be a link to it.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs/protocol}
DATA=${DATA:-../project/sample}
CORPUS=${CORPUS:-../project/corpus}
. "$(dirname "$SELF")/python.sh"  # PY
ENCODER=${ENCODER:-../project/encoders/multilingual-e5-small}
GPU=${GPU:--1}
THREADS=${THREADS:-1}
STEPS1=${STEPS1:-1800}; EVAL1=${EVAL1:-450}; STEPS2=${STEPS2:-800}; EVAL2=${EVAL2:-200}
TARGET_DOCS=${TARGET_DOCS:-800}; EPOCHS2=${EPOCHS2:-8}; PSEUDO_LIMIT=${PSEUDO_LIMIT:-4000}
DEV_LIMIT=${DEV_LIMIT:-1000}; TEST_LIMIT=${TEST_LIMIT:-0}; DEV_LANG=${DEV_LANG:-en}
STUDENT_TEMPERATURE=${STUDENT_TEMPERATURE:-0}
read -r -a TRAIN_EXTRA <<< "${TRAIN_ARGS:-}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
export PYTHONUNBUFFERED=1
mkdir -p "$RUNS"
STEP=$1; SEED=${2:-}
# the target text: LANG/train.conll (its tags unused), else LANG/train.txt
target_text() { if [ -f "$DATA/$1/train.conll" ]; then echo "$DATA/$1/train.conll"; else echo "$DATA/$1/train.txt"; fi; }

# the score map of a student of LANG, as the workflow stores it (calibrate --target-lang:
# Platt's map fitted on the development language for its own students, T = 2.0 for the others)
calibrate_student() {
  $PY -m spacy_maral calibrate "$1/model-last" "$CORPUS/$DEV_LANG-dev.spacy" --lang "$DEV_LANG" --limit "$DEV_LIMIT" \
    --report "$1.calibration.json" --gpu-id "$GPU" --temperature "$STUDENT_TEMPERATURE" --target-lang "$2" \
    --score-map "${STUDENT_SCORE_MAP:-platt}"
}

case "$STEP" in
all)
  SEEDS=$2; LANGS=$3
  bash "$SELF" corpora "$LANGS"
  for S in $SEEDS; do
    bash "$SELF" teacher "$S"
    for L in $LANGS; do
      bash "$SELF" pseudo "$S" "$L"
      for V in P W ST ST-W; do bash "$SELF" student "$S" "$L" "$V"; done
    done
    # the test sets of this seed, read once, after all its students have finished
    for L in $LANGS; do
      VARIANTS= bash "$SELF" evaluate "$S" "$L"
      VARIANTS=ST-W bash "$SELF" evaluate "$S" "$L"
    done
  done
  ;;
corpora)
  for L in $2; do
    $PY -m spacy project run convert ../project --vars.data_dir "$(realpath "$DATA")" --vars.target_lang "$L"
  done
  ;;
teacher)
  OUT=$RUNS/teacher-s$SEED
  $PY -m spacy_maral.bench measure "$RUNS/teacher-s$SEED.timing.json" -- $PY -m spacy train ../configs/source.cfg \
    --output "$OUT" --gpu-id "$GPU" --system.seed "$SEED" \
    --paths.train "$CORPUS/en-train.spacy" --paths.dev "$CORPUS/en-dev.spacy" --paths.encoder "$ENCODER" \
    --paths.log "$OUT.jsonl" --training.max_steps "$STEPS1" --training.eval_frequency "$EVAL1" --corpora.dev.limit "$DEV_LIMIT" "${TRAIN_EXTRA[@]}"
  $PY -m spacy_maral calibrate "$OUT/model-best" "$CORPUS/$DEV_LANG-dev.spacy" --lang "$DEV_LANG" --limit "$DEV_LIMIT" \
    --report "$OUT.calibration.json" --gpu-id "$GPU"
  ;;
pseudo)
  LANG_=$3
  MEMBERS=()
  for E in ${ENSEMBLE:-}; do MEMBERS+=(--ensemble "$RUNS/teacher-s$E/model-best"); done
  $PY -m spacy_maral.bench measure "$RUNS/pseudo-s$SEED-$LANG_.timing.json" -- $PY -m spacy_maral pseudo-label \
    "$RUNS/teacher-s$SEED/model-best" "$(target_text "$LANG_")" "$RUNS/pseudo-s$SEED-$LANG_" \
    --gpu-id "$GPU" --limit "$PSEUDO_LIMIT" --lang "$LANG_" "${MEMBERS[@]}"
  ;;
student)
  LANG_=$3; V=$4
  WARM=(--paths.init_from "$RUNS/teacher-s$SEED/model-best")
  SELF_TRAINING=(--components.maral_ner.adaptation.refine false --components.maral_ner.adaptation.use_anchors false)
  STAGE2_SEED=$SEED
  case "$V" in
    P) EXTRA=() ;;
    W2) EXTRA=("${WARM[@]}"); STAGE2_SEED=$((SEED + 100)) ;;
    W) EXTRA=("${WARM[@]}") ;;
    ST) EXTRA=("${SELF_TRAINING[@]}") ;;
    ST-W) EXTRA=("${SELF_TRAINING[@]}" "${WARM[@]}") ;;
    *) echo "unknown variant $V (P, W, W2, ST or ST-W)" >&2; exit 2 ;;
  esac
  OUT=$RUNS/$V-s$SEED-$LANG_
  $PY -m spacy_maral.bench measure "$OUT.timing.json" -- $PY -m spacy train ../configs/adapt.cfg --output "$OUT" \
    --gpu-id "$GPU" --system.seed "$STAGE2_SEED" \
    --paths.source "$CORPUS/en-train.spacy" --paths.target "$RUNS/pseudo-s$SEED-$LANG_" \
    --paths.dev "$CORPUS/en-dev.spacy" --paths.encoder "$ENCODER" --paths.log "$OUT.jsonl" \
    --paths.diagnostics "$OUT.diagnostics.jsonl" --paths.checkpoint "$OUT.checkpoint" \
    --corpora.train.max_target_docs "$TARGET_DOCS" --components.maral_ner.adaptation.n_epochs "$EPOCHS2" \
    --training.max_steps "$STEPS2" --training.eval_frequency "$EVAL2" --corpora.dev.limit "$DEV_LIMIT" \
    --nlp.tokenizer.lang "$LANG_" --corpora.train.source_lang en "${EXTRA[@]}" "${TRAIN_EXTRA[@]}"
  calibrate_student "$OUT" "$LANG_"
  $PY -m spacy_maral guard "$RUNS/teacher-s$SEED/model-best" "$OUT/model-last" "$CORPUS/en-dev.spacy" \
    "$(target_text "$LANG_")" --output "$OUT.guard.json" --source-lang en --target-lang "$LANG_" \
    --dev-limit "$DEV_LIMIT" --gpu-id "$GPU"
  ;;
soup)
  LANG_=$3; OUT=$RUNS/S-s$SEED-$LANG_
  $PY -m spacy_maral.bench measure "$OUT.timing.json" -- $PY -m spacy_maral average \
    "$RUNS/W2-s$SEED-$LANG_/model-last" "$RUNS/W-s$SEED-$LANG_/model-last" --output "$OUT/model-last"
  calibrate_student "$OUT" "$LANG_"
  ;;
dev)
  LANG_=$3; MODELS=()
  for V in $4; do
    if [ "$V" = teacher ]; then MODELS+=("teacher=$RUNS/teacher-s$SEED/model-best")
    else MODELS+=("$V=$RUNS/$V-s$SEED-$LANG_/model-last"); fi
  done
  $PY -m spacy_maral evaluate "$CORPUS/$DEV_LANG-dev.spacy" "${MODELS[@]}" --lang "$DEV_LANG" --gpu-id "$GPU" \
    -o "$RUNS/dev-s$SEED-$LANG_.json"
  ;;
evaluate)
  LANG_=$3
  if [ -n "${VARIANTS:-}" ]; then
    MODELS=(); NAME=eval-s$SEED-$LANG_-${VARIANTS// /-}
  else
    MODELS=("teacher=$RUNS/teacher-s$SEED/model-best"); NAME=eval-s$SEED-$LANG_; VARIANTS="P W ST"
  fi
  for V in $VARIANTS; do
    if [ -d "$RUNS/$V-s$SEED-$LANG_/model-last" ]; then MODELS+=("$V=$RUNS/$V-s$SEED-$LANG_/model-last")
    else echo "note: $RUNS/$V-s$SEED-$LANG_/model-last is missing; not evaluated" >&2; fi
  done
  $PY -m spacy_maral evaluate "$CORPUS/$LANG_-test.spacy" "${MODELS[@]}" --lang "$LANG_" --gpu-id "$GPU" --limit "$TEST_LIMIT" \
    -o "$RUNS/$NAME.json" --reliability "$RUNS/reliability-${NAME#eval-}.png"
  ;;
*)
  echo "unknown step $STEP" >&2; exit 2 ;;
esac
