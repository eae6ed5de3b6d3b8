#!/usr/bin/env bash
# --timeline and KOLO_TIMELINE together: a warning on each rank, the flag's files (with the cycle
# markers KOLO_TIMELINE_MARK_CYCLES asks for), and none of the variable's.
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
warnings=$(grep -c "warning: --timeline $dir/flag.json replaces KOLO_TIMELINE=$dir/env.json" <<<"$out")
[ "$warnings" = 2 ] || fail "expected the warning once per rank, got $warnings"
for r in 0 1; do
  [ -e "$dir/env.rank$r.json" ] && fail "KOLO_TIMELINE's file was written for rank $r"
  grep -q '"name":"CYCLE_START"' "$dir/flag.rank$r.json" || fail "rank $r has no cycle markers"
done
echo "timeline flag: OK"
