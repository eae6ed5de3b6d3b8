#!/usr/bin/env bash
# Two builds of Kolo side by side on one collective bench: `kolo-bench allreduce` (or another
# collective) under kolorun, BASE then NEW, ROUNDS times; prints each size's median time per
# build and NEW/BASE. Build the old commit in a folder of its own and copy its bin/ away
# (kolo-bench and kolorun are all it needs).
# Usage: bench/compare_allreduce.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS [NP [KOLO-BENCH ARGS...]]]
#   default: 5 rounds, 2 ranks, allreduce --backend shm -b 1MiB -e 256MiB -f 4 -n 6 -w 2
set -u
base=${1:?usage: compare_allreduce.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS [NP [ARGS...]]]}
new=${2:?usage: compare_allreduce.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS [NP [ARGS...]]]}
rounds=${3:-5}
np=${4:-2}
shift $(($# < 4 ? $# : 4))
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(allreduce --backend shm -b 1MiB -e 256MiB -f 4 -n 6 -w 2)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "$rounds"); do
  for side in base new; do
    b=$base; [[ $side == new ]] && b=$new
    # Rank 0's table: size in column 1, time(us) in column 5.
    "$b/kolorun" -np "$np" "$b/kolo-bench" "${args[@]}" 2>&1 | sed 's/^\[[0-9]*\] *//' |
      awk -v s=$side '$1 ~ /^[0-9]+$/ {print s, $1, $5}' >> "$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, size, t = line.split()
    d[(side, int(size))].append(float(t))
print(f"{'size(B)':>12} {'base_us':>10} {'new_us':>10} {'new/base':>8}  (runs: base | new)")
for size in sorted({k[1] for k in d}):
    b, n = d[("base", size)], d[("new", size)]
    if not b or not n: continue
    mb, mn = statistics.median(b), statistics.median(n)
    print(f"{size:>12} {mb:>10.1f} {mn:>10.1f} {mn / mb:>8.3f}  ({b} | {n})")
PY
