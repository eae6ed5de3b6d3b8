#!/usr/bin/env bash
# The GPU check (issues 12 and 32): every GPU test, the main job with --device cuda against the
# same models in PyTorch eager (and with --cuda-graph at batch 64 against both), deterministic mode twice and ZeRO stage 2 against unsharded
# (same parameters expected), kolo-bench allreduce --backend nccl beside raw ncclAllReduce on
# the same buffers and kolo-bench fusion --device cuda (the device fusion buffer, with and
# without the timeline), then one summary. Three ways to run it:
#
#   scripts/gpu-check.sh [build-dir]
#       In place, on a GPU machine with the development packages: builds for the GPU(s) it
#       finds (default build-gpu) and runs the checks. Exits 0 with a message without a GPU.
#   scripts/gpu-check.sh --bundle DIR [--arch 90[,80...]] [--from-build BUILD] [--build-dir B]
#       On the development machine: builds the runner's targets (in B, default build-gpu) for
#       the CUDA architectures named (default 90) with a portable -march (x86-64-v3), then packs
#       DIR (under 64 MiB): the stripped binaries and the non-system libraries they need (not
#       glibc's, not the CUDA/cuBLAS/cuDNN/NCCL ones: those come from the GPU machine) in
#       payload.tar.gz, a Fashion-MNIST slice (20,000 training images + the test set), the
#       PyTorch reference (torch_eager_reference.py), this script and run.sh. --from-build
#       packs an existing build's binaries instead of building (the CTest does, to be quick).
#   bash DIR/run.sh          (= gpu-check.sh --run-bundle DIR)
#       On a GPU machine that has only the driver, the CUDA runtime libraries (a toolkit or a
#       PyTorch wheel's nvidia/*/lib folders, found at run time) and python3 with torch: finds
#       the CUDA libraries, checks that every binary's libraries resolve, runs the checks with a
#       time cap per step (all of it within KOLO_GPU_CHECK_BUDGET_S, default 170 s) and prints
#       the summary to stdout. Without a GPU it says so, checks the libraries and skips the GPU
#       steps. With the device tool: carry DIR (a path inside the checkout, e.g. build-bundle)
#       and run `bash build-bundle/run.sh`.
#
# Environment: KOLO_GPU_CHECK_JOBS (default: nproc), KOLO_GPU_CHECK_EPOCHS (in place: the main
# job's epochs, default 1), DATA_DIR (Fashion-MNIST IDX .gz files; default
# /usr/share/datasets/fashion-mnist), KOLO_PYTHON (python with torch; default: the first python3
# that imports torch), KOLO_CUDA_LIB_DIRS (colon-separated folders searched for the CUDA
# libraries before the usual places), KOLO_GPU_CHECK_NO_GPU=1 (act as if no GPU were visible).
# The in-place mode needs: cmake >= 3.24, g++ (C++20), make, nvcc + NCCL + cuDNN (the CUDA
# toolkit), Boost headers, nlohmann-json, GoogleTest, OpenBLAS, zlib. Missing ones are listed.
set -uo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
summary=()
status=0
say() { echo "gpu-check: $*"; }
note() { summary+=("$*"); say "$*"; }
fail() { status=1; note "$@"; }

# The targets every mode needs: the test binaries of the GPU tests below, and the tools.
targets=(nccl_test coordinator_test framework_test train_fashion_mnist_models_test kolo-bench kolorun
  train_fashion_mnist sharded_optimizer_test sharded_training_test sharded_worker)

# Every GPU test: the nccl backend's, the coordinator's CUDA staging and routing, the
# framework's CUDA kernels and models. One test run per line: "log-name binary [gtest args]".
gpu_test_runs=(
  "nccl_test nccl_test"
  "coordinator_cuda coordinator_test --gtest_filter=*Cuda*:*Device*:*Staging*"
  "framework_cuda framework_test --gtest_filter=*Cuda*"
  "models_cuda train_fashion_mnist_models_test --gtest_filter=*Cuda*"
  # ZeRO with CUDA parameters (docs/zero.md, Devices): stages 1 and 2 on one GPU against the
  # unsharded run there and the sharded CPU run (SGD momentum, Adam, LARS, clipping), the device
  # memory per category, a checkpoint through the host; then 2 ranks through host staging to tcp
  # (one GPU is enough) and on nccl (one GPU per rank, skipped with fewer).
  "sharded_cuda sharded_optimizer_test --gtest_filter=ShardedCuda.*"
  "sharded_ranks_cuda sharded_training_test --gtest_filter=*Cuda*"
  # Alone in its process: it needs GPU 0 without a primary context, which every earlier test makes.
  "guard_alone framework_test --gtest_filter=CudaTest.AGuardOnAThreadWithoutADeviceCreatesNoContextOnGpu0"
)

