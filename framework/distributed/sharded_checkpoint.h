// Checkpoints of ZeRO training (sharded_optimizer.h): every rank saves its own shard of the
// optimizer state; a checkpoint saved by N ranks loads on M ranks (each rank takes the slices
// its new shards cover from whichever files hold them); consolidate writes one unsharded
// checkpoint on rank 0 that load_checkpoint (serialize.h) reads into an unsharded optimizer.
//
// Files: rank r of N writes "<path>.shard<r>-of-<N>" with save_tensors (atomic, CRC-32; the
// format of serialize.h). Entries: "meta/shard" (int64 [2]: r, N), "meta/sizes" (int64 [P]:
// each parameter's element count, in the optimizer's order), "meta/optimizer/<name>" (int64 [1],
// the optimizer's type in the name), "optim/step" and "optim/param_steps" (the counters, on
// every shard), "optim/param.<i>.<slot>@<offset>" (float32 [length]: elements [offset,
// offset + length) of parameter i's slot), and on shard 0 only the model, "model/<name>".
// Stages 1 and 2 keep the whole parameters on every rank, so one copy suffices.
// Devices: the files hold host tensors; a run with CUDA parameters (and state slices) saves and
// loads through the host (save_tensors and Tensor::copy_ copy between host and device), so a
// checkpoint of a CUDA run loads into a CPU run and the other way.
//
// Every function is collective over the optimizer's process set: every member calls it, and
// every member fails alike (kolo::Error) when any fails, with the failing rank's message. Load
// checks every file, name, size and the coverage of every slice before writing anything: on
// error the model and the optimizer are unchanged. A save is atomic per file, not per set: a
// failed save may leave some ranks' new files beside others' old ones (the metadata and the
// coverage check catch a mixed set at load).
// Errors: IoError for a missing or unreadable shard file (naming it, and the shard count of the
// files found there when it differs from saved_shards) or a CRC mismatch; Mismatch for a
// checkpoint of another model (parameter count or sizes), another optimizer type, or another
// model entry (name or shape), naming the entry and both values; InvalidArgument for
// saved_shards < 1.
// Thread-safety: the training thread, between steps.
#pragma once

#include <string>

#include "framework/distributed/sharded_optimizer.h"
#include "framework/optim/serialize.h"

namespace kolo::fw {

// "<path>.shard<rank>-of-<shards>".
std::string shard_file(const std::string& path, int rank, int shards);

// Writes this rank's shard (rank 0's with `model`).
void save_sharded_checkpoint(const std::string& path, const NamedTensors& model,
                             ShardedOptimizer& optimizer);

// Loads a checkpoint that `saved_shards` ranks saved under `path` into the model and this rank's
// shards, whatever the current number of ranks.
void load_sharded_checkpoint(const std::string& path, int saved_shards, const NamedTensors& model,
                             ShardedOptimizer& optimizer);

// Loads an unsharded checkpoint (save_checkpoint's or consolidate_checkpoint's entries) into
// the model and this rank's slices: every rank reads the whole file. Errors as above (Mismatch
// naming a missing entry or another shape); nothing is written unless every rank's checks pass.
void load_unsharded_checkpoint(const std::string& path, const NamedTensors& model,
                               ShardedOptimizer& optimizer);

// Gathers every rank's slices and writes, on the set's rank 0, an unsharded checkpoint
// (save_checkpoint's entries) to `path`. Other ranks hold a whole copy of the state for the
// duration of the call (one sum over the set per state tensor, where exactly one rank
// contributes each element, so the sum is exact).
void consolidate_checkpoint(const std::string& path, const NamedTensors& model,
                            ShardedOptimizer& optimizer);

}  // namespace kolo::fw
