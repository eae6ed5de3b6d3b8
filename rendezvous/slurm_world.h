// The World of a Slurm job step: what `srun` (alone, without kolorun or mpirun) tells each task
// in its SLURM_* variables, and the rendezvous store that Kolo starts on the step's first node.
// The launcher table (backends/registry.h, registered_launchers()) lists it as "srun", after
// the backends' launchers (mpirun inside an allocation inherits SLURM_* from its daemons' step:
// mpirun's world is the right one there), and kolorun's KOLO_RANK wins over both
// (launched_world()). docs/clusters.md is the user's side.
//
// Note [Slurm rendezvous]
// - Coordinates: rank SLURM_PROCID of SLURM_STEP_NUM_TASKS (else SLURM_NTASKS); node
//   SLURM_NODEID of the step's node list SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, a
//   compressed hostlist, expand_hostlist()); local rank SLURM_LOCALID of the tasks on this node,
//   SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE, "2(x3),1"); cross rank and size: the
//   nodes (in node-list order) that have a task of this local rank. Every one is checked against
//   the others, and an error names the variable, its value and what it disagrees with.
// - Store: rank 0 (which must run on the step's first node) hosts the TcpStore on
//   slurm_store_port(SLURM_JOB_ID, SLURM_STEP_ID), so that every task computes the address alone
//   and concurrent steps and jobs on one node do not collide; the other tasks connect to the first
//   node by name (or 127.0.0.1 when the step has one node), waiting up to
//   KOLO_RENDEZVOUS_TIMEOUT. Fallback: KOLO_STORE_ADDR=HOST:PORT, set by the user and propagated
//   by srun, replaces the derived address (a derived port that is taken, a node name that does
//   not resolve from the other nodes).
// - Secret: KOLO_SECRET (srun propagates the environment), else the contents of the file
//   KOLO_SECRET_FILE (private to its owner: mode 600 or stricter); with neither a step of more
//   than one task refuses to start: the store listens on the cluster network, and an
//   unauthenticated one would take anyone's keys.
//
// Thread-safety: pure functions over their arguments, except slurm_environment() (reads
// environ) and world_from_slurm() (starts or connects a store; call it once per process).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/knobs.h"
#include "kolo/status.h"
#include "rendezvous/world.h"

namespace kolo {

using EnvMap = std::map<std::string, std::string>;

// The SLURM_* variables of this process's environment (name -> value).
EnvMap slurm_environment();

// Whether `env` is the environment of a task of a Slurm job step: SLURM_JOB_ID and
// SLURM_STEP_ID (or the older SLURM_STEPID) are set. A batch script or salloc shell is not a
// step (no SLURM_STEP_ID): a program run there directly is a single rank.
bool is_slurm_step(const EnvMap& env);

// The host names of a compressed Slurm hostlist, in order: "node[1-3,05],gpu7" ->
// node1 node2 node3 node05 gpu7 (zero-padding kept: "n[08-10]" -> n08 n09 n10; several
// bracket groups multiply: "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Errors: InvalidArgument
// naming `variable`, the value and what is wrong (an unclosed '[', a range whose end is below
// its start, an empty name), e.g. "SLURM_STEP_NODELIST=n[3-1] is invalid: range 3-1 ...".
Result<std::vector<std::string>> expand_hostlist(std::string_view list, std::string_view variable);

// The task count of each node from Slurm's tasks-per-node form: "2(x3),1" -> 2 2 2 1.
// Errors: InvalidArgument naming `variable` and the value.
Result<std::vector<int>> expand_tasks_per_node(std::string_view text, std::string_view variable);

// Where this task is in its step (Note [Slurm rendezvous]).
struct SlurmStep {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  int node = 0;                    // SLURM_NODEID
  std::vector<std::string> nodes;  // the step's nodes, expanded
  int64_t job_id = 0, step_id = 0;
};

// The step that `env` (a task's SLURM_* variables) describes, every variable checked against
// the others. Errors: InvalidArgument naming the variable, its value and the expectation, e.g.
// "SLURM_PROCID is not set: expected this task's rank in the Slurm job step (srun sets it)",
// "SLURM_STEP_NUM_TASKS=3 disagrees with SLURM_STEP_TASKS_PER_NODE=2(x2), which counts 4 tasks".
Result<SlurmStep> parse_slurm_step(const EnvMap& env);

// The store port of a step: in [10000, 32000), below Linux's ephemeral range, a function of the
// job and step ids only (every task computes the same one).
int slurm_store_port(int64_t job_id, int64_t step_id);

// Where rank 0's store listens (host: the first node, 127.0.0.1 for a one-node step) unless
// `knobs` sets KOLO_STORE_ADDR, which then wins. Errors: parse_host_port's for a malformed
// KOLO_STORE_ADDR.
Result<HostPort> slurm_store_address(const SlurmStep& step, const KnobSet& knobs);

// The job secret of a Slurm step: KOLO_SECRET, else KOLO_SECRET_FILE's contents
// (read_secret_file()). A step of one task without either gets a random one. Errors:
// InvalidArgument naming both variables and how to set one, read_secret_file's.
Result<std::string> slurm_secret(const SlurmStep& step, const KnobSet& knobs);

// The World of the step `env` describes: parse_slurm_step, slurm_secret, then rank 0 starts the
// store at slurm_store_address and every task (rank 0 too) connects to it, each wait bounded by
// rendezvous_timeout(knobs). Collective over the step's tasks. Errors: the above; IoError from
// rank 0's bind naming the port, where it came from and KOLO_STORE_ADDR; a connect's IoError or
// PeerFailure with the address, its origin and the KOLO_RENDEZVOUS_TIMEOUT hint.
Result<World> world_from_slurm_env(const EnvMap& env, const KnobSet& knobs);
// world_from_slurm_env(slurm_environment(), knobs): the launcher table's entry.
Result<World> world_from_slurm(const KnobSet& knobs);
// is_slurm_step(slurm_environment()).
bool launched_by_srun();

}  // namespace kolo
