// kolo-bench allreduce|allgather|broadcast|alltoall|reducescatter: nccl-tests-style timing of
// one Kolo backend's collectives, and (under mpirun) of raw MPI on the same buffers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/hierarchical/hierarchical_backend.h"
#include "backends/registry.h"
#include "bench/bench_case.h"
#include "bench/bench_check.h"
#include "bench/bench_options.h"
#include "bench/json_rows.h"
#include "bench/mpi_support.h"
#include "bench/nccl_support.h"
#include "common/knobs.h"

namespace kolo::bench {

Status run_backend_case(Backend& b, const BenchCase& c) {
  const std::vector<int64_t> blocks(c.ranks, c.block);
  switch (c.collective) {
    case Collective::kAllreduce:
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

Status run(const CollectiveOptions& o, const KnobSet& knobs) {
  // kolorun's launcher knobs, else mpirun (in an MPI build), else one rank: as kolo::init() does.
  KOLO_ASSIGN_OR_RETURN(LaunchedWorld launched, launched_world(knobs));
  const World& world = launched.world;
  const BackendContext ctx = backend_context(world, knobs, "kolo-bench");
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, create_backend(o.backend, ctx));
  // KOLO_HIERARCHICAL_ALLREDUCE=1 or KOLO_HIERARCHICAL_ALLGATHER=1 times the hierarchy with
  // --backend across hosts, as kolo::init() builds it (within a host: shm, or
  // KOLO_CPU_OPERATIONS when set); each knob switches its own collective.
  const bool allreduce = knobs.boolean(KnobId::kHierarchicalAllreduce);
  const bool allgather = knobs.boolean(KnobId::kHierarchicalAllgather);
  if (allreduce || allgather) {
    KOLO_ASSIGN_OR_RETURN(
        backend, make_hierarchical_backend(
                     std::move(backend), ctx,
                     hierarchical_options(launched, o.backend, knobs.is_set(KnobId::kCpuOperations),
                                          allreduce, allgather)));
  }
  const std::string backend_name =
      backend->name() == "hierarchical" ? "hierarchical over " + o.backend : o.backend;
  const int n = world.size, rank = world.rank;
  const size_t element = dtype_size(o.dtype);
  // A backend that takes CUDA tensors only (nccl) runs on device buffers, beside raw NCCL on
  // the same buffers; the others on host memory, beside raw MPI under mpirun.
  const bool on_gpu = !backend->supports(Device::cpu());
  std::unique_ptr<GpuBench> gpu;
  if (on_gpu) {
    KOLO_ASSIGN_OR_RETURN(gpu, make_gpu_bench(ctx, o.max_bytes + element));
  }
  std::unique_ptr<RawMpi> mpi = on_gpu ? nullptr : make_raw_mpi();
  const char* ref = gpu ? "nccl" : "mpi";
  const bool has_ref = gpu || mpi;

  // Both buffers at the largest size, allocated and touched once (host copies on a GPU).
  std::vector<char> input(o.max_bytes + element), output(o.max_bytes + element);
  nlohmann::json rows = nlohmann::json::array();
  if (rank == 0) {
    std::printf("# kolo-bench %s: backend %s, %d ranks, %d iterations (+%d warm-up)%s\n",
                collective_name(o.collective), backend_name.c_str(), n, o.iters, o.warmup,
                gpu   ? ", raw NCCL on the same device buffers"
                : mpi ? ", raw MPI on the same buffers"
                      : "");
    std::printf("# time = max over ranks of the mean time per call; busbw = algbw x %s\n",
                o.collective == Collective::kAllreduce   ? "2(n-1)/n"
                : o.collective == Collective::kBroadcast ? "1"
                                                         : "(n-1)/n");
    std::printf("%12s %12s %9s %8s %11s %11s %11s %8s", "size(B)", "count", "type", "redop",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    if (has_ref)
      std::printf(" %11s %9s", (std::string(ref) + "(us)").c_str(),
                  (std::string("kolo/") + ref).c_str());
    std::printf("\n");
  }
  const uint64_t factor = static_cast<uint64_t>(o.factor);
  for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= factor) {
    BenchCase c;
    c.collective = o.collective;
    c.dtype = o.dtype;
    c.op = o.op;
    c.ranks = n;
    const bool per_rank = o.collective == Collective::kAllgather ||
                          o.collective == Collective::kAlltoall ||
                          o.collective == Collective::kReducescatter;
    c.block = std::max<int64_t>(1, bytes / element / (per_rank ? n : 1));
    c.count = per_rank ? c.block * n : c.block;
    c.input = input.data();
    c.output = output.data();
    if (o.check) fill_inputs(c, rank);
    BenchCase host = c;  // the host view of the case, for the check
    const size_t case_bytes = static_cast<size_t>(c.count) * element;
    if (gpu) {
      if (o.check) KOLO_RETURN_IF_ERROR(gpu->upload(input.data(), case_bytes));
      c.input = gpu->input();
      c.output = gpu->output();
    }
    KOLO_ASSIGN_OR_RETURN(double mean,
                          time_calls(
                              o.warmup, o.iters, [&] { return run_backend_case(*backend, c); },
                              [&] { return backend->barrier(); }));
    double time = mean;
    int64_t wrong = 0;
    if (gpu) {
      if (o.check) KOLO_RETURN_IF_ERROR(gpu->download(output.data(), case_bytes));
      KOLO_ASSIGN_OR_RETURN(time, gpu->max_over_ranks(mean));
      KOLO_ASSIGN_OR_RETURN(wrong, gpu->sum_over_ranks(o.check ? count_wrong(host, rank) : 0));
    } else {
      KOLO_RETURN_IF_ERROR(
          backend->allreduce(&mean, &time, 1, DataType::kFloat64, Reduction{ReduceOp::kMax}));
      wrong = o.check ? count_wrong(host, rank) : 0;
      KOLO_RETURN_IF_ERROR(backend->allreduce(&wrong, &wrong, 1, DataType::kInt64, Reduction{}));
    }
    double ref_time = 0;
    if (gpu) {
      KOLO_ASSIGN_OR_RETURN(double m, time_calls(
                                          o.warmup, o.iters, [&] { return gpu->run_raw(c); },
                                          [&] { return gpu->barrier(); }));
      KOLO_ASSIGN_OR_RETURN(ref_time, gpu->max_over_ranks(m));
    }
    if (mpi) {
      KOLO_ASSIGN_OR_RETURN(double m, time_calls(
                                          o.warmup, o.iters, [&] { return mpi->run(c); },
                                          [&] { return mpi->barrier(); }));
      KOLO_ASSIGN_OR_RETURN(ref_time, mpi->max_over_ranks(m));
    }
    const double size_bytes = static_cast<double>(c.count * element);
    const double algbw = size_bytes / time / 1e9;
    const double busbw = algbw * busbw_factor(o.collective, n);
    if (rank == 0) {
      const char* redop = is_reduction(o.collective) ? reduce_op_name(o.op).data() : "none";
      std::printf("%12.0f %12lld %9s %8s %11.1f %11.3f %11.3f", size_bytes,
                  static_cast<long long>(c.count), dtype_name(o.dtype).data(), redop, time * 1e6,
                  algbw, busbw);
      if (o.check)
        std::printf(" %8lld", static_cast<long long>(wrong));
      else
        std::printf(" %8s", "N/A");
      if (has_ref) std::printf(" %11.1f %9.2f", ref_time * 1e6, time / ref_time);
      std::printf("\n");
      std::fflush(stdout);
      nlohmann::json row = {{"collective", collective_name(o.collective)},
                            {"backend", backend_name},
                            {"ranks", n},
                            {"size_bytes", size_bytes},
                            {"count", c.count},
                            {"type", dtype_name(o.dtype)},
                            {"redop", redop},
                            {"time_us", time * 1e6},
                            {"algbw_gbps", algbw},
                            {"busbw_gbps", busbw}};
      row["wrong"] = o.check ? nlohmann::json(wrong) : nlohmann::json(nullptr);
      if (has_ref) {
        row[std::string(ref) + "_time_us"] = ref_time * 1e6;
        row[std::string("kolo_over_") + ref] = time / ref_time;
      }
      rows.push_back(row);
    }
    if (bytes > o.max_bytes / factor) break;  // the next size would overflow or exceed -e
  }
  if (rank == 0 && !o.json_path.empty()) KOLO_RETURN_IF_ERROR(write_json_rows(o.json_path, rows));
  return backend->barrier();
}

}  // namespace

int run_collective_bench(Collective collective, const KnobSet& knobs, int argc, char** argv) {
  CollectiveOptions options;
  options.collective = collective;
  return run_command(collective_command_line(options), argc, argv,
                     [&] { return run(options, knobs); });
}

}  // namespace kolo::bench
