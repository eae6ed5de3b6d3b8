// Supervisor: starts the ranks of this node and watches them until they are all gone.
//
// Note [kolorun supervision]
// Each rank runs in its own process group (so a signal for it reaches whatever it spawned, and
// a terminal's Ctrl-C reaches only kolorun, which forwards it once). Its stdin is /dev/null;
// with tagging on, its stdout and stderr are pipes that kolorun reads and prefixes line by
// line. One thread runs one poll() loop over those pipes and a self-pipe that the SIGCHLD,
// SIGINT and SIGTERM handlers write to, so nothing is done inside a signal handler. That loop
// never waits on whoever reads kolorun's own output (Note [kolorun output never blocks] in
// output_sink.h).
// When a rank exits non-zero or dies by a signal, kolorun reports it (Note [Which rank kolorun
// names]), sends SIGTERM to every other rank and SIGKILL to those still alive after the grace
// period. SIGINT/SIGTERM sent to
// kolorun are forwarded the same way (a second one escalates to SIGKILL at once). Signals go to
// each rank's process group, a rank that has exited included (helpers it started live on in
// it), and once every rank has exited, whatever is left in their groups gets SIGKILL.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::kolorun {

struct RankSpec {
  int rank = 0;                            // global rank, shown in prefixes and messages
  std::string role = "rank";               // "worker" in an elastic job (rank is its id then)
  std::vector<std::string> argv;           // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // the complete environment of the process
  std::vector<int> cpus;                   // CPU affinity (cpu_binding.h); empty: inherit
};

struct SuperviseOptions {
  bool tag_output = true;
  std::chrono::milliseconds grace{3000};
  // Multi-node (see failure_watch.h): on_failure is called once with the first local
  // failure's description (a failed rank, or kolorun itself interrupted); remote_failure_fd
  // turns readable, with a message, when another node reports one.
  std::function<void(const std::string&)> on_failure;
  int remote_failure_fd = -1;
  // Called for every rank once the scan that reaped it is over and its failure reported: its
  // global rank and exit_text() ("exited with status 1"). kolorun publishes it (exit_notices.h).
  std::function<void(int rank, const std::string& how)> on_exit;
};

// Note [Which rank kolorun names]
// The rank kolorun names, and whose status it returns, is the first to end while the others
// still ran, by the time kolorun saw it end (the waitpid scan that found it), whatever ends
// later. The order in which one scan finds several ended ranks is not the order they ended in,
// so within one scan (ranks that ended within one wake-up of kolorun's loop) a rank killed by a
// signal counts as first, then one that exited with an error, then one that exited 0, then the
// lowest rank: a signal is more often the cause, an error exit the consequence (its links broke).
// When it is reported is another matter: a rank killed by a signal at once; one that exited with
// an error after 250 ms (or once every rank has ended), so that ranks failing alike (a job-wide
// setting that differs) each print their own error before kolorun stops them. An interruption
// of kolorun, or another node's failure, within those 250 ms is reported instead.
// The first rank to leave is not always the first to be seen dead. Kolo's static destructors end
// the session of a rank that returns from main without kolo::shutdown(), and its peers learned of
// it, threw and died by SIGABRT before that process had ended (3 of 6 runs: kolorun named a
// survivor, issue 33). So kolorun records each rank's end in the store (SuperviseOptions::on_exit)
// and a Kolo rank fails on its departed peer only once that record is there (Note [Departures] in
// coordinator/departures.h).
// A rank that exits 0 while others still run is not a failure: ranks may finish at different
// times. But when a rank fails after it, the early one is named first, as the first rank to
// leave ("rank 0 (pid P) exited with status 0 while the other ranks still ran, the first rank to
// leave; then rank 1 (pid Q) was killed by signal 6 (SIGABRT)"), since a peer that left early is
// the likely cause of a collective failing, and kolorun returns the failure's status, non-zero.

// Note [Ranks die with kolorun]
// A rank must not outlive its launcher: killed with SIGKILL, kolorun cannot forward anything,
// and its ranks would run on unsupervised, re-parented to init. So each rank starts as
// `kolorun --exec-rank R PPID cmd args...` (exec_rank_main below), which asks the kernel for
// SIGKILL when its parent dies (PR_SET_PDEATHSIG, kept across exec), checks that the parent is
// still PPID (it may have died before the request), and execs cmd in place: same pid, same
// process group and CPU mask. The signal follows the parent *thread* that spawned the rank, so
// supervise() must run on a thread that lives as long as kolorun (its main thread does).

// Runs the ranks to completion and returns kolorun's exit status: 0 when all exit 0; the
// first failed rank's exit status (128 + signal if it was killed; Note [Which rank kolorun
// names]); 1 when another node
// reported a failure; 128 + signal when kolorun was interrupted. IoError "cannot start rank R:
// cmd: <reason>" when a rank's command is not found or not executable in its PATH, or a process
// cannot be created (the ones already started are stopped first). Call once per process: it
// installs signal handlers.
Result<int> supervise(const std::vector<RankSpec>& ranks, const SuperviseOptions& options);

// OK when this node can hold `ranks` processes: the descriptors their output pipes need (two per
// rank when tagging, plus a margin for the store) within RLIMIT_NOFILE, and the processes within
// RLIMIT_NPROC and the kernel's pid_max. Otherwise InvalidArgument naming -np, what it needs
// and the limit, checked before anything starts (instead of failing half-way through spawning).
Status check_node_capacity(int ranks, bool tag_output);

// The first argument of kolorun's rank-starting mode, and that mode's main: argv is
// {kolorun, kExecRankFlag, R, PPID, cmd, args...}. Does not return unless exec fails, when it
// prints "kolorun: cannot start rank R: cmd: <reason>" and returns 127.
inline constexpr const char* kExecRankFlag = "--exec-rank";
int exec_rank_main(int argc, char** argv);

// "SIGKILL" for 9; "signal 64" style text for numbers without a name.
std::string signal_name(int sig);

// How a process ended, from its waitpid status: "exited with status 1", "was killed by signal
// 9 (SIGKILL)".
std::string exit_text(int status);

// One rank's end as the supervisor saw it: its global rank, its waitpid status, and the number
// of the waitpid scan that found it.
struct RankExit {
  int rank = 0;
  int status = 0;
  uint64_t scan = 0;
};

// Whether `a` counts as ending before `b` (Note [Which rank kolorun names]): found by an
// earlier scan; within one scan killed by a signal, then exited with an error, then exited 0,
// then the lower rank. A strict weak order.
bool ended_first(const RankExit& a, const RankExit& b);

}  // namespace kolo::kolorun
