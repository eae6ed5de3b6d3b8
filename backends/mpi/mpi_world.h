// The World of a job launched by mpirun: rank, size and topology come from MPI itself, and a
// rendezvous store is set up so that store-based backends (tcp) work under mpirun too.
#pragma once

#include "kolo/status.h"
#include "rendezvous/world.h"

namespace kolo {

// True when this process was started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is set).
bool launched_by_mpirun();

// Builds the World from MPI_COMM_WORLD. Collective: every rank must call it, once.
// - Initialises MPI with MPI_THREAD_MULTIPLE if needed (see mpi_runtime.h); fails with
//   PreconditionFailed when MPI provides a lower thread level.
// - local_rank/local_size: the rank's place among the ranks sharing its node
//   (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED); cross_rank/cross_size: its place among
//   the ranks of equal local_rank across nodes.
// - Rank 0 starts a TcpStoreServer (World::server) on 127.0.0.1 when every rank shares its
//   node, otherwise on all interfaces, advertising its first non-loopback IPv4 address; it
//   draws a random 128-bit secret. Address and secret reach the other ranks by MPI_Bcast, and
//   every rank (0 included) connects a TcpStore client to the server, waiting for it and for
//   each reply up to rendezvous_timeout(knobs) (KOLO_RENDEZVOUS_TIMEOUT).
// Errors: rank 0's failure to start the server is broadcast, so every rank returns the same
// IoError instead of waiting; MPI failures return IoError with MPI's error text.
// The returned World must outlive every backend built from its store; rank 0's World owns
// the server, so rank 0 must keep it until all ranks are done with the store.
Result<World> world_from_mpi(const KnobSet& knobs);

}  // namespace kolo
