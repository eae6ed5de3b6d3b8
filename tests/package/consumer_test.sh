#!/usr/bin/env bash
# Installs Kolo from a build tree into a temporary prefix and uses it as a user would:
#  1. examples/consumer (its own CMake project) finds it with find_package(Kolo 0.2), builds,
#     and trains with 2 ranks under the installed kolorun;
#  2. the same program builds with pkg-config and g++ alone, and starts without LD_LIBRARY_PATH;
#  3. find_package refuses a component the build lacks, and a version it is not, with reasons;
#  4. Kolo's sources configure as a subproject (add_subdirectory / FetchContent);
#  5. a shared libkolo has a versioned SONAME and exports the public API only.
# Usage: consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/kolorun bin/kolo-bench bin/kolo-trace include/kolo/kolo.h include/kolo/framework.h \
         include/kolo_framework/framework/tensor.h lib/cmake/Kolo/KoloConfig.cmake \
         lib/cmake/Kolo/KoloConfigVersion.cmake lib/pkgconfig/kolo.pc lib/pkgconfig/kolo-framework.pc; do
  [[ -e $prefix/$f ]] || fail "the install lacks $f"
done
[[ -z $(find "$prefix/include" -name '*_test*') ]] || fail "test headers were installed"
# The umbrella header goes beside kolo.h only, not also among the headers it includes.
[[ ! -e $prefix/include/kolo_framework/framework/include ]] || fail "framework/include was installed"

echo "== 1. find_package(Kolo) and kolorun -np 2"
cmake -S "$src/examples/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" >/dev/null
out=$("$prefix/bin/kolorun" -np 2 "$work/consumer/consumer" --steps 200 2>&1) || fail "consumer: $out"
echo "$out"
grep -q "consumer: 2 ranks, 200 steps, .*replicas identical" <<<"$out" || fail "no result line"

echo "== 2. pkg-config"
flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs kolo-framework)
if [[ -e $prefix/lib/libkolo.a ]]; then
  flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --static --cflags --libs kolo-framework)
fi
g++ -std=c++20 -O1 "$src/examples/consumer/consumer.cc" -o "$work/consumer_pc" $flags
# The README's line alone makes a program that starts: the .pc files carry an rpath to the
# install's lib/, so no LD_LIBRARY_PATH is needed (nor allowed to help here).
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/kolorun" -np 2 "$work/consumer_pc" --steps 50 2>&1) ||
  fail "pkg-config build: $out"
grep -q "replicas identical" <<<"$out" || fail "pkg-config build gave no result line: $out"
echo "built with: $flags"

echo "== 3. components and versions the install does not have"
probe() {  # probe ARGS-OF-FIND_PACKAGE: configures a project that asks for them, prints the log
  mkdir -p "$work/probe"
  printf 'cmake_minimum_required(VERSION 3.22)\nproject(p LANGUAGES CXX)\nfind_package(%s)\n' \
    "$1" >"$work/probe/CMakeLists.txt"
  rm -rf "$work/probe/b"
  cmake -S "$work/probe" -B "$work/probe/b" -DCMAKE_PREFIX_PATH="$prefix" 2>&1 && return 1 || true
}
log=$(probe "Kolo 0.2 CONFIG REQUIRED COMPONENTS gloo") || fail "COMPONENTS gloo was accepted"
grep -q "component 'gloo' is not part of this Kolo build (it has: kolo, framework" <<<"$log" ||
  fail "no reason for the missing component: $log"
log=$(probe "Kolo 0.3 CONFIG REQUIRED") || fail "version 0.3 was accepted"
grep -q "0.2.0" <<<"$log" || fail "no version in the refusal: $log"
echo "refused as expected"

echo "== 4. Kolo as a subproject (add_subdirectory, as FetchContent does): configures"
cmake -S "$src/examples/consumer" -B "$work/subproject" -DKOLO_SOURCE_DIR="$src" >"$work/sub.log" 2>&1 ||
  fail "configuring Kolo as a subproject failed: $(tail -n 20 "$work/sub.log")"
grep -q "Kolo 0.2.0: backends=" "$work/sub.log" || fail "no Kolo summary in the subproject's log"
[[ ! -e $work/subproject/kolo/tests ]] || fail "a subproject builds Kolo's tests by default"
echo "configured"

echo "== 5. the shared library"
lib=$(ls "$prefix"/lib/libkolo.so.* 2>/dev/null | head -n 1 || true)
if [[ -n $lib ]]; then
  soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
  [[ $soname == libkolo.so.0.2 ]] || fail "SONAME is '$soname', expected libkolo.so.0.2"
  exported=$(nm -D --defined-only -C "$lib" | awk '{$1=$2=""; print}')
  grep -q "kolo::init()" <<<"$exported" || fail "kolo::init() is not exported"
  # Every exported symbol is Kolo's, and every name it is declared under (kolo::Status,
  # kolo::detail::X, ...) appears in the installed public headers.
  foreign=$(grep -v "kolo::" <<<"$exported" | head -n 3 || true)
  [[ -z $foreign ]] || fail "symbols that are not Kolo's are exported: $foreign"
  for name in $(grep -oE "kolo::(detail::)?[A-Za-z_][A-Za-z0-9_]*" <<<"$exported" | sort -u); do
    short=${name##*::}
    grep -qw "$short" "$prefix"/include/kolo/*.h || fail "$name is exported but not public"
  done
  echo "SONAME $soname; $(wc -l <<<"$exported") symbols exported, all of the public API"
else
  echo "static build: no shared library to inspect"
fi
echo "consumer test passed"
