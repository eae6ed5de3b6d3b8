#!/usr/bin/env bash
# Two builds of Kolo side by side: `kolo-bench latency` and `kolo-bench fusion` (2 ranks, the
# one-host default backend) run alternately, BASE then NEW, ROUNDS times; prints each row's
# median per build and NEW/BASE. For "nothing got slower" after a change: build the old commit
# in a folder of its own (kolo-bench is linked statically, so its bin/ can be copied away).
# Usage: bench/compare_builds.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS]   (default 5)
set -u
base=${1:?usage: compare_builds.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS]}
new=${2:?usage: compare_builds.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS]}
rounds=${3:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq $rounds); do
  for side in base new; do
    b=$base; [[ $side == new ]] && b=$new
    $b/kolorun -np 2 $b/kolo-bench latency --iters 500 --json $out/lat-$side-$i.json >/dev/null 2>&1
    $b/kolorun -np 2 $b/kolo-bench fusion --iters 7 --warmup 1 --json $out/fus-$side-$i.json >/dev/null 2>&1
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys, glob
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(kind, side):
    per = {}
    for i in range(1, rounds + 1):
        try: data = json.load(open(f"{out}/{kind}-{side}-{i}.json"))
        except Exception: continue
        for r in data:
            key = r.get("measurement") or r.get("mode")
            val = r.get("value", r.get("step_ms"))
            per.setdefault(key, []).append(val)
    return per
for kind, label in (("lat", "latency"), ("fus", "fusion")):
    b, n = rows(kind, "base"), rows(kind, "new")
    for key in b:
        if key in n and b[key] and n[key]:
            mb, mn = statistics.median(b[key]), statistics.median(n[key])
            print(f"{label:8s} {key[:60]:60s} base {mb:10.3f} new {mn:10.3f} new/base {mn/mb:6.3f} (n={len(b[key])},{len(n[key])})")
PY
