#include "tools/kolorun/job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "rendezvous/barrier.h"
#include "rendezvous/world.h"

extern char** environ;

namespace kolo::kolorun {
namespace {

// How long kolorun waits on node 0's store once the ranks run: to reconnect, for a reply, and
// (node 0, after a failure) for the other nodes to finish. Node 0 gone or cut off then costs
// seconds, not --timeout (which only bounds the nodes' gathering at start, and node 0's wait for
// the others to finish).
constexpr std::chrono::seconds kStoreLossBound{2};

Result<std::string> choose_secret(const LaunchOptions& o, const KnobSet& knobs) {
  if (o.secret && o.secret_file)
    return Status::InvalidArgument("--secret and --secret-file are both given: pass one");
  if (o.secret_file) return read_secret_file(*o.secret_file, "--secret-file");
  if (o.secret) {
    std::fprintf(stderr,
                 "kolorun: warning: --secret puts the job secret in the process list, where "
                 "every user of this host can read it; use --secret-file PATH or KOLO_SECRET\n");
    return *o.secret;
  }
  if (knobs.is_set(KnobId::kSecret)) return knobs.text(KnobId::kSecret);
  // An elastic job with --rdzv takes nodes that join later: they need the secret too.
  if (o.nnodes == 1 && !(o.elastic && o.rdzv)) return random_secret();
  return Status::InvalidArgument(
      "--nnodes " + std::to_string(o.nnodes) +
      " needs a secret shared by every node: give each node the same one in a private file "
      "(--secret-file PATH) or in KOLO_SECRET, e.g. (umask 077; od -An -tx1 -N16 /dev/urandom "
      "| tr -d ' \\n' > PATH)");
}

// Every node checks that it was started like node 0, then all wait for each other; a node that
// joins an elastic job later (--node-rank >= --nnodes) does not wait: the others run already.
Status gather_nodes(Store& store, const LaunchOptions& o, std::chrono::milliseconds timeout) {
  std::string shape = "nnodes=" + std::to_string(o.nnodes) + " np=" + std::to_string(o.np);
  std::string same = "--nnodes and -np (per node; or the same --np-total)";
  if (o.elastic) {
    // Every node's kolorun checks --min-np against what it sees: they must agree.
    shape += " min-np=" + std::to_string(o.elastic->min_np) +
             " max-np=" + std::to_string(o.elastic->max_np);
    same = "--nnodes, -np, --min-np and --max-np (an elastic job's bounds count the whole job)";
  }
  if (o.node_rank == 0) {
    KOLO_RETURN_IF_ERROR(store.set("kolorun/shape", shape));
  } else {
    auto theirs = store.get("kolorun/shape", timeout);
    if (!theirs.ok())
      return theirs.status().with_context("waiting for node 0 at " + o.rdzv->to_string());
    if (*theirs != shape)
      return Status::Mismatch("node " + std::to_string(o.node_rank) + " was started with " + shape +
                              " but node 0 with " + *theirs + ": every node needs the same " +
                              same);
  }
  std::string me = std::to_string(o.node_rank);
  KOLO_ASSIGN_OR_RETURN(int64_t claims, store.add("kolorun/node/" + me + "/claims", 1));
  if (claims > 1)
    return Status::InvalidArgument("--node-rank " + me +
                                   " was given to more than one kolorun; each node needs its own");
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  KOLO_RETURN_IF_ERROR(store.set("kolorun/node/" + me + "/host", host));
  if (o.node_rank >= o.nnodes) return Status::Ok();
  return rendezvous_barrier(store, "kolorun/nodes", o.node_rank, o.nnodes, timeout, "node ranks");
}

// An elastic job's default KOLO_STALL_SHUTDOWN_TIME: the op timeout's default, so that a rank
// waits for a stuck peer no longer than for a lost one in a fixed job.
constexpr const char* kElasticStallShutdown = "60s";

// An elastic worker's command and environment: the world's coordinates come from its
// generation's plan, so none may be inherited from kolorun's own environment either.
RankSpec elastic_worker(const LaunchOptions& o, std::map<std::string, std::string> env) {
  for (const char* var : {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
                          "KOLO_CROSS_RANK", "KOLO_CROSS_SIZE", "KOLO_ELASTIC_WORKER"})
    env.erase(var);
  // Workers come and go, so they are not bound; the threads are shared out for the most there
  // may be.
  const size_t share = allowed_cpus().size() / static_cast<size_t>(o.elastic->max_np);
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    env.emplace(var, std::to_string(std::max<size_t>(1, share)));
  // A rank stuck (stopped, deadlocked outside Kolo) would hold an elastic job as it holds a fixed
  // one; past this time rank 0 names it and kolorun stops it (Note [Elastic rendezvous]:
  // "Stuck"). Unless the user chose a time: one that is given is kept.
  env.emplace("KOLO_STALL_SHUTDOWN_TIME", kElasticStallShutdown);
  RankSpec spec;
  spec.argv = o.command;
  spec.env = std::move(env);
  return spec;
}

}  // namespace

Result<Job> setup_job(const LaunchOptions& o, const KnobSet& knobs) {
  Job job;
  job.timeout = rendezvous_timeout(knobs);
  KOLO_ASSIGN_OR_RETURN(std::string secret, choose_secret(o, knobs));
  HostPort addr;
  if (o.nnodes == 1 && !o.rdzv) {
    KOLO_ASSIGN_OR_RETURN(job.server, TcpStoreServer::start("127.0.0.1", 0, secret));
    addr = {"127.0.0.1", job.server->port()};
  } else {
    addr = *o.rdzv;
    if (o.node_rank == 0) {
      KOLO_ASSIGN_OR_RETURN(job.server, TcpStoreServer::start(addr.host, addr.port, secret));
      addr.port = job.server->port();
    }
    if (o.nnodes > 1 || o.elastic) {
      // --timeout bounds the connect and each reply, as it does the ranks' (world.cc).
      auto first = TcpStore::connect(addr, secret, job.timeout, job.timeout);
      if (!first.ok()) return with_rendezvous_timeout_hint(first.status(), knobs);
      job.store = std::move(*first);
      KOLO_RETURN_IF_ERROR(
          with_rendezvous_timeout_hint(gather_nodes(*job.store, o, job.timeout), knobs));
      KOLO_ASSIGN_OR_RETURN(job.store,
                            TcpStore::connect(addr, secret, kStoreLossBound, kStoreLossBound));
      // An elastic job outlives a failed node (Note [Elastic nodes]): no FailureWatch.
      if (!o.elastic) job.watch = std::make_unique<FailureWatch>(*job.store, o.node_rank);
    }
  }
  if (!job.store) {
    KOLO_ASSIGN_OR_RETURN(job.store,
                          TcpStore::connect(addr, secret, kStoreLossBound, kStoreLossBound));
  }
  job.exits = std::make_unique<ExitNotices>(*job.store);

  std::map<std::string, std::string> base;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) base[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : o.env) base[k] = v;
  for (const auto& [k, v] : o.knob_flags) base[k] = v;
  base["KOLO_STORE_ADDR"] = addr.to_string();
  base["KOLO_SECRET"] = secret;
  if (o.elastic) {
    job.worker = elastic_worker(o, base);
    return job;
  }
  // N ranks that each start one compute thread per core would oversubscribe the node N-fold
  // (OpenBLAS and OpenMP default to every core). Unless the user chose, each rank gets as
  // many threads as it has CPUs: its bound share, or an equal share of the unbound node.
  const std::vector<int> cpus = allowed_cpus();
  KOLO_ASSIGN_OR_RETURN(std::vector<std::vector<int>> binding, plan_binding(cpus, o.np, o.bind_to));
  base["KOLO_SIZE"] = std::to_string(o.np * o.nnodes);
  base["KOLO_LOCAL_SIZE"] = std::to_string(o.np);
  base["KOLO_CROSS_RANK"] = std::to_string(o.node_rank);
  base["KOLO_CROSS_SIZE"] = std::to_string(o.nnodes);
  for (int local = 0; local < o.np; ++local) {
    RankSpec spec;
    spec.rank = o.node_rank * o.np + local;
    spec.argv = o.command;
    spec.env = base;
    spec.env["KOLO_RANK"] = std::to_string(spec.rank);
    spec.env["KOLO_LOCAL_RANK"] = std::to_string(local);
    spec.cpus = binding[static_cast<size_t>(local)];
    const size_t share =
        spec.cpus.empty() ? cpus.size() / static_cast<size_t>(o.np) : spec.cpus.size();
    for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      spec.env.emplace(var, std::to_string(std::max<size_t>(1, share)));
    job.ranks.push_back(std::move(spec));
  }
  return job;
}

Status finish_job(Job& job, const LaunchOptions& o, bool failed) {
  const bool store_lost = job.watch && job.watch->store_lost();
  job.watch.reset();
  if (o.nnodes == 1) return Status::Ok();
  if (o.node_rank != 0) {
    // Only node 0's store matters to the others: say we are done and leave. A lost store just
    // means node 0 has already gone.
    if (!store_lost)
      (void)job.store->set("kolorun/done/arrived/" + std::to_string(o.node_rank), "1");
    return Status::Ok();
  }
  // After a failure the others learn of it within a poll of their FailureWatch and stop their
  // ranks within the grace period; waiting longer would only delay this exit.
  const std::chrono::milliseconds bound =
      failed ? std::min<std::chrono::milliseconds>(job.timeout, o.grace + kStoreLossBound)
             : job.timeout;
  return rendezvous_barrier(*job.store, "kolorun/done", 0, o.nnodes, bound, "node ranks")
      .with_context("waiting for the other nodes to finish");
}

}  // namespace kolo::kolorun
