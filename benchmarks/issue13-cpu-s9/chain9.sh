#!/usr/bin/env bash
# Session 9: ST-W seeds 1 and 2, two at a time, then their evaluations (ST-W only).
cd /work/main
L=runs/issue13/logs
for S in 1 2; do
  bash scripts/seed_runs.sh student $S de ST-W > $L/ST-W-s$S-de.log 2>&1 &
  A=$!
  bash scripts/seed_runs.sh student $S es ST-W > $L/ST-W-s$S-es.log 2>&1 &
  B=$!
  wait $A; echo "de s$S rc=$?" >> $L/chain9.status
  wait $B; echo "es s$S rc=$?" >> $L/chain9.status
done
for S in 1 2; do
  for LANG_ in de es; do
    THREADS=2 VARIANTS=ST-W bash scripts/seed_runs.sh evaluate $S $LANG_ > $L/evaluate-s$S-$LANG_-ST-W.log 2>&1
    echo "eval s$S $LANG_ rc=$?" >> $L/chain9.status
  done
done
echo done >> $L/chain9.status
