// rendezvous_barrier: every member of a group announces itself in the store and waits for all
// the others. Used by backends before they connect and by kolorun to gather nodes.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "kolo/status.h"
#include "rendezvous/store.h"

namespace kolo {

// Sets "<prefix>/arrived/<rank>" and waits until "<prefix>/arrived/0" .. "/<size-1>" all exist.
// Keys are never deleted, so each barrier needs a prefix of its own (a second barrier on the
// same prefix returns at once).
// Errors: InvalidArgument when size < 1 or rank is outside [0, size); Timeout naming the
// members that never arrived, e.g.
//   "rendezvous timed out after 30s: ranks 2, 3 of 4 never arrived"
// (`members` replaces the word "ranks", e.g. "node ranks"); store errors pass through.
Status rendezvous_barrier(Store& store, const std::string& prefix, int rank, int size,
                          std::chrono::milliseconds timeout, std::string_view members = "ranks");

}  // namespace kolo
