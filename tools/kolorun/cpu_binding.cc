#include "tools/kolorun/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace kolo::kolorun {
namespace {

Status set_thread_cpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE)
      return Status::InvalidArgument("CPU " + std::to_string(c) + " is out of range");
    CPU_SET(c, &set);
  }
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    return Status::IoError("sched_setaffinity(" + format_cpu_list(cpus) +
                           "): " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

Result<BindTo> parse_bind_to(const std::string& text) {
  if (text == "auto") return BindTo::kAuto;
  if (text == "cores" || text == "core") return BindTo::kCores;
  if (text == "none") return BindTo::kNone;
  return Status::InvalidArgument("--bind-to: expected auto, cores or none, got '" + text + "'");
}

const char* bind_to_name(BindTo b) {
  switch (b) {
    case BindTo::kAuto:
      return "auto";
    case BindTo::kCores:
      return "cores";
    case BindTo::kNone:
      return "none";
  }
  return "?";
}

Result<std::vector<std::vector<int>>> plan_binding(const std::vector<int>& allowed, int np,
                                                   BindTo mode) {
  if (np < 1) return Status::InvalidArgument("-np must be >= 1, got " + std::to_string(np));
  std::vector<std::vector<int>> plan(static_cast<size_t>(np));
  const int cpus = static_cast<int>(allowed.size());
  if (mode == BindTo::kNone) return plan;
  if (np > cpus) {
    if (mode == BindTo::kAuto) return plan;
    return Status::InvalidArgument("--bind-to cores needs a CPU per rank: -np " +
                                   std::to_string(np) + " but kolorun may use " +
                                   std::to_string(cpus) + " CPU(s) (" + format_cpu_list(allowed) +
                                   "); use --bind-to none to oversubscribe");
  }
  const int share = cpus / np, extra = cpus % np;
  int next = 0;
  for (int r = 0; r < np; ++r) {
    const int n = share + (r < extra ? 1 : 0);
    plan[r].assign(allowed.begin() + next, allowed.begin() + next + n);
    next += n;
  }
  return plan;
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  if (out.empty()) {
    const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int c = 0; c < n; ++c) out.push_back(c);
  }
  return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

ScopedThreadAffinity::ScopedThreadAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  saved_ = allowed_cpus();
  status_ = set_thread_cpus(cpus);
  changed_ = status_.ok();
}

ScopedThreadAffinity::~ScopedThreadAffinity() {
  if (changed_) (void)set_thread_cpus(saved_);
}

}  // namespace kolo::kolorun
