// kolorun: the launcher. See `kolorun --help` and Note [kolorun supervision] in supervisor.h.
#include <fcntl.h>

#include <iostream>
#include <string>

#include "tools/kolorun/job.h"
#include "tools/kolorun/options.h"
#include "tools/kolorun/print_config.h"
#include "tools/kolorun/supervisor.h"

int main(int argc, char** argv) {
  using namespace kolo::kolorun;
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
    exits->publish(rank, how);
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
