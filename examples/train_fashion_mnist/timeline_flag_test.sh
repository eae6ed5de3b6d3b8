#!/usr/bin/env bash
# --timeline and KOLO_TIMELINE together: a warning on each rank, the flag's files with every
# operation (and the cycle markers KOLO_TIMELINE_MARK_CYCLES asks for), and the variable's files
# ended at init, before the first operation (the program asks only Kolo's public API, and
# KOLO_TIMELINE has started its trace by the time the program learns of it).
# Usage: timeline_flag_test.sh KOLORUN TRAIN_FASHION_MNIST
set -u
kolorun=$1 train=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$(KOLO_TIMELINE="$dir/env.json" KOLO_TIMELINE_MARK_CYCLES=1 OPENBLAS_NUM_THREADS=1 \
  "$kolorun" -np 2 "$train" --model mlp --epochs 1 --train-subset 640 --test-subset 100 \
  --timeline "$dir/flag.json" 2>&1)
rc=$?
[ $rc = 77 ] && exit 77  # no dataset
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
[ $rc = 0 ] || fail "exit code $rc"
warnings=$(grep -c "warning: --timeline $dir/flag.json replaces the trace that KOLO_TIMELINE started, which ends here" <<<"$out")
[ "$warnings" = 2 ] || fail "expected the warning once per rank, got $warnings"
for r in 0 1; do
  env_trace=$dir/env.rank$r.json flag_trace=$dir/flag.rank$r.json
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$env_trace" ||
    fail "KOLO_TIMELINE's trace of rank $r is not closed JSON"
  grep -q '"name":"ALLREDUCE"' "$env_trace" && fail "KOLO_TIMELINE's trace of rank $r has operations"
  grep -q '"name":"ALLREDUCE"' "$flag_trace" || fail "rank $r's --timeline trace has no allreduce"
  grep -q '"name":"CYCLE_START"' "$flag_trace" || fail "rank $r has no cycle markers"
done
echo "timeline flag: OK"
