// Child processes of kolorun, shared by the fixed supervisor (supervisor.h) and the elastic one
// (elastic_supervisor.h): starting a rank or worker in its own process group behind
// `kolorun --exec-rank` (Note [Ranks die with kolorun]), reading its output line by line,
// signalling its group, and the self-pipe through which signals reach the poll loop
// (Note [kolorun supervision]). Everything here is called from the supervising thread only.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kolo/status.h"
#include "tools/kolorun/line_prefixer.h"
#include "tools/kolorun/output_sink.h"
#include "tools/kolorun/supervisor.h"

namespace kolo::kolorun {

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool alive = false;
  int status = 0;                // waitpid status once reaped
  uint64_t scan = 0;             // the waitpid scan that reaped it (Supervisor::reap)
  bool group_gone = false;       // its process group has no member left (kill said ESRCH)
  int out_fd = -1, err_fd = -1;  // read ends, -1 when closed or not tagging
  std::unique_ptr<LinePrefixer> out, err;
};

// Whether a waitpid status is a failure (not exit 0), and kolorun's exit status for it (128 +
// signal when killed).
bool failed(int status);
int exit_code_of(int status);

// Initialises `attr` for a process kolorun starts (a rank, a worker, the discovery script): its
// own process group, so that a signal for it reaches whatever it spawns, and the default
// dispositions and an empty mask for the signals kolorun handles or ignores, since ignored
// dispositions would survive exec. The caller destroys it (posix_spawnattr_destroy).
void init_spawn_attributes(posix_spawnattr_t& attr);

// Starts spec's process (argv[0] looked up in spec's PATH) with its output piped into prefixers
// writing to the sinks when `tag`; fills `child`. IoError "cannot start rank R: cmd: <reason>"
// ("worker W" by spec.role)
// when the command is not runnable or the process cannot be created.
Status spawn(const RankSpec& spec, bool tag, OutputSink& out_sink, OutputSink& err_sink,
             Child& child);

// Sends sig to each child's process group, also once the child was reaped (what it left in its
// group must not outlive the job); a group found empty is not signalled again.
void signal_all(std::vector<Child>& children, int sig);
void signal_group(Child& child, int sig);

// Reads what is available on fd into its prefixer; closes fd (sets it to -1) at EOF or error.
void pump(int& fd, LinePrefixer& lines);

// Note [kolorun output never blocks]: writes what the sinks hold while their readers take it;
// after an interruption at most 2 s, then drops the rest and says so.
void flush_at_exit(const std::vector<OutputSink*>& sinks, bool interrupted);

// The self-pipe: handlers for SIGINT, SIGTERM, SIGCHLD and SIGHUP write the signal's number to
// it; SIGPIPE is ignored. Once per process. IoError when the pipe cannot be made.
Status install_signal_pipe();
int signal_pipe_fd();  // its read end (non-blocking)
void close_signal_pipe();

}  // namespace kolo::kolorun
