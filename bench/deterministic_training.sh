#!/usr/bin/env bash
# The main job's parameter checksum (train_fashion_mnist --print-checksum: SHA-256, printed by
# rank 0) under KOLO_DETERMINISTIC=1 across fusion thresholds, bucket sizes, --autotune, tcp and
# shm, 2 and 4 ranks, and the control without the knob (docs/determinism.md). One line per
# configuration: the checksum it printed.
cd "$(dirname "$0")/.."
run() {  # label, env, kolorun flags, job flags
  local d
  d=$(env $2 OPENBLAS_NUM_THREADS=1 timeout 300 build/bin/kolorun $3 build/bin/train_fashion_mnist \
      --epochs 1 --train-subset 6400 --test-subset 1000 --print-checksum $4 2>&1 | grep "parameters sha256" | sort -u | awk '{print $NF}' | tr '\n' ' ')
  printf '%-58s %s\n' "$1" "$d"
}
for np in 2 4; do
  for be in tcp shm; do
    D="KOLO_DETERMINISTIC=1 KOLO_CPU_OPERATIONS=$be"
    run "np=$np $be det plain run 1 (bucket 0)" "$D" "-np $np" "--bucket-size 0"
    run "np=$np $be det plain run 2 (bucket 0)" "$D" "-np $np" "--bucket-size 0"
    for f in 0 64KiB 4MiB 64MiB; do
      run "np=$np $be det fusion $f (bucket 0)" "$D KOLO_FUSION_THRESHOLD=$f" "-np $np" "--bucket-size 0"
    done
    run "np=$np $be det bucket 4MiB" "$D" "-np $np" "--bucket-size 4MiB"
    run "np=$np $be det --autotune (bucket 0)" "$D" "-np $np --autotune" "--bucket-size 0"
  done
  for f in 0 64MiB; do
    run "np=$np tcp DEFAULT fusion $f (bucket 0)" "KOLO_CPU_OPERATIONS=tcp KOLO_FUSION_THRESHOLD=$f" "-np $np" "--bucket-size 0"
  done
done
