// The backend of a job with one rank: every collective is a local copy (a sum of one input,
// the gather of one block), run by ChannelBackend's algorithms over a channel that has no
// peers. No sockets, no rendezvous. The coordinator uses it whenever the job has one rank,
// whichever backend is configured, and names it after that backend so that timelines read the
// same ("TCP_ALLREDUCE").
//
// Errors: the collectives validate their arguments like every ChannelBackend (backend.h); the
// channel never carries a byte, and a send or receive asked of it (which the algorithms never
// do with one rank) fails with Internal naming the peer.
// Thread-safety: as every Backend, one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"

namespace kolo {

// A Backend of size 1, rank 0, taking CPU buffers, named `name`.
std::unique_ptr<Backend> make_local_backend(std::string name);

}  // namespace kolo
