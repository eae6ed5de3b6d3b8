#!/usr/bin/env bash
# scripts/gpu-check.sh --bundle, checked on a machine without a GPU (issue 32): packs a bundle
# from this build's binaries (--from-build: no 8-minute GPU build), checks its size and
# contents, runs its runner as the device tool would (`bash DIR/run.sh` from the checkout's
# root) and asserts the summary: the CUDA libraries found, every binary's libraries resolving
# in the bundle, the GPU steps skipped. Then the errors: a bundle missing a library it needs,
# a CUDA library nowhere to be found, a folder that is not a bundle, bad options. The PyTorch
# reference runs two tiny epochs on the CPU where a python3 with torch exists.
# Usage: gpu_bundle_test.sh BUILD_DIR SOURCE_DIR. Exits 77 (skipped) without the Fashion-MNIST
# package or without a CUDA build's test binaries.
set -uo pipefail
build="$(realpath "$1")"
src="$(realpath "$2")"
data="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
if [[ ! -f "$data/train-images-idx3-ubyte.gz" ]]; then
  echo "skipped: no Fashion-MNIST at $data (apt-get install dataset-fashion-mnist)"
  exit 77
fi
if [[ ! -x "$build/bin/nccl_test" ]]; then
  echo "skipped: $build/bin/nccl_test is missing (a build without CUDA/NCCL)"
  exit 77
fi
work=$(mktemp -d)
export TMPDIR="$work"  # the runner unpacks (and keeps failed runs' logs) there
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND, counts a failure when it fails
  local what="$1"
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
has() { grep -qF -- "$2" "$1" || { echo "  '$2' not in $1:"; sed 's/^/  | /' "$1"; return 1; }; }
lacks() { ! grep -qF -- "$2" "$1" || { echo "  '$2' unexpected in $1"; return 1; }; }

# 1. Pack.
bundle="$work/bundle"
"$src/scripts/gpu-check.sh" --bundle "$bundle" --from-build "$build" >"$work/pack.log" 2>&1
check "packing exits 0" test $? -eq 0
size=$(du -sb "$bundle" | awk '{print $1}')
check "the bundle ($size bytes) is under 64 MiB" test "$size" -lt $((64 * 1024 * 1024))
for f in run.sh gpu-check.sh torch_eager_reference.py payload.tar.gz cuda-libs.txt BUILD-INFO \
  data/train-images-idx3-ubyte.gz data/train-labels-idx1-ubyte.gz data/t10k-images-idx3-ubyte.gz \
  data/t10k-labels-idx1-ubyte.gz; do
  check "the bundle has $f" test -s "$bundle/$f"
done
tar -tzf "$bundle/payload.tar.gz" | sort >"$work/payload.txt"
for f in bin/nccl_test bin/coordinator_test bin/framework_test bin/train_fashion_mnist_models_test \
  bin/kolo-bench bin/kolorun bin/train_fashion_mnist bin/sharded_optimizer_test \
  bin/sharded_training_test bin/sharded_worker lib/libopenblas.so.0; do
  check "the payload has $f" has "$work/payload.txt" "$f"
done
check "the payload carries no glibc or CUDA library" \
  bash -c "! grep -E 'lib/(libc|libm|libpthread|libcudart|libcublas|libcudnn|libnccl)\.so' '$work/payload.txt'"
check "the CUDA libraries to find include cudart, cuBLAS and NCCL" \
  bash -c "grep -q '^libcudart.so' '$bundle/cuda-libs.txt' && grep -q '^libcublas.so' '$bundle/cuda-libs.txt' && grep -q '^libnccl.so' '$bundle/cuda-libs.txt'"
# The training slice: 20,000 images (IDX header count 0x4e20) of 784 bytes after a 16-byte header.
check "the training images are 20,000, whole" \
  test "$(zcat "$bundle/data/train-images-idx3-ubyte.gz" | head -c 8 | od -An -tx1 | tr -d ' \n')" = \
  "0000080300004e20"
check "the training images' bytes" \
  test "$(zcat "$bundle/data/train-images-idx3-ubyte.gz" | wc -c)" -eq $((16 + 20000 * 784))
check "the training labels' bytes and count" \
  test "$(zcat "$bundle/data/train-labels-idx1-ubyte.gz" | wc -c)" -eq $((8 + 20000))
check "the slice is the set's first 20,000 images" \
  test "$(zcat "$bundle/data/train-images-idx3-ubyte.gz" | tail -c +17 | md5sum)" = \
  "$(zcat "$data/train-images-idx3-ubyte.gz" | tail -c +17 | head -c $((20000 * 784)) | md5sum)"

