#!/usr/bin/env bash
# Cost of KOLO_DETERMINISTIC=1 (docs/determinism.md): kolo-bench allreduce with and without the
# knob, alternating runs of the two so that load on the machine hits both alike, for each
# backend (shm, tcp) and rank count (2, 4). Prints, per size, the median time of each mode over
# the runs and the ratio deterministic / default.
#
#   bench/deterministic.sh [RUNS] [BUILD] [MIN] [MAX]   (defaults: 5, build, 1MiB, 64MiB)
# e.g. `bench/deterministic.sh 15 build 1KiB 512KiB` for the small messages (factor 4 between
# sizes).
set -euo pipefail
runs=${1:-5}
build=${2:-build}
min=${3:-1MiB}
max=${4:-64MiB}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for np in 2 4; do
  for backend in shm tcp; do
    for ((i = 0; i < runs; ++i)); do
      for mode in default deterministic; do
        knob=0
        [[ $mode == deterministic ]] && knob=1
        KOLO_DETERMINISTIC=$knob "$build/bin/kolorun" -np "$np" "$build/bin/kolo-bench" allreduce \
          --backend "$backend" -b "$min" -e "$max" -f 4 -n 10 -w 3 \
          --json "$tmp/$np-$backend-$mode-$i.json" >/dev/null
      done
    done
  done
done
python3 - "$tmp" "$runs" <<'PY'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
print(f"{'ranks':>5} {'backend':>7} {'size(B)':>10} {'default(us)':>12} {'determ.(us)':>12} {'ratio':>6}")
for np in (2, 4):
    for backend in ("shm", "tcp"):
        times = {}
        for mode in ("default", "deterministic"):
            for i in range(runs):
                for row in json.load(open(f"{tmp}/{np}-{backend}-{mode}-{i}.json")):
                    times.setdefault((row["size_bytes"], mode), []).append(row["time_us"])
        for size in sorted({s for s, _ in times}):
            d = statistics.median(times[(size, "default")])
            k = statistics.median(times[(size, "deterministic")])
            print(f"{np:>5} {backend:>7} {size:>10} {d:>12.1f} {k:>12.1f} {k / d:>6.2f}")
PY
