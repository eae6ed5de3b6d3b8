#include "tools/kolorun/print_config.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "backends/registry.h"
#include "coordinator/cuda_staging.h"
#include "rendezvous/world.h"

namespace kolo::kolorun {
namespace {

// One value of --print-config and where it came from.
struct Shown {
  std::string value;
  std::string source;
};

// The columns of KnobSet::describe(), whose line for the same knob this replaces.
std::string knob_line(std::string_view name, const Shown& shown) {
  std::string line(name);
  line.resize(std::max<size_t>(26, line.size() + 1), ' ');
  line += shown.value;
  line.resize(std::max<size_t>(line.size() + 1, 26 + 14), ' ');
  return line + shown.source;
}

// The World of kolorun's ranks, as far as the backend rule reads it (its shape).
World job_shape(const LaunchOptions& o) {
  World w;
  w.size = o.np * o.nnodes;
  w.local_size = o.np;
  w.cross_size = o.nnodes;
  return w;
}

// What the ranks do with KOLO_CPU_OPERATIONS unset: kolorun's ranks find their world in its
// environment, so the launcher's own backend (mpi under mpirun) never applies to them.
Shown cpu_default(const World& w) {
  const std::string name = default_cpu_backend(w);
  if (w.size == 1)
    return {name, "default for this job: one rank, whose collectives stay in its process"};
  if (w.local_size == w.size)
    return {name, "default for this job: its " + std::to_string(w.size) + " ranks share one host"};
  return {name, "default for this job: its ranks are on " + std::to_string(w.cross_size) +
                    " hosts, " + std::to_string(w.local_size) + " on each"};
}

// What the ranks do with KOLO_GPU_OPERATIONS unset; `cpu` is their CPU backend.
Shown gpu_default(const LaunchOptions& o, const std::string& cpu) {
  if (auto it = o.env.find("CUDA_VISIBLE_DEVICES"); it != o.env.end())
    ::setenv("CUDA_VISIBLE_DEVICES", it->second.c_str(), 1);  // before the driver reads it
  const int visible = coord::cuda_device_count();
  // The ranks' CUDA_VISIBLE_DEVICES: -x's value, set above, else the one they inherit.
  const bool own = gpu_per_process(std::getenv("CUDA_VISIBLE_DEVICES"));
  Result<std::string> chosen = gpu_backend_choice("", visible, o.np, own);
  const std::string gpus = std::to_string(visible) + " GPU(s) visible here";
  if (chosen.ok() && !chosen->empty())
    return {*chosen, "default for this job: " + gpus + " for " + std::to_string(o.np) +
                         " rank(s) on this host" +
                         (own ? " (CUDA_VISIBLE_DEVICES gives each its own)" : "")};
  const std::string staged = "; CUDA tensors go through host memory to " + cpu;
  // The registry's default for CUDA tensors (BackendEntry::default_for_cuda), if the build has one.
  const auto& entries = registered_backends();
  auto device = std::find_if(entries.begin(), entries.end(),
                             [](const BackendEntry& e) { return e.default_for_cuda; });
  if (device == entries.end())
    return {"(none)", "default: this build has no backend for CUDA tensors" + staged};
  if (visible == 0) return {"(none)", "default for this job: no GPU visible here" + staged};
  return {"(none)", "default for this job: " + gpus + ", fewer than its " + std::to_string(o.np) +
                        " ranks on this host (" + std::string(device->name) +
                        " takes a GPU per rank)" + staged};
}

// Without a shape: the registry's documented default, the rule itself.
Shown rule(KnobId id) {
  std::string doc(documented_default(knob(id)));
  std::erase(doc, '`');
  return {"(per job)", "default: " + doc + "; kolorun --print-config -np N shows this job's"};
}

}  // namespace

std::string print_config(const LaunchOptions& o, const KnobSet& knobs) {
  std::map<KnobId, Shown> replaced;
  const bool shaped = o.np > 0;  // -np or --np-total given
  // KOLO_CPU_OPERATIONS has no default_text: unset, the job's shape decides (or the rule).
  std::string cpu = knobs.is_set(KnobId::kCpuOperations) ? knobs.text(KnobId::kCpuOperations) : "";
  if (!knobs.is_set(KnobId::kCpuOperations)) {
    replaced[KnobId::kCpuOperations] =
        shaped ? cpu_default(job_shape(o)) : rule(KnobId::kCpuOperations);
    cpu = replaced[KnobId::kCpuOperations].value;
  }
  if (!knobs.is_set(KnobId::kGpuOperations))
    replaced[KnobId::kGpuOperations] = shaped ? gpu_default(o, cpu) : rule(KnobId::kGpuOperations);
  std::istringstream in(knobs.describe());
  std::string out;
  for (std::string line; std::getline(in, line);) {
    for (const auto& [id, shown] : replaced)
      if (line.rfind(std::string(knob(id).name) + " ", 0) == 0)
        line = knob_line(knob(id).name, shown);
    out += line + "\n";
  }
  return out;
}

}  // namespace kolo::kolorun
