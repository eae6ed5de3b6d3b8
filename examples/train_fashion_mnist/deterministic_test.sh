#!/usr/bin/env bash
# Deterministic mode end to end (docs/determinism.md, "The main job"): the main job under
# kolorun --deterministic prints one parameter checksum (--print-checksum, SHA-256) per rank
# count, whatever the backend (tcp, shm), fusion threshold (0, 64 MiB), bucket size (0, 4 MiB),
# random delays before each submission (KOLO_TEST_SUBMIT_DELAY) and OpenBLAS's own thread
# count (OPENBLAS_NUM_THREADS 1, 2 or unset: deterministic mode fixes it, so the framework's
# kernels are part of the contract). The control: without the knob, 4 ranks on tcp with fusion
# 0 and 64 MiB give different checksums (the ring's association follows the fusion buffer).
# Fusion 0 gave one checksum in every run seen; 64 MiB a different one in each (which tensors
# share a buffer follows timing), never fusion 0's: that would need a run with no fusion at all.
# Usage: deterministic_test.sh KOLORUN TRAIN_FASHION_MNIST
set -u
kolorun=$1 train=$2
unset OPENBLAS_NUM_THREADS KOLO_DETERMINISTIC KOLO_FUSION_THRESHOLD KOLO_CPU_OPERATIONS
common=(--epochs 1 --train-subset 640 --test-subset 100 --batch-size 32 --print-checksum)
fail() { echo "FAIL: $*"; exit 1; }
# checksum LABEL ENV... -- KOLORUN_FLAGS... -- JOB_FLAGS...: prints the one checksum the job
# printed; 77 (no data set) skips the test.
checksum() {
  local label=$1 envs=() flags=() job=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  job=("$@")
  local out rc
  out=$(env "${envs[@]}" timeout 240 "$kolorun" "${flags[@]}" "$train" "${common[@]}" \
        "${job[@]}" 2>&1)
  rc=$?
  [ $rc = 77 ] && exit 77
  [ $rc = 0 ] || { echo "$out" >&2; fail "$label: exit code $rc"; }
  local sums
  sums=$(echo "$out" | grep "parameters sha256" | awk '{print $NF}' | sort -u)
  [ "$(echo "$sums" | wc -w)" = 1 ] || { echo "$out" >&2; fail "$label: no single checksum"; }
  echo "$sums"
}
# agree NP BACKEND: every deterministic configuration of NP ranks on BACKEND gives one checksum.
declare -A want
agree() {
  local np=$1 be=$2 label sum
  local d=(KOLO_CPU_OPERATIONS="$be")
  local -a configs=(
    "plain|OPENBLAS_NUM_THREADS=1|--bucket-size 0"
    "fusion 0, OpenBLAS 2 threads|OPENBLAS_NUM_THREADS=2 KOLO_FUSION_THRESHOLD=0|--bucket-size 0"
    "fusion 64MiB, OpenBLAS default|KOLO_FUSION_THRESHOLD=64MiB|--bucket-size 0"
    "bucket 4MiB|OPENBLAS_NUM_THREADS=1|--bucket-size 4MiB"
    "submit delays up to 2ms|KOLO_TEST_SUBMIT_DELAY=2ms|--bucket-size 0")
  for c in "${configs[@]}"; do
    IFS='|' read -r label envs jobflags <<<"$c"
    # shellcheck disable=SC2086
    sum=$(checksum "np=$np $be $label" "${d[@]}" $envs -- -np "$np" --deterministic -- \
          $jobflags) || exit $?
    echo "np=$np $be deterministic, $label: $sum"
    [ -z "${want[$np]:-}" ] && want[$np]=$sum
    [ "$sum" = "${want[$np]}" ] || fail "np=$np $be $label: $sum, expected ${want[$np]}"
  done
}
agree 2 tcp
agree 2 shm
agree 4 tcp
agree 4 shm
a=$(checksum "control fusion 0" KOLO_CPU_OPERATIONS=tcp KOLO_FUSION_THRESHOLD=0 \
    OPENBLAS_NUM_THREADS=1 -- -np 4 -- --bucket-size 0) || exit $?
b=$(checksum "control fusion 64MiB" KOLO_CPU_OPERATIONS=tcp KOLO_FUSION_THRESHOLD=64MiB \
    OPENBLAS_NUM_THREADS=1 -- -np 4 -- --bucket-size 0) || exit $?
echo "np=4 tcp without the knob: fusion 0 $a, fusion 64MiB $b"
[ "$a" != "$b" ] || fail "the control did not differ: the test no longer shows what the knob does"
echo "PASS"