# The fixes of the GPU path's review that were written and unit-tested without a GPU and only a
# GPU can confirm: each test is named in the summary with its outcome, so that a pass is seen
# rather than assumed (a skip says why in its log). One test per line: "log-name Suite.Test".
confirms=(
  "nccl_test NcclOneRankTest.ConcurrentAbortsFailEveryOpWithTheFirstReasonAndNoneOk"    # defect 1
  "nccl_test NcclOneRankTest.AnOpWhoseEventTheCallerDropsStillCompletes"                # defect 2
  "nccl_test NcclOneRankTest.AFusedBatchIsOneGroupWithItsPostScalesAfterTheReduction"   # defect 3
  "nccl_test NcclOneRankTest.WithoutAReadyEventItWaitsForTheLegacyDefaultStream"        # defect 4
  "coordinator_cuda CudaRuntimeTest.StagingCopiesFollowTheLegacyStreamAndTheOutputsReadyEvent"  # 5
  "nccl_test NcclOneRankTest.ACallNcclRefusesAbortsTheCommunicator"                     # S5
  "nccl_test NcclOneRankTest.TheAverageAndScaleKernelsComputeWhatTheHostComputes"       # S6
  "nccl_test NcclOneRankTest.AnIntegerAverageIsTheHostsAverage"                         # S6
  "framework_cuda CudaTest.RecordEventLeavesTheCallersDeviceCurrent"  # device restored; 2 GPUs
  "coordinator_cuda CudaRuntimeTest.ANcclOperationsSpansEndWhenTheGpuFinishedIt"  # GPU time traced
  "nccl_test BatchedCopyTest.CopiesEverySegmentExactlyAndNothingElse"        # device fusion buffer
  "nccl_test NcclOneRankTest.AllreducePiecesFusesOnTheDeviceAndCopiesOutAfterTheReduction"
  "guard_alone CudaTest.AGuardOnAThreadWithoutADeviceCreatesNoContextOnGpu0"  # s8 #1; 2 GPUs
  "nccl_test NcclDeathTest.DestroyedOnAThreadThatDoesNotOwnItsOpenGroupItStopsTheProcess"  # s8 #3
  "nccl_test NcclOneRankTest.AnAbortInsideAnOperationEndsItsGroupWithoutItsPostWork"   # s8 #4
  "nccl_test BatchedCopyTest.AlignedPiecesOfOddFloat16CountsCopyExactly"  # s8 #5: padded pieces
  "sharded_cuda ShardedCuda.StagesOneAndTwoOnTheDeviceEqualTheUnshardedAndTheCpuRuns"  # ZeRO GPU
  "sharded_cuda ShardedCuda.ParametersOnTwoDevicesAreNamed"               # ZeRO: refused
  "sharded_cuda ShardedCuda.DeviceBuffersAreCountedUnderCuda"              # ZeRO device memory
  "sharded_cuda ShardedCuda.ACheckpointOfACudaRunLoadsOnTheDeviceAndOnTheCpu"  # via the host
  "sharded_ranks_cuda ShardedTrainingTest.CudaParametersThroughHostStagingMatchUnsharded"  # 1 GPU
  "sharded_ranks_cuda ShardedTrainingTest.CudaParametersOnNcclMatchUnsharded"  # ZeRO; 2 GPUs
  "nccl_test NcclOneRankTest.AllgatherBroadcastAlltoallReducescatterBarrier"  # issue 32 #2: empty
  "nccl_test NcclOneRankTest.EmptyTensorsCompleteWithoutNccl"  # issue 32 #2: every op, fused, in op
  "nccl_test NcclTwoRankTest.EmptyBlocksOfOneRankBesideTheOthersData"  # issue 32 #2; 2 GPUs
  "coordinator_cuda CudaRuntimeTest.AFusedNcclBatchHasOneDeviceSpanAndEveryTensorsOperation"  # 32 #4
  "framework_cuda CudaConvTest.ConvolutionAndBiasGradientMatchCpuOverShapes"  # i32: cuDNN algos, bias grad
  "framework_cuda CudaConvTest.Tf32ConvolutionStaysWithinTf32RoundingOfTheCpu"  # i32: TF32 opt-in
  "framework_cuda CudaConvTest.DeterministicModeGivesTheSameBitsTwice"        # i32: deterministic algos
  "framework_cuda CudaTest.BatchNormSumsMatchCpu"  # i32: BN sums on cuDNN's reduction
  "framework_cuda CudaTest.OverlappingPoolGradientsMatchCpuAndRepeatBitForBit"  # i29: no atomics
  "framework_cuda CudaGraphGpu.TrainingStepMatchesEager"  # i32: --cuda-graph's step = eager
  "framework_cuda CudaGraphGpu.HostReadInsideACaptureIsRefusedByName"  # i32: capture refusals
  "framework_cuda CudaGraphGpu.CaptureTemporariesStayReservedForTheGraph"  # i32: private pool
  "framework_cuda CudaGraphGpu.ASecondCaptureWhileOneIsOpenIsRefused"  # i32: one capture at a time
  "framework_cuda FusedLinearReluCuda.MatchesTheUnfusedOpsOnTheGpu"  # i32: cuBLASLt bias+ReLU
  "framework_cuda FusedLinearReluCuda.InDeterministicModeItIsTheUnfusedOpsBitForBit"  # i32
)

# The main job against PyTorch eager: each model at each batch size, 1 rank, epoch 2's samples/s.
compare_models=(mlp cnn)
compare_batches=(64 512)
compare_images=20000  # the bundle's training slice; in place, --train-subset of the full set

# Libraries by soname: glibc's (every Linux machine has them, matched to its kernel) and the
# CUDA ones (the GPU machine's, matched to its driver). Everything else a binary needs travels.
glibc_re='^(linux-vdso|ld-linux[-a-z0-9_]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[-a-z_.0-9]*|nvJitLink|cufft|curand|cusparse|cusolver|nvToolsExt|cupti)\.so'

# ---------------------------------------------------------------------------------------------
# Running the steps. Set by the mode: bin (the binaries), data_dir, log_dir, kolo_ld (the
# LD_LIBRARY_PATH Kolo's binaries run with; empty: unchanged), deadline (epoch seconds after
# which no step starts; each step's cap is cut to it).

# capped SECONDS CMD...: runs CMD with Kolo's library path, killed after SECONDS or at the
# deadline, whichever is first. Returns 124 (timeout's code) without running when the budget is
# spent.
capped() {
  local cap="$1" left
  shift
  left=$((deadline - $(date +%s)))
  ((left < cap)) && cap=$left
  if ((cap < 5)); then
    echo "gpu-check: not started, the run's time budget is spent: $*"
    return 124
  fi
  if [[ -n "$kolo_ld" ]]; then
    timeout -k 5 "$cap" env LD_LIBRARY_PATH="$kolo_ld" "$@"
  else
    timeout -k 5 "$cap" "$@"
  fi
}

