#!/usr/bin/env bash
# --elastic end to end (docs/elastic.md, "The training stack"). Two modes:
#   fixed  2 and 3 ranks of a fixed world, with and without --elastic: the same final weights bit
#          for bit (commit and sync change nothing; the elastic sampler's batches are the fixed
#          job's when the world's size divides the training subset); and an uneven tail in
#          which two of 3 ranks have no sample trains as 1 rank with 3 times the batch
#   lost   3 ranks under kolorun --min-np 2, rank 1 killed before step 10 (commit every 4): the
#          job re-forms on 2 ranks from the commit at step 8, losing 2 steps, and finishes; and a
#          run whose rank 1 is killed right at that commit (nothing lost) ends with the same
#          weights bit for bit, because rolled-back steps leave no trace. Then with --respawn:
#          kolorun starts a replacement, which joins at a commit (3 ranks again, its State synced
#          from the others) and the job finishes. Skipped (77) when this
#          kolorun has no --min-np.
# Usage: elastic_test.sh fixed|lost KOLORUN TRAIN_FASHION_MNIST
set -u
mode=$1 kolorun=$2 train=$3
export OPENBLAS_NUM_THREADS=1
# 1200 images: divisible by 2 and 3, so the fixed job's padded shards pad nothing.
common=(--model mlp --epochs 2 --train-subset 1200 --test-subset 500 --batch-size 32)
out=""
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
# run NAME ARGS...: the job's output in $out; 77 (no dataset) skips the test.
run() {
  local name=$1
  shift
  out=$("$kolorun" "$@" 2>&1)
  local rc=$?
  [ $rc = 77 ] && exit 77
  [ $rc = 0 ] || fail "$name: exit code $rc"
}
digest() { grep -o 'final weights: fnv1a64 [0-9a-f]*' <<<"$out"; }

if [ "$mode" = fixed ]; then
  for np in 2 3; do
    run "$np ranks" -np $np "$train" "${common[@]}"
    plain=$(digest)
    [ -n "$plain" ] || fail "$np ranks: no weights digest"
    run "$np ranks --elastic" -np $np "$train" "${common[@]}" --elastic --commit-every 3
    [ "$(digest)" = "$plain" ] || fail "$np ranks: --elastic gave $(digest), the fixed job $plain"
    grep -q "world re-formed" <<<"$out" && fail "$np ranks --elastic: re-formed a fixed world"
    echo "$np ranks: $plain with and without --elastic"
  done
  # The epoch's uneven tail: 97 images in steps of 96 and 1, so ranks 1 and 2 have no sample in
  # each epoch's last step and take part with a weight of 0. Sample-weighted averaging makes 3
  # ranks of 32 the same training as 1 rank of 96 (same rates: no scaling), to float rounding:
  # the same test counts after every epoch (the weights' bits differ by the summation order).
  tail=(--model mlp --epochs 3 --train-subset 97 --test-subset 500 --lr-scaling none --elastic)
  counts() { grep -oE "epoch [0-9]/3: .*test acc [0-9.]+ \([0-9]+/500\)" <<<"$out" | sed 's/train loss.*test/test/'; }
  run "3 ranks, uneven tail" -np 3 "$train" "${tail[@]}" --batch-size 32
  three=$(counts)
  [ "$(wc -l <<<"$three")" = 3 ] || fail "3 ranks, uneven tail: expected 3 epochs"
  run "1 rank, uneven tail" -np 1 "$train" "${tail[@]}" --batch-size 96
  [ "$(counts)" = "$three" ] || fail "uneven tail: 1 rank gave $(counts), 3 ranks $three"
  echo "uneven tail: 3 ranks of 32 and 1 rank of 96 test alike after every epoch"
  exit 0
fi

[ "$mode" = lost ] || fail "unknown mode '$mode'"
if ! "$kolorun" --help 2>&1 | grep -qE '^ +--min-np'; then
  echo "SKIP: this kolorun has no --min-np (no elastic driver)"
  exit 77
fi
elastic=(-np 3 --min-np 2 "$train" "${common[@]}" --elastic --commit-every 4)
run "killed before step 10" "${elastic[@]}" --fail-rank-at 1:10
# The generation's number depends on kolorun's timing (a re-form request may reach it before it
# reaps the killed worker, and then one generation more is formed): any number.
grep -qE "\[0\] elastic: world re-formed: generation [0-9]+, 2 ranks, resumed at step 8 \(lost 2 steps\)" \
  <<<"$out" || fail "killed before step 10: no re-form line as expected"
grep -q "final test accuracy 0\.[6-9]" <<<"$out" || fail "killed before step 10: accuracy"
lost=$(digest)
echo "killed before step 10: $lost"
run "killed at the commit" "${elastic[@]}" --fail-rank-at 1:8
grep -q "resumed at step 8 (lost 0 steps)" <<<"$out" || fail "killed at the commit: re-form line"
[ "$(digest)" = "$lost" ] || fail "killed at the commit: $(digest), killed later: $lost"
echo "killed at the commit step: the same weights"
# 6000 images for 2 epochs (a few seconds), so that the replacement has started and loaded the
# data set long before the job would end.
run "replaced" -np 3 --min-np 2 --respawn "$train" --model mlp --epochs 2 --train-subset 6000 \
  --test-subset 500 --batch-size 32 --elastic --commit-every 4 --fail-rank-at 1:10
grep -qE "generation [0-9]+, 2 ranks, resumed at step 8 \(lost 2 steps\)" <<<"$out" ||
  fail "replaced: no re-form at the loss"
grep -qE "\[0\] elastic: world re-formed: generation [0-9]+, 3 ranks, resumed at step [0-9]+ \(lost 0 steps\)" \
  <<<"$out" || fail "replaced: the replacement did not join at a commit"
grep -q "final test accuracy 0\.[7-9]" <<<"$out" || fail "replaced: accuracy"
echo "replaced: the replacement joined and the job finished"
