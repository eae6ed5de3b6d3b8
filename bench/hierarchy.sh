#!/usr/bin/env bash
# Flat against hierarchical collectives on two simulated hosts joined by a network of a given
# rate: where does the hierarchy pay?
#
#   bench/hierarchy.sh [-r ROUNDS] [-n RANKS_PER_HOST] [-t RATE] [-c COLLECTIVE] [-B BUILD_DIR]
#                      [-- kolo-bench options]
#
# Two network namespaces, one per "host", joined by a veth pair whose both directions are
# limited to RATE by a token bucket (tc tbf; default 1gbit, "none" for the bare veth), and
# RANKS_PER_HOST ranks in each (one kolorun per namespace, tcp across the veth, shm within a
# namespace when hierarchical). COLLECTIVE (allreduce, default, or allgather) runs through
# `kolo-bench COLLECTIVE --backend tcp` flat and with KOLO_HIERARCHICAL_<COLLECTIVE>=1,
# alternately, ROUNDS times each (default 3; alternation puts both under the same background
# load), and the table gives each size's median time of both and their ratio. Needs root (ip
# netns, tc). Default kolo-bench options: -b 64KiB -e 64MiB -f 4 -n 10 -w 2 --check.
#
# What it shows: on a link slower than memory, the flat ring sends 2(P-1)/P of an allreduce's
# bytes out of each host and the hierarchy 2(C-1)/C (C hosts of L ranks, P = C L); for
# allgather (P-1)/P against (C-1)/C. Both simulated hosts share this machine's cores, so the
# CPU-bound small sizes say little about real hosts; the large ones are bound by the link.
set -euo pipefail

rounds=3
per_host=2
rate=1gbit
collective=allreduce
build=build
while getopts "r:n:t:c:B:" opt; do
  case "$opt" in
    r) rounds="$OPTARG" ;;
    n) per_host="$OPTARG" ;;
    t) rate="$OPTARG" ;;
    c) collective="$OPTARG" ;;
    B) build="$OPTARG" ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
bench_args=("$@")
[[ ${#bench_args[@]} -eq 0 ]] && bench_args=(-b 64KiB -e 64MiB -f 4 -n 10 -w 2 --check)
case "$collective" in
  allreduce) knob=KOLO_HIERARCHICAL_ALLREDUCE ;;
  allgather) knob=KOLO_HIERARCHICAL_ALLGATHER ;;
  *) echo "hierarchy: -c must be allreduce or allgather, got '$collective'" >&2; exit 2 ;;
esac
bin="$build/bin"
for tool in kolorun kolo-bench; do
  [[ -x "$bin/$tool" ]] || { echo "hierarchy: $bin/$tool not found (build first)" >&2; exit 2; }
done
bin="$(cd "$bin" && pwd)"
[[ $(id -u) -eq 0 ]] || { echo "hierarchy: needs root (ip netns, tc)" >&2; exit 2; }

ns="kbh$$"
work="$(mktemp -d)"
cleanup() { ip netns del "${ns}a" 2>/dev/null || true; ip netns del "${ns}b" 2>/dev/null || true
            rm -rf "$work"; }
trap cleanup EXIT
ip netns add "${ns}a"
ip netns add "${ns}b"
ip link add "${ns}x" netns "${ns}a" type veth peer name "${ns}y" netns "${ns}b"
ip -n "${ns}a" addr add 10.236.0.1/24 dev "${ns}x"
ip -n "${ns}b" addr add 10.236.0.2/24 dev "${ns}y"
for side in "a ${ns}x" "b ${ns}y"; do
  set -- $side
  ip -n "$ns$1" link set "$2" up
  ip -n "$ns$1" link set lo up
  # A burst of 256 KiB lets a socket's window through at line rate; the queue holds 50 ms.
  [[ "$rate" == none ]] || tc -n "$ns$1" qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms
done

# One job: a kolorun in each namespace; rank 0 (namespace a) writes the rows as JSON.
run_job() {  # run_job ON(0|1) JSON
  local port=$((29000 + RANDOM % 1000)) job
  job=(--nnodes 2 --rdzv 10.236.0.1:$port --secret bench -np "$per_host")
  ip netns exec "${ns}a" env KOLO_TCP_HOST=10.236.0.1 "$knob=$1" "$bin/kolorun" "${job[@]}" \
    --node-rank 0 "$bin/kolo-bench" "$collective" --backend tcp --json "$2" "${bench_args[@]}" \
    >"$2.log" 2>&1 &
  local a=$!
  ip netns exec "${ns}b" env KOLO_TCP_HOST=10.236.0.2 "$knob=$1" "$bin/kolorun" "${job[@]}" \
    --node-rank 1 "$bin/kolo-bench" "$collective" --backend tcp "${bench_args[@]}" \
    >"$2.b.log" 2>&1 || { wait $a || true; cat "$2.b.log" >&2; return 1; }
  wait $a || { cat "$2.log" >&2; return 1; }
}

echo "# $collective, 2 hosts x $per_host ranks, link $rate each way, $rounds rounds; $(uptime | sed 's/.*load/load/')"
for ((r = 0; r < rounds; ++r)); do
  run_job 0 "$work/flat$r.json"
  run_job 1 "$work/hier$r.json"
done
python3 - "$work" "$rounds" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def times(kind):
    by_size = {}
    for r in range(rounds):
        for row in json.load(open(f"{work}/{kind}{r}.json")):
            if row.get("wrong", 0):
                sys.exit(f"hierarchy: {kind} run {r}: {row['wrong']} wrong elements at {int(row['size_bytes'])} B")
            by_size.setdefault(int(row["size_bytes"]), []).append(row["time_us"])
    return by_size
flat, hier = times("flat"), times("hier")
print(f"{'size':>12} {'flat us':>12} {'hier us':>12} {'hier/flat':>10}  per round (hier/flat)")
for size in sorted(flat):
    f, h = statistics.median(flat[size]), statistics.median(hier[size])
    pairs = " ".join(f"{b / a:.2f}" for a, b in zip(flat[size], hier[size]))
    print(f"{size:>12} {f:>12.1f} {h:>12.1f} {h / f:>10.2f}  {pairs}")
EOF
