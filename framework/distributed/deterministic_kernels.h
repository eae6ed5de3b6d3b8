// The training stack's half of deterministic mode (docs/determinism.md): Kolo's reductions fold
// over the ranks in rank order; this makes the framework's own kernels reproducible too.
#pragma once

namespace kolo::fw {

// The BLAS thread count of deterministic mode, part of its contract: one thread per rank, so
// a rank's sgemm results depend on neither the host's core count nor OPENBLAS_NUM_THREADS.
inline constexpr int kDeterministicBlasThreads = 1;

// Call after kolo::init(), before training, from one thread. When kolo::deterministic(): sets
// OpenBLAS to kDeterministicBlasThreads and, in a CUDA build, the GPU kernels' deterministic
// reductions (kernels::cuda::set_deterministic), then returns true. Otherwise changes nothing
// and returns false. Idempotent. The DataLoader needs nothing: its batches are a function of
// (seed, epoch) whatever its prefetch thread does.
bool configure_deterministic_kernels();

}  // namespace kolo::fw
