#include "bench/bench_options.h"

#include <charconv>
#include <string_view>

#include "kolo/units.h"

namespace kolo::bench {

namespace {

constexpr const char* kNames[] = {"allreduce", "allgather", "broadcast", "alltoall",
                                  "reducescatter"};

Result<int64_t> parse_int(std::string_view flag, std::string_view text, int64_t min) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min)
    return Status::InvalidArgument(std::string(flag) + " " + std::string(text) +
                                   " is invalid: expected an integer >= " + std::to_string(min));
  return value;
}

}  // namespace

const char* collective_name(Collective c) { return kNames[static_cast<int>(c)]; }

Result<Collective> parse_collective(const std::string& name) {
  for (int i = 0; i < 5; ++i)
    if (name == kNames[i]) return static_cast<Collective>(i);
  return Status::InvalidArgument("unknown collective '" + name +
                                 "': expected allreduce, allgather, broadcast, alltoall or "
                                 "reducescatter");
}

std::string collective_usage() {
  return "usage: kolo-bench allreduce|allgather|broadcast|alltoall|reducescatter [options]\n"
         "  --backend tcp|mpi  backend to time (default tcp)\n"
         "  -b SIZE            smallest message, e.g. 4KiB (default 4KiB)\n"
         "  -e SIZE            largest message (default 256MiB)\n"
         "  -f N               size multiplier between rows (default 2)\n"
         "  -n N               timed iterations per size (default 20)\n"
         "  -w N               warm-up iterations per size (default 5)\n"
         "  -d DTYPE           uint8 int8 int32 int64 float16 bfloat16 float32 float64\n"
         "  -o OP              sum average min max product (reductions only; default sum)\n"
         "  --check            deterministic inputs; count wrong output elements\n"
         "  --json FILE        write every row as JSON (rank 0)\n"
         "Launch under kolorun (kolorun -np 2 kolo-bench allreduce) or mpirun; under mpirun\n"
         "each size is also timed with the raw MPI collective on the same buffers.\n"
         "SIZE is the whole buffer: allreduce/broadcast data, allgather output,\n"
         "reducescatter input, alltoall send buffer (as in nccl-tests).\n";
}

Result<CollectiveOptions> parse_collective_options(Collective collective, int argc, char** argv) {
  CollectiveOptions o;
  o.collective = collective;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") return Status::Aborted(collective_usage());
    if (flag == "--check") {
      o.check = true;
      continue;
    }
    if (i + 1 >= argc)
      return Status::InvalidArgument(std::string(flag) + " needs a value (see --help)");
    const std::string_view value = argv[++i];
    if (flag == "--backend") {
      if (value != "tcp" && value != "mpi")
        return Status::InvalidArgument("--backend " + std::string(value) +
                                       " is invalid: expected tcp or mpi");
      o.backend = std::string(value);
    } else if (flag == "-b" || flag == "-e") {
      auto size = parse_size(value);
      if (!size.ok()) return size.status().with_context(std::string(flag));
      (flag == "-b" ? o.min_bytes : o.max_bytes) = *size;
    } else if (flag == "-f") {
      KOLO_ASSIGN_OR_RETURN(int64_t f, parse_int(flag, value, 2));
      o.factor = static_cast<uint64_t>(f);
    } else if (flag == "-n") {
      KOLO_ASSIGN_OR_RETURN(int64_t n, parse_int(flag, value, 1));
      o.iters = static_cast<int>(n);
    } else if (flag == "-w") {
      KOLO_ASSIGN_OR_RETURN(int64_t w, parse_int(flag, value, 0));
      o.warmup = static_cast<int>(w);
    } else if (flag == "-d") {
      auto dtype = parse_dtype(value);
      if (!dtype)
        return Status::InvalidArgument("-d " + std::string(value) +
                                       " is invalid: expected uint8, int8, int32, int64, "
                                       "float16, bfloat16, float32 or float64");
      o.dtype = *dtype;
    } else if (flag == "-o") {
      auto op = parse_reduce_op(value);
      if (!op)
        return Status::InvalidArgument("-o " + std::string(value) +
                                       " is invalid: expected sum, average, min, max or product");
      o.op = *op;
    } else if (flag == "--json") {
      o.json_path = std::string(value);
    } else {
      return Status::InvalidArgument("unknown option " + std::string(flag) + " (see --help)");
    }
  }
  if (o.min_bytes == 0 || o.min_bytes > o.max_bytes)
    return Status::InvalidArgument("-b " + std::to_string(o.min_bytes) + " and -e " +
                                   std::to_string(o.max_bytes) +
                                   " are invalid: expected 0 < -b <= -e");
  return o;
}

}  // namespace kolo::bench
