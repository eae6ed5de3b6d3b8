// The global entry points of kolo/kolo.h: one process-wide Runtime built by init().
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <thread>

#include "backends/hierarchical/hierarchical_backend.h"
#include "backends/local_backend.h"
#include "backends/registry.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "coordinator/cuda_staging.h"
#include "coordinator/departures.h"
#include "coordinator/elastic_hooks.h"
#include "coordinator/failure_board.h"
#include "coordinator/knob_agreement.h"
#include "coordinator/pairs.h"
#include "coordinator/process_sets.h"
#include "coordinator/runtime.h"
#include "coordinator/submit.h"
#include "kolo/kolo.h"
#include "rendezvous/elastic_world.h"
#include "rendezvous/world.h"

namespace kolo {

namespace {

// KOLO_TEST_SUBMIT_DELAY (test-only). Lock-free: read on every submission, from any thread.
std::atomic<int64_t> g_submit_delay_ns{0};
std::atomic<uint64_t> g_submit_delay_seed{0};  // the rank, in the top bits
std::atomic<uint64_t> g_submissions{0};

void set_test_submit_delay(std::chrono::nanoseconds max, int rank) {
  g_submit_delay_ns.store(max.count());
  g_submit_delay_seed.store(static_cast<uint64_t>(rank) << 40);
  g_submissions.store(0);
}

// A pseudo-random sleep before a submission, so that tests see ranks' tensors become ready in
// varying orders. Seeded by rank and a count of this rank's submissions (splitmix64), so each
// rank sleeps differently; which thread gets which count is left to the scheduler.
void test_submit_delay() {
  const int64_t max_ns = g_submit_delay_ns.load(std::memory_order_relaxed);
  if (max_ns <= 0) return;
  uint64_t x = g_submit_delay_seed.load(std::memory_order_relaxed) ^
               g_submissions.fetch_add(1, std::memory_order_relaxed);
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  std::this_thread::sleep_for(
      std::chrono::nanoseconds(static_cast<int64_t>(x % static_cast<uint64_t>(max_ns + 1))));
}

struct Global {
  Mutex mu;  // serialises init/shutdown; guards every member below
  // Declared first, so destroyed last: a program that exits without kolo::shutdown() runs
  // these destructors, and the tables' shutdown and the backends still use the world's store.
  // The process sets' and pairs' backend factories read it without the lock, through the
  // reference init() gave them: it changes only in init() and shutdown(), while no table exists.
  World world KOLO_GUARDED_BY(mu);
  std::shared_ptr<Store> quick_store KOLO_GUARDED_BY(mu);  // quick_store(): the board's, pairs'
  std::shared_ptr<coord::Runtime> runtime KOLO_GUARDED_BY(mu);       // set while initialised
  std::shared_ptr<coord::ProcessSetTable> sets KOLO_GUARDED_BY(mu);  // with runtime
  std::shared_ptr<coord::PairTable> pairs KOLO_GUARDED_BY(mu);       // with runtime
  // With runtime, in a job of several ranks.
  std::shared_ptr<coord::Departures> departures KOLO_GUARDED_BY(mu);
  bool was_shut_down KOLO_GUARDED_BY(mu) = false;
  // init() after shutdown() must not meet the previous session's rendezvous keys (a store
  // never deletes keys), so every session namespaces them; all ranks count alike.
  int session KOLO_GUARDED_BY(mu) = 0;
  // An elastic worker's: whether the last init() found one, and the newest generation it joined
  // (-1 none yet; the next init() joins a newer one: Note [Elastic rendezvous]).
  bool elastic KOLO_GUARDED_BY(mu) = false;
  int64_t generation KOLO_GUARDED_BY(mu) = -1;
  int reset_limit KOLO_GUARDED_BY(mu) = -1;  // KOLO_ELASTIC_RESET_LIMIT; -1 before init()
  // The process sets of the last elastic session, for the next (Note [Elastic process sets]).
  std::string carried_sets KOLO_GUARDED_BY(mu);

