#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the whole test suite with CTest.
# Usage: scripts/run-tests.sh [extra ctest args]    e.g. -L unit, -R tcp
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cd build
# Two at a time fits a 2-core machine; multi-process tests are marked RUN_SERIAL.
ctest --output-on-failure --timeout 300 -j 2 "$@"
