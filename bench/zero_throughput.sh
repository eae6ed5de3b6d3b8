#!/usr/bin/env bash
# The main job's training throughput with ZeRO stages 1 and 2 against unsharded (docs/zero.md,
# section 4; issue 28's step-time goal): train_fashion_mnist, 1 epoch on a subset, --shard 0, 1
# and 2 alternating within each round so that load on the machine hits the three alike, on shm
# and tcp, 2 and 4 ranks. Prints each mode's median "samples/s (global)" over the rounds and the
# step-time ratios sharded / unsharded (unsharded samples/s over sharded samples/s).
#
#   bench/zero_throughput.sh [RUNS] [BUILD] [SUBSET] [RANKS...]   (defaults: 5, build, 25600, 2 4)
set -euo pipefail
runs=${1:-5}
build=${2:-build}
subset=${3:-25600}
shift $(($# < 3 ? $# : 3))
ranks_list=("$@")
[[ ${#ranks_list[@]} -eq 0 ]] && ranks_list=(2 4)
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%5s %7s %12s %12s %12s %9s %9s\n' ranks backend "shard0(s/s)" "shard1(s/s)" "shard2(s/s)" \
  "t1/t0" "t2/t0"
for np in "${ranks_list[@]}"; do
  for backend in shm tcp; do
    for ((i = 0; i < runs; ++i)); do
      for shard in 0 1 2; do
        KOLO_CPU_OPERATIONS=$backend "$build/bin/kolorun" -np "$np" \
          "$build/bin/train_fashion_mnist" --epochs 1 --train-subset "$subset" --test-subset 500 \
          --shard "$shard" 2>&1 | grep -o '[0-9]* samples/s (global' | awk '{print $1}' |
          head -1 >>"$tmp/$shard"
      done
    done
    s0=$(median <"$tmp/0") s1=$(median <"$tmp/1") s2=$(median <"$tmp/2")
    rm -f "$tmp"/?
    printf '%5s %7s %12s %12s %12s %9.3f %9.3f\n' "$np" "$backend" "$s0" "$s1" "$s2" \
      "$(echo "$s0 / $s1" | bc -l)" "$(echo "$s0 / $s2" | bc -l)"
  done
done
