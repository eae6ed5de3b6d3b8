#include "backends/mpi/mpi_world.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/mpi/mpi_runtime.h"
#include "rendezvous/address.h"
#include "rendezvous/tcp_store.h"

namespace kolo {

namespace {

// Owns a communicator for the duration of world_from_mpi().
struct CommGuard {
  MPI_Comm comm = MPI_COMM_NULL;
  ~CommGuard() {
    if (comm != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm);
  }
};

// The first IPv4 address of an interface that is up and not loopback: what the other nodes
// can most likely reach. Empty when there is none.
std::string first_external_ipv4() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) found = text;
  }
  freeifaddrs(list);
  return found;
}

// Rank 0's announcement: "ok <host:port> <secret>" or "error <message>".
constexpr int kAnnouncementBytes = 1024;

std::string announce(bool all_local, std::unique_ptr<TcpStoreServer>& server) {
  std::string advertised = "127.0.0.1";
  std::string bind = "127.0.0.1";
  if (!all_local) {
    advertised = first_external_ipv4();
    bind = "0.0.0.0";
    if (advertised.empty())
      return "error mpi world: rank 0 found no non-loopback IPv4 interface to host the "
             "rendezvous store on, but the job spans several nodes";
  }
  const std::string secret = random_secret();
  auto started = TcpStoreServer::start(bind, 0, secret);
  if (!started.ok())
    return "error mpi world: rank 0 could not start the rendezvous store: " +
           started.status().to_string();
  server = std::move(started).value();
  return "ok " + HostPort{advertised, server->port()}.to_string() + " " + secret;
}

}  // namespace

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

Result<World> world_from_mpi(const KnobSet& knobs) {
  KOLO_RETURN_IF_ERROR(ensure_mpi());
  World world;
  CommGuard comm, local, cross;
  KOLO_RETURN_IF_ERROR(
      mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &comm.comm), "mpi world: MPI_Comm_dup"));
  MPI_Comm_set_errhandler(comm.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm.comm, &world.rank);
  MPI_Comm_size(comm.comm, &world.size);

  KOLO_RETURN_IF_ERROR(mpi_status(
      MPI_Comm_split_type(comm.comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &local.comm),
      "mpi world: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)"));
  MPI_Comm_rank(local.comm, &world.local_rank);
  MPI_Comm_size(local.comm, &world.local_size);
  // Ranks with the same local rank, one per node, ordered by world rank.
  KOLO_RETURN_IF_ERROR(
      mpi_status(MPI_Comm_split(comm.comm, world.local_rank, world.rank, &cross.comm),
                 "mpi world: MPI_Comm_split by local rank"));
  MPI_Comm_rank(cross.comm, &world.cross_rank);
  MPI_Comm_size(cross.comm, &world.cross_size);

  char buffer[kAnnouncementBytes] = {};
  if (world.rank == 0) {
    const std::string text = announce(world.local_size == world.size, world.server);
    std::strncpy(buffer, text.c_str(), kAnnouncementBytes - 1);
  }
  KOLO_RETURN_IF_ERROR(mpi_status(MPI_Bcast(buffer, kAnnouncementBytes, MPI_CHAR, 0, comm.comm),
                                  "mpi world: MPI_Bcast of the store address"));
  const std::string text(buffer);
  if (text.rfind("ok ", 0) != 0) return Status::IoError(text.substr(text.find(' ') + 1));
  const size_t space = text.find(' ', 3);
  KOLO_ASSIGN_OR_RETURN(HostPort address,
                        parse_host_port(text.substr(3, space - 3), "rank 0's store address"));
  world.secret = text.substr(space + 1);
  const std::chrono::milliseconds bound = rendezvous_timeout(knobs);
  auto store = TcpStore::connect(address, world.secret, bound, bound);
  if (!store.ok())
    return with_rendezvous_timeout_hint(
        store.status().with_context("mpi world: rank " + std::to_string(world.rank) +
                                    " connecting to rank 0's rendezvous store"),
        knobs);
  world.store = std::move(store).value();
  return world;
}

}  // namespace kolo
