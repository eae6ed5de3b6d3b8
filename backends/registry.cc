#include "backends/registry.h"

#include <algorithm>

#include "common/logging.h"
#include "rendezvous/slurm_world.h"

// backend_entry_<name>() of every folder of backends/ (written by backends/CMakeLists.txt).
#include "backends/backend_entries.h"

namespace kolo {

namespace {

// Device kinds whose Device with ordinal 0 the supports() check below tries.
constexpr DeviceKind kDeviceKinds[] = {DeviceKind::kCpu, DeviceKind::kCuda};

std::string kind_list(const std::vector<DeviceKind>& kinds) {
  std::string out;
  for (DeviceKind k : kinds) {
    out += out.empty() ? "" : ", ";
    out += Device{k, 0}.to_string();
  }
  return out.empty() ? "none" : out;
}

}  // namespace

bool BackendEntry::handles(Device device) const {
  return std::find(devices.begin(), devices.end(), device.kind) != devices.end();
}

const std::vector<BackendEntry>& registered_backends() {
  // One line per backend, in order of preference for CPU tensors (see launched_world()). A
  // folder that this build did not configure has an empty entry, which is left out.
  static const std::vector<BackendEntry> kBackends = [] {
    std::vector<BackendEntry> entries = {
        backend_entry_shm(),  // one_host: only where every rank shares the host
        backend_entry_tcp(), backend_entry_mpi(),
        backend_entry_nccl(),  // CUDA tensors only (KOLO_GPU_OPERATIONS)
    };
    std::erase_if(entries, [](const BackendEntry& e) { return e.name.empty(); });
    return entries;
  }();
  return kBackends;
}

const std::vector<LauncherEntry>& registered_launchers() {
  static const std::vector<LauncherEntry> kLaunchers = [] {
    std::vector<LauncherEntry> out;
    for (const BackendEntry& entry : registered_backends())
      if (entry.launcher.detect != nullptr) out.push_back({entry.launcher, entry.name});
    // Launchers that are no backend's, one line each.
    out.push_back({{.name = "srun", .detect = launched_by_srun, .world = world_from_slurm}, {}});
    return out;
  }();
  return kLaunchers;
}

Result<const BackendEntry*> find_backend(std::string_view name) {
  std::string known;
  for (const auto& entry : registered_backends()) {
    if (entry.name == name) return &entry;
    known += known.empty() ? "" : ", ";
    known += entry.name;
  }
  return Status::InvalidArgument("unknown backend '" + std::string(name) +
                                 "'; this build has: " + known);
}

namespace {

// What every factory relies on: the deadline of every wait comes from the connect or the op
// timeout, and its options from the job's knobs.
// "tcp, shm": the backends of this build that honour KOLO_DETERMINISTIC.
std::string rank_order_names() {
  std::string out;
  for (const auto& entry : registered_backends())
    if (entry.rank_order) out += (out.empty() ? "" : ", ") + std::string(entry.name);
  return out;
}

Status check_context(std::string_view name, const BackendContext& context) {
  if (context.knobs == nullptr)
    return Status::InvalidArgument("backend " + std::string(name) +
                                   ": context.knobs is not set (the KnobSet that kolo::init() "
                                   "parsed; backend_context() sets it)");
  if (context.op_timeout.count() <= 0)
    return Status::InvalidArgument("backend " + std::string(name) +
                                   ": context.op_timeout must be > 0 ms, got " +
                                   std::to_string(context.op_timeout.count()));
  if (context.connect_timeout.count() <= 0)
    return Status::InvalidArgument("backend " + std::string(name) +
                                   ": context.connect_timeout must be > 0 ms, got " +
                                   std::to_string(context.connect_timeout.count()) +
                                   " (KOLO_RENDEZVOUS_TIMEOUT; backend_context() sets it)");
  return Status::Ok();
}

// Refused before anything connects, so that every rank of a job (they agree on the knob and
// the backend, coordinator/knob_agreement.h) fails at init with the same message.
Status check_deterministic(const BackendEntry& entry, const BackendContext& context) {
  if (entry.rank_order || !context.knobs->boolean(KnobId::kDeterministic)) return Status::Ok();
  return Status::InvalidArgument(
      "KOLO_DETERMINISTIC=1: backend " + std::string(entry.name) +
      " cannot reduce in a fixed order (it runs its library's own algorithms, whose summation "
      "order depends on the message size and layout); use a backend that can (" +
      rank_order_names() +
      ": KOLO_CPU_OPERATIONS, KOLO_GPU_OPERATIONS to stage CUDA tensors "
      "through one), or unset KOLO_DETERMINISTIC (docs/determinism.md)");
}

}  // namespace

Result<std::unique_ptr<Backend>> create_backend(std::string_view name,
                                                const BackendContext& context) {
  KOLO_ASSIGN_OR_RETURN(const BackendEntry* entry, find_backend(name));
  KOLO_RETURN_IF_ERROR(check_context(name, context));
  KOLO_RETURN_IF_ERROR(check_deterministic(*entry, context));
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, entry->factory(context));
  KOLO_RETURN_IF_ERROR(check_devices(*entry, *backend));
  return backend;
}

