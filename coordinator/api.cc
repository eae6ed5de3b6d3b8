// The global entry points of kolo/kolo.h: one process-wide Runtime built by init().
#include <atomic>
#include <mutex>

#include "backends/channel_backend.h"
#include "backends/registry.h"
#include "common/logging.h"
#include "coordinator/runtime.h"
#include "coordinator/submit.h"
#include "kolo/kolo.h"
#include "ops/thread_channel.h"
#include "rendezvous/world.h"
#ifdef KOLO_HAVE_MPI
#include "backends/mpi/mpi_world.h"
#endif

namespace kolo {

namespace {

struct Global {
  std::mutex mu;  // serialises init/shutdown
  std::shared_ptr<coord::Runtime> runtime;  // set while initialised
  World world;                                // outlives the runtime's backends
  bool was_shut_down = false;
  // init() after shutdown() must not meet the previous session's rendezvous keys (a store
  // never deletes keys), so every session namespaces them; all ranks count alike.
  int session = 0;
};

Global& global() {
  static Global g;
  return g;
}

std::shared_ptr<coord::Runtime> current() {
  std::lock_guard<std::mutex> lock(global().mu);
  return global().runtime;
}

Result<World> make_world(std::string& default_ops) {
  default_ops = "tcp";
  if (launched_by_kolorun()) return world_from_env();
#ifdef KOLO_HAVE_MPI
  if (launched_by_mpirun()) {
    default_ops = "mpi";
    return world_from_mpi();
  }
#endif
  return world_from_env();  // a single rank with an in-process store
}

// A backend for one rank alone: in-process channel, no sockets.
std::unique_ptr<Backend> solo_backend(const char* name) {
  auto channels = ops::make_thread_channels(1);
  return std::make_unique<ChannelBackend>(name, std::move(channels[0]));
}

}  // namespace

Status init() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.runtime) return Status::PreconditionFailed("kolo::init(): already initialised");
  std::string default_ops;
  KOLO_ASSIGN_OR_RETURN(World world, make_world(default_ops));
  KOLO_ASSIGN_OR_RETURN(coord::RuntimeConfig config, coord::config_from_env(default_ops));
  set_log_rank(world.rank);
  coord::Topology topo{world.rank,       world.size,       world.local_rank,
                       world.local_size, world.cross_rank, world.cross_size};
  std::unique_ptr<Backend> data, control;
  if (world.size == 1) {
    data = solo_backend(config.cpu_operations.c_str());
    control = solo_backend("control");
  } else {
    // Control and data planes are separate instances of the same backend, so small
    // negotiation messages never queue behind bulk data.
    const std::string ns = "kolo/s" + std::to_string(g.session);
    BackendContext ctx = backend_context(world, ns + "/data");
    ctx.op_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config.op_timeout);
    KOLO_ASSIGN_OR_RETURN(data, create_backend(config.cpu_operations, ctx));
    ctx.store_prefix = ns + "/ctrl";
    KOLO_ASSIGN_OR_RETURN(control, create_backend(config.cpu_operations, ctx));
  }
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<coord::Runtime> rt,
                        coord::Runtime::create(std::move(config), topo, std::move(data),
                                               std::move(control)));
  g.world = std::move(world);
  g.runtime = std::move(rt);
  g.was_shut_down = false;
  ++g.session;
  return Status::Ok();
}

Status shutdown() {
  Global& g = global();
  std::shared_ptr<coord::Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    rt = std::move(g.runtime);
    g.runtime.reset();
    if (rt) g.was_shut_down = true;
  }
  if (!rt) return Status::Ok();
  Status st = rt->shutdown();
  rt.reset();
  std::lock_guard<std::mutex> lock(g.mu);
  g.world = World{};
  return st;
}

bool is_initialized() { return current() != nullptr; }

#define KOLO_TOPOLOGY_GETTER(field, fallback)       \
  int field() {                                     \
    auto rt = current();                            \
    return rt ? rt->topology().field : (fallback);  \
  }
KOLO_TOPOLOGY_GETTER(rank, 0)
KOLO_TOPOLOGY_GETTER(size, 1)
KOLO_TOPOLOGY_GETTER(local_rank, 0)
KOLO_TOPOLOGY_GETTER(local_size, 1)
KOLO_TOPOLOGY_GETTER(cross_rank, 0)
KOLO_TOPOLOGY_GETTER(cross_size, 1)
#undef KOLO_TOPOLOGY_GETTER

Status start_timeline(const std::string& path, bool mark_cycles) {
  auto rt = current();
  if (!rt) return Status::PreconditionFailed("kolo::start_timeline(): kolo::init() has not been called");
  return rt->start_timeline(path, mark_cycles);
}

Status stop_timeline() {
  auto rt = current();
  if (!rt) return Status::PreconditionFailed("kolo::stop_timeline(): kolo::init() has not been called");
  rt->timeline().stop();
  return Status::Ok();
}

namespace coord {

// Used by the *_async functions in submit.cc.
Handle submit_global(Result<std::unique_ptr<Entry>> entry, const std::string& name) {
  auto state = std::make_shared<detail::OpState>(name);
  if (!entry.ok()) {
    state->complete(entry.status());
    return Handle(state);
  }
  auto rt = current();
  if (!rt) {
    bool after = false;
    {
      std::lock_guard<std::mutex> lock(global().mu);
      after = global().was_shut_down;
    }
    (*entry)->state->complete(Status::PreconditionFailed(
        "'" + name + "': " +
        (after ? "kolo::shutdown() was called; call kolo::init() again to submit operations"
               : "kolo::init() has not been called")));
    return Handle((*entry)->state);
  }
  return rt->submit(std::move(*entry));
}

}  // namespace coord

}  // namespace kolo
