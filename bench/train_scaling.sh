#!/usr/bin/env bash
# Scaling efficiency of the main job: samples/s of N ranks / (N x samples/s of 1 rank).
#
#   bench/train_scaling.sh [-r ROUNDS] [-n RANKS] [-b BUILD_DIR] [-- train_fashion_mnist args]
#
# Runs 1-rank and N-rank trainings alternately, ROUNDS times each (alternation puts both runs
# under the same background load: on a shared VM that noise is larger than the effect), and
# prints every run's samples/s, the medians and their ratio. Fairness: one compute thread per
# rank in both runs (OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1), and the 1-rank run is confined to
# one CPU with taskset, as each rank of the N-rank run is by kolorun's default binding; so
# neither run gets a core for free. Default train args: one epoch on 30,000 training images.
set -euo pipefail

rounds=5
ranks=2
build=build
while getopts "r:n:b:" opt; do
  case "$opt" in
    r) rounds="$OPTARG" ;;
    n) ranks="$OPTARG" ;;
    b) build="$OPTARG" ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
train_args=("$@")
[[ ${#train_args[@]} -eq 0 ]] && train_args=(--epochs 1 --train-subset 30000 --test-subset 1000)

bin="$build/bin"
for tool in kolorun train_fashion_mnist; do
  [[ -x "$bin/$tool" ]] || { echo "train_scaling: $bin/$tool not found (build first)" >&2; exit 2; }
done
first_cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# Prints the last epoch's global samples/s of one run.
samples_per_second() {
  "$@" 2>&1 | tr '\r' '\n' | sed -n 's/.* \([0-9][0-9]*\) samples\/s (global.*/\1/p' | tail -1
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

one=() many=()
for ((i = 1; i <= rounds; ++i)); do
  a=$(samples_per_second taskset -c "$first_cpu" "$bin/kolorun" -np 1 "$bin/train_fashion_mnist" "${train_args[@]}")
  b=$(samples_per_second "$bin/kolorun" -np "$ranks" "$bin/train_fashion_mnist" "${train_args[@]}")
  [[ -n "$a" && -n "$b" ]] || { echo "train_scaling: a run printed no samples/s" >&2; exit 1; }
  one+=("$a") many+=("$b")
  echo "round $i: 1 rank $a samples/s, $ranks ranks $b samples/s"
done
m1=$(printf '%s\n' "${one[@]}" | median)
mn=$(printf '%s\n' "${many[@]}" | median)
awk -v a="$m1" -v b="$mn" -v n="$ranks" \
  'BEGIN {printf "medians: 1 rank %.0f, %d ranks %.0f samples/s; scaling efficiency %.3f\n", a, n, b, b / (n * a)}'
