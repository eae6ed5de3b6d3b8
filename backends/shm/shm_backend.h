// The shm backend: ranks of one host run the collectives through one shared-memory segment
// (shm_segment.h) instead of sockets.
//
// Protocol. Every rank owns two buffers of chunk_bytes (parity 0 and 1) in the segment and a
// progress counter `seq` (its RankLine). The collectives are sequences of "buffer uses", counted
// alike on every rank (use u takes buffer u % 2): in use u a rank writes what it contributes into
// its own buffer, then publishes seq = 2u+1 ("written"); a second phase (the large allreduce)
// publishes 2u+2. Readers wait until the writer's seq reaches the mark, then read the writer's
// buffer. Before a rank writes its buffer for use u, every peer must have published 2(u-1)+1:
// since a rank publishes nothing of use u-1 before it has finished reading use u-2, the buffer
// (last used in u-2) is free. Double buffering means this wait is almost always satisfied by
// one the collective already did, so the ranks pipeline without extra synchronisation.
// A wait polls briefly (50 us when every rank has a core of its own, 1 us with more ranks than
// cores; then for up to 200 us while yielding the core), then sleeps on the counter with
// FUTEX_WAIT (a shared, not private, futex: the word lives in a MAP_SHARED mapping); a publisher
// calls FUTEX_WAKE only when a peer sleeps. While asleep, a waiter wakes every few milliseconds
// to check that the rank it waits for is alive (pidfd_open / poll, kill(pid, 0) where pidfds are
// missing), so a rank killed with SIGKILL fails its peers at once, naming it; anything else
// fails after op_timeout.
//
// Algorithms (bytes = count * dtype size, P ranks):
// - allreduce up to threshold_bytes: one use; each rank copies its (prescaled) input in, then
//   reduces all P buffers, in rank order, straight into its output with ops::reduce_to/_into.
// - larger allreduces: chunks of chunk_bytes, one use each: each rank copies its peers' shares
//   of the chunk in, reduces its own 1/P share from its input and every peer's buffer into its
//   own buffer and publishes the second mark; then every rank copies every share out. The
//   copy-in of chunk k+1 on one rank overlaps the reductions of chunk k on the others; memory
//   stays 2 * P * chunk_bytes for any size. From KOLO_SHM_STREAM_THRESHOLD up, results go to
//   an output that is not the input with streaming stores (Note [Chunked allreduce] in
//   shm_backend.cc: the bytes each rank moves, and why).
// - a fused allreduce (allreduce_pieces, Note [Allreduce pieces] in backends/backend.h) is the
//   same: the copies in and out read and write the pieces where they are (piece_index.h),
//   so a fused batch costs what one buffer of its total costs. A plain allreduce is one piece,
//   and the ranks' cuts may differ (only the total must agree: more than the Note asks).
// - allgather, broadcast: chunks of chunk_bytes per rank, one use each.
// - reducescatter, alltoall: each buffer holds P regions of chunk_bytes / P (one per block or
//   destination), one use per region-sized piece.
// - barrier: one use, no data.
// The first use of every collective carries a descriptor (kind, dtype, op, root, count and a
// hash of the per-rank counts) that every rank checks against its own, so ranks that disagree
// fail with Mismatch naming both values instead of reading each other's data wrongly; alltoall
// additionally checks every rank's send counts against the receivers' recv counts. No index or
// size is ever read from shared memory: the layout and every length come from this rank's own
// arguments, validated by Backend.
//
// Failure is sticky: after a collective failed, the ranks' counters disagree, so every later call
// returns the first error.
//
// Knobs (this folder's rows, shm_knobs.h): KOLO_SHM_CHUNK, KOLO_SHM_THRESHOLD, read from the
// context's knobs; rank 0's values are the job's (they are in the segment header).
// KOLO_SHM_STREAM_THRESHOLD is each rank's own.
// Thread-safety: one thread at a time, as every Backend.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/registry.h"
#include "kolo/status.h"

namespace kolo {

// The shm Backend ("shm") for this rank. Errors: shm_segment.h's connect_segment's, and
// InvalidArgument for an invalid KOLO_* variable.
Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& context);

// The registry's entry: CPU buffers; no launcher of its own; one_host, and first in the
// registry, so that it is the default CPU backend of a job whose ranks all share one host.
BackendEntry backend_entry_shm();

}  // namespace kolo
