#!/usr/bin/env bash
# Cost of KOLO_REDUCTION=exact (docs/determinism.md, Note [Exact reduction] in ops/exact.cc):
# kolo-bench allreduce (float32 sum) in three modes, default, KOLO_DETERMINISTIC=1 and
# KOLO_REDUCTION=exact, alternating runs of the three so that load on the machine hits all
# alike, on 2 ranks for each backend (shm, tcp). Prints, per size, the median time of each mode
# over the runs and the ratios to default.
#
#   bench/exact.sh [RUNS] [BUILD] [MIN] [MAX] [NP]   (defaults: 5, build, 4KiB, 64MiB, 2)
set -euo pipefail
runs=${1:-5}
build=${2:-build}
min=${3:-4KiB}
max=${4:-64MiB}
np=${5:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
modes=(default deterministic exact)
for backend in shm tcp; do
  for ((i = 0; i < runs; ++i)); do
    for mode in "${modes[@]}"; do
      env=(KOLO_DETERMINISTIC=0 KOLO_REDUCTION=default)
      [[ $mode == deterministic ]] && env=(KOLO_DETERMINISTIC=1 KOLO_REDUCTION=default)
      [[ $mode == exact ]] && env=(KOLO_DETERMINISTIC=0 KOLO_REDUCTION=exact)
      env "${env[@]}" "$build/bin/kolorun" -np "$np" "$build/bin/kolo-bench" allreduce \
        --backend "$backend" -b "$min" -e "$max" -f 4 -n 5 -w 2 \
        --json "$tmp/$backend-$mode-$i.json" >/dev/null
    done
  done
done
python3 - "$tmp" "$runs" "$np" <<'PY'
import json, statistics, sys
tmp, runs, np = sys.argv[1], int(sys.argv[2]), sys.argv[3]
modes = ("default", "deterministic", "exact")
print(f"{'ranks':>5} {'backend':>7} {'size(B)':>10} {'default(us)':>12} {'determ.(us)':>12} "
      f"{'exact(us)':>12} {'det/def':>8} {'exact/def':>9}")
for backend in ("shm", "tcp"):
    times = {}
    for mode in modes:
        for i in range(runs):
            for row in json.load(open(f"{tmp}/{backend}-{mode}-{i}.json")):
                times.setdefault((row["size_bytes"], mode), []).append(row["time_us"])
    for size in sorted({s for s, _ in times}):
        d, k, e = (statistics.median(times[(size, m)]) for m in modes)
        print(f"{np:>5} {backend:>7} {size:>10.0f} {d:>12.1f} {k:>12.1f} {e:>12.1f} "
              f"{k / d:>8.2f} {e / d:>9.2f}")
PY