# why RC: words for a failed step's exit status.
why() { if [[ "$1" == 124 || "$1" == 137 ]]; then echo "timed out"; else echo "exit $1"; fi; }

run_test() {
  local name="$1" binary="$2" rc=0
  shift 2
  capped 90 "$bin/$binary" "$@" >"$log_dir/$name.log" 2>&1 || rc=$?
  local passed skipped
  passed=$(grep -E '^\[  PASSED  \]' "$log_dir/$name.log" | head -1)
  # gtest's count: "[  SKIPPED ] N test(s), listed below:" (absent when none was skipped).
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\},.*/\1/p' "$log_dir/$name.log" | head -1)
  skipped=${skipped:-0}
  if ((rc == 0)); then
    note "test $name: ok: $passed $skipped skipped"
  else
    fail "test $name: FAILED ($(why "$rc"); log: $log_dir/$name.log) $passed"
    # The failed tests' names in the summary; their messages and the log's end above it.
    summary+=("$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log_dir/$name.log" | sort -u | sed 's/^/    /')")
    grep -E '^\[  FAILED  \]|Failure' -A3 "$log_dir/$name.log" | head -40
    tail -5 "$log_dir/$name.log"
  fi
}

run_gpu_tests() {
  local entry log test words
  for entry in "${gpu_test_runs[@]}"; do
    read -r -a words <<<"$entry"  # name, binary, gtest arguments (split, never globbed)
    run_test "${words[@]}"
  done
  for entry in "${confirms[@]}"; do
    read -r log test <<<"$entry"
    if grep -qE "^\[       OK \] $test " "$log_dir/$log.log" 2>/dev/null; then
      note "  confirmed on this GPU: $test"
    elif grep -qE "^\[  SKIPPED \] $test" "$log_dir/$log.log" 2>/dev/null; then
      # GTEST_SKIP's message is the line above "[  SKIPPED ]".
      note "  skipped here ($(grep -B1 -E "^\[  SKIPPED \] $test" "$log_dir/$log.log" | head -1)): $test"
    else
      fail "  NOT confirmed (failed or did not run, $log_dir/$log.log): $test"
    fi
  done
}

# main_job NP: the main job with --device cuda on NP ranks (one GPU each), as a user runs it.
main_job() {
  local np="$1" rc=0
  local log="$log_dir/main-np$np.log"
  capped 120 "$bin/kolorun" -np "$np" "$bin/train_fashion_mnist" --device cuda \
    --epochs "${KOLO_GPU_CHECK_EPOCHS:-1}" --data-dir "$data_dir" >"$log" 2>&1 || rc=$?
  if ((rc == 0)); then
    note "main job, $np rank(s), --device cuda: $(grep -iE 'samples/s|accuracy' "$log" | tail -2 | tr '\n' ' ')"
  else
    fail "main job, $np rank(s): FAILED ($(why "$rc"); log: $log)"
    tail -20 "$log"
  fi
}

# epoch2_rate LOG: epoch 2's samples/s as the main job and the reference print it.
epoch2_rate() { sed -n 's|.*epoch 2/2:.* \([0-9][0-9]*\) samples/s.*|\1|p' "$1" | tail -1; }

# compare MODEL BATCH: epoch 2's samples/s of Kolo's built-in stack and of PyTorch eager, same
# GPU, same model, batch, data slice and SGD; the ratio is Kolo's over PyTorch's.
compare() {
  local model="$1" batch="$2" rc=0
  local klog="$log_dir/main-$model-$batch.log" tlog="$log_dir/torch-$model-$batch.log"
  local args=(--model "$model" --batch-size "$batch" --epochs 2 --data-dir "$data_dir"
    --train-subset "$compare_images")
  capped 60 "$bin/kolorun" -np 1 "$bin/train_fashion_mnist" --device cuda "${args[@]}" \
    --test-subset 1000 >"$klog" 2>&1 || rc=$?
  local kolo torch ratio
  kolo=$(epoch2_rate "$klog")
  if ((rc != 0)) || [[ -z "$kolo" ]]; then
    fail "main job $model batch $batch: FAILED ($(why "$rc"); log: $klog)"
    tail -10 "$klog"
    return
  fi
  if [[ -z "$python" ]]; then
    note "main job $model batch $batch: kolo $kolo samples/s; PyTorch reference skipped (no python3 with torch)"
    return
  fi
  rc=0
  kolo_ld="" capped 60 "$python" "$reference" --device cuda "${args[@]}" >"$tlog" 2>&1 || rc=$?
  torch=$(epoch2_rate "$tlog")
  if ((rc != 0)) || [[ -z "$torch" ]]; then
    fail "main job $model batch $batch: kolo $kolo samples/s; PyTorch reference FAILED ($(why "$rc"); log: $tlog)"
    tail -10 "$tlog"
    return
  fi
  ratio=$(awk -v k="$kolo" -v t="$torch" 'BEGIN { printf "%.2f", k / t }')
  note "main job $model batch $batch: kolo $kolo samples/s, torch $torch samples/s, kolo/torch ${ratio}x"
}

