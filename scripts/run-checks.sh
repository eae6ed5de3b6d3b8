#!/usr/bin/env bash
# The checks CI runs after the test suite. Two gates on the source first, seconds each:
#   format     clang-format (Debian's clang-format 14, .clang-format) in check mode over every
#              tracked C++/CUDA file: a file it would change fails, listed with its first diff
#   functions  no function over 80 lines outside tests (scripts/function_lengths.py)
# then one that parses without building (106 s on 2 cores, configure included):
#   tsa   Clang's thread-safety analysis as errors over what the checking builds below leave out
#         (the nccl backend, CUDA host code, the torch plugin): each such file parsed with its
#         flags from a tree configured with CUDA, NCCL and torch (scripts/thread_safety_check.py)
# then the checking builds (cmake/kolo_checks.cmake), each in its own build tree, Clang throughout:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer over the unit and multi-process tests;
#         the whole tree compiled with Clang's thread-safety analysis as errors
#   fuzz  every libFuzzer target of tests/fuzz for KOLO_FUZZ_SECONDS (default 20) each, from its
#         seed corpus; a finding fails and is kept in build-asan/fuzz-findings/<target>/
#   tsan  ThreadSanitizer over the coordinator, ops and backend tests, compiled with Clang's
#         thread-safety analysis as errors
# Usage: scripts/run-checks.sh [format] [functions] [tsa] [asan] [fuzz] [tsan]  (none: all, in order)
# scripts/run-tests.sh runs them all after the main suite; CI runs that.
set -euo pipefail
cd "$(dirname "$0")/.."
checks=("$@")
((${#checks[@]})) || checks=(format functions tsa asan fuzz tsan)
jobs="$(nproc)"

# Kolo's own code only: no CUDA (nothing runs it here) and no torch plugin (LibTorch is not built
# with sanitizers, and its headers cost minutes of compile per file).
configure() {  # configure DIR CMAKE-FLAGS...
  local dir="$1"
  shift
  CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_TORCH=OFF -DBUILD_SHARED_LIBS=OFF -DKOLO_BUILD_EXAMPLES=OFF "$@" \
    >/dev/null
}

# Open MPI's own allocations are not Kolo's leaks; everything else is an error.
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp"

fuzz_targets=(fuzz_units fuzz_negotiation fuzz_store_protocol fuzz_tcp_wire fuzz_data_files
              fuzz_trace_reader)

for check in "${checks[@]}"; do
  start=$SECONDS
  case "$check" in
    format)
      unformatted=()
      while IFS= read -r file; do
        clang-format --dry-run --Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
      done < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
      if ((${#unformatted[@]})); then
        clang-format --dry-run "${unformatted[0]}" 2>&1 | head -20
        echo "format: clang-format would change ${#unformatted[@]} file(s): ${unformatted[*]}" >&2
        echo "format: run clang-format -i on them" >&2
        exit 1
      fi
      ;;
    functions)
      if ! python3 scripts/function_lengths.py --limit 80; then
        echo "functions: the functions above are over 80 lines; split them along their seams" >&2
        exit 1
      fi
      ;;
    tsa)
      # ON, not AUTO: a machine without CUDA, NCCL or LibTorch fails here, naming what is missing,
      # rather than passing with nothing analysed.
      CC=clang CXX=clang++ cmake -S . -B build-tsa -DCMAKE_BUILD_TYPE=Release -DKOLO_THREAD_SAFETY=ON \
        -DKOLO_WITH_CUDA=ON -DKOLO_WITH_NCCL=ON -DKOLO_WITH_TORCH=ON >/dev/null
      python3 scripts/thread_safety_check.py build-tsa -j "$jobs"
      ;;
    asan)
      configure build-asan -DKOLO_SANITIZE=address,undefined -DKOLO_FUZZ=ON -DKOLO_THREAD_SAFETY=ON
      cmake --build build-asan -j "$jobs"
      ctest --test-dir build-asan --output-on-failure --timeout 600 -j "$jobs" -L 'unit|multiprocess' \
        -E 'Mpirun|MpiSingleton'
      # Open MPI leaks from plugins it has unloaded by exit, so LeakSanitizer cannot tell whose
      # the memory was (the stack shows "<unknown module>"): jobs under mpirun, and tests that
      # run MPI in-process as a singleton, run with every check but the leak check.
      ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" \
        ctest --test-dir build-asan --output-on-failure --timeout 600 -j "$jobs" \
        -L 'unit|multiprocess' -R 'Mpirun|MpiSingleton'
      ;;
    fuzz)
      configure build-asan -DKOLO_SANITIZE=address,undefined -DKOLO_FUZZ=ON -DKOLO_THREAD_SAFETY=ON
      cmake --build build-asan -j "$jobs" --target "${fuzz_targets[@]}"
      for target in "${fuzz_targets[@]}"; do
        corpus="build-asan/fuzz-corpus/$target" findings="build-asan/fuzz-findings/$target"
        rm -rf "$corpus" && mkdir -p "$corpus" "$findings"
        cp tests/fuzz/corpus/"$target"/* "$corpus"/
        echo "fuzz: $target for ${KOLO_FUZZ_SECONDS:-20}s"
        if ! build-asan/bin/"$target" -max_total_time="${KOLO_FUZZ_SECONDS:-20}" -timeout=10 \
             -rss_limit_mb=2048 -artifact_prefix="$findings/" -print_final_stats=1 \
             "$corpus" >"$findings/log" 2>&1; then
          tail -40 "$findings/log"
          echo "fuzz: $target found a failing input, saved in $findings/" >&2
          exit 1
        fi
        grep -E "stat::number_of_executed_units|stat::new_units_added" "$findings/log" | tr '\n' ' '
        echo
      done
      ;;
    tsan)
      configure build-tsan -DKOLO_SANITIZE=thread -DKOLO_THREAD_SAFETY=ON -DKOLO_WITH_MPI=OFF
      # elastic_recovery_test: real elastic jobs (kolorun and its workers built with TSan too),
      # whose re-forming runs shutdown, init and the store's watches across threads.
      tsan_tests=(coordinator_test ops_test channel_backend_test registry_test tcp_test elastic_test
                  rendezvous_test elastic_recovery_test)
      cmake --build build-tsan -j "$jobs" --target "${tsan_tests[@]}"
      for t in "${tsan_tests[@]}"; do
        echo "tsan: $t"
        build-tsan/bin/"$t" --gtest_brief=1
      done
      ;;
    *)
      echo "run-checks: unknown check '$check' (expected format, functions, tsa, asan, fuzz or tsan)" >&2
      exit 2
      ;;
  esac
  echo "run-checks: $check passed in $((SECONDS - start))s"
done
