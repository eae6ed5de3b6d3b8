#!/usr/bin/env bash
# --shard with --checkpoint (docs/zero.md, section 5): one unsharded file that any --shard and
# any number of ranks resumes. The learning rate is held constant (--lr-scaling none, warm-up
# over every step) so that a 1-epoch run's checkpoint is the 2-epoch run's state after epoch 1.
#   1. 2 ranks, --shard 0, 2 epochs: the reference weights.
#   2. --shard 2 for epoch 1 with --checkpoint, then --resume with --shard 1 for epoch 2: the
#      reference weights bit for bit (momentum slices gathered and scattered back exactly).
#   3. That checkpoint resumed by --shard 0 after 1 epoch: the reference again.
#   4. A 3-rank --shard 2 resume of it trains (another global batch: no bitwise claim).
#   5. A checkpoint of another model (--model mlp) refused on every rank, naming the tensor
#      and both shapes; the file is left as it was.
# Usage: shard_checkpoint_test.sh KOLORUN TRAIN_FASHION_MNIST
set -u
kolorun=$1 train=$2
export OPENBLAS_NUM_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--epochs 2 --train-subset 1280 --test-subset 200 --print-checksum --lr-scaling none
  --warmup-epochs 2)
out=""
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
# run NAME EXPECTED_RC ARGS...: the job's output in $out; 77 (no dataset) skips the test.
run() {
  local name=$1 expected=$2
  shift 2
  out=$("$kolorun" "$@" 2>&1)
  local rc=$?
  [ $rc = 77 ] && exit 77
  [ $rc = "$expected" ] || fail "$name: exit code $rc, expected $expected"
}
checksum() { grep -o 'parameters sha256 [0-9a-f]*' <<<"$out"; }

run "reference" 0 -np 2 "$train" "${common[@]}" --shard 0
reference=$(checksum)
[ -n "$reference" ] || fail "reference: no checksum"

run "stage 2, epoch 1" 0 -np 2 "$train" "${common[@]}" --epochs 1 --shard 2 \
  --checkpoint "$dir/c.kolo"
cp "$dir/c.kolo" "$dir/after1.kolo"
run "stage 1 resume" 0 -np 2 "$train" "${common[@]}" --shard 1 --checkpoint "$dir/c.kolo" --resume
grep -q "resumed from '$dir/c.kolo' after 1 epoch(s)" <<<"$out" || fail "stage 1 resume: no resume"
[ "$(checksum)" = "$reference" ] || fail "stage 1 resume gave $(checksum), unsharded $reference"

cp "$dir/after1.kolo" "$dir/c0.kolo"
run "unsharded resume" 0 -np 2 "$train" "${common[@]}" --shard 0 --checkpoint "$dir/c0.kolo" \
  --resume
[ "$(checksum)" = "$reference" ] || fail "unsharded resume gave $(checksum), expected $reference"

cp "$dir/after1.kolo" "$dir/c3.kolo"
run "3 ranks" 0 -np 3 "$train" "${common[@]}" --shard 2 --checkpoint "$dir/c3.kolo" --resume \
  --min-accuracy 0.5
grep -q "\[2\] \[rank 2\] zero stage 2 memory" <<<"$out" || fail "3 ranks: no rank 2 memory line"

cp "$dir/after1.kolo" "$dir/mlp.kolo"
run "another model" 1 -np 2 "$train" "${common[@]}" --model mlp --shard 1 \
  --checkpoint "$dir/mlp.kolo" --resume
for r in 0 1; do
  grep -q "\[$r\] .*Mismatch: .*model tensor 'fc1.weight' has shape \[128, 1568\], the model \[512, 784\]" \
    <<<"$out" || fail "another model: rank $r did not name the tensor that differs"
done
cmp -s "$dir/mlp.kolo" "$dir/after1.kolo" || fail "another model: the checkpoint was changed"
echo "PASS"
