#!/usr/bin/env bash
# The main job's training throughput with and without KOLO_DETERMINISTIC=1 (docs/determinism.md,
# "Cost"): train_fashion_mnist, 1 epoch on a subset, 2 ranks on shm and on tcp, the two modes
# alternating so that load on the machine hits both alike. Prints each mode's median of the
# epoch's "samples/s (global)" over the runs and the ratio deterministic / default. Under
# kolorun each rank gets OPENBLAS_NUM_THREADS = its share of the CPUs by default; deterministic
# mode fixes one BLAS thread per rank, so on a host with more cores than ranks the ratio also
# shows what that costs.
#
#   bench/deterministic_throughput.sh [RUNS] [BUILD] [SUBSET]   (defaults: 5, build, 6400)
set -euo pipefail
runs=${1:-5}
build=${2:-build}
subset=${3:-6400}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%5s %7s %14s %14s %6s\n' ranks backend "default(s/s)" "determ.(s/s)" ratio
for backend in shm tcp; do
  : >"/tmp/kolo_dt_$$_0" && : >"/tmp/kolo_dt_$$_1"
  for ((i = 0; i < runs; ++i)); do
    for knob in 0 1; do
      KOLO_DETERMINISTIC=$knob KOLO_CPU_OPERATIONS=$backend "$build/bin/kolorun" -np 2 \
        "$build/bin/train_fashion_mnist" --epochs 1 --train-subset "$subset" --test-subset 500 \
        2>&1 | grep -o '[0-9]* samples/s (global' | awk '{print $1}' | head -1 >>"/tmp/kolo_dt_$$_$knob"
    done
  done
  d=$(median <"/tmp/kolo_dt_$$_0")
  k=$(median <"/tmp/kolo_dt_$$_1")
  rm -f "/tmp/kolo_dt_$$_0" "/tmp/kolo_dt_$$_1"
  printf '%5s %7s %14s %14s %6.2f\n' 2 "$backend" "$d" "$k" "$(echo "$k / $d" | bc -l)"
done
