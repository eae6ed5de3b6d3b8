#include "bench/bench_options.h"

#include <algorithm>
#include <string_view>

#include "bench/json_rows.h"
#include "common/build_info.h"

namespace kolo::bench {

namespace {

constexpr const char* kNames[] = {"allreduce", "allgather", "broadcast", "alltoall",
                                  "reducescatter"};

}  // namespace

const char* collective_name(Collective c) { return kNames[static_cast<int>(c)]; }

CommandLine collective_command_line(CollectiveOptions& o) {
  std::vector<std::string> dtypes, ops;
  for (int i = 0; i < kNumDataTypes; ++i) dtypes.emplace_back(dtype_name(static_cast<DataType>(i)));
  for (int i = 0; i < kNumReduceOps; ++i)
    ops.emplace_back(reduce_op_name(static_cast<ReduceOp>(i)));
  CommandLine line;
  line.command = collective_name(o.collective);
  line.about =
      "Times the collective through one Kolo backend at sizes -b, -b x -f, ... up to -e and\n"
      "prints nccl-tests' columns (size, count, type, redop, time, algbw, busbw, #wrong).\n";
  const std::vector<std::string> backends(built_backends().begin(), built_backends().end());
  line.flags = {
      choice_flag(
          "--backend", "NAME", backends,
          [&o, backends](std::string_view v) {
            if (std::find(backends.begin(), backends.end(), v) == backends.end()) return false;
            o.backend = std::string(v);
            return true;
          },
          o.backend, "backend to time"),
      size_flag("-b", &o.min_bytes, 1, "smallest message"),
      size_flag("-e", &o.max_bytes, 1, "largest message"),
      int_flag("-f", "N", &o.factor, 2, kIntMax, "size multiplier between rows"),
      int_flag("-n", "N", &o.iters, 1, kIntMax, "timed iterations per size"),
      int_flag("-w", "N", &o.warmup, 0, kIntMax, "warm-up iterations per size"),
      int_flag("-r", "N", &o.rounds, 1, 1000,
               "rounds per size: -w and -n calls of the backend, then of the raw library"),
      enum_flag("-d", "DTYPE", dtypes, parse_dtype, &o.dtype, std::string(dtype_name(o.dtype)),
                "element type"),
      enum_flag("-o", "OP", ops, parse_reduce_op, &o.op, std::string(reduce_op_name(o.op)),
                "reduction, allreduce and reducescatter only"),
      switch_flag("--check", &o.check, "deterministic inputs; count wrong output elements"),
      switch_flag("--copy", &o.copy,
                  "also time every rank copying the size's bytes at once (host buffers)"),
      json_flag(&o.json_path),
  };
  line.notes =
      "Launch under kolorun (kolorun -np 2 kolo-bench allreduce) or mpirun; under mpirun\n"
      "each size is also timed with the raw MPI collective on the same buffers.\n"
      "SIZE is the whole buffer: allreduce/broadcast data, allgather output,\n"
      "reducescatter input, alltoall send buffer (as in nccl-tests).\n"
      "--copy adds copy(us): every rank copies SIZE bytes from the input to the output\n"
      "buffer at the same time (the faster of memcpy and streaming stores), the memory's\n"
      "floor for a collective that reads its input and writes its output once.\n"
      "With -r N each time is the median of N rounds' means and the ratios are medians of\n"
      "the rounds' ratios: the backend and the raw library alternate, so that a slow phase of\n"
      "the machine falls on both.\n";
  line.check = [&o]() -> Status {
    if (o.min_bytes > o.max_bytes)
      return Status::InvalidArgument("-b " + std::to_string(o.min_bytes) + " and -e " +
                                     std::to_string(o.max_bytes) +
                                     " are invalid: expected -b <= -e");
    return Status::Ok();
  };
  return line;
}

}  // namespace kolo::bench
