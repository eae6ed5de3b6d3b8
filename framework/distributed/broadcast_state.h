// Making every rank start from the same state: parameters, optimizer state and checkpoints.
//
// broadcast_parameters / broadcast_optimizer_state copy the root rank's tensors into every
// other rank's (in place, any device and dtype, names "bcast.<kind>.<name>"). Every rank must
// pass the same names with the same shapes; a mismatch fails on every rank with Kolo's message
// naming the tensor.
//
// Checkpoints: save_checkpoint_on_root writes the file on the root rank only; the others wait
// until it is complete and fail too when the root could not write it. Load either on every
// rank with load_checkpoint (optim/serialize.h, shared file system) or with
// load_checkpoint_from_root, which reads on the root and broadcasts.
//
// Checkpoint errors: when the root's save or load fails, every rank throws. The root throws
// serialize.h's error (naming the file and the OS reason or the damage); the other ranks throw
// an error with the same code, "checkpoint '<path>' could not be written|loaded on root rank
// <root>: <the root's message>". The collective sequence stays in step, so the job may go on
// (e.g. retry with another path). A failed load changes no rank's model or optimizer, since the
// root checks the whole file before writing any tensor and the broadcasts are skipped.
//
// Errors: kolo::Error carrying Kolo's Status (or serialize.h's errors). Thread-safety: call
// from one thread per rank, in the same order on every rank.
#pragma once

#include "framework/optim/optimizer.h"
#include "framework/optim/serialize.h"

namespace kolo::fw {

void broadcast_parameters(const NamedTensors& named, int root = 0);
void broadcast_optimizer_state(Optimizer& optimizer, int root = 0);

void save_checkpoint_on_root(const std::string& path, const NamedTensors& model,
                             Optimizer* optimizer, int root = 0);
// Loads on the root and broadcasts, so only the root needs to see the file.
void load_checkpoint_from_root(const std::string& path, const NamedTensors& model,
                               Optimizer* optimizer, int root = 0);

}  // namespace kolo::fw
