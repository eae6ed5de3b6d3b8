// kolo-bench allreduce|allgather|broadcast|alltoall|reducescatter: nccl-tests-style timing of
// one Kolo backend's collectives, and (under mpirun) of raw MPI on the same buffers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/exact_allreduce.h"
#include "backends/hierarchical/hierarchical_backend.h"
#include "backends/registry.h"
#include "bench/bench_case.h"
#include "bench/bench_check.h"
#include "bench/bench_options.h"
#include "bench/json_rows.h"
#include "bench/mpi_support.h"
#include "bench/nccl_support.h"
#include "bench/workload.h"
#include "common/knobs.h"
#include "ops/exact.h"
#include "ops/stream_copy.h"

namespace kolo::bench {

Status run_backend_case(Backend& b, const BenchCase& c) {
  const std::vector<int64_t> blocks(c.ranks, c.block);
  switch (c.collective) {
    case Collective::kAllreduce:
      if (c.exact) {
        static ops::Workspace acc;  // one bench thread
        if (c.input != c.output)
          std::memcpy(c.output, c.input, static_cast<size_t>(c.count) * dtype_size(c.dtype));
        return exact_allreduce(b, c.output, c.count, c.dtype,
                               c.op == ReduceOp::kAverage ? b.size() : 1, acc);
      }
      return b.allreduce(c.input, c.output, c.count, c.dtype, Reduction{c.op});
    case Collective::kAllgather:
      return b.allgather(c.input, c.output, c.dtype, blocks);
    case Collective::kBroadcast:
      return b.broadcast(c.output, c.count, c.dtype, 0);
    case Collective::kAlltoall:
      return b.alltoall(c.input, c.output, c.dtype, blocks, blocks);
    case Collective::kReducescatter:
      return b.reducescatter(c.input, c.output, c.dtype, Reduction{c.op}, blocks);
  }
  return Status::Internal("unknown collective");
}

double busbw_factor(Collective collective, int n) {
  switch (collective) {
    case Collective::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Collective::kBroadcast:
      return 1.0;
    default:
      return static_cast<double>(n - 1) / n;
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// Mean seconds per call over `iters` calls after `warmup` untimed ones, on this rank.
template <typename Run, typename Barrier>
Result<double> time_calls(int warmup, int iters, Run run, Barrier barrier) {
  for (int i = 0; i < warmup; ++i) KOLO_RETURN_IF_ERROR(run());
  KOLO_RETURN_IF_ERROR(barrier());
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) KOLO_RETURN_IF_ERROR(run());
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

bool is_reduction(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReducescatter;
}

// The backend under test, made as kolo::init() makes the data plane, and the raw library it is
// compared with on the same buffers (NCCL on device buffers, MPI under mpirun), if any.
struct Bench {
  LaunchedWorld launched;  // owns the store the backends were connected through
  std::unique_ptr<Backend> backend;
  std::string name;               // "tcp", "hierarchical over tcp"
  std::unique_ptr<GpuBench> gpu;  // a backend that takes CUDA tensors only runs on the GPU
  std::unique_ptr<RawMpi> mpi;    // host buffers under mpirun
  const char* ref() const { return gpu ? "nccl" : "mpi"; }
  bool has_ref() const { return gpu || mpi; }
};

// kolorun's launcher knobs, else mpirun (in an MPI build), else one rank: as kolo::init() does.
// KOLO_HIERARCHICAL_ALLREDUCE=1 or KOLO_HIERARCHICAL_ALLGATHER=1 times the hierarchy with
// --backend across hosts, as kolo::init() builds it (within a host: shm, or
// KOLO_CPU_OPERATIONS when set); each knob switches its own collective.
Result<Bench> connect_bench(const CollectiveOptions& o, const KnobSet& knobs) {
  Bench b;
  KOLO_ASSIGN_OR_RETURN(b.launched, launched_world(knobs));
  const BackendContext ctx = backend_context(b.launched.world, knobs, "kolo-bench");
  KOLO_ASSIGN_OR_RETURN(b.backend, create_backend(o.backend, ctx));
  const bool allreduce = knobs.boolean(KnobId::kHierarchicalAllreduce);
  const bool allgather = knobs.boolean(KnobId::kHierarchicalAllgather);
  if (allreduce || allgather) {
    KOLO_ASSIGN_OR_RETURN(b.backend, make_hierarchical_backend(
                                         std::move(b.backend), ctx,
                                         hierarchical_options(b.launched, o.backend,
                                                              knobs.is_set(KnobId::kCpuOperations),
                                                              allreduce, allgather)));
  }
  b.name = b.backend->name() == "hierarchical" ? "hierarchical over " + o.backend : o.backend;
  if (!b.backend->supports(Device::cpu())) {
    KOLO_ASSIGN_OR_RETURN(b.gpu, make_gpu_bench(ctx, o.max_bytes + dtype_size(o.dtype)));
  } else {
    b.mpi = make_raw_mpi();
  }
  return b;
}

void print_header(const CollectiveOptions& o, const Bench& b) {
  std::printf("# kolo-bench %s: backend %s, %d ranks, %d iterations (+%d warm-up)%s\n",
              collective_name(o.collective), b.name.c_str(), b.launched.world.size, o.iters,
              o.warmup,
              b.gpu   ? ", raw NCCL on the same device buffers"
              : b.mpi ? ", raw MPI on the same buffers"
                      : "");
  std::printf("# time = max over ranks of the mean time per call; busbw = algbw x %s\n",
              o.collective == Collective::kAllreduce   ? "2(n-1)/n"
              : o.collective == Collective::kBroadcast ? "1"
                                                       : "(n-1)/n");
  if (o.rounds > 1)
    std::printf("# %d rounds per size, alternating: medians of the rounds' times and ratios\n",
                o.rounds);
  std::printf("%12s %12s %9s %8s %11s %11s %11s %8s", "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  if (b.has_ref())
    std::printf(" %11s %9s", (std::string(b.ref()) + "(us)").c_str(),
                (std::string("kolo/") + b.ref()).c_str());
  if (o.copy) std::printf(" %11s %9s", "copy(us)", "kolo/copy");
  std::printf("\n");
}

// The case of about `bytes` bytes on the host buffers (nccl-tests' layout, bench_case.h).
BenchCase case_of_size(const CollectiveOptions& o, int ranks, uint64_t bytes, char* input,
                       char* output) {
  BenchCase c;
  c.collective = o.collective;
  c.dtype = o.dtype;
  c.op = o.op;
  c.ranks = ranks;
  const bool per_rank = o.collective == Collective::kAllgather ||
                        o.collective == Collective::kAlltoall ||
                        o.collective == Collective::kReducescatter;
  const int64_t element = static_cast<int64_t>(dtype_size(o.dtype));
  c.block = std::max<int64_t>(1, static_cast<int64_t>(bytes) / element / (per_rank ? ranks : 1));
  c.count = per_rank ? c.block * ranks : c.block;
  c.input = input;
  c.output = output;
  return c;
}

struct Measured {
  double time = 0;       // seconds per call, the slowest rank's mean
  double ref_time = 0;   // the same for the raw library, when there is one
  double copy_time = 0;  // the same for a copy of the bytes (--copy)
  double over_ref = 0;   // time / ref_time: with -r, the median of the rounds' ratios
  double over_copy = 0;  // time / copy_time, likewise
  int64_t wrong = 0;     // wrong elements over every rank (with --check)
};

// --copy: the slowest rank's mean time to copy `bytes` from the case's input to its output, all
// ranks at once (as in the collective, they share the memory), by the faster of memcpy and
// streaming stores: glibc's memcpy streams only beyond its own threshold.
Result<double> time_copy(const CollectiveOptions& o, Backend& backend, const BenchCase& c,
                         size_t bytes) {
  double fastest = 0;
  for (bool stream : {false, true}) {
    KOLO_ASSIGN_OR_RETURN(double mean, time_calls(
                                           o.warmup, o.iters,
                                           [&] {
                                             if (stream)
                                               ops::stream_copy(c.output, c.input, bytes);
                                             else
                                               std::memcpy(c.output, c.input, bytes);
                                             return Status::Ok();
                                           },
                                           [&] { return backend.barrier(); }));
    double slowest = 0;
    KOLO_RETURN_IF_ERROR(
        backend.allreduce(&mean, &slowest, 1, DataType::kFloat64, Reduction{ReduceOp::kMax}));
    fastest = stream ? std::min(fastest, slowest) : slowest;
  }
  return fastest;
}

// One round of `host` (the case on host buffers; a GPU bench copies it to its device buffers):
// the slowest rank's mean time through the backend, then through the raw library on the same
// buffers (0 without one), and the copy's (--copy). Checks the result in the first round.
Result<Measured> measure_round(const CollectiveOptions& o, Bench& b, const BenchCase& host,
                               bool first) {
  const int rank = b.launched.world.rank;
  const size_t bytes = static_cast<size_t>(host.count) * dtype_size(o.dtype);
  const bool check = o.check && first;
  BenchCase c = host;
  if (b.gpu) {
    if (check) KOLO_RETURN_IF_ERROR(b.gpu->upload(host.input, bytes));
    c.input = b.gpu->input();
    c.output = b.gpu->output();
  }
  Backend& backend = *b.backend;
  KOLO_ASSIGN_OR_RETURN(double mean,
                        time_calls(
                            o.warmup, o.iters, [&] { return run_backend_case(backend, c); },
                            [&] { return backend.barrier(); }));
  Measured m;
  if (b.gpu) {
    if (check) KOLO_RETURN_IF_ERROR(b.gpu->download(host.output, bytes));
    KOLO_ASSIGN_OR_RETURN(m.time, b.gpu->max_over_ranks(mean));
    KOLO_ASSIGN_OR_RETURN(m.wrong, b.gpu->sum_over_ranks(check ? count_wrong(host, rank) : 0));
    KOLO_ASSIGN_OR_RETURN(double raw, time_calls(
                                          o.warmup, o.iters, [&] { return b.gpu->run_raw(c); },
                                          [&] { return b.gpu->barrier(); }));
    KOLO_ASSIGN_OR_RETURN(m.ref_time, b.gpu->max_over_ranks(raw));
    return m;
  }
  KOLO_RETURN_IF_ERROR(
      backend.allreduce(&mean, &m.time, 1, DataType::kFloat64, Reduction{ReduceOp::kMax}));
  m.wrong = check ? count_wrong(host, rank) : 0;
  KOLO_RETURN_IF_ERROR(backend.allreduce(&m.wrong, &m.wrong, 1, DataType::kInt64, Reduction{}));
  if (b.mpi) {
    KOLO_ASSIGN_OR_RETURN(double raw, time_calls(
                                          o.warmup, o.iters, [&] { return b.mpi->run(c); },
                                          [&] { return b.mpi->barrier(); }));
    KOLO_ASSIGN_OR_RETURN(m.ref_time, b.mpi->max_over_ranks(raw));
  }
  if (o.copy) {
    KOLO_ASSIGN_OR_RETURN(m.copy_time, time_copy(o, backend, c, bytes));
  }
  return m;
}

// -r rounds of measure_round: each time is the median of the rounds', each ratio the median of
// the rounds' ratios (a slow phase of the machine then spoils a round, not one side).
Result<Measured> measure(const CollectiveOptions& o, Bench& b, const BenchCase& host) {
  std::vector<double> times, refs, copies, ref_ratios, copy_ratios;
  Measured m;
  for (int r = 0; r < o.rounds; ++r) {
    KOLO_ASSIGN_OR_RETURN(Measured round, measure_round(o, b, host, r == 0));
    if (r == 0) m.wrong = round.wrong;
    times.push_back(round.time);
    refs.push_back(round.ref_time);
    copies.push_back(round.copy_time);
    if (round.ref_time > 0) ref_ratios.push_back(round.time / round.ref_time);
    if (round.copy_time > 0) copy_ratios.push_back(round.time / round.copy_time);
  }
  m.time = median(times);
  m.ref_time = median(refs);
  m.copy_time = median(copies);
  m.over_ref = ref_ratios.empty() ? 0 : median(ref_ratios);
  m.over_copy = copy_ratios.empty() ? 0 : median(copy_ratios);
  return m;
}

// Prints the case's line of the table (rank 0) and returns it as a JSON row.
nlohmann::json report(const CollectiveOptions& o, const Bench& b, const BenchCase& c,
                      const Measured& m) {
  const int n = b.launched.world.size;
  const double size_bytes = static_cast<double>(c.count * dtype_size(o.dtype));
  const double algbw = size_bytes / m.time / 1e9;
  const double busbw = algbw * busbw_factor(o.collective, n);
  const char* redop = is_reduction(o.collective) ? reduce_op_name(o.op).data() : "none";
  std::printf("%12.0f %12lld %9s %8s %11.1f %11.3f %11.3f", size_bytes,
              static_cast<long long>(c.count), dtype_name(o.dtype).data(), redop, m.time * 1e6,
              algbw, busbw);
  if (o.check)
    std::printf(" %8lld", static_cast<long long>(m.wrong));
  else
    std::printf(" %8s", "N/A");
  if (b.has_ref()) std::printf(" %11.1f %9.2f", m.ref_time * 1e6, m.over_ref);
  if (o.copy) std::printf(" %11.1f %9.2f", m.copy_time * 1e6, m.over_copy);
  std::printf("\n");
  std::fflush(stdout);
  nlohmann::json row = {{"collective", collective_name(o.collective)},
                        {"backend", b.name},
                        {"ranks", n},
                        {"size_bytes", size_bytes},
                        {"count", c.count},
                        {"type", dtype_name(o.dtype)},
                        {"redop", redop},
                        {"time_us", m.time * 1e6},
                        {"algbw_gbps", algbw},
                        {"busbw_gbps", busbw},
                        {"rounds", o.rounds}};
  row["wrong"] = o.check ? nlohmann::json(m.wrong) : nlohmann::json(nullptr);
  if (b.has_ref()) {
    row[std::string(b.ref()) + "_time_us"] = m.ref_time * 1e6;
    row[std::string("kolo_over_") + b.ref()] = m.over_ref;
  }
  if (o.copy) {
    row["copy_time_us"] = m.copy_time * 1e6;
    row["kolo_over_copy"] = m.over_copy;
  }
  return row;
}

Status run(const CollectiveOptions& o, const KnobSet& knobs) {
  KOLO_ASSIGN_OR_RETURN(Bench b, connect_bench(o, knobs));
  if (o.copy && b.gpu)
    return Status::InvalidArgument("--copy times host memory; backend " + b.name +
                                   " runs on device buffers");
  const int rank = b.launched.world.rank;
  // Both buffers at the largest size, allocated and touched once (host copies on a GPU).
  const size_t element = dtype_size(o.dtype);
  std::vector<char> input(o.max_bytes + element), output(o.max_bytes + element);
  // KOLO_REDUCTION=exact takes float sums and averages of host buffers (as the executor does).
  const bool exact = knobs.text(KnobId::kReduction) == "exact" && !b.gpu &&
                     o.collective == Collective::kAllreduce && ops::exact_dtype(o.dtype) &&
                     (o.op == ReduceOp::kSum || o.op == ReduceOp::kAverage);
  if (exact) KOLO_RETURN_IF_ERROR(ops::exact_supported(o.dtype, b.launched.world.size));
  nlohmann::json rows = nlohmann::json::array();
  if (rank == 0) print_header(o, b);
  const uint64_t factor = static_cast<uint64_t>(o.factor);
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= factor) {
    BenchCase c = case_of_size(o, b.launched.world.size, bytes, input.data(), output.data());
    c.exact = exact;
    if (o.check) fill_inputs(c, rank);
    KOLO_ASSIGN_OR_RETURN(Measured m, measure(o, b, c));
    if (rank == 0) rows.push_back(report(o, b, c, m));
    if (bytes > o.max_bytes / factor) break;  // the next size would overflow or exceed -e
  }
  if (rank == 0 && !o.json_path.empty()) KOLO_RETURN_IF_ERROR(write_json_rows(o.json_path, rows));
  return b.backend->barrier();
}

}  // namespace

int run_collective_bench(Collective collective, const KnobSet& knobs, int argc, char** argv) {
  CollectiveOptions options;
  options.collective = collective;
  return run_command(collective_command_line(options), argc, argv,
                     [&] { return run(options, knobs); });
}

}  // namespace kolo::bench
