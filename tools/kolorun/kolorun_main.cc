// kolorun: the launcher. See `kolorun --help` and Note [kolorun supervision] in supervisor.h.
#include <fcntl.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "rendezvous/elastic_plan.h"
#include "rendezvous/world.h"
#include "tools/kolorun/elastic_driver.h"
#include "tools/kolorun/elastic_supervisor.h"
#include "tools/kolorun/host_discovery.h"
#include "tools/kolorun/job.h"
#include "tools/kolorun/options.h"
#include "tools/kolorun/print_config.h"
#include "tools/kolorun/supervisor.h"

namespace {

using namespace kolo::kolorun;

// The first discovery run, before anything starts: how many workers generation 0 has. Its error
// ends kolorun (exit 2) with nothing started. Sets *warned when it warned about other hosts.
kolo::Result<int> first_discovery(const LaunchOptions& o, const std::string& host, bool* warned) {
  const ElasticOptions& e = *o.elastic;
  // On several nodes only node 0 runs the script, and it shares the slots out once every node's
  // kolorun runs (Note [Elastic nodes]): generation 0 is -np on each initial node.
  if (!e.discovery_script || (o.rdzv && o.node_rank > 0)) return o.np;
  KOLO_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts,
                        run_discovery(*e.discovery_script, e.discovery_timeout));
  if (o.rdzv) return o.np;
  const LocalShare share = local_share(hosts, host);
  if (share.slots < e.min_np)
    return kolo::Status::InvalidArgument(
        "--host-discovery-script " + *e.discovery_script + " lists " + std::to_string(share.slots) +
        " slots on this host (" + host + ", localhost or 127.0.0.1), fewer than --min-np " +
        std::to_string(e.min_np));
  if (!share.other_hosts.empty()) {
    *warned = true;
    std::cerr << "kolorun: warning: the discovery script lists other hosts ("
              << join_and(share.other_hosts)
              << "): kolorun cannot start ranks on other hosts yet; it uses this host's slots "
                 "only\n";
  }
  return std::min(o.np, share.slots);
}

// An elastic job (elastic_supervisor.h), after the flags and knobs were checked.
int run_elastic(const LaunchOptions& o, const kolo::KnobSet& knobs) {
  const ElasticOptions& e = *o.elastic;
  ElasticSuperviseOptions so;
  so.tag_output = o.tag_output;
  so.grace = o.grace;
  so.elastic = e;
  so.host = this_hostname();
  auto initial = first_discovery(o, so.host, &so.warned_other_hosts);
  if (!initial.ok()) {
    std::cerr << "kolorun: " << initial.status().message() << "; nothing was started\n";
    return 2;
  }
  so.initial_workers = *initial;
  // With --rdzv other nodes' kolorun may take part, from the start or later (Note [Elastic
  // nodes] in elastic_nodes.h).
  so.several_nodes = o.rdzv.has_value();
  so.nnodes = o.nnodes;
  so.node_rank = o.node_rank;
  if (kolo::Status s = check_node_capacity(e.max_np, o.tag_output); !s.ok()) {
    std::cerr << "kolorun: " << s.message() << "\n";
    return 2;
  }
  auto job = setup_job(o, knobs);
  if (!job.ok()) {
    std::cerr << "kolorun: " << job.status().message() << "\n";
    return 1;
  }
  so.worker = job->worker;
  so.store = job->store.get();
  ExitNotices* exits = job->exits.get();
  so.on_exit = [exits](int64_t worker, const std::string& how) {
    exits->publish(kolo::elastic_protocol::exit_key(worker), how);
  };
  std::unique_ptr<HostDiscovery> discovery;
  if (e.discovery_script && !(so.several_nodes && o.node_rank > 0))
    discovery = std::make_unique<HostDiscovery>(*e.discovery_script, e.discovery_interval,
                                                e.discovery_timeout);
  so.discovery = discovery.get();
  auto code = supervise_elastic(so);
  discovery.reset();
  if (!code.ok()) {
    std::cerr << "kolorun: " << code.status().message() << "\n";
    return 1;
  }
  return *code;
}

}  // namespace

int main(int argc, char** argv) {
  // How each rank starts (Note [Ranks die with kolorun] in supervisor.h).
  if (argc > 1 && std::string(argv[1]) == kExecRankFlag) return exec_rank_main(argc, argv);
  // Started with stdin, stdout or stderr closed (>&-), kolorun's first sockets and pipes would
  // take those numbers and its messages would go into them: /dev/null stands in.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && ::open("/dev/null", O_RDWR) != fd) return 2;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = parse_options(args);
  if (!options.ok()) {
    std::cerr << "kolorun: " << options.status().message() << "\n"
              << "usage: kolorun [options] -np N cmd args...  (kolorun --help for more)\n";
    return 2;
  }
  if (options->help) {
    std::cout << usage();
    return 0;
  }
  if (options->print_config == PrintConfig::kMarkdown) {
    std::cout << kolo::knobs_markdown();
    return 0;
  }
  // Every knob is checked here, so that a bad value stops the job before any rank starts.
  auto knobs = knobs_for_ranks(*options);
  if (!knobs.ok()) {
    std::cerr << "kolorun: " << knobs.status().message() << "\n";
    return 2;
  }
  for (const std::string& w : knobs->warnings()) std::cerr << "kolorun: warning: " << w << "\n";
  if (options->print_config == PrintConfig::kValues) {
    std::cout << print_config(*options, *knobs);
    return 0;
  }
  if (options->elastic) return run_elastic(*options, *knobs);
  if (kolo::Status s = check_node_capacity(options->np, options->tag_output); !s.ok()) {
    std::cerr << "kolorun: " << s.message() << "\n";
    return 2;
  }
  auto job = setup_job(*options, *knobs);
  if (!job.ok()) {
    std::cerr << "kolorun: " << job.status().message() << "\n";
    return 1;
  }
  SuperviseOptions supervise_options{options->tag_output, options->grace, nullptr, -1, nullptr};
  ExitNotices* exits = job->exits.get();
  supervise_options.on_exit = [exits](int rank, const std::string& how) {
    exits->publish(kolo::launcher_exit_key(rank), how);
  };
  if (job->watch) {
    FailureWatch* watch = job->watch.get();
    supervise_options.on_failure = [watch](const std::string& what) { watch->publish(what); };
    supervise_options.remote_failure_fd = watch->fd();
  }
  auto code = supervise(job->ranks, supervise_options);
  if (!code.ok()) {  // a rank could not start: the other nodes' ranks must not wait for it
    std::cerr << "kolorun: " << code.status().message() << "\n";
    if (job->watch) job->watch->publish(code.status().message());
    if (kolo::Status s = finish_job(*job, *options, /*failed=*/true); !s.ok())
      std::cerr << "kolorun: warning: " << s.message() << "\n";
    return 1;
  }
  if (kolo::Status s = finish_job(*job, *options, *code != 0); !s.ok())
    std::cerr << "kolorun: warning: " << s.message() << "\n";
  return *code;
}
