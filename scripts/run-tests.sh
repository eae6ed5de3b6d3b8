#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), runs the whole test suite with CTest, then the checking
# builds (scripts/run-checks.sh: sanitizers, fuzzing, thread-safety analysis). This is what CI
# runs (.ci/run).
# Usage: scripts/run-tests.sh [extra ctest args]    e.g. -L unit, -R tcp
#        KOLO_CHECKS=0 scripts/run-tests.sh          the CTest suite only
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/setup.sh build
echo "run-tests: set-up and build took $((SECONDS - start))s"
start=$SECONDS
(
  cd build
  # Two at a time fits a 2-core machine; multi-process tests are marked RUN_SERIAL.
  ctest --output-on-failure --timeout 300 -j 2 "$@"
)
echo "run-tests: the CTest suite took $((SECONDS - start))s"
if [[ "${KOLO_CHECKS:-1}" != 0 ]]; then
  scripts/run-checks.sh
fi