# compare_graph MODEL: --cuda-graph (graph_step.h) at batch 64, where launch overhead dominates
# (issue 32's goal: 1.3x PyTorch eager), against the eager run and the reference that compare
# MODEL 64 just logged. The log's "cuda graph: N steps replayed" shows that the graph ran.
compare_graph() {
  local model="$1" batch=64 rc=0
  local glog="$log_dir/main-$model-$batch-cuda-graph.log"
  capped 60 "$bin/kolorun" -np 1 "$bin/train_fashion_mnist" --device cuda --cuda-graph \
    --model "$model" --batch-size "$batch" --epochs 2 --data-dir "$data_dir" \
    --train-subset "$compare_images" --test-subset 1000 >"$glog" 2>&1 || rc=$?
  local graph eager torch replays
  graph=$(epoch2_rate "$glog")
  replays=$(sed -n 's|.*cuda graph: \([0-9]*\) steps replayed.*|\1|p' "$glog" | tail -1)
  if ((rc != 0)) || [[ -z "$graph" ]]; then
    fail "main job $model batch $batch --cuda-graph: FAILED ($(why "$rc"); log: $glog)"
    tail -10 "$glog"
    return
  fi
  eager=$(epoch2_rate "$log_dir/main-$model-$batch.log")
  torch=$(epoch2_rate "$log_dir/torch-$model-$batch.log")
  local ratios
  ratios=$(awk -v g="$graph" -v e="${eager:-0}" -v t="${torch:-0}" 'BEGIN {
    ge = "n/a"; gt = "n/a"
    if (e > 0) ge = sprintf("%.2fx", g / e)
    if (t > 0) gt = sprintf("%.2fx (goal 1.3x)", g / t)
    printf "graph/eager %s, graph/torch %s", ge, gt }')
  note "main job $model batch $batch --cuda-graph: kolo $graph samples/s ($replays steps replayed), $ratios"
}

compare_with_torch() {
  local model batch
  for model in "${compare_models[@]}"; do
    for batch in "${compare_batches[@]}"; do compare "$model" "$batch"; done
    compare_graph "$model"
  done
}

# bench NP: kolo-bench allreduce on nccl beside raw ncclAllReduce on the same buffers.
bench() {
  local np="$1" rc=0
  local log="$log_dir/bench-np$np.log"
  capped 90 "$bin/kolorun" -np "$np" "$bin/kolo-bench" allreduce --backend nccl -b 4KiB \
    -e 256MiB -f 4 --check >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    fail "kolo-bench allreduce nccl, $np rank(s): FAILED ($(why "$rc"); log: $log)"
    tail -20 "$log"
    return
  fi
  note "kolo-bench allreduce nccl, $np rank(s): size(B) kolo_us nccl_us kolo/nccl #wrong"
  # Columns: size count type redop time algbw busbw #wrong [nccl(us) kolo/nccl].
  summary+=("$(sed 's/^\[[0-9]*\] //' "$log" | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {
      printf "    %10s %10s %10s %9s %s\n", $1, $5, (NF >= 10 ? $9 : "-"),
             (NF >= 10 ? $10 : "-"), $8 }')")
  echo "${summary[-1]}"
}

# fusion NP: ResNet-50's 161 gradients on the GPU through the coordinator: nccl's device fusion
# buffer (default), fusion off, one flat allreduce, and the default with the timeline.
fusion() {
  local np="$1" rc=0
  local log="$log_dir/fusion-np$np.log"
  capped 60 "$bin/kolorun" -np "$np" "$bin/kolo-bench" fusion --device cuda --iters 20 \
    --warmup 3 >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    fail "kolo-bench fusion --device cuda, $np rank(s): FAILED ($(why "$rc"); log: $log)"
    tail -20 "$log"
    return
  fi
  local rows without with
  rows=$(sed 's/^\[[0-9]*\] //' "$log" | grep -E '^(fusion|flat) ')  # its rows, not other output
  without=$(awk '/^fusion default +[0-9]/ { print $(NF-1) }' <<<"$rows")
  with=$(awk '/^fusion default \+ timeline/ { print $(NF-1) }' <<<"$rows")
  note "kolo-bench fusion --device cuda, $np rank(s): step_ms without timeline $without, with $with, with/without $(awk -v a="$with" -v b="$without" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')x"
  summary+=("$(sed 's/^/    /' <<<"$rows")")
  echo "${summary[-1]}"
}

# checksum_run NAME ENV NP ARGS...: the main job on the GPU, a short subset, printing its
# parameters' SHA-256, which it leaves in `digest` (empty when the job failed, which is noted).
checksum_run() {
  local name="$1" env="$2" np="$3" rc=0
  shift 3
  local log="$log_dir/$name.log"
  digest=""
  capped 60 env $env "$bin/kolorun" -np "$np" "$bin/train_fashion_mnist" --device cuda \
    --epochs 1 --train-subset 6400 --test-subset 1000 --data-dir "$data_dir" --print-checksum \
    "$@" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    fail "main job $name: FAILED ($(why "$rc"); log: $log)"
    tail -10 "$log"
    return
  fi
  digest=$(sed -n 's/.*parameters sha256 \([0-9a-f]*\).*/\1/p' "$log" | head -1)
}

