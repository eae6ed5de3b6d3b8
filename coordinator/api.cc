// The global entry points of kolo/kolo.h: one process-wide Runtime built by init().
#include <algorithm>
#include <atomic>
#include <mutex>

#include "backends/local_backend.h"
#include "backends/registry.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "coordinator/cuda_staging.h"
#include "coordinator/failure_board.h"
#include "coordinator/runtime.h"
#include "coordinator/submit.h"
#include "kolo/kolo.h"
#include "rendezvous/world.h"

namespace kolo {

namespace {

struct Global {
  std::mutex mu;                            // serialises init/shutdown
  std::shared_ptr<coord::Runtime> runtime;  // set while initialised
  World world;                              // outlives the runtime's backends
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

// NCCL-style: what the environment changed (at info) and likely typos (warnings), once per job.
void log_knobs(const KnobSet& knobs) {
  for (const std::string& w : knobs.warnings()) KOLO_LOG_WARNING(w);
  for (const std::string& line : knobs.echo_lines()) KOLO_LOG_INFO(line);
}

// The store a FailureBoard records in: a client of its own with short timeouts when the store
// is a TcpStore at KOLO_STORE_ADDR (so that a failing rank never waits long on a lost store),
// else the world's (in-process, or set up by a launcher such as mpirun), borrowed.
std::shared_ptr<Store> failure_board_store(const KnobSet& knobs, World& world) {
  constexpr std::chrono::seconds kBound{1};
  if (!knobs.text(KnobId::kStoreAddr).empty()) {
    Result<HostPort> hp = parse_host_port(knobs.text(KnobId::kStoreAddr), "KOLO_STORE_ADDR");
    if (hp.ok()) {
      Result<std::unique_ptr<TcpStore>> own = TcpStore::connect(*hp, world.secret, kBound, kBound);
      if (own.ok()) return std::shared_ptr<Store>(std::move(*own));
    }
  }
  return std::shared_ptr<Store>(world.store.get(), [](Store*) {});
}

}  // namespace

Status init() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.runtime) return Status::PreconditionFailed("kolo::init(): already initialised");
  // Every knob is validated before the rendezvous, so that a typo fails this rank at once
  // instead of after (or while) its peers connect. KOLO_CPU_OPERATIONS accepts only this
  // build's backends.
  KOLO_ASSIGN_OR_RETURN(KnobSet knobs, KnobSet::from_process_env());
  // kolorun's environment, else a launcher a backend knows (mpirun), else one rank.
  KOLO_ASSIGN_OR_RETURN(LaunchedWorld launched, launched_world());
  World& world = launched.world;
  KOLO_ASSIGN_OR_RETURN(coord::RuntimeConfig config,
                        coord::config_from_knobs(knobs, launched.default_backend));
  set_log_rank(world.rank);
  if (world.rank == 0) log_knobs(knobs);
  coord::Topology topo{world.rank,       world.size,       world.local_rank,
                       world.local_size, world.cross_rank, world.cross_size};
  std::unique_ptr<Backend> data, control;
  if (world.size == 1) {
    data = make_local_backend(config.cpu_operations);
    control = make_local_backend("control");
  } else {
    // Control and data planes are separate instances of the same backend, so small
    // negotiation messages never queue behind bulk data.
    const std::string ns = "kolo/s" + std::to_string(g.session);
    BackendContext ctx = backend_context(world, ns + "/data");
    ctx.op_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config.op_timeout);
    KOLO_ASSIGN_OR_RETURN(data, create_backend(config.cpu_operations, ctx));
    ctx.store_prefix = ns + "/ctrl";
    // Every rank takes part in a control round at least every heartbeat, so a control wait
    // longer than the stall shutdown time means a frozen rank (stopped, or stuck outside
    // Kolo's thread): rank 0's stall inspector cannot see it from inside that wait, so the
    // wait itself is bounded.
    if (config.stall_shutdown_time.count() > 0)
      ctx.op_timeout = std::min(
          ctx.op_timeout,
          std::chrono::duration_cast<std::chrono::milliseconds>(config.stall_shutdown_time));
    KOLO_ASSIGN_OR_RETURN(control, create_backend(config.cpu_operations, ctx));
  }
  if (world.size > 1) {
    auto board = std::make_shared<coord::FailureBoard>(
        failure_board_store(knobs, world), "kolo/s" + std::to_string(g.session), world.rank);
    config.name_first_failure = [board](const Status& st) { return board->name_first_failure(st); };
  }
  // CUDA tensors: a device backend (nccl) of their own, or a CPU backend other than the data
  // plane's that they are staged to; none when they are staged to the data plane's backend.
  KOLO_ASSIGN_OR_RETURN(
      std::string gpu_name,
      gpu_backend_choice(config.gpu_operations, coord::cuda_device_count(), world.local_size));
  std::unique_ptr<Backend> gpu;
  if (!gpu_name.empty() && gpu_name != config.cpu_operations &&
      (world.size > 1 || gpu_name == "nccl")) {
    BackendContext ctx = backend_context(world, "kolo/s" + std::to_string(g.session) + "/gpu");
    ctx.op_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config.op_timeout);
    KOLO_ASSIGN_OR_RETURN(gpu, create_backend(gpu_name, ctx));
  }
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<coord::Runtime> rt,
                        coord::Runtime::create(std::move(config), topo, std::move(data),
                                               std::move(control), std::move(gpu)));
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

#define KOLO_TOPOLOGY_GETTER(field, fallback)      \
  int field() {                                    \
    auto rt = current();                           \
    return rt ? rt->topology().field : (fallback); \
  }
KOLO_TOPOLOGY_GETTER(rank, 0)
KOLO_TOPOLOGY_GETTER(size, 1)
KOLO_TOPOLOGY_GETTER(local_rank, 0)
KOLO_TOPOLOGY_GETTER(local_size, 1)
KOLO_TOPOLOGY_GETTER(cross_rank, 0)
KOLO_TOPOLOGY_GETTER(cross_size, 1)
#undef KOLO_TOPOLOGY_GETTER

Status start_timeline(const std::string& path, std::optional<bool> mark_cycles) {
  auto rt = current();
  if (!rt)
    return Status::PreconditionFailed("kolo::start_timeline(): kolo::init() has not been called");
  return rt->start_timeline(path, mark_cycles.value_or(rt->config().timeline_mark_cycles));
}

Status stop_timeline() {
  auto rt = current();
  if (!rt)
    return Status::PreconditionFailed("kolo::stop_timeline(): kolo::init() has not been called");
  rt->timeline().stop();
  return Status::Ok();
}

Status mark_step() {
  auto rt = current();
  if (!rt) return Status::PreconditionFailed("kolo::mark_step(): kolo::init() has not been called");
  rt->mark_step();
  return Status::Ok();
}

int64_t steps_marked() {
  auto rt = current();
  return rt ? rt->steps_marked() : 0;
}

std::optional<int64_t> tuned_bucket_bytes() {
  auto rt = current();
  return rt ? rt->tuned_bucket_bytes() : std::nullopt;
}

std::vector<AppliedTuning> autotune_history() {
  auto rt = current();
  if (!rt) return {};
  std::vector<AppliedTuning> out;
  for (const auto& a : rt->applied_tunings())
    out.push_back({a.cycle, a.decision.apply_step, a.decision.fusion_threshold,
                   a.decision.cycle_time_ns, a.decision.bucket_bytes});
  return out;
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
