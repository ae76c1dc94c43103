#!/usr/bin/env bash
# Issue 13's seed runs on a lent GPU machine (benchmark tooling; see BENCHMARKS.md).
# The machine has Python 3.12 with torch, cupy, numpy, scipy, sklearn but no spaCy and
# no network: the software travels as .dev/site312.tar.xz (the pinned wheels, unpacked
# and stripped), the encoder as .dev/encoder (scripts/device/pack_encoder.py) and the
# data as .dev/data (converted corpora and the target training text). .dev must be
# git-ignored (.git/info/exclude) and named in the device call's carry. To build it:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl  spacy==3.8.18 \
#     thinc==8.3.14 blis cymem preshed murmurhash srsly catalogue confection wasabi weasel \
#     spacy-legacy spacy-loggers cloudpathlib smart_open pydantic pydantic_core annotated-types \
#     typing-inspection typing_extensions spacy-transformers==1.4.0 spacy-alignments \
#     transformers==4.53.2 tokenizers==0.21.4 huggingface_hub==0.36.2 faiss-cpu   (the .venv's versions)
#   unzip each wheel into one folder (plus spacy_maral's dist-info from `pip wheel --no-deps .`),
#   strip --strip-unneeded the .so files, drop tests/ and C sources, tar | xz > .dev/site312.tar.xz
#   python scripts/device/pack_encoder.py encoders/multilingual-e5-small .dev/encoder ../shared/data/conll/*/*.conll
#   cp corpus/{en-train,en-dev,de-test,es-test}.spacy .dev/data/; cp ../shared/data/conll/{de,es}/train.conll .dev/data/{de,es}/
# (about 61 MB in all, under the 64 MiB a call carries).
#
#   bash scripts/device/issue13_gpu.sh start BUDGET_S    set up, launch every run in the
#        background (setsid: it outlives the call while the machine stays warm), wait up
#        to BUDGET_S, then pack what is finished into $OUT/results.tar.gz
#   bash scripts/device/issue13_gpu.sh wait BUDGET_S     wait again (a later call), pack
#
# The runs: per seed (0, 1, 2, side by side) the teacher, pseudo-labels for de and es,
# then the six students (P, W, ST x de, es) side by side, then each language's test set
# read once by `evaluate` (teacher and the three students); at the end the paired
# bootstraps and tables of scripts/seed_report.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=$1; BUDGET=${2:-540}
T0=$(date +%s)
W=/tmp/issue13
export PYTHONPATH=$PWD:/tmp/site PY=${PY:-python3} GPU=${GPU:-0} DATA=.dev/data RUNS=$W/runs PYTHONUNBUFFERED=1
SEEDS=${SEEDS:-0 1 2}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRAIN_ARGS=${TRAIN_ARGS-"--system.gpu_allocator null"}

pack() {
  mkdir -p "$OUT"
  (cd $W && find runs -maxdepth 2 -type f \( -name "*.json" -o -name "*.jsonl" -o -name "*.png" \) -print0 \
     | tar czf "$OUT/results.tar.gz" --null -T - logs status.txt 2>/dev/null)
  cp $W/status.txt "$OUT/" 2>/dev/null
  tail -n 5 $W/logs/*.log > "$OUT/log_tails.txt" 2>/dev/null
  ls -la "$OUT"
}

wait_budget() {
  while [ ! -f $W/ALL_DONE ] && [ $(( $(date +%s) - T0 )) -lt "$BUDGET" ]; do
    sleep 10
    echo "$(( $(date +%s) - T0 ))s: $(cat $W/status.txt 2>/dev/null | tail -n 1) | gpu $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader) | load $(cut -d' ' -f1 /proc/loadavg)"
  done
}

run_logged() {  # NAME STEP ARGS...: one seed_runs.sh step, its failure written to status.txt
  local name=$1; shift
  bash scripts/seed_runs.sh "$@" > $W/logs/$name.log 2>&1 || echo "$(date +%T) $name FAILED" >> $W/status.txt
}

seed_job() {  # one seed, start to end
  local S=$1 L V
  bash scripts/seed_runs.sh teacher "$S" > $W/logs/teacher-s$S.log 2>&1 || { echo "teacher s$S FAILED" >> $W/status.txt; return; }
  echo "$(date +%T) teacher s$S done" >> $W/status.txt
  for L in de es; do run_logged pseudo-s$S-$L pseudo "$S" $L & done; wait
  echo "$(date +%T) pseudo s$S done" >> $W/status.txt
  for L in de es; do for V in P W ST; do run_logged $V-s$S-$L student "$S" $L $V & done; done; wait
  echo "$(date +%T) students s$S done" >> $W/status.txt
  for L in de es; do run_logged eval-s$S-$L evaluate "$S" $L & done; wait
  echo "$(date +%T) seed $S done" >> $W/status.txt
}

case "$MODE" in
start)
  rm -rf $W; mkdir -p $W/logs $W/runs /tmp/site corpus
  tar xJf .dev/site312.tar.xz -C /tmp/site || exit 1
  cp .dev/data/*.spacy corpus/
  python3 scripts/device/unpack_encoder.py .dev/encoder encoders/multilingual-e5-small || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import spacy, thinc, torch, cupy, spacy_transformers, transformers, faiss; from thinc.api import require_gpu; require_gpu(0); import thinc.api as t; print('spacy', spacy.__version__, 'thinc', thinc.__version__, 'torch', torch.__version__, 'cupy', cupy.__version__, 'transformers', transformers.__version__, t.get_current_ops())" || exit 1
  echo "$(date +%T) set up in $(( $(date +%s) - T0 ))s" > $W/status.txt
  setsid nohup bash scripts/device/issue13_gpu.sh run-all > $W/logs/driver.log 2>&1 < /dev/null &
  wait_budget; pack ;;
run-all)
  export THREADS=1
  for S in $SEEDS; do seed_job $S & done; wait
  # paired bootstraps of every student against the teacher and ST, and the tables
  $PY scripts/seed_report.py $RUNS --bootstrap > $RUNS/seed_report.md 2>> $W/logs/driver.log
  touch $W/ALL_DONE ;;
wait)
  wait_budget; pack ;;
esac