# reproducible: deterministic mode (docs/determinism.md) gives the same parameters twice on the
# GPU (issue 29: cuDNN's deterministic algorithms, gather-form pooling, one-block reductions),
# and with --cuda-graph (issue 32);
# ZeRO stage 2 on CUDA parameters (2 ranks through host staging) against the unsharded job.
reproducible() {
  local a b
  checksum_run deterministic-1 KOLO_DETERMINISTIC=1 1 && a=$digest
  checksum_run deterministic-2 KOLO_DETERMINISTIC=1 1 && b=$digest
  if [[ -n "$a" && "$a" == "$b" ]]; then
    note "main job, deterministic mode, twice on the GPU: the same parameters (sha256 ${a:0:16})"
  elif [[ -n "$a" && -n "$b" ]]; then
    fail "main job, deterministic mode, twice on the GPU: parameters DIFFER (${a:0:16} vs ${b:0:16})"
  fi
  # --cuda-graph replays the eager step's kernels with the same arguments (graph_step.h), and
  # with one rank DistributedOptimizer's step is SGD's: the same parameters as the eager run.
  local g=""
  checksum_run deterministic-cuda-graph KOLO_DETERMINISTIC=1 1 --cuda-graph && g=$digest
  if [[ -n "$a" && "$a" == "$g" ]]; then
    note "main job --cuda-graph, deterministic mode: the eager run's parameters (sha256 ${g:0:16})"
  elif [[ -n "$a" && -n "$g" ]]; then
    fail "main job --cuda-graph, deterministic mode: parameters DIFFER from the eager run's (${g:0:16} vs ${a:0:16})"
  fi
  checksum_run shard0 KOLO_GPU_OPERATIONS=tcp 2 --shard 0 && a=$digest
  checksum_run shard2 KOLO_GPU_OPERATIONS=tcp 2 --shard 2 && b=$digest
  if [[ -n "$a" && -n "$b" ]]; then
    if [[ "$a" == "$b" ]]; then
      note "main job --shard 2 vs --shard 0, 2 ranks on one GPU: bit-identical parameters"
    else
      note "main job --shard 2 vs --shard 0, 2 ranks on one GPU: parameters differ (${a:0:16} vs ${b:0:16}; on the CPU they are equal)"
    fi
  fi
}

# run_gpu_steps GPUS: everything that needs a GPU, in the order of the summary.
# The short benches come before the main-job comparisons, so that a run cut by its time budget
# still measures nccl and the timeline's cost (issue 32 items 2 and 4).
run_gpu_steps() {
  local gpus="$1"
  run_gpu_tests
  bench 1
  fusion 1
  [[ "$mode" == in-place ]] && main_job 1
  compare_with_torch
  reproducible
  ((gpus > 1)) && main_job "$gpus"
  ((gpus > 1)) && bench "$gpus"
  ((gpus > 1)) && fusion "$gpus"
}

