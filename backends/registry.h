// The table of backends. A backend is made selectable by one line in registry.cc.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "kolo/status.h"
#include "rendezvous/store.h"
#include "rendezvous/world.h"

namespace kolo {

// What a backend needs to connect its group. Everything is borrowed for the duration of the
// factory call only.
struct BackendContext {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  Store* store = nullptr;    // rendezvous; keys are namespaced by the backend
  // Prefix for every store key this instance uses, so that several instances of one backend
  // (e.g. the coordinator's control plane beside its data plane) connect independently.
  std::string store_prefix = "kolo";
  std::string secret;        // the job's shared secret: peers must prove they know it
  std::chrono::milliseconds connect_timeout{30000};
  std::chrono::milliseconds op_timeout{60000};  // a transfer that makes no progress this long fails
};

// The context that connects `world`'s ranks under `store_prefix`: topology, store and secret
// from the world (borrowed: world must outlive the factory call), default timeouts.
BackendContext backend_context(const World& world, std::string store_prefix);

using BackendFactory = Result<std::unique_ptr<Backend>> (*)(const BackendContext&);

struct BackendEntry {
  std::string_view name;
  BackendFactory factory;
};

// The backends compiled into this build, in order of preference for CPU tensors.
const std::vector<BackendEntry>& registered_backends();
// Creates the named backend; InvalidArgument listing the known names when it is unknown.
Result<std::unique_ptr<Backend>> create_backend(std::string_view name,
                                                const BackendContext& context);

}  // namespace kolo
