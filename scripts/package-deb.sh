#!/usr/bin/env bash
# Builds the Debian package of Kolo: build-deb/kolo_<version>_<arch>.deb, which installs on a
# plain Debian 12 with `apt install ./kolo_*.deb` (apt fetches the libraries it depends on).
# The package is built without CUDA (the toolkit in /usr/local/cuda is no Debian package, so a
# package could not declare it) and for any x86-64 processor (KOLO_ARCH=x86-64), with libkolo
# and libkolo_framework shared, installed under /usr.
# Usage: scripts/package-deb.sh [build-dir]   (default: build-deb)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build-deb}"
scripts/setup.sh --deps-only
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
      -DKOLO_WITH_CUDA=OFF -DKOLO_ARCH=x86-64 -DBUILD_SHARED_LIBS=ON \
      -DKOLO_BUILD_TESTS=OFF -DKOLO_BUILD_EXAMPLES=OFF
cmake --build "$build_dir" -j "$(nproc)"
(cd "$build_dir" && cpack -G DEB)
ls -l "$build_dir"/kolo_*.deb
