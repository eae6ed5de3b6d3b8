#!/usr/bin/env bash
# Rewrites the README's knob table (between <!-- knobs:begin ... --> and <!-- knobs:end -->)
# from the registry, as `kolorun --print-config=markdown` prints it; common_test fails until the
# table is current. Usage: scripts/update-knob-table.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
table="$("${1:-build}"/bin/kolorun --print-config=markdown)"
TABLE="$table" python3 - <<'PY'
import os, re
readme = open("README.md").read()
begin = readme.index("<!-- knobs:begin")
start = readme.index("\n", begin) + 1
end = readme.index("<!-- knobs:end -->")
open("README.md", "w").write(readme[:start] + os.environ["TABLE"] + "\n" + readme[end:])
PY
