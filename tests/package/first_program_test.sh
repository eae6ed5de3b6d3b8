#!/usr/bin/env bash
# docs/first-program.md as a new user follows it, against a fresh install of Kolo:
#  1. the page's train.cc and CMakeLists.txt are exactly the files of docs/first-program/;
#  2. copied from the page into an empty folder, they build with the page's commands (CMake and
#     find_package) and run with the installed kolorun -np 2, printing the lines the page shows
#     (numbers aside) and a test accuracy of at least 0.80 (0.850 measured);
#  3. the page's pkg-config commands build and run it too, without LD_LIBRARY_PATH.
# HOME is a scratch folder, so that the page's ~/kolo is the fresh install. Exit 77 (skipped)
# after step 1 when the Debian package dataset-fashion-mnist is not installed.
# Usage: first_program_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
page=$src/docs/first-program.md
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# block NAME: the fenced block that follows the line "<!-- first-program: NAME -->" of the page.
block() {
  python3 - "$page" "$1" <<'PY'
import sys
path, name = sys.argv[1], sys.argv[2]
lines = open(path).read().split("\n")
marker = "<!-- first-program: %s -->" % name
if marker not in lines:
    sys.exit("%s has no line '%s'" % (path, marker))
start = lines.index(marker) + 1
if start >= len(lines) or not lines[start].startswith("```"):
    sys.exit("%s: no fenced block right after '%s'" % (path, marker))
end = lines.index("```", start + 1)
sys.stdout.write("\n".join(lines[start + 1:end]) + "\n")
PY
}
# The lines with every number replaced by N: what the output looks like, whatever the digits.
shape() { sed -E 's/[0-9]+(\.[0-9]+)?/N/g'; }

echo "== 1. the page holds docs/first-program/ exactly"
export HOME=$work/home
folder=$HOME/first-program
mkdir -p "$folder"
for f in train.cc CMakeLists.txt; do
  block "$f" >"$folder/$f"
  diff -u "$src/docs/first-program/$f" "$folder/$f" ||
    fail "docs/first-program.md's $f differs from docs/first-program/$f (above)"
done
for f in build run output pkg-config; do block "$f" >"$work/$f"; done
echo "same"
if [[ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi

check_output() {  # check_output HOW OUTPUT
  diff -u <(shape <"$work/output") <(shape <<<"$2") ||
    fail "$1: the output differs from the page's in more than numbers (above)"
  local accuracy
  accuracy=$(sed -nE 's/^\[0\] test accuracy ([0-9.]+)$/\1/p' <<<"$2")
  python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= 0.80)" "$accuracy" ||
    fail "$1: test accuracy $accuracy is below 0.80"
  echo "$2"
}

echo "== 2. CMake: the page's build and run commands"
cmake --install "$build" --prefix "$HOME/kolo" >/dev/null
cd "$folder"
env -u LD_LIBRARY_PATH bash -e "$work/build" >"$work/build.log" 2>&1 ||
  fail "the page's build commands failed: $(tail -n 30 "$work/build.log")"
out=$(env -u LD_LIBRARY_PATH bash -e "$work/run" 2>&1) || fail "the page's run command failed: $out"
check_output "CMake build" "$out"

echo "== 3. pkg-config: the page's commands"
out=$(env -u LD_LIBRARY_PATH bash -e "$work/pkg-config" 2>&1) ||
  fail "the page's pkg-config commands failed: $out"
check_output "pkg-config build" "$out"
echo "first program test passed"
