#!/usr/bin/env bash
# Scaling efficiency of the main job: samples/s of N ranks / (N x samples/s of 1 rank).
#
#   bench/train_scaling.sh [-r ROUNDS] [-n RANKS] [-b BUILD_DIR] [-p] [-- train_fashion_mnist args]
#
# Runs 1-rank and N-rank trainings alternately, ROUNDS times each (alternation puts both runs
# under the same background load: on a shared VM that noise is larger than the effect), and
# prints every run's samples/s, the medians and their ratio. Fairness: one compute thread per
# rank in both runs (OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1), and the 1-rank run is confined to
# one CPU with taskset, as each rank of the N-rank run is by kolorun's default binding; so
# neither run gets a core for free. Default train args: one epoch on 30,000 training images.
# -p adds the machine's own limit to each round: RANKS independent 1-rank trainings at once, one
# per CPU (no communication), whose summed samples/s over RANKS x the lone run is what scaling
# could reach if Kolo cost nothing (cores that slow each other show up there, not in Kolo).
set -euo pipefail

rounds=5
ranks=2
build=build
pairs=0
while getopts "r:n:b:p" opt; do
  case "$opt" in
    r) rounds="$OPTARG" ;;
    n) ranks="$OPTARG" ;;
    b) build="$OPTARG" ;;
    p) pairs=1 ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
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

# Summed samples/s of RANKS independent 1-rank trainings started together, one per CPU.
independent_runs() {
  local dir cpus
  dir=$(mktemp -d)
  mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: *//' | tr ',' '\n' |
    awk -F- '{for (c = $1; c <= ($2 == "" ? $1 : $2); ++c) print c}')
  for ((r = 0; r < ranks; ++r)); do
    samples_per_second taskset -c "${cpus[r % ${#cpus[@]}]}" "$bin/kolorun" -np 1 \
      "$bin/train_fashion_mnist" "${train_args[@]}" > "$dir/$r" &
  done
  wait
  cat "$dir"/* | awk '{s += $1} END {print s}'
  rm -rf "$dir"
}

one=() many=() apart=()
for ((i = 1; i <= rounds; ++i)); do
  a=$(samples_per_second taskset -c "$first_cpu" "$bin/kolorun" -np 1 "$bin/train_fashion_mnist" "${train_args[@]}")
  b=$(samples_per_second "$bin/kolorun" -np "$ranks" "$bin/train_fashion_mnist" "${train_args[@]}")
  [[ -n "$a" && -n "$b" ]] || { echo "train_scaling: a run printed no samples/s" >&2; exit 1; }
  one+=("$a") many+=("$b")
  line="round $i: 1 rank $a samples/s, $ranks ranks $b samples/s"
  if ((pairs)); then
    c=$(independent_runs)
    apart+=("$c")
    line+=", $ranks independent 1-rank runs $c samples/s"
  fi
  echo "$line"
done
m1=$(printf '%s\n' "${one[@]}" | median)
mn=$(printf '%s\n' "${many[@]}" | median)
awk -v a="$m1" -v b="$mn" -v n="$ranks" \
  'BEGIN {printf "medians: 1 rank %.0f, %d ranks %.0f samples/s; scaling efficiency %.3f\n", a, n, b, b / (n * a)}'
if ((pairs)); then
  mc=$(printf '%s\n' "${apart[@]}" | median)
  awk -v a="$m1" -v c="$mc" -v b="$mn" -v n="$ranks" \
    'BEGIN {printf "independent runs: %.0f samples/s, %.3f of %d x 1 rank (the machine'"'"'s limit); Kolo at %.3f of them\n", c, c / (n * a), n, b / c}'
fi
