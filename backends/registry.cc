#include "backends/registry.h"

#include "backends/tcp/tcp_backend.h"
#if KOLO_HAVE_MPI
#include "backends/mpi/mpi_backend.h"
#endif

namespace kolo {

const std::vector<BackendEntry>& registered_backends() {
  static const std::vector<BackendEntry> kBackends = {
      {"tcp", &make_tcp_backend},
#if KOLO_HAVE_MPI
      {"mpi", &make_mpi_backend},
#endif
  };
  return kBackends;
}

Result<std::unique_ptr<Backend>> create_backend(std::string_view name,
                                                const BackendContext& context) {
  std::string known;
  for (const auto& entry : registered_backends()) {
    if (entry.name == name) return entry.factory(context);
    known += known.empty() ? "" : ", ";
    known += entry.name;
  }
  return Status::InvalidArgument("unknown backend '" + std::string(name) +
                                 "'; this build has: " + known);
}

BackendContext backend_context(const World& world, std::string store_prefix) {
  BackendContext ctx;
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
