#!/usr/bin/env bash
# The torch plugin's benchmark (docs/benchmarks.md, "PyTorch plugin"): step time of the main
# job's CNN, batch 64 per rank, 2 ranks on the CPU, in one run, alternating the contenders:
#   kolo-py   kolo.torch DistributedOptimizer (Python, Horovod's API)
#   ddp-py    PyTorch DistributedDataParallel with gloo (Debian's torch 1.13)
#   kolo-cpp  Kolo::torch DistributedOptimizer (LibTorch C++, build/bin/torch_fashion_mnist)
#   kolo-fw   Kolo's own training stack (build/bin/train_fashion_mnist --model cnn)
# and, last in each round, kolo-py and ddp-py again in ONE job with interleaved windows
# (torch_bench.py --mode both): on a shared host the load drifts between separate runs, so the
# "pair" lines and their ratio (median over window pairs) are the like-for-like comparison.
# Usage: bench/torch/run.sh [build-dir] [rounds]    (default build, 3)
# KOLORUN_ARGS adds kolorun options for every contender, e.g. KOLORUN_ARGS="--bind-to none".
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
rounds="${2:-3}"
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1
read -r -a kolorun <<< "$build/bin/kolorun ${KOLORUN_ARGS:-}"
for round in $(seq "$rounds"); do
  for mode in kolo ddp; do
    ms=$("${kolorun[@]}" -np 2 /usr/bin/python3 bench/torch/torch_bench.py --mode $mode |
         sed -n 's/.*step_time_ms \([0-9.]*\).*/\1/p')
    echo "round $round $mode-py step_time_ms $ms"
  done
  ms=$("${kolorun[@]}" -np 2 "$build/bin/torch_fashion_mnist" --max-steps 185 |
       sed -n 's/.*step_time_ms \([0-9.]*\).*/\1/p')
  echo "round $round kolo-cpp step_time_ms $ms"
  # 11840 images = 185 steps of 2 x 64; samples/s is global, so a step takes 2*64/rate.
  rate=$("${kolorun[@]}" -np 2 "$build/bin/train_fashion_mnist" --model cnn --epochs 1 \
           --train-subset 11840 --test-subset 1000 --warmup-epochs 0 |
         sed -n 's/.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1)
  echo "round $round kolo-fw step_time_ms $(awk -v r="$rate" 'BEGIN{printf "%.3f", 128000/r}')"
  "${kolorun[@]}" -np 2 /usr/bin/python3 bench/torch/torch_bench.py --mode both --steps 20 \
      --repeats 8 | sed -n 's/^\[0\] \(kolo\|ddp\|ratio\) \(.*\)/round '"$round"' pair \1 \2/p'
done