  // Still initialised here, the process is exiting without kolo::shutdown(): the members'
  // destructors end the session, and the peers are told why first (Note [Departures]). (No
  // lock: no other thread calls into Kolo while static destructors run.)
  ~Global() {
    if (runtime && departures) departures->record();
  }
};

Global& global() {
  static Global g;
  return g;
}

std::shared_ptr<coord::Runtime> current() {
  Global& g = global();
  MutexLock lock(g.mu);
  return g.runtime;
}

std::shared_ptr<coord::ProcessSetTable> current_sets() {
  Global& g = global();
  MutexLock lock(g.mu);
  return g.sets;
}

// Where a session's keys live: "kolo/s<N>" in a fixed job; in an elastic one its generation's
// namespace, which only one session of each worker ever uses.
std::string session_prefix(int session, const World& world) {
  if (world.generation >= 0) return elastic_protocol::generation_prefix(world.generation);
  return "kolo/s" + std::to_string(session);
}

// A control plane's context: its waits are bounded by the stall shutdown time too, when that is
// set and shorter (see init()), and its errors then name that setting.
void bound_by_stall_time(BackendContext& ctx, std::chrono::nanoseconds stall) {
  const auto bound = std::chrono::duration_cast<std::chrono::milliseconds>(stall);
  if (bound.count() > 0 && bound < ctx.op_timeout) {
    ctx.op_timeout = bound;
    ctx.op_timeout_knob = "KOLO_STALL_SHUTDOWN_TIME";
  }
}

// What a sub-group's backends are made from, shared by every set and pair of a session. The
// knobs are the job's, as init() parsed them (shared: the groups outlive init()'s frame).
struct GroupPlan {
  const World* world;
  std::shared_ptr<const KnobSet> knobs;
  coord::RuntimeConfig config;
  std::string device_backend;  // the device backend of CUDA tensors, or empty
  std::string prefix;          // the session's (session_prefix())
};

// A sub-group's backends (a process set's, a point-to-point pair's): the job's CPU backend
// connecting only `ranks` (its subgroup factory, else new connections through the store under
// `ns`), `tag` telling its creation apart from concurrent ones (BackendContext::group_tag).
// `plan.device_backend` (or none) gets a communicator of the members too, made as the job's
// is: a unique id through the store under `ns`. Not ncclCommSplit: that is collective over the
// job's communicator, which only the global background thread may touch, while a group is made
// by its members' threads alone (a pair by two ranks). A CPU backend chosen for CUDA tensors
// (KOLO_GPU_OPERATIONS=tcp|mpi|shm) is not connected per group: the group stages them to its
// data plane.
Result<coord::SetBackends> group_backends(const GroupPlan& plan, const std::string& ns, int tag,
                                          const std::vector<int>& ranks, int group_rank) {
  const World& world = *plan.world;
  BackendContext ctx = backend_context(world, *plan.knobs, ns + "/data");
  ctx.rank = group_rank;
  ctx.size = static_cast<int>(ranks.size());
  ctx.group_tag = tag;
  coord::SetBackends b;
  if (!plan.device_backend.empty()) {
    // local_rank and local_size stay the job's: they choose this process's own GPU.
    BackendContext dev = ctx;
    dev.store_prefix = ns + "/gpu";
    KOLO_ASSIGN_OR_RETURN(b.gpu, create_backend(plan.device_backend, dev));
  }
  // A group of a one-host job is on one host; otherwise its members count as on hosts of
  // their own (tcp then publishes a routable address).
  const bool one_host = world.local_size == world.size;
  ctx.local_rank = one_host ? group_rank : 0;
  ctx.local_size = one_host ? ctx.size : 1;
  ctx.cross_rank = one_host ? 0 : group_rank;
  ctx.cross_size = one_host ? 1 : ctx.size;
  const std::string& name = plan.config.cpu_operations;
  if (ranks.size() == 1) {  // as init() for a job of one rank
    b.data = make_local_backend(name);
    b.control = make_local_backend("control");
    return b;
  }
  KOLO_ASSIGN_OR_RETURN(b.data, create_subgroup_backend(name, ctx, ranks));
  ctx.store_prefix = ns + "/ctrl";
  bound_by_stall_time(ctx, plan.config.stall_shutdown_time);
  KOLO_ASSIGN_OR_RETURN(b.control, create_subgroup_backend(name, ctx, ranks));
  return b;
}

// Group tags: even for process sets (by id), odd for pairs (by their two ranks), so that no
// two groups that may be created at once share one (up to 32767 ranks within MPI's int tags).
coord::MakeSetBackends set_backends(GroupPlan plan) {
  return [plan](int32_t id, const std::vector<int>& ranks, int set_rank) {
    return group_backends(plan, plan.prefix + "/ps" + std::to_string(id), 2 * id, ranks, set_rank);
  };
}

coord::MakePairBackends pair_backends(GroupPlan plan) {
  return [plan](int low, int high, int pair_rank) {
    const std::string ns = plan.prefix + "/p2p/" + std::to_string(low) + "-" + std::to_string(high);
    return group_backends(plan, ns, 2 * (low * plan.world->size + high) + 1, {low, high},
                          pair_rank);
  };
}

// NCCL-style: what the environment changed (at info) and likely typos (warnings), once per job.
void log_knobs(const KnobSet& knobs) {
  for (const std::string& w : knobs.warnings()) KOLO_LOG_WARNING(w);
  for (const std::string& line : knobs.echo_lines()) KOLO_LOG_INFO(line);
}

// The store of the FailureBoard and the PairTable, whose calls are small: a client of its own
// with short timeouts when the store is a TcpStore at KOLO_STORE_ADDR, so that a failing rank
// never waits long on a lost store (node 0 gone, a partition), neither to record its failure
// nor to say "gone" in PairTable::shutdown() at its exit; else the world's (in-process, or set
// up by a launcher such as mpirun), borrowed.
std::shared_ptr<Store> quick_store(const KnobSet& knobs, World& world) {
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

// What init() learns before it connects anything: the knobs (parsed here, the one time the
// library reads the environment), the job and the coordinator's configuration.
struct Job {
  std::shared_ptr<const KnobSet> knobs;
  LaunchedWorld launched;
  coord::RuntimeConfig config;
  std::string prefix;  // session_prefix()
};

// An elastic job re-forms its world by shutting its backends down and connecting new ones, which
// a backend of a fixed world (BackendEntry::fixed_world) cannot: refused before anything
// connects, naming the backends that can.
Status check_elastic(const Job& job) {
  if (job.launched.world.generation < 0) return Status::Ok();
  std::string can;
  for (const BackendEntry& e : registered_backends())
    if (!e.fixed_world && e.handles(Device::cpu()))
      can += (can.empty() ? "" : ", ") + std::string(e.name);
  for (const std::string& name : {job.config.cpu_operations, job.config.gpu_operations}) {
    Result<const BackendEntry*> entry = find_backend(name);
    if (name.empty() || !entry.ok() || !(*entry)->fixed_world) continue;
    return Status::Unsupported(
        "kolo::init(): an elastic job (KOLO_ELASTIC_WORKER is set: kolorun --min-np/--max-np) "
        "cannot use backend '" +
        name +
        "', whose ranks are fixed for the whole job (it cannot "
        "shrink or grow its world); choose one that can with KOLO_CPU_OPERATIONS: " +
        can);
  }
  return Status::Ok();
}

// Every knob is validated before the rendezvous, so that a typo fails this rank at once instead
// of after (or while) its peers connect; KOLO_CPU_OPERATIONS accepts only this build's backends.
// Then the ranks compare their job-wide knobs before anything connects: ranks that differ would
// run different collectives, or never meet (coordinator/knob_agreement.h).
// `generation`: an elastic worker's last (it joins a newer one).
Result<Job> read_job(int session, int64_t generation) {
  Job job;
  KOLO_ASSIGN_OR_RETURN(KnobSet knobs, KnobSet::from_process_env());
  job.knobs = std::make_shared<const KnobSet>(std::move(knobs));
  // kolorun's environment, else a launcher a backend knows (mpirun), else one rank.
  KOLO_ASSIGN_OR_RETURN(job.launched, launched_world(*job.knobs, generation));
  KOLO_ASSIGN_OR_RETURN(job.config,
                        coord::config_from_knobs(*job.knobs, job.launched.default_backend));
  KOLO_RETURN_IF_ERROR(check_elastic(job));
  const World& world = job.launched.world;
  job.prefix = session_prefix(session, world);
  set_log_rank(world.rank);
  if (world.rank == 0) log_knobs(*job.knobs);
  if (world.size > 1) {
    KOLO_RETURN_IF_ERROR(with_rendezvous_timeout_hint(
        coord::agree_on_job_knobs(
            *world.store, job.prefix, world.rank, world.size,
            coord::job_knobs_message(*job.knobs,
                                     {{KnobId::kCpuOperations, job.config.cpu_operations}}),
            rendezvous_timeout(*job.knobs)),
        *job.knobs));
  }
  return job;
}

struct Planes {
  std::unique_ptr<Backend> data, control;
};

// The data and control planes: separate instances of the same backend, so small negotiation
// messages never queue behind bulk data; local backends in a job of one rank.
Result<Planes> connect_planes(const Job& job) {
  const World& world = job.launched.world;
  const coord::RuntimeConfig& config = job.config;
  Planes p;
  if (world.size == 1) {
    p.data = make_local_backend(config.cpu_operations);
    p.control = make_local_backend("control");
    return p;
  }
  BackendContext ctx = backend_context(world, *job.knobs, job.prefix + "/data");
  KOLO_ASSIGN_OR_RETURN(p.data, create_backend(config.cpu_operations, ctx));
  // The control plane stays flat: its messages are small. The hierarchy is built when asked
  // for, and offered to the autotuner (not required, so unequal hosts keep the flat backend;
  // off until the tuner switches it on). Both conditions are job-wide values, which every
  // rank agreed on, so that every rank builds it or none: whether the tuner searches it (the
  // knob left unset) is rank 0's business alone.
  if (config.hierarchical_allreduce || config.hierarchical_allgather || config.autotune.enabled) {
    KOLO_ASSIGN_OR_RETURN(
        p.data,
        make_hierarchical_backend(
            std::move(p.data), ctx,
            hierarchical_options(job.launched, config.cpu_operations,
                                 job.knobs->is_set(KnobId::kCpuOperations),
                                 config.hierarchical_allreduce, config.hierarchical_allgather)));
  }
  ctx.store_prefix = job.prefix + "/ctrl";
  // Every rank takes part in a control round at least every heartbeat, so a control wait
  // longer than the stall shutdown time means a frozen rank (stopped, or stuck outside
  // Kolo's thread): rank 0's stall inspector cannot see it from inside that wait, so the
  // wait itself is bounded.
  bound_by_stall_time(ctx, config.stall_shutdown_time);
  KOLO_ASSIGN_OR_RETURN(p.control, create_backend(config.cpu_operations, ctx));
  return p;
}

struct GpuPlane {
  std::unique_ptr<Backend> backend;  // null: CUDA tensors are staged to the data plane
  std::string device_backend;        // a device-only backend's name (nccl), or empty
};

// CUDA tensors: a device backend of their own, or a CPU backend other than the data plane's
// that they are staged to; none when they are staged to the data plane's backend.
Result<GpuPlane> connect_gpu_plane(const Job& job) {
  const World& world = job.launched.world;
  KOLO_ASSIGN_OR_RETURN(
      std::string name,
      gpu_backend_choice(job.config.gpu_operations, coord::cuda_device_count(), world.local_size,
                         gpu_per_process(std::getenv("CUDA_VISIBLE_DEVICES"))));
  GpuPlane g;
  if (name.empty()) return g;
  // A device backend (one that takes no CPU tensors): process sets and pairs get one too.
  KOLO_ASSIGN_OR_RETURN(const BackendEntry* entry, find_backend(name));
  if (!entry->handles(Device::cpu())) g.device_backend = name;
  // A CPU backend for a job of one rank would only stage to what the data plane does already.
  if (name == job.config.cpu_operations || (world.size == 1 && g.device_backend.empty())) return g;
  BackendContext ctx = backend_context(world, *job.knobs, job.prefix + "/gpu");
  KOLO_ASSIGN_OR_RETURN(g.backend, create_backend(name, ctx));
  return g;
}

// How the ranks of a job of several learn what happened to a peer: the failure board names the
// rank that failed first (config.name_first_failure), and this rank's Departures records its
// leaving without kolo::shutdown() and says how a peer left (config.describe_departure, Note
// [Departures]). Null in a job of one rank.
std::shared_ptr<coord::Departures> report_peers(const Job& job, std::shared_ptr<Store> quick,
                                                coord::RuntimeConfig& config) {
  const World& world = job.launched.world;
  if (world.size == 1) return nullptr;
  auto board = std::make_shared<coord::FailureBoard>(quick, job.prefix, world.rank, world.size);
  config.name_first_failure = [board](const Status& st) { return board->name_first_failure(st); };
  auto departures = std::make_shared<coord::Departures>(
      quick, job.prefix, world.rank,
      job.launched.launcher == "kolorun" ? coord::kLauncherExitWait : std::chrono::seconds(0),
      world.workers);
  config.describe_departure = [departures](int r) { return departures->describe(r); };
  if (world.generation >= 0)  // Note [Elastic rendezvous]: "Stuck"
    config.report_stuck = [quick, g = world.generation,
                           workers = world.workers](const std::vector<int>& stuck) {
      std::string ids;
      for (int r : stuck) ids += (ids.empty() ? "" : ",") + std::to_string(workers.at(r));
      if (Status st = quick->set(elastic_protocol::stuck_key(g), ids); !st.ok())
        KOLO_LOG_WARNING("kolo::elastic: could not name the stuck workers " + ids +
                         " to kolorun: " + st.message());
    };
  return departures;
}

// KOLO_PROCESS_SETS: every rank adds the same sets, in order, before init() returns.
Status add_knob_process_sets(const KnobSet& knobs, coord::ProcessSetTable& sets) {
  if (!knobs.is_set(KnobId::kProcessSets)) return Status::Ok();
  for (const std::vector<int>& ranks : knobs.rank_sets(KnobId::kProcessSets)) {
    Result<ProcessSet> added = sets.add(ranks);
    if (!added.ok())
      return added.status().with_context("KOLO_PROCESS_SETS=" + knobs.raw(KnobId::kProcessSets));
  }
  return Status::Ok();
}

// A backend that timed out connecting waited BackendContext::connect_timeout, which is
// KOLO_RENDEZVOUS_TIMEOUT: its own message names only the field, so say which setting it was.
// (Its other errors are no wait of the rendezvous.)
Status connect_error(const Status& st, const KnobSet& knobs) {
  return st.code() == StatusCode::kTimeout ? with_rendezvous_timeout_hint(st, knobs) : st;
}

// One attempt of init(), under g.mu. An elastic worker's generation is recorded as joined as
// soon as it is known, so that the next attempt, after a failure, joins a newer one.
Status init_session(Global& g) KOLO_REQUIRES(g.mu);
Status init_session(Global& g) {
  KOLO_ASSIGN_OR_RETURN(Job job, read_job(g.session, g.generation));
  World& world = job.launched.world;
  g.elastic = world.generation >= 0;
  if (g.elastic) g.generation = world.generation;
  g.reset_limit = static_cast<int>(job.knobs->integer(KnobId::kElasticResetLimit));
  set_test_submit_delay(job.knobs->duration(KnobId::kTestSubmitDelay), world.rank);
  Result<Planes> connected = connect_planes(job);
  if (!connected.ok()) return connect_error(connected.status(), *job.knobs);
  Planes planes = std::move(*connected);
  std::shared_ptr<Store> quick = quick_store(*job.knobs, world);
  coord::RuntimeConfig config = job.config;
  std::shared_ptr<coord::Departures> departures = report_peers(job, quick, config);
  Result<GpuPlane> gpu_connected = connect_gpu_plane(job);
  if (!gpu_connected.ok()) return connect_error(gpu_connected.status(), *job.knobs);
  GpuPlane gpu = std::move(*gpu_connected);
  const coord::Topology topo{world.rank,       world.size,       world.local_rank,
                             world.local_size, world.cross_rank, world.cross_size};
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<coord::Runtime> created,
                        coord::Runtime::create(std::move(config), topo, std::move(planes.data),
                                               std::move(planes.control), std::move(gpu.backend)));
  std::shared_ptr<coord::Runtime> rt = std::move(created);
  g.world = std::move(world);
  g.quick_store = quick;
  const GroupPlan plan{&g.world, job.knobs, rt->config(), gpu.device_backend, job.prefix};
  auto sets = std::make_shared<coord::ProcessSetTable>(rt, set_backends(plan));
  auto pairs =
      std::make_shared<coord::PairTable>(rt, quick.get(), job.prefix + "/p2p", pair_backends(plan));
  ++g.session;
  if (Status added = add_knob_process_sets(*job.knobs, *sets); !added.ok()) {
    pairs->shutdown();
    sets->shutdown();
    (void)rt->shutdown();
    g.quick_store.reset();
    g.world = World{};
    return added;
  }
  g.runtime = std::move(rt);
  g.sets = std::move(sets);
  g.pairs = std::move(pairs);
  g.departures = std::move(departures);
  g.was_shut_down = false;
  if (g.elastic)  // best effort: kolorun waits for it only to find members stuck elsewhere
    (void)quick->set(elastic_protocol::joined_key(g.generation, g.world.workers[g.world.rank]),
                     "1");
  return Status::Ok();
}

}  // namespace

Status init() {
  Global& g = global();
  std::string carried;
  {
    MutexLock lock(g.mu);
    if (g.runtime) return Status::PreconditionFailed("kolo::init(): already initialised");
    // An elastic generation superseded while it connected (a member lost meanwhile): the next
    // one is there already (Note [Elastic rendezvous]). Each pass joins a newer generation, and
    // kolorun publishes one per event, so this ends.
    while (true) {
      Status st = init_session(g);
      if (!elastic_protocol::is_superseded(st)) KOLO_RETURN_IF_ERROR(st);
      if (st.ok()) break;
      KOLO_LOG_INFO(st.message() + "; joining the newer generation");
    }
    if (!g.elastic || g.generation == 0) return Status::Ok();
    carried = std::move(g.carried_sets);
    g.carried_sets.clear();
  }
  // Collective over the new generation (every member's init() gets here), and unlocked: it
  // runs collectives through the public API.
  return detail::carry_process_sets(carried);
}

Status shutdown() {
  Global& g = global();
  std::shared_ptr<coord::Runtime> rt;
  std::shared_ptr<coord::ProcessSetTable> sets;
  std::shared_ptr<coord::PairTable> pairs;
  // What the next elastic session carries over (Note [Elastic process sets]).
  const std::string carried =
      detail::elastic_workers().empty() ? std::string() : detail::describe_process_sets();
  {
    MutexLock lock(g.mu);
    if (g.runtime && g.elastic) g.carried_sets = carried;
    rt = std::move(g.runtime);
    g.runtime.reset();
    sets = std::move(g.sets);
    g.sets.reset();
    pairs = std::move(g.pairs);
    g.pairs.reset();
    if (rt) g.was_shut_down = true;
  }
  if (!rt) return Status::Ok();
  // The pairs and sets first: their Runtimes borrow the world's store and use their own
  // threads.
  pairs->shutdown();
  pairs.reset();
  sets->shutdown();
  sets.reset();
  Status st = rt->shutdown();
  rt.reset();
  MutexLock lock(g.mu);
  g.departures.reset();
  g.quick_store.reset();
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

bool deterministic() {
  auto rt = current();
  return rt && rt->config().deterministic;
}

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
  return autotune_history(std::numeric_limits<int64_t>::max());
}

std::vector<AppliedTuning> autotune_history(int64_t through_step) {
  auto rt = current();
  if (!rt) return {};
  std::vector<AppliedTuning> out;
  // Note [Autotune]: a rank that has marked through_step >= apply_step steps has applied that
  // decision, whereas one with a later apply_step may still be on its way to some ranks.
  for (const auto& a : rt->applied_tunings())
    if (a.decision.apply_step <= through_step)
      out.push_back({a.cycle, a.decision.apply_step, a.decision.fusion_threshold,
                     a.decision.cycle_time_ns, a.decision.bucket_bytes, a.hierarchical});
  return out;
}

namespace coord {

namespace {

// Why `name` cannot be submitted now: before init, or after shutdown.
Status not_running(const std::string& name) {
  bool after = false;
  {
    Global& g = global();
    MutexLock lock(g.mu);
    after = g.was_shut_down;
  }
  return Status::PreconditionFailed(
      "'" + name + "': " +
      (after ? "kolo::shutdown() was called; call kolo::init() again to submit operations"
             : "kolo::init() has not been called"));
}

}  // namespace

Result<Session> current_session(const std::string& name) {
  Global& g = global();
  {
    MutexLock lock(g.mu);
    if (g.runtime) return Session{g.runtime, g.sets, g.pairs};
  }
  return not_running(name);
}

std::shared_ptr<Runtime> global_runtime() { return current(); }

// Used by the *_async functions in submit.cc.
Handle submit_global(Result<std::unique_ptr<Entry>> entry, const std::string& name,
                     const ProcessSet& process_set) {
  if (!entry.ok()) {
    auto state = std::make_shared<detail::OpState>(name);
    state->complete(entry.status());
    return Handle(state);
  }
  auto rt = current();
  if (!rt) {
    (*entry)->state->complete(not_running(name));
    return Handle((*entry)->state);
  }
  test_submit_delay();
  if (process_set.is_global()) return rt->submit(std::move(*entry));
  std::shared_ptr<ProcessSetTable> sets = current_sets();
  Result<std::shared_ptr<Runtime>> set_rt =
      sets ? sets->runtime_for(
                 process_set, std::string(op_type_name((*entry)->request.type)) + " '" + name + "'")
           : Result<std::shared_ptr<Runtime>>(
                 Status::PreconditionFailed("'" + name + "': kolo::shutdown() was called"));
  if (!set_rt.ok()) {
    (*entry)->state->complete(set_rt.status());
    return Handle((*entry)->state);
  }
  return (*set_rt)->submit(std::move(*entry));
}

}  // namespace coord

Result<ProcessSet> add_process_set(std::vector<int> ranks) {
  auto sets = current_sets();
  if (!sets)
    return Status::PreconditionFailed("kolo::add_process_set(): kolo::init() has not been called");
  return sets->add(std::move(ranks));
}

Status remove_process_set(const ProcessSet& set) {
  auto sets = current_sets();
  if (!sets)
    return Status::PreconditionFailed(
        "kolo::remove_process_set(): kolo::init() has not been called");
  return sets->remove(set);
}

ProcessSet global_process_set() { return ProcessSet{}; }

std::vector<ProcessSet> process_sets() {
  auto sets = current_sets();
  return sets ? sets->sets() : std::vector<ProcessSet>{ProcessSet{}};
}

namespace detail {

bool elastic_enabled() {
  Global& g = global();
  MutexLock lock(g.mu);
  return g.elastic;
}

int64_t elastic_generation() {
  Global& g = global();
  MutexLock lock(g.mu);
  return g.runtime && g.elastic ? g.generation : -1;
}

Result<int64_t> elastic_newest_generation() {
  Global& g = global();
  std::shared_ptr<Store> store;
  {
    MutexLock lock(g.mu);
    if (!g.runtime || !g.elastic)
      return Status::PreconditionFailed("kolo::elastic: not an initialised elastic job");
    store = g.quick_store;
  }
  // One round trip: this rank is in a generation, so generation 0's plan exists and the
  // counter alone says which is the newest (newest_generation() also asks for plan 0).
  return store->add(elastic_protocol::kGenerationKey, 0);
}

std::vector<int64_t> elastic_workers() {
  Global& g = global();
  MutexLock lock(g.mu);
  return g.runtime ? g.world.workers : std::vector<int64_t>{};
}

Result<ProcessSet> carry_process_set(int32_t id, std::vector<int> members,
                                     std::vector<int> former) {
  auto sets = current_sets();
  if (!sets) return Status::PreconditionFailed("kolo::elastic: not initialised");
  return sets->carry(id, std::move(members), std::move(former));
}

Status close_process_set(int32_t id, std::vector<int> former, std::string why) {
  auto sets = current_sets();
  if (!sets) return Status::PreconditionFailed("kolo::elastic: not initialised");
  sets->close(id, std::move(former), std::move(why));
  return Status::Ok();
}

int elastic_reset_limit() {
  Global& g = global();
  {
    MutexLock lock(g.mu);
    if (g.reset_limit >= 0) return g.reset_limit;
  }
  return static_cast<int>(KnobSet::defaults().integer(KnobId::kElasticResetLimit));
}

Status world_failure() {
  auto rt = current();
  return rt ? rt->failure() : Status::Ok();
}

}  // namespace detail

}  // namespace kolo
