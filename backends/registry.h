// The table of backends: what each backend of this build is, as data. The coordinator asks it
// which backend to create, which devices that backend takes, and which launcher started the job.
//
// Adding a backend is one folder plus one line (README "Layout"):
// - backends/<name>/CMakeLists.txt calls kolo_backend(<name> ...) when its requirements are met
//   (cmake/kolo_helpers.cmake), and the folder defines `BackendEntry backend_entry_<name>()`.
// - registry.cc's table gets the line `backend_entry_<name>(),`, in order of preference.
// A folder that the build did not configure (e.g. mpi without MPI) keeps its line: CMake
// declares an empty entry for it (generated/backends/backend_entries.h), which the table skips.
//
// Thread-safety: everything here may be called from any thread; the table is built once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "common/knobs.h"
#include "kolo/status.h"
#include "kolo/types.h"
#include "rendezvous/store.h"
#include "rendezvous/world.h"

namespace kolo {

// What a backend needs to connect its group. Everything is borrowed for the duration of the
// factory call only. Build it with backend_context(), which fills the topology, the store, the
// secret, the knobs, the connect and op timeouts from the job; a factory refuses a context
// without knobs or with a connect or op timeout <= 0 (create_backend).
struct BackendContext {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  Store* store = nullptr;  // rendezvous; keys are namespaced by the backend
  // Prefix for every store key this instance uses, so that several instances of one backend
  // (e.g. the coordinator's control plane beside its data plane) connect independently.
  std::string store_prefix = "kolo";
  std::string secret;  // the job's shared secret: peers must prove they know it
  // The job's knobs as init() parsed them, once: a factory reads its options from them
  // (KOLO_RING_*, its own rows such as KOLO_TCP_*), never from the environment. Required.
  const KnobSet* knobs = nullptr;
  // How long the factory waits for its peers to connect (or to publish what it needs from the
  // store): KOLO_RENDEZVOUS_TIMEOUT (backend_context() sets it; no default here, the registry row
  // has it, and kolorun's --timeout sets that for its ranks). Required > 0.
  std::chrono::milliseconds connect_timeout{0};
  // A transfer that makes no progress this long fails: KOLO_OP_TIMEOUT (backend_context() sets
  // it from the knobs; no default here, the registry row has it). Required > 0.
  std::chrono::milliseconds op_timeout{0};
  // The setting op_timeout comes from, for error messages: the control plane's is bounded by
  // KOLO_STALL_SHUTDOWN_TIME when that is shorter (coordinator/api.cc).
  std::string op_timeout_knob = "KOLO_OP_TIMEOUT";
  // A sub-group's tag (SubgroupFactory): groups that share a member and may be created at the
  // same time, from different threads, must have different tags (mpi passes it to
  // MPI_Comm_create_group, whose concurrent calls are told apart by it). >= 0.
  int group_tag = 0;
};

// The context that connects `world`'s ranks under `store_prefix`: topology, store and secret
// from the world, `knobs` and KOLO_OP_TIMEOUT's value from them (both borrowed: they must
// outlive the factory call).
BackendContext backend_context(const World& world, const KnobSet& knobs, std::string store_prefix);

using BackendFactory = Result<std::unique_ptr<Backend>> (*)(const BackendContext&);
// Connects a sub-group of the job's ranks (a process set, kolo/process_set.h). `context` is the
// group's: rank and size within the group, the group's own store_prefix; `world_ranks` holds
// the members' ranks in the job, ascending (context.rank indexes it). Collective over the
// members only.
using SubgroupFactory = Result<std::unique_ptr<Backend>> (*)(const BackendContext& context,
                                                             const std::vector<int>& world_ranks);

// A launcher other than kolorun (mpirun for mpi, srun): registered_launchers() lists them.
struct BackendLauncher {
  std::string_view name;  // for messages, e.g. "mpirun", "srun"
  // Whether this process was started by the launcher. Cheap, no side effects (reads the
  // environment).
  bool (*detect)() = nullptr;
  // The World the launcher describes. Collective: every rank of the job calls it once. `knobs`
  // are init()'s: its waits for the rendezvous are bounded by rendezvous_timeout(knobs).
  Result<World> (*world)(const KnobSet& knobs) = nullptr;
  // Whether the declaring backend is the default for CPU tensors in jobs this launcher started
  // (false for a launcher that is no backend's).
  bool default_backend = false;
};

struct BackendEntry {
  std::string_view name;  // what KOLO_CPU_OPERATIONS names; equals the folder's name
  BackendFactory factory = nullptr;
  // How to connect a sub-group of the job's ranks. nullptr: `factory` with the group's
  // context, which connects the members afresh through the store (tcp, shm); a backend whose
  // group comes from elsewhere (mpi's MPI_COMM_WORLD) derives it from the job's instead.
  SubgroupFactory subgroup = nullptr;
  // The device kinds whose buffers the backend's collectives take directly. The created
  // Backend's supports(device) is true exactly for these kinds (create_backend checks it
  // for ordinal 0 of each kind).
  std::vector<DeviceKind> devices = {DeviceKind::kCpu};
  BackendLauncher launcher;  // detect == nullptr: the backend knows no launcher
  // The backend connects only ranks that share one host (shm): it is the default only for jobs
  // of several ranks that all run on one host (local_size == size > 1), and skipped otherwise.
  bool one_host = false;
  // The default backend for CUDA tensors when KOLO_GPU_OPERATIONS is unset (a device backend
  // whose `devices` include kCuda), where every rank of the host can have a GPU of its own
  // (gpu_backend_choice). The first such entry of the registry is the default.
  bool default_for_cuda = false;
  // The backend's ranks are fixed for the whole job (mpi: MPI_COMM_WORLD cannot shrink or grow
  // portably), so an elastic job, which re-forms its world, refuses it at kolo::init().
  bool fixed_world = false;
  // The backend reduces every element in rank order whatever the message size, layout and
  // timing (Note [Deterministic reduction] in ops/deterministic.cc), on its own (shm) or when
  // KOLO_DETERMINISTIC=1 asks it to (channel backends). create_backend refuses
  // KOLO_DETERMINISTIC=1 for a backend without it (mpi and nccl run their libraries'
  // algorithms).
  bool rank_order = false;

