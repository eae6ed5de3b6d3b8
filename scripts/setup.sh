#!/usr/bin/env bash
# Installs what Kolo needs from Debian (only what is missing), then configures and builds.
# Usage: scripts/setup.sh [build-dir]   (default: build). Extra CMake flags via KOLO_CMAKE_FLAGS.
#        scripts/setup.sh --deps-only    installs the packages only.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"

packages=(
  build-essential cmake ccache pkg-config
  libboost-dev libboost-system-dev      # Boost.Asio (tcp backend, rendezvous store)
  libopenmpi-dev openmpi-bin            # the mpi backend and mpirun
  nlohmann-json3-dev                    # timeline and tests
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev            # CPU GEMM; gzip'd IDX files
  dataset-fashion-mnist                 # the main job's data
  iproute2                              # network namespaces in the two-node test
  file                                  # cpack -G DEB (scripts/package-deb.sh)
  clang libclang-rt-14-dev              # checking builds: sanitizers, libFuzzer (run-checks.sh)
  clang-format                          # run-checks.sh format
  slurmctld slurmd slurm-client munge   # a one-host Slurm for tests/slurm (scripts/slurm.sh)
)
# The PyTorch plugin (plugins/torch): LibTorch for C++, python3-torch for kolo.torch. Installing
# them takes about 3 minutes on a fresh Debian 12 (~170 packages, ~600 MB); KOLO_WITH_TORCH=OFF
# skips them (and the plugin).
if [[ "${KOLO_WITH_TORCH:-AUTO}" != OFF ]]; then
  packages+=(libtorch-dev python3-torch pybind11-dev python3-dev)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

[[ "$build_dir" == "--deps-only" ]] && exit 0

jobs="$(nproc)"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
  -DKOLO_WITH_TORCH="${KOLO_WITH_TORCH:-AUTO}" ${KOLO_CMAKE_FLAGS:-}
cmake --build "$build_dir" -j "$jobs"