Result<std::unique_ptr<Backend>> create_subgroup_backend(std::string_view name,
                                                         const BackendContext& context,
                                                         const std::vector<int>& world_ranks) {
  KOLO_ASSIGN_OR_RETURN(const BackendEntry* entry, find_backend(name));
  KOLO_RETURN_IF_ERROR(check_context(name, context));
  if (static_cast<int>(world_ranks.size()) != context.size || context.rank < 0 ||
      context.rank >= context.size)
    return Status::InvalidArgument(
        "backend " + std::string(name) + ": a sub-group of " + std::to_string(world_ranks.size()) +
        " ranks needs a context of that size and a rank in it, got rank " +
        std::to_string(context.rank) + " of " + std::to_string(context.size));
  KOLO_RETURN_IF_ERROR(check_deterministic(*entry, context));
  KOLO_ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> backend,
      entry->subgroup ? entry->subgroup(context, world_ranks) : entry->factory(context));
  KOLO_RETURN_IF_ERROR(check_devices(*entry, *backend));
  return backend;
}

Status check_devices(const BackendEntry& entry, const Backend& backend) {
  // The executor trusts supports() with raw pointers, and callers plan with the entry before a
  // backend exists: the two must not disagree.
  for (DeviceKind kind : kDeviceKinds) {
    const Device device{kind, 0};
    if (backend.supports(device) != entry.handles(device))
      return Status::Internal("backend " + std::string(entry.name) + ": supports(" +
                              device.to_string() + ") is " +
                              (backend.supports(device) ? "true" : "false") +
                              " but its registry entry lists devices: " + kind_list(entry.devices));
  }
  return Status::Ok();
}

std::string default_cpu_backend(const World& world) {
  const bool one_host = world.size > 1 && world.local_size == world.size;
  for (const auto& entry : registered_backends())
    if (entry.handles(Device::cpu()) && (!entry.one_host || one_host))
      return std::string(entry.name);
  return "";
}

Result<std::string> gpu_backend_choice(std::string_view requested, int visible_gpus, int local_size,
                                       bool gpu_per_process) {
  if (requested.empty()) {
    const bool fits =
        visible_gpus > 0 && (local_size <= visible_gpus || (visible_gpus == 1 && gpu_per_process));
    if (!fits) return std::string();
    for (const auto& entry : registered_backends())
      if (entry.default_for_cuda) return std::string(entry.name);
    return std::string();
  }
  const std::string what = "KOLO_GPU_OPERATIONS=" + std::string(requested);
  Result<const BackendEntry*> entry = find_backend(requested);
  if (!entry.ok()) return Status(entry.status().code(), what + ": " + entry.status().message());
  if (!(*entry)->handles(Device::cpu()) && visible_gpus <= 0)
    return Status::InvalidArgument(what +
                                   ": this process sees no GPU (CUDA_VISIBLE_DEVICES, "
                                   "driver), and backend " +
                                   std::string(requested) + " takes CUDA tensors only");
  return std::string(requested);
}

bool gpu_per_process(const char* cuda_visible_devices) {
  return cuda_visible_devices != nullptr && *cuda_visible_devices != '\0';
}

Result<LaunchedWorld> launched_world(const KnobSet& knobs, int64_t last_generation) {
  LaunchedWorld out;
  if (launched_by_kolorun(knobs)) {
    out.launcher = "kolorun";
    for (const LauncherEntry& l : registered_launchers())
      if (l.launcher.detect())
        KOLO_LOG_INFO("KOLO_RANK (kolorun) and " << l.launcher.name
                                                 << "'s variables are both set: kolorun's "
                                                    "world wins (kolorun inside an allocation)");
    KOLO_ASSIGN_OR_RETURN(out.world, world_from_knobs(knobs, last_generation));
    out.default_backend = default_cpu_backend(out.world);
    return out;
  }
  for (const LauncherEntry& entry : registered_launchers()) {
    const BackendLauncher& l = entry.launcher;
    if (!l.detect()) continue;
    out.launcher = l.name;
    KOLO_ASSIGN_OR_RETURN(out.world, l.world(knobs));
    out.default_backend = l.default_backend && !entry.backend.empty()
                              ? std::string(entry.backend)
                              : default_cpu_backend(out.world);
    return out;
  }
  out.launcher = "none";
  KOLO_ASSIGN_OR_RETURN(out.world, world_from_knobs(knobs));  // a single rank, in-process store
  out.default_backend = default_cpu_backend(out.world);
  return out;
}

BackendContext backend_context(const World& world, const KnobSet& knobs, std::string store_prefix) {
  BackendContext ctx;
  ctx.knobs = &knobs;
  // Rounded up: a timeout below 1 ms still bounds the waits rather than failing them all.
  ctx.op_timeout = std::chrono::ceil<std::chrono::milliseconds>(knobs.duration(KnobId::kOpTimeout));
  ctx.connect_timeout = rendezvous_timeout(knobs);
  ctx.rank = world.rank;
  ctx.size = world.size;
  ctx.local_rank = world.local_rank;
  ctx.local_size = world.local_size;
  ctx.cross_rank = world.cross_rank;
  ctx.cross_size = world.cross_size;
  ctx.store = world.store.get();
  ctx.secret = world.secret;
  ctx.store_prefix = std::move(store_prefix);
  return ctx;
}

}  // namespace kolo
