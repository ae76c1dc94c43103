#!/bin/bash
# The runs behind snapavg_screen.py (benchmarks/PROTOCOL.md, "Candidates SNAPAVG and
# T-POOL"): on a finished `make conll TARGETS=fi,es` project, each language's SNAPAVG
# (the mean of its student's snapshots from step 500 on and its model-last), calibrated
# and guarded as the workflow does its student, then the teacher, the student the workflow
# made (pick) and the mean (avg) scored on the language's dev set.
#
#   bash benchmarks/scripts/snapavg_screen.sh PROJECT SEED DEV_DATA OUT [LANG ...]
#
# PROJECT: the run's project folder; SEED: its stage-2 seed (STUDENT_SEED); DEV_DATA: a
# CoNLL folder with LANG/dev.conll (Spanish is scored on its sentences 1,001 on, the ones
# neither DEVSEL nor Platt's map read) and LANG/train.conll (the guard's target text);
# OUT: the screen folder (project: PROJECT's path; avg-LANG/, avg-LANG-calibration.json, guard-avg-LANG.json,
# LANG-dev.json with its per-sentence counts). LANG: fi es by default. PY: the Python
# (python.sh: the repository's .venv by default).
set -euo pipefail
PROJECT=$1; SEED=$2; DATA=$(realpath "$3"); OUT=$(realpath -m "$4"); shift 4
if [ $# -gt 0 ]; then LANGS=("$@"); else LANGS=(fi es); fi
. "$(dirname "${BASH_SOURCE[0]}")/python.sh"  # PY
mkdir -p "$OUT"
cd "$PROJECT"
pwd > "$OUT/project"  # where snapavg_screen.py finds the pick
for L in "${LANGS[@]}"; do
  RUN=training/adapt-$L/student-s$SEED
  DEV=$DATA/$L/dev.conll
  if [ "$L" = es ]; then  # the held-out part: sentences 1,001 on, as the corpus converter reads them
    DEV=$OUT/es-dev-held-out.conll
    "$PY" -c "import itertools, pathlib, sys
from spacy_maral.corpora.conll import read_conll
from spacy_maral.corpora.writer import docs_to_conll
pathlib.Path(sys.argv[2]).write_text(docs_to_conll(itertools.islice(read_conll(sys.argv[1]), 1000, None)), encoding='utf8')" "$DATA/es/dev.conll" "$DEV"
  fi
  echo "$(date -u +%T) $L: average"
  "$PY" -m spacy_maral average --snapshots "$RUN/snapshots" --from-step 500 "$RUN/model-last" --output "$OUT/avg-$L"
  "$PY" -m spacy_maral calibrate "$OUT/avg-$L" corpus/es-dev.spacy --lang es --limit 1000 \
    --report "$OUT/avg-$L-calibration.json" --gpu-id -1 --precision auto --temperature 0 --score-map platt --target-lang "$L"
  echo "$(date -u +%T) $L: guard"
  "$PY" -m spacy_maral guard training/teacher/model-best "$OUT/avg-$L" corpus/en-dev.spacy "$DATA/$L/train.conll" \
    --output "$OUT/guard-avg-$L.json" --source-lang en --target-lang "$L" --dev-limit 1000 --package-choice auto \
    --gpu-id -1 --precision auto --max-label-shift 0.2 --max-dev-drop 5.0 > "$OUT/guard-avg-$L.log" 2>&1 || true
  echo "$(date -u +%T) $L: evaluate on $(basename "$DEV")"
  "$PY" -m spacy_maral evaluate "$DEV" teacher=training/teacher/model-best "pick=training/student-$L/model" "avg=$OUT/avg-$L" \
    --output "$OUT/$L-dev.json" --lang "$L" --gpu-id -1 --precision auto > "$OUT/$L-dev.log" 2>&1
done
echo "$(date -u +%T) done"
