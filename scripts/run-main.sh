#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job: data-parallel training of a small
# CNN on Fashion-MNIST with 2 processes on the embedded TCP backend.
# Usage: scripts/run-main.sh [-np N] [training flags...]   e.g. --model mlp --epochs 2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
np=2
if [[ "${1:-}" == "-np" ]]; then np="$2"; shift 2; fi
exec build/bin/kolorun -np "$np" build/bin/train_fashion_mnist "$@"