count_gpus() {
  local n=0
  if [[ "${KOLO_GPU_CHECK_NO_GPU:-0}" == 1 ]]; then
    echo 0
    return
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  fi
  if ((n > 0)) && [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    n=$(awk -F, '{print NF}' <<<"$CUDA_VISIBLE_DEVICES")
  fi
  echo "$n"
}

# find_python: KOLO_PYTHON, else the first python3 that imports torch; empty when none.
find_python() {
  local p
  for p in ${KOLO_PYTHON:-} python3 /usr/bin/python3 /usr/local/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1; then
      command -v "$p"
      return
    fi
  done
}

print_summary() {
  echo
  echo "=== gpu-check summary ($1, $(date -u +%FT%TZ)) ==="
  printf '%s\n' "${summary[@]}"
  # SECONDS: bash's count since the script started (the bundle's run must stay under 3 minutes).
  if ((status == 0)); then echo "gpu-check: PASS (${SECONDS} s)"; else echo "gpu-check: FAIL (${SECONDS} s)"; fi
}

# ---------------------------------------------------------------------------------------------
# The bundle's run: CUDA library discovery and the library check.

# cuda_search_dirs: the folders that may hold the CUDA libraries, in the order they are tried:
# KOLO_CUDA_LIB_DIRS, the toolkit (CUDA_HOME, /usr/local/cuda*), then an installed PyTorch
# wheel's nvidia packages (nvidia/<lib>/lib, nvidia/cu13/lib, ...) and torch/lib, found without
# importing torch.
cuda_search_dirs() {
  local d
  tr ':' '\n' <<<"${KOLO_CUDA_LIB_DIRS:-}"
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    [[ -n "$d" ]] && printf '%s\n' "$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib"
  done
  local p
  for p in ${KOLO_PYTHON:-} python3 /usr/bin/python3; do
    command -v "$p" >/dev/null 2>&1 || continue
    "$p" - 2>/dev/null <<'PY'
import glob, importlib.util, os
for name in ("nvidia", "torch"):
    spec = importlib.util.find_spec(name)
    for root in (spec.submodule_search_locations or []) if spec else []:
        for pattern in ("*/lib", "*/*/lib", "lib"):
            for d in sorted(glob.glob(os.path.join(root, pattern))):
                print(d)
PY
  done
}

# find_cuda_libs: for each CUDA library the binaries need (cuda-libs.txt, written at packing),
# the first search folder holding it goes on cuda_dirs; otherwise the loader's cache (ldconfig)
# may have it. Each library's place goes to the summary; a missing one is named.
find_cuda_libs() {
  local soname d found dirs
  mapfile -t dirs < <(cuda_search_dirs | awk 'NF && !seen[$0]++')
  cuda_dirs=()
  cuda_missing=()
  local places=()
  while read -r soname; do
    [[ -z "$soname" ]] && continue
    found=""
    for d in "${dirs[@]}"; do
      if [[ -e "$d/$soname" ]]; then
        found="$d"
        break
      fi
    done
    if [[ -n "$found" ]]; then
      [[ " ${cuda_dirs[*]} " == *" $found "* ]] || cuda_dirs+=("$found")
      places+=("$soname $found")
    elif ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$soname "; then
      places+=("$soname (the loader's cache)")
    else
      cuda_missing+=("$soname")
      places+=("$soname NOT FOUND")
    fi
  done <"$bundle/cuda-libs.txt"
  note "cuda libraries: $(IFS=';'; echo "${places[*]}" | sed 's/;/; /g')"
  ((${#cuda_missing[@]})) &&
    say "searched: ${dirs[*]} (KOLO_CUDA_LIB_DIRS adds folders)"
  return 0
}

# check_libraries: every unpacked binary's and library's dependencies, with the path the runs
# use: each must resolve in the bundle, to glibc's, or (CUDA ones) anywhere; an unresolved CUDA
# library is one the GPU machine must provide, any other unresolved one is a packing error.
check_libraries() {
  local f line lib path
  if ! command -v ldd >/dev/null 2>&1; then
    note "libraries: not checked (no ldd on this machine)"
    return
  fi
  local -A bad=() outside=() later=()  # library -> the first file needing it (or its path)
  for f in "$unpacked"/bin/* "$unpacked"/lib/*; do
    while read -r line; do
      lib=$(awk '{print $1}' <<<"$line")
      path=$(awk '$2 == "=>" {print $3}' <<<"$line")
      if [[ "$line" == *"not found"* ]]; then
        if [[ "$lib" =~ $cuda_re ]]; then
          later[$lib]=1
        else
          bad[$lib]="${bad[$lib]:-needed by $(basename "$f")}"
        fi
      elif [[ -n "$path" && "$path" != "$unpacked/lib/"* && ! "$lib" =~ $glibc_re &&
        ! "$lib" =~ $cuda_re ]]; then
        outside[$lib]="${outside[$lib]:-$path, needed by $(basename "$f")}"
      fi
    done < <(LD_LIBRARY_PATH="$kolo_ld" ldd "$f" 2>&1 | grep -E '=>|not found')
  done
  local n_bin n_lib
  n_bin=$(find "$unpacked/bin" -type f | wc -l)
  n_lib=$(find "$unpacked/lib" -type f | wc -l)
  if ((${#bad[@]} + ${#outside[@]} == 0)); then
    note "libraries: $n_bin binaries, $n_lib carried libraries: every non-CUDA library resolves in the bundle or to glibc"
  fi
  for lib in "${!bad[@]}"; do fail "libraries: $lib NOT FOUND (${bad[$lib]}): the bundle lacks it"; done
  for lib in "${!outside[@]}"; do
    fail "libraries: $lib resolves outside the bundle (${outside[$lib]}): the bundle lacks it"
  done
  if ((${#later[@]})); then
    note "libraries: CUDA libraries not found here, to be found on the GPU machine: ${!later[*]}"
  else
    note "libraries: every CUDA library the binaries need resolves here"
  fi
}

# ---------------------------------------------------------------------------------------------
# The modes.

run_bundle() {
  mode=bundle
  bundle="$(cd "$1" && pwd)" || exit 1
  deadline=$(($(date +%s) + ${KOLO_GPU_CHECK_BUDGET_S:-170}))
  for f in payload.tar.gz cuda-libs.txt torch_eager_reference.py data; do
    [[ -e "$bundle/$f" ]] || { say "$bundle is not a bundle: $f is missing (scripts/gpu-check.sh --bundle packs one)"; exit 1; }
  done
  unpacked=$(mktemp -d "${TMPDIR:-/tmp}/kolo-gpu-bundle.XXXXXX") || exit 1
  # The unpacked binaries go at exit; the logs stay when something failed (the summary names them).
  trap 'rm -rf "$unpacked/bin" "$unpacked/lib"; ((status)) || rm -rf "$unpacked"' EXIT
  log_dir="$unpacked/logs"
  mkdir -p "$log_dir"
  tar -xzf "$bundle/payload.tar.gz" -C "$unpacked" || { say "cannot unpack $bundle/payload.tar.gz"; exit 1; }
  note "bundle $bundle: $(tr '\n' ' ' <"$bundle/BUILD-INFO" 2>/dev/null)"
  say "unpacked in $unpacked"
  bin="$unpacked/bin"
  data_dir="$bundle/data"
  reference="$bundle/torch_eager_reference.py"
  find_cuda_libs
  kolo_ld="$unpacked/lib"
  ((${#cuda_dirs[@]})) && kolo_ld+=$(printf ':%s' "${cuda_dirs[@]}")
  kolo_ld+="${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  check_libraries
  local gpus
  gpus=$(count_gpus)
  if ((gpus == 0)); then
    note "gpu: none visible (nvidia-smi lists none): the GPU steps are skipped"
    print_summary "bundle, no GPU"
    exit "$status"
  fi
  note "gpu: $gpus, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  if ((${#cuda_missing[@]})); then
    fail "gpu steps: not run, CUDA libraries missing: ${cuda_missing[*]} (set KOLO_CUDA_LIB_DIRS)"
    print_summary "bundle, $gpus GPU(s)"
    exit 1
  fi
  python=$(find_python)
  [[ -n "$python" ]] && say "PyTorch reference with $python"
  run_gpu_steps "$gpus"
  print_summary "bundle, $gpus GPU(s)"
  exit "$status"
}

# The in-place mode's prerequisites: say everything that is missing at once.
check_prerequisites() {
  local missing=()
  need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$1 ($2)"); }
  need_header() {
    local h
    for h in "${@:2}"; do [[ -e "$h" ]] && return 0; done
    missing+=("$1")
  }
  need_cmd cmake "apt-get install cmake"
  need_cmd g++ "apt-get install g++"
  need_cmd make "apt-get install make"
  need_cmd nvcc "the CUDA toolkit, /usr/local/cuda/bin"
  need_header "Boost headers (apt-get install libboost-dev)" /usr/include/boost/asio.hpp
  need_header "nlohmann-json (apt-get install nlohmann-json3-dev)" /usr/include/nlohmann/json.hpp
  need_header "GoogleTest (apt-get install libgtest-dev libgmock-dev)" /usr/include/gtest/gtest.h
  need_header "OpenBLAS (apt-get install libopenblas-dev)" /usr/include/cblas.h \
    /usr/include/x86_64-linux-gnu/cblas.h /usr/include/openblas/cblas.h
  need_header "zlib (apt-get install zlib1g-dev)" /usr/include/zlib.h
  need_header "NCCL (nccl.h, part of the CUDA toolkit here)" /usr/local/cuda/include/nccl.h \
    /usr/include/nccl.h
  if ((${#missing[@]})); then
    say "missing prerequisites:"
    for m in "${missing[@]}"; do say "  - $m"; done
    say "install them (scripts/setup.sh --deps-only installs the Debian ones) and run again,"
    say "or pack a bundle on a machine that has them: scripts/gpu-check.sh --bundle DIR."
    exit 1
  fi
  say "cmake $(cmake --version | head -1 | awk '{print $3}'), $(g++ --version | head -1), $(nvcc --version | tail -1)"
}

# build BUILD_DIR LOG_DIR CMAKE_ARGS...: configures and builds the targets; exits on failure.
build() {
  local build_dir="$1" logs="$2" start
  shift 2
  mkdir -p "$logs"
  start=$(date +%s)
  if ! cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKOLO_WITH_CUDA=ON \
    -DKOLO_WITH_NCCL=ON "$@" >"$logs/configure.log" 2>&1; then
    tail -30 "$logs/configure.log"
    say "configure failed (log: $logs/configure.log)"
    exit 1
  fi
  if ! cmake --build "$build_dir" -j "${KOLO_GPU_CHECK_JOBS:-$(nproc)}" --target "${targets[@]}" \
    >"$logs/build.log" 2>&1; then
    grep -E "error|Error" "$logs/build.log" | head -30
    say "build failed (log: $logs/build.log)"
    exit 1
  fi
  note "build (${targets[*]}): $(($(date +%s) - start)) s"
}

run_in_place() {
  mode=in-place
  local build_dir="${1:-build-gpu}"
  export PATH="$PATH:/usr/local/cuda/bin"
  local gpus
  gpus=$(count_gpus)
  if ((gpus == 0)); then
    say "no GPU visible (nvidia-smi lists none): nothing to check here. The CUDA build and the"
    say "GPU-free tests run in the ordinary build (scripts/setup.sh); run this on a GPU machine,"
    say "or pack a bundle here for one: scripts/gpu-check.sh --bundle DIR (see its header)."
    exit 0
  fi
  say "$gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  check_prerequisites
  log_dir="$build_dir/gpu-check"
  build "$build_dir" "$log_dir" -DCMAKE_CUDA_ARCHITECTURES=native
  bin="$build_dir/bin"
  data_dir="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
  kolo_ld=""
  deadline=$(($(date +%s) + ${KOLO_GPU_CHECK_BUDGET_S:-3600}))
  reference="scripts/torch_eager_reference.py"
  python=$(find_python)
  if [[ ! -d "$data_dir" ]]; then
    fail "main job: not run, no Fashion-MNIST at $data_dir (apt-get install dataset-fashion-mnist, or DATA_DIR=...)"
    compare_models=()
  fi
  run_gpu_steps "$gpus"
  print_summary "$gpus GPU(s)"
  exit "$status"
}

# ---------------------------------------------------------------------------------------------
# Packing a bundle.

# slice_idx SRC DST COUNT HEADER_BYTES ITEM_BYTES: the first COUNT items of an IDX .gz file,
# with the count in its header rewritten (big-endian, bytes 4-7).
slice_idx() {
  local src="$1" dst="$2" count="$3" header="$4" item="$5"
  {
    zcat "$src" | head -c 4
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((count >> 24 & 255)) $((count >> 16 & 255)) \
      $((count >> 8 & 255)) $((count & 255)))"
    zcat "$src" | tail -c +9 | head -c $((header - 8 + count * item))
  } | gzip -6 >"$dst"
}

pack_data() {
  local src="${DATA_DIR:-/usr/share/datasets/fashion-mnist}" out="$1/data" f
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [[ -f "$src/$f" ]] || { say "no Fashion-MNIST at $src ($f missing): apt-get install dataset-fashion-mnist, or DATA_DIR=..."; exit 1; }
  done
  mkdir -p "$out"
  slice_idx "$src/train-images-idx3-ubyte.gz" "$out/train-images-idx3-ubyte.gz" \
    "$compare_images" 16 784
  slice_idx "$src/train-labels-idx1-ubyte.gz" "$out/train-labels-idx1-ubyte.gz" \
    "$compare_images" 8 1
  cp "$src"/t10k-*-ubyte.gz "$out/"
}

# pack_binaries BIN_DIR STAGE: the targets' binaries and every library they need that is neither
# glibc's nor CUDA's, stripped, in STAGE/bin and STAGE/lib; the CUDA sonames in cuda-libs.txt.
pack_binaries() {
  local from="$1" stage="$2" t line lib path
  mkdir -p "$stage/bin" "$stage/lib"
  : >"$stage/cuda-libs.txt"
  for t in "${targets[@]}"; do
    [[ -x "$from/$t" ]] || { say "$from/$t is missing: build the target $t"; exit 1; }
    cp "$from/$t" "$stage/bin/"
    strip "$stage/bin/$t"
    while read -r line; do
      lib=$(awk '{print $1}' <<<"$line")
      path=$(awk '$2 == "=>" {print $3}' <<<"$line")
      if [[ "$lib" =~ $cuda_re ]]; then
        echo "$lib" >>"$stage/cuda-libs.txt"
      elif [[ "$lib" =~ $glibc_re ]]; then
        continue
      elif [[ -z "$path" || "$line" == *"not found"* ]]; then
        say "$t needs $lib, which is not found here: cannot pack it"
        exit 1
      elif [[ ! -e "$stage/lib/$lib" ]]; then
        cp -L "$path" "$stage/lib/$lib"
        chmod u+w "$stage/lib/$lib"
        strip --strip-unneeded "$stage/lib/$lib"
      fi
    done < <(ldd "$from/$t" | grep -E '=>')
  done
  sort -u -o "$stage/cuda-libs.txt" "$stage/cuda-libs.txt"
}

pack_bundle() {
  local dir="$1" arch="$2" from="$3" build_dir="$4" start
  start=$(date +%s)
  if [[ -z "$from" ]]; then
    build "$build_dir" "$build_dir/gpu-check" -DKOLO_ARCH=x86-64-v3 \
      -DCMAKE_CUDA_ARCHITECTURES="${arch//,/;}" -DKOLO_WITH_TORCH=OFF
    from="$build_dir"
  fi
  # Replaces an earlier bundle only: anything else in DIR may be someone's.
  if [[ -e "$dir" && ! -f "$dir/BUILD-INFO" && -n "$(ls -A "$dir" 2>/dev/null)" ]]; then
    say "$dir exists and is not a bundle (no BUILD-INFO): name an empty or new folder"
    exit 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir" || exit 1
  local stage
  stage=$(mktemp -d) || exit 1
  pack_binaries "$from/bin" "$stage"
  tar -czf "$dir/payload.tar.gz" -C "$stage" bin lib
  mv "$stage/cuda-libs.txt" "$dir/"
  pack_data "$dir"
  cp "$self" "$dir/gpu-check.sh"
  cp scripts/torch_eager_reference.py "$dir/"
  cat >"$dir/run.sh" <<'EOF'
#!/usr/bin/env bash
# Kolo's GPU check bundle (scripts/gpu-check.sh --bundle): runs every GPU test, the main job
# against PyTorch eager (eager, and --cuda-graph at batch 64), kolo-bench allreduce/fusion on this machine's GPU, and prints one
# summary. Needs the NVIDIA driver, the CUDA libraries (a toolkit or a PyTorch wheel's) and
# python3 with torch. Usage: bash DIR/run.sh   (from any folder)
exec bash "$(dirname "$0")/gpu-check.sh" --run-bundle "$(dirname "$0")"
EOF
  chmod +x "$dir/run.sh" "$dir/gpu-check.sh"
  # What the binaries were built for, as the build's cache says (--from-build: that build's).
  cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$from/CMakeCache.txt" 2>/dev/null | head -1; }
  printf 'commit %s\npacked %s\nfrom %s\nkolo-arch %s\ncuda-arch %s\n' \
    "$(git describe --always --dirty 2>/dev/null || echo unknown)" "$(date -u +%FT%TZ)" "$from" \
    "$(cache_value KOLO_ARCH)" "$(cache_value CMAKE_CUDA_ARCHITECTURES)" >"$dir/BUILD-INFO"
  local files size libs
  files=$(tar -tzf "$dir/payload.tar.gz" | grep -c '[^/]$')
  libs=$(ls "$stage/lib" | tr '\n' ' ')
  rm -rf "$stage"
  size=$(du -sb "$dir" | awk '{print $1}')
  note "bundle $dir: $((size / 1024 / 1024)) MiB ($size bytes), $files files in payload.tar.gz, built and packed in $(($(date +%s) - start)) s"
  note "carried libraries: $libs"
  note "CUDA libraries from the GPU machine: $(tr '\n' ' ' <"$dir/cuda-libs.txt")"
  if ((size >= 64 * 1024 * 1024)); then
    say "the bundle is over 64 MiB ($size bytes): the device tool cannot carry it"
    exit 1
  fi
  # The device tool carries paths inside the checkout and runs its command in the checkout's root.
  local root
  root=$(pwd)
  if [[ "$dir" == "$root/"* ]]; then
    say "run it on a GPU machine: bash $dir/run.sh; with the device tool: carry [\"${dir#"$root/"}\"], command: bash ${dir#"$root/"}/run.sh"
  else
    say "run it on a GPU machine: bash $dir/run.sh (to carry it with the device tool, pack it inside the checkout: --bundle build-bundle)"
  fi
}

main() {
  local bundle_dir="" arch=90 from="" build_dir=build-gpu
  case "${1:-}" in
    --run-bundle)
      [[ -n "${2:-}" ]] || { say "--run-bundle: expected a bundle folder"; exit 2; }
      run_bundle "$2"
      ;;
    --bundle) ;;
    -h | --help)
      sed -n '2,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      say "unknown option '$1' (expected --bundle DIR, --run-bundle DIR, --help or a build folder)"
      exit 2
      ;;
    *)
      cd "$(dirname "$self")/.." || exit 1
      run_in_place "${1:-}"
      ;;
  esac
  while (($#)); do
    case "$1" in
      --bundle | --arch | --from-build | --build-dir)
        [[ -n "${2:-}" ]] || { say "$1: expected a value"; exit 2; }
        ;;&
      --bundle) bundle_dir="$2" ;;
      --arch)
        [[ "$2" =~ ^[0-9]+(,[0-9]+)*$ ]] || { say "--arch: expected CUDA architectures such as 90 or 80,90, got '$2'"; exit 2; }
        arch="$2"
        ;;
      --from-build) from="$2" ;;
      --build-dir) build_dir="$2" ;;
      *)
        say "unknown argument '$1' (expected --bundle DIR [--arch 90] [--from-build BUILD] [--build-dir DIR])"
        exit 2
        ;;
    esac
    shift 2
  done
  # Relative folders are the caller's; the build runs from the repository's root.
  bundle_dir=$(realpath -m "$bundle_dir")
  [[ -n "$from" ]] && from=$(realpath -m "$from")
  build_dir=$(realpath -m "$build_dir")
  cd "$(dirname "$self")/.." || exit 1
  pack_bundle "$bundle_dir" "$arch" "$from" "$build_dir"
  print_summary "bundle packed"
}

# Sourced (a harness that calls the steps itself), it only defines them.
[[ "${BASH_SOURCE[0]}" == "$0" ]] && main "$@"