# 2. The runner, as the device tool runs it (from the checkout's root), with no GPU.
(cd "$src" && KOLO_GPU_CHECK_NO_GPU=1 bash "$bundle/run.sh") >"$work/run.log" 2>&1
check "the runner without a GPU exits 0" test $? -eq 0
for line in "=== gpu-check summary (bundle, no GPU," \
  "cuda libraries: libcublas.so" \
  "libraries: 10 binaries, " \
  "carried libraries: every non-CUDA library resolves in the bundle or to glibc" \
  "gpu: none visible (nvidia-smi lists none): the GPU steps are skipped" \
  "gpu-check: PASS"; do
  check "the summary says '$line'" has "$work/run.log" "$line"
done
check "nothing is NOT FOUND" lacks "$work/run.log" "NOT FOUND"
check "no GPU step ran" lacks "$work/run.log" "test nccl_test"

# 2b. The GPU tests' step, sourced from the bundle's script and run here: the list runs through
# the bundle's binaries, every GPU test skips, and the summary says so test by test.
mkdir "$work/steps"
tar -xzf "$bundle/payload.tar.gz" -C "$work/steps"
(
  # shellcheck source=/dev/null
  source "$bundle/gpu-check.sh"
  # shellcheck disable=SC2034  # the variables the sourced steps read
  mode=bundle bin="$work/steps/bin" log_dir="$work/steps" kolo_ld="$work/steps/lib"
  # shellcheck disable=SC2034
  deadline=$(($(date +%s) + 120))
  run_gpu_tests
  print_summary "steps without a GPU"
) >"$work/steps.log" 2>&1
check "the GPU tests' step passes without a GPU (every test skips)" test $? -eq 0
for line in "test nccl_test: ok: [  PASSED  ]" "test coordinator_cuda: ok:" \
  "test framework_cuda: ok:" "test models_cuda: ok:" "test guard_alone: ok:" \
  "  skipped here (no CUDA device"; do
  check "the steps' summary says '$line'" has "$work/steps.log" "$line"
done
check "no confirmation is missing" lacks "$work/steps.log" "NOT confirmed"

# 3. A CUDA library nowhere to be found is named; without a GPU that is no failure.
echo "libkolo_absent_cuda_test.so.1" >>"$bundle/cuda-libs.txt"
KOLO_GPU_CHECK_NO_GPU=1 bash "$bundle/run.sh" >"$work/absent.log" 2>&1
check "an absent CUDA library without a GPU still exits 0" test $? -eq 0
check "the absent CUDA library is named" has "$work/absent.log" \
  "libkolo_absent_cuda_test.so.1 NOT FOUND"

# 4. A payload without a library its binaries need: the runner fails and names it.
mkdir "$work/unpacked"
tar -xzf "$bundle/payload.tar.gz" -C "$work/unpacked"
rm "$work/unpacked/lib/libopenblas.so.0"
tar -czf "$bundle/payload.tar.gz" -C "$work/unpacked" bin lib
KOLO_GPU_CHECK_NO_GPU=1 bash "$bundle/run.sh" >"$work/missing.log" 2>&1
check "a missing library fails the run" test $? -ne 0
check "the missing library is named" has "$work/missing.log" \
  "libraries: libopenblas.so.0 resolves outside the bundle (/"
check "the summary says FAIL" has "$work/missing.log" "gpu-check: FAIL"

# 5. Wrong uses: each a clear message and a non-zero exit.
wrong() {  # wrong EXPECTED ARGS...: gpu-check.sh ARGS fails saying EXPECTED
  "$src/scripts/gpu-check.sh" "${@:2}" >"$work/wrong.log" 2>&1 && { echo "  exit 0"; return 1; }
  has "$work/wrong.log" "$1"
}
check "a folder that is not a bundle" wrong "is not a bundle: payload.tar.gz is missing" \
  --run-bundle "$work"
check "--arch that is not architectures" wrong "--arch: expected CUDA architectures such as 90 or 80,90, got 'sm90'" \
  --bundle "$work/b2" --arch sm90
check "--bundle into a folder that is not a bundle" wrong "exists and is not a bundle" \
  --bundle "$work/unpacked" --from-build "$build"
check "an unknown argument" wrong "unknown argument '--arhc'" --bundle "$work/b3" --arhc 90

# 6. The PyTorch reference on the CPU, two tiny epochs (where a python3 has torch).
python=""
for p in /usr/bin/python3 python3; do
  "$p" -c 'import torch' >/dev/null 2>&1 && { python=$p; break; }
done
if [[ -n "$python" ]]; then
  "$python" "$bundle/torch_eager_reference.py" --model cnn --batch-size 64 --epochs 2 \
    --train-subset 256 --device cpu --data-dir "$bundle/data" >"$work/torch.log" 2>&1
  check "the reference runs" test $? -eq 0
  check "the reference prints epoch 2's samples/s" \
    bash -c "grep -qE '^epoch 2/2: .* [0-9]+ samples/s$' '$work/torch.log'"
else
  echo "note: no python3 with torch here: the reference is not run"
fi

echo "$failures failure(s)"
((failures == 0))
