// kolorun --print-config: every knob's value and where it came from (KnobSet::describe), with
// one answer to "which backend will run": the backend knobs, when not set, show what this job's
// ranks will use on this host and why, by the rule init() applies (backends/registry.h:
// default_cpu_backend, gpu_backend_choice), given the job's shape from -np (or --np-total) and
// --nnodes. Without them the shape is unknown, and the default is shown as the rule (the
// registry's documented default).
#pragma once

#include <string>

#include "common/knobs.h"
#include "tools/kolorun/options.h"

namespace kolo::kolorun {

// The text of --print-config. `knobs` is knobs_for_ranks(options). Reads the GPUs this process
// sees, as the ranks will (with -x CUDA_VISIBLE_DEVICES=..., this process's variable is set to
// that first: call it only to print and exit).
std::string print_config(const LaunchOptions& options, const KnobSet& knobs);

}  // namespace kolo::kolorun
