// Waiting for a nonblocking MPI request against the operation timeout, and ending the job when
// it does not complete in time.
//
// Why the mpi backend polls: a blocking MPI collective waits forever for a frozen peer (a
// SIGSTOPped rank, one stuck outside Kolo), and nothing can interrupt it. So every collective
// of the backend is started nonblocking (MPI_Iallreduce, ...) and waited for here, with
// MPI_Test, until it completes or its deadline passes.
//
// Why spin first (Note [Polling an MPI request]): Open MPI 4.1 advances a nonblocking collective
// (coll/libnbc) only inside MPI calls of this rank, so a rank that sleeps between tests stalls
// its own transfer and its peers'. A wait therefore spins (MPI_Test back to back; Open MPI
// yields the CPU in it when mpirun placed more ranks than cores) for as long as the transfer
// may take on a slow link, poll_spin(bytes). Only a wait that outlasts that is waiting for a
// late or absent peer, and it sleeps between tests: for 1/8 of the time waited beyond the
// spin, between kMinPause and kMaxPause. A completion after the spin is then seen at most
// 12.5% (and 1 ms) late, and a rank waiting for a frozen peer wakes at most 1000 times a
// second (about 2% of a core) instead of spinning, as Open MPI's own blocking wait does.
//
// Why abort rather than return (abort_job): a request still in flight at the deadline cannot
// be cancelled (MPI_Cancel is for point-to-point receives only), and MPI may still write the
// caller's output buffer, and read its input, at any later time. Returning an error would
// hand that memory back to a caller who may free or reuse it. Open MPI 4.1 cannot shrink a
// communicator around the frozen rank either, so the job cannot go on; abort_job prints why
// and ends it with MPI_Abort (under mpirun every rank of the job ends).
//
// Thread-safety: every function may be called from any thread after ensure_mpi().
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "kolo/status.h"

namespace kolo {

// The poll schedule's constants (see the header comment).
inline constexpr std::chrono::microseconds kSpinBase{1000};  // spin of any wait, even 0 bytes
inline constexpr double kSpinBytesPerSecond = 50e6;          // a slow link's rate, for the spin
inline constexpr std::chrono::microseconds kMinPause{10};
inline constexpr std::chrono::microseconds kMaxPause{1000};

// How long a wait for an operation that moves `bytes` (the larger of what this rank sends and
// receives) spins before it sleeps: kSpinBase + bytes / kSpinBytesPerSecond.
std::chrono::nanoseconds poll_spin(int64_t bytes);

// The pause before the next MPI_Test, after `waited` of a wait whose spin lasts `spin`: zero
// while waited < spin, then (waited - spin) / 8 clamped to [kMinPause, kMaxPause].
std::chrono::nanoseconds poll_pause(std::chrono::nanoseconds spin, std::chrono::nanoseconds waited);

// Waits until `request` completes, or until `timeout` has passed since the call. OK: it
// completed and `request` is MPI_REQUEST_NULL. Timeout "did not complete within <timeout>":
// the deadline passed and the request is still in flight, its buffers still MPI's (the caller
// must not return them; see abort_job). IoError with MPI's text when MPI_Test fails.
Status wait_request(MPI_Request& request, int64_t bytes, std::chrono::nanoseconds timeout);

// The exit code of a job that abort_job ended: ETIME ("Timer expired"). Not 124, with which
// timeout(1) and test harnesses report a command they had to kill: a job that ended itself must
// not read as one that hung.
inline constexpr int kTimeoutExitCode = 62;
// How long abort_job waits between its message and MPI_Abort.
inline constexpr std::chrono::seconds kAbortGrace{1};

// Ends the job because an MPI operation cannot complete: prints `message` to stderr as an
// error line (whatever KOLO_LOG_LEVEL says: it is the process's last word), waits `grace`
// so that the peers that timed out in the same collective print theirs too before mpirun
// kills them, then calls MPI_Abort(MPI_COMM_WORLD, kTimeoutExitCode), which under mpirun ends
// every rank of the job (this one's other threads, waiting on handles, included). Never
// returns: should MPI_Abort return, the process exits with that code.
[[noreturn]] void abort_job(const std::string& message,
                            std::chrono::nanoseconds grace = kAbortGrace);

}  // namespace kolo