  bool handles(Device device) const;
};

// The backends compiled into this build, in order of preference for CPU tensors. Their names
// are those of kolo::built_backends() (common/build_info.h).
const std::vector<BackendEntry>& registered_backends();

// The entry named `name`. Errors: InvalidArgument "unknown backend 'x'; this build has: tcp, mpi"
// when the build has no such backend.
Result<const BackendEntry*> find_backend(std::string_view name);

// OK when `backend.supports()` agrees with `entry.devices` for every device kind; otherwise
// Internal naming the backend, the device and both answers.
Status check_devices(const BackendEntry& entry, const Backend& backend);

// Creates the named backend with its factory. Errors: find_backend's for an unknown name;
// InvalidArgument "backend tcp: context.op_timeout must be > 0 ms, got 0" (every factory waits
// by it) or "backend tcp: context.knobs is not set ..." (every factory reads its options from
// them); the factory's; check_devices' when the created backend disagrees with its entry;
// InvalidArgument "KOLO_DETERMINISTIC=1: backend mpi cannot ..." when the knob is set and the
// entry is not rank_order (create_subgroup_backend too).
Result<std::unique_ptr<Backend>> create_backend(std::string_view name,
                                                const BackendContext& context);

// Creates the named backend for a sub-group of the job's ranks: the entry's subgroup factory,
// else its factory with `context`. Errors as create_backend's.
Result<std::unique_ptr<Backend>> create_subgroup_backend(std::string_view name,
                                                         const BackendContext& context,
                                                         const std::vector<int>& world_ranks);

// The first registered backend for CPU tensors that can connect `world`'s ranks
// (BackendEntry::one_host): shm when they all share one host, else tcp.
std::string default_cpu_backend(const World& world);

// The backend for CUDA tensors (KOLO_GPU_OPERATIONS). `requested` is the knob's value, empty
// when unset; `visible_gpus` what this process sees; `local_size` the ranks on this host;
// `gpu_per_process`: the launcher gave this process a GPU of its own (CUDA_VISIBLE_DEVICES is
// set, as SLURM --gpus-per-task=1 and similar launchers do). Unset: the first entry that is
// default_for_cuda (nccl) when the build has one and every rank of the host can have a GPU of
// its own (0 < local_size <= visible_gpus, or one visible GPU per process; NCCL refuses two
// ranks on one GPU), else "" (CUDA tensors, if any, are staged through host memory to the CPU
// backend, so a CPU job on a GPU machine with more ranks than GPUs still starts).
// A CPU backend's name is returned as is: CUDA tensors are then staged to that backend.
// Errors: InvalidArgument "KOLO_GPU_OPERATIONS=nccl: unknown backend 'nccl'; this build has:
// tcp, mpi" for a backend not in this build, and "KOLO_GPU_OPERATIONS=nccl: this process
// sees no GPU" when a device-only backend was asked for and there is no device.
Result<std::string> gpu_backend_choice(std::string_view requested, int visible_gpus,
                                       int local_size = 1, bool gpu_per_process = false);

// Whether the launcher gave this process GPUs of its own, read from the value of its
// CUDA_VISIBLE_DEVICES (nullptr when unset): set and not empty, as SLURM --gpus-per-task,
// mpirun wrappers and `kolorun -x CUDA_VISIBLE_DEVICES=...` do. gpu_backend_choice's
// `gpu_per_process`; init() and kolorun --print-config both ask this.
bool gpu_per_process(const char* cuda_visible_devices);

// The launchers init() knows besides kolorun, in the order it asks them (launched_world()):
// the one table of launchers. A backend that comes with its own launcher declares it in its
// entry (BackendEntry::launcher: mpirun for mpi, present only when the build has the backend);
// a launcher that is no backend's is a line of registry.cc's table (srun: Slurm's job steps,
// rendezvous/slurm_world.h). The backends' launchers come first: mpirun inside a Slurm
// allocation inherits SLURM_* from the step of its daemons, and its own world is the right one.
struct LauncherEntry {
  BackendLauncher launcher;
  // The backend whose entry declared the launcher (its default backend when
  // launcher.default_backend); empty for a launcher that is no backend's.
  std::string_view backend;
};
const std::vector<LauncherEntry>& registered_launchers();

// The job this process belongs to, and who said so.
struct LaunchedWorld {
  World world;
  std::string launcher;         // "kolorun", "mpirun", ... or "none" for a single rank
  std::string default_backend;  // the backend for CPU tensors unless KOLO_CPU_OPERATIONS is set
};

// Finds the job: kolorun's launcher knobs in `knobs` (KOLO_RANK, ...; rendezvous/world.h)
// first (kolorun inside a Slurm allocation or step wins, and says so at info level); else the
// first of registered_launchers() that detects this process builds the World (collective, see
// BackendLauncher::world); else a single rank with an in-process store. The default backend is
// the launcher's backend when its entry says so, otherwise the first registered backend that
// handles CPU tensors and fits the world (BackendEntry::one_host).
// An elastic worker's world is the newest generation after `last_generation` that names it
// (world_from_knobs()). Errors: those of world_from_knobs() or of the launcher's world().
Result<LaunchedWorld> launched_world(const KnobSet& knobs, int64_t last_generation = -1);

}  // namespace kolo
