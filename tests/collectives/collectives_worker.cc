// collectives_worker: one rank of a multi-process collectives test. Started by kolorun (tcp),
// mpirun (mpi or tcp) or by hand with KOLO_* variables (the test driver does that to fault
// the job). Exit status: 0 all checks passed; 1 a check failed (the message says which);
// 2 bad usage; 3 (kill mode) a collective failed after a peer died, as it should; 4 (kill
// mode) no failure was seen.
//
//   collectives_worker --backend tcp|mpi|shm [--mode checks|kill|loop|mismatch]
//                      [--counts N,N,...] [--hierarchical INTRA]
// kill mode: rank 1 raises SIGKILL on itself while every rank loops over 32 MiB allreduces;
// the survivors must see an error. loop mode: the same loop with nobody killed, for a test that
// kills a rank from outside (scancel in tests/slurm). mismatch mode: rank r allreduces 10 + r
// floats; every rank must fail (exit 3) instead of reading past its peers' data. --counts: the
// element counts of the checks (collective_checks.h). --hierarchical: the backend is the
// hierarchical composite (backends/hierarchical) over --backend, with INTRA within each host,
// allreduce and allgather hierarchical; its creation must not fall back to the flat backend, and
// the checks run again with both switches off.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/hierarchical/hierarchical_backend.h"
#include "backends/registry.h"
#include "tests/collectives/collective_checks.h"

namespace {

int fail(int rank, const std::string& what, const kolo::Status& status, int code) {
  std::fprintf(stderr, "collectives_worker rank %d: %s: %s\n", rank, what.c_str(),
               status.to_string().c_str());
  return code;
}

int kill_mode(kolo::Backend& backend, bool self_kill) {
  const int rank = backend.rank();
  if (rank == 1 && self_kill) {
    // A separate thread, so that the kill lands in the middle of a collective.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::raise(SIGKILL);
    }).detach();
  }
  std::vector<float> data(8 << 20, 1.0f);
  for (int i = 0; i < 2000; ++i) {
    kolo::Status s = backend.allreduce(data.data(), data.data(), static_cast<int64_t>(data.size()),
                                       kolo::DataType::kFloat32, kolo::Reduction{});
    if (!s.ok()) return fail(rank, "allreduce failed after " + std::to_string(i) + " calls", s, 3);
  }
  std::fprintf(stderr, "collectives_worker rank %d: no failure seen after rank 1 died\n", rank);
  return 4;
}

int mismatch_mode(kolo::Backend& backend) {
  const int rank = backend.rank();
  std::vector<float> data(static_cast<size_t>(10 + rank), 1.0f);
  kolo::Status s = backend.allreduce(data.data(), data.data(), static_cast<int64_t>(data.size()),
                                     kolo::DataType::kFloat32, kolo::Reduction{});
  if (!s.ok()) return fail(rank, "allreduce failed", s, 3);
  std::fprintf(stderr, "collectives_worker rank %d: counts disagreed but allreduce passed\n", rank);
  return 4;
}

std::vector<int64_t> parse_counts(const std::string& text) {
  std::vector<int64_t> counts;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    counts.push_back(std::stoll(text.substr(at, end - at)));
    at = end + 1;
  }
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name, mode = "checks", intra;
  std::vector<int64_t> counts;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--backend") == 0)
      backend_name = argv[i + 1];
    else if (std::strcmp(argv[i], "--mode") == 0)
      mode = argv[i + 1];
    else if (std::strcmp(argv[i], "--counts") == 0)
      counts = parse_counts(argv[i + 1]);
    else if (std::strcmp(argv[i], "--hierarchical") == 0)
      intra = argv[i + 1];
  }
  if (backend_name.empty() ||
      (mode != "checks" && mode != "kill" && mode != "loop" && mode != "mismatch")) {
    std::fprintf(
        stderr,
        "usage: collectives_worker --backend tcp|mpi|shm [--mode checks|kill|loop|mismatch] "
        "[--counts N,N,...] [--hierarchical INTRA]\n");
    return 2;
  }
  // kolorun's environment (parsed once, as init() does), or mpirun's through the mpi
  // backend's registry entry.
  auto knobs = kolo::KnobSet::from_process_env();
  if (!knobs.ok()) return fail(-1, "knobs", knobs.status(), 1);
  auto launched = kolo::launched_world(*knobs);
  if (!launched.ok()) return fail(-1, "world", launched.status(), 1);
  kolo::BackendContext ctx = kolo::backend_context(launched->world, *knobs, "kolo");
  // Short bounds: a test must fail within seconds, not hang for the 60 s default.
  ctx.connect_timeout = std::chrono::seconds(10);
  ctx.op_timeout = std::chrono::seconds(10);
  auto backend = kolo::create_backend(backend_name, ctx);
  if (!backend.ok()) return fail(ctx.rank, "creating backend " + backend_name, backend.status(), 1);
  if (!intra.empty()) {
    backend = kolo::make_hierarchical_backend(
        std::move(*backend), ctx,
        kolo::HierarchicalOptions{
            .intra = intra, .cross = backend_name, .allreduce = true, .allgather = true});
    if (!backend.ok()) return fail(ctx.rank, "hierarchical backend", backend.status(), 1);
    if (dynamic_cast<kolo::HierarchicalBackend*>(backend->get()) == nullptr)
      return fail(ctx.rank, "hierarchical backend", kolo::Status::Internal("got the flat backend"),
                  1);
    backend_name = "hierarchical " + intra + "/" + backend_name;
  }
  auto* hierarchy = dynamic_cast<kolo::HierarchicalBackend*>(backend->get());
  if (mode == "kill" || mode == "loop") return kill_mode(**backend, mode == "kill");
  if (mode == "mismatch") return mismatch_mode(**backend);
  auto passed = kolo::testing::run_collective_checks(**backend, counts);
  if (!passed.ok()) return fail(ctx.rank, "check failed", passed.status(), 1);
  if (hierarchy) {
    // The switches, flipped alike on every rank: the same checks on the flat paths.
    hierarchy->set_hierarchical(false);
    hierarchy->set_hierarchical_allgather(false);
    auto flat = kolo::testing::run_collective_checks(**backend, {ctx.size + 1});
    if (!flat.ok())
      return fail(ctx.rank, "check failed after set_hierarchical(false)", flat.status(), 1);
    hierarchy->set_hierarchical(true);
  }
  std::printf("collectives_worker rank %d of %d (%s): %d checks passed\n", ctx.rank, ctx.size,
              backend_name.c_str(), *passed);
  return 0;
}
