// Which CPUs each local rank may run on (kolorun --bind-to).
//
// Why bind. A data-parallel job runs one compute thread per rank plus Kolo's background thread,
// which wakes for short bursts. Unbound, the scheduler moves threads between cores, so one
// rank's background thread preempts another rank's compute thread, and every rank waits for
// the slowest at the next allreduce. Bound, a rank's threads share only its own cores, which
// also keeps their caches warm. Measured on the 2-core development VM (2-rank CNN training,
// docs/benchmarks.md): samples/s up ~5-10% and far less run-to-run spread. mpirun binds too
// (to a core per rank when there are at most two).
//
// The plan gives local rank r an equal contiguous share of the CPUs kolorun itself may use
// (its affinity mask, so a taskset or cgroup around kolorun is respected): with C CPUs and N
// ranks, rank r gets C / N of them (the first C % N ranks one more). OpenMP and OpenBLAS
// threads default to the size of that share (job.cc).
#pragma once

#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::kolorun {

enum class BindTo {
  kAuto,   // bind when every rank gets at least one CPU, else leave the scheduler free
  kCores,  // bind; an error when there are more ranks than CPUs
  kNone,   // never bind
};

Result<BindTo> parse_bind_to(const std::string& text);  // "auto", "cores", "none"
const char* bind_to_name(BindTo b);

// The CPUs of each local rank (np entries); an empty entry means "not bound". `allowed` is
// the CPU list to share out, in increasing order. InvalidArgument (kCores only) naming the
// counts when np > allowed.size().
Result<std::vector<std::vector<int>>> plan_binding(const std::vector<int>& allowed, int np,
                                                   BindTo mode);

// The CPUs the calling thread may run on (sched_getaffinity), in increasing order; on
// failure, 0 .. hardware_concurrency-1.
std::vector<int> allowed_cpus();

// "0-3,8,10-11".
std::string format_cpu_list(const std::vector<int>& cpus);

// Sets the calling thread's affinity to `cpus` for its lifetime and restores it after, so
// that a process spawned meanwhile inherits `cpus`. An empty list changes nothing.
// Thread-safety: affects the calling thread only (Linux affinity is per thread).
class ScopedThreadAffinity {
 public:
  explicit ScopedThreadAffinity(const std::vector<int>& cpus);
  ~ScopedThreadAffinity();
  ScopedThreadAffinity(const ScopedThreadAffinity&) = delete;
  ScopedThreadAffinity& operator=(const ScopedThreadAffinity&) = delete;
  // IoError naming the CPUs when the kernel refused them (the thread keeps its old mask).
  const Status& status() const { return status_; }

 private:
  bool changed_ = false;
  std::vector<int> saved_;
  Status status_;
};

}  // namespace kolo::kolorun
