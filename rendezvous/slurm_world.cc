#include "rendezvous/slurm_world.h"

#include <cctype>
#include <charconv>
#include <optional>

#include "rendezvous/address.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/tcp_store.h"

extern char** environ;

namespace kolo {
namespace {

Status bad(std::string_view variable, std::string_view value, const std::string& why) {
  return Status::InvalidArgument(std::string(variable) + "=" + std::string(value) +
                                 " is invalid: " + why);
}

// "'text'", built by appending: GCC 12 warns falsely (-Wrestrict, its bug 105329) on
// "'" + std::string(...) when inlined.
std::string quoted(std::string_view text) {
  std::string out(1, '\'');
  out.append(text);
  out += '\'';
  return out;
}

// A non-negative decimal integer, all of `text`.
std::optional<int64_t> to_int(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

// Splits at the commas that are outside brackets.
std::vector<std::string_view> top_level_items(std::string_view list) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      ++depth;
    } else if (list[i] == ']') {
      --depth;
    }
  }
  return items;
}

// "1-3,05" -> "1" "2" "3" "05" (the width of a range's start is kept: 08-10 -> 08 09 10).
Result<std::vector<std::string>> expand_ranges(std::string_view ranges, std::string_view variable,
                                               std::string_view list) {
  std::vector<std::string> out;
  for (std::string_view r : top_level_items(ranges)) {
    const size_t dash = r.find('-');
    std::string_view lo = r.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : r.substr(dash + 1);
    std::optional<int64_t> a = to_int(lo), b = to_int(hi);
    if (!a || !b) return bad(variable, list, quoted(r) + " is not N or N-M inside [...]");
    if (*b < *a)
      return bad(variable, list,
                 "range " + std::string(r) + " ends below its start: expected N-M with N <= M");
    for (int64_t v = *a; v <= *b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return out;
}

// One item of a hostlist: a name with bracket groups anywhere ("r[1-2]n[1-2]").
Status expand_item(std::string_view item, std::string_view variable, std::string_view list,
                   std::vector<std::string>& out) {
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < item.size()) {
    const size_t open = item.find('[', i);
    const std::string_view text = item.substr(i, open - i);
    for (std::string& n : names) n += text;
    if (open == std::string_view::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string_view::npos)
      return bad(variable, list,
                 "'[' at " + std::to_string(open) + " of '" + std::string(item) +
                     "' is not closed by ']'");
    KOLO_ASSIGN_OR_RETURN(std::vector<std::string> values,
                          expand_ranges(item.substr(open + 1, close - open - 1), variable, list));
    std::vector<std::string> product;
    for (const std::string& n : names)
      for (const std::string& v : values) product.push_back(n + v);
    names = std::move(product);
    i = close + 1;
  }
  for (std::string& n : names) out.push_back(std::move(n));
  return Status::Ok();
}

}  // namespace

EnvMap slurm_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (entry.rfind("SLURM_", 0) == 0 && eq != std::string_view::npos)
      env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

bool is_slurm_step(const EnvMap& env) {
  return env.count("SLURM_JOB_ID") != 0 &&
         (env.count("SLURM_STEP_ID") != 0 || env.count("SLURM_STEPID") != 0);
}

Result<std::vector<std::string>> expand_hostlist(std::string_view list, std::string_view variable) {
  std::vector<std::string> out;
  for (std::string_view item : top_level_items(list)) {
    if (item.empty() || item.front() == '[')
      return bad(variable, list, "an empty host name: expected a list like node[1-3,5],gpu7");
    KOLO_RETURN_IF_ERROR(expand_item(item, variable, list, out));
  }
  return out;
}

Result<std::vector<int>> expand_tasks_per_node(std::string_view text, std::string_view variable) {
  std::vector<int> out;
  for (std::string_view item : top_level_items(text)) {
    const size_t paren = item.find("(x");
    std::optional<int64_t> count = to_int(item.substr(0, paren)), repeat = 1;
    if (paren != std::string_view::npos)
      repeat = item.back() == ')' ? to_int(item.substr(paren + 2, item.size() - paren - 3))
                                  : std::nullopt;
    if (!count || !repeat || *count < 1 || *repeat < 1 || *count > INT32_MAX || *repeat > INT32_MAX)
      return bad(variable, text,
                 quoted(item) + " is not N or N(xM) with N, M >= 1: expected e.g. 2(x3),1");
    out.insert(out.end(), static_cast<size_t>(*repeat), static_cast<int>(*count));
  }
  return out;
}

int slurm_store_port(int64_t job_id, int64_t step_id) {
  // Consecutive steps of a job get consecutive ports; jobs are spread by a multiplier prime to
  // the range, so that neighbouring job ids on one node do not collide with their later steps.
  constexpr int64_t kFirst = 10000, kCount = 22000;
  const uint64_t mixed = static_cast<uint64_t>(job_id) * 7919u + static_cast<uint64_t>(step_id);
  return static_cast<int>(kFirst + static_cast<int64_t>(mixed % kCount));
}

namespace {

// The value of the first of `names` that `env` sets, with its name.
struct Found {
  std::string name, value;
};
std::optional<Found> first_of(const EnvMap& env, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto it = env.find(n); it != env.end()) return Found{n, it->second};
  return std::nullopt;
}

std::string names_of(std::initializer_list<const char*> names) {
  std::string out;
  for (const char* n : names) out += (out.empty() ? "" : " or ") + std::string(n);
  return out;
}

// A required integer in [lo, hi] (hi < 0: no upper bound), from the first of `names` set.
Result<int64_t> step_int(const EnvMap& env, std::initializer_list<const char*> names,
                         const std::string& meaning, int64_t lo, int64_t hi,
                         const std::string& hi_what = "") {
  std::optional<Found> f = first_of(env, names);
  if (!f)
    return Status::InvalidArgument(names_of(names) + " is not set: expected " + meaning +
                                   " (srun sets it in every task of a job step)");
  std::optional<int64_t> v = to_int(f->value);
  if (!v || *v < lo || (hi >= 0 && *v > hi))
    return bad(
        f->name, f->value,
        "expected " + meaning + ", an integer in [" + std::to_string(lo) + ", " +
            (hi >= 0 ? std::to_string(hi) + (hi_what.empty() ? "" : " (" + hi_what + ")") : "inf") +
            "]");
  return *v;
}

// The step's nodes and their task counts, checked against each other and the task count.
Status step_layout(const EnvMap& env, SlurmStep& s) {
  const auto tpn_names = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
  const auto list_names = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"};
  std::optional<Found> tpn = first_of(env, tpn_names), list = first_of(env, list_names);
  if (!tpn)
    return Status::InvalidArgument(names_of(tpn_names) +
                                   " is not set: expected the tasks of each node, e.g. 2(x3),1");
  if (!list)
    return Status::InvalidArgument(names_of(list_names) +
                                   " is not set: expected the step's nodes, e.g. node[1-4]");
  KOLO_ASSIGN_OR_RETURN(std::vector<int> tasks, expand_tasks_per_node(tpn->value, tpn->name));
  KOLO_ASSIGN_OR_RETURN(s.nodes, expand_hostlist(list->value, list->name));
  int64_t total = 0;
  for (int t : tasks) total += t;
  const std::string ntasks_name = first_of(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"})->name;
  if (total != s.size)
    return Status::InvalidArgument(ntasks_name + "=" + std::to_string(s.size) + " disagrees with " +
                                   tpn->name + "=" + tpn->value + ", which counts " +
                                   std::to_string(total) + " tasks");
  if (tasks.size() != s.nodes.size())
    return Status::InvalidArgument(tpn->name + "=" + tpn->value + " gives tasks for " +
                                   std::to_string(tasks.size()) + " nodes but " + list->name + "=" +
                                   list->value + " names " + std::to_string(s.nodes.size()) +
                                   " nodes");
  if (std::optional<Found> n = first_of(env, {"SLURM_STEP_NUM_NODES"});
      n && to_int(n->value) != static_cast<int64_t>(s.nodes.size()))
    return Status::InvalidArgument(n->name + "=" + n->value + " disagrees with " + list->name +
                                   "=" + list->value + ", which names " +
                                   std::to_string(s.nodes.size()) + " nodes");
  KOLO_ASSIGN_OR_RETURN(
      int64_t node, step_int(env, {"SLURM_NODEID"}, "this task's node in the step's node list", 0,
                             static_cast<int64_t>(s.nodes.size()) - 1,
                             "the nodes of " + list->name + "=" + list->value));
  s.node = static_cast<int>(node);
  s.local_size = tasks[s.node];
  KOLO_ASSIGN_OR_RETURN(
      int64_t local,
      step_int(env, {"SLURM_LOCALID"}, "this task's rank on its node", 0, s.local_size - 1,
               "the tasks of node " + std::to_string(s.node) + " in " + tpn->name));
  s.local_rank = static_cast<int>(local);
  s.cross_size = 0;
  for (size_t n = 0; n < tasks.size(); ++n) {
    if (tasks[n] <= s.local_rank) continue;
    if (static_cast<int>(n) < s.node) ++s.cross_rank;
    ++s.cross_size;
  }
  return Status::Ok();
}

}  // namespace

Result<SlurmStep> parse_slurm_step(const EnvMap& env) {
  SlurmStep s;
  KOLO_ASSIGN_OR_RETURN(s.job_id, step_int(env, {"SLURM_JOB_ID"}, "the job's id", 0, -1));
  KOLO_ASSIGN_OR_RETURN(s.step_id,
                        step_int(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, "the step's id", 0, -1));
  KOLO_ASSIGN_OR_RETURN(int64_t size, step_int(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"},
                                               "the tasks of the job step", 1, INT32_MAX));
  s.size = static_cast<int>(size);
  // The layout first: a task count that disagrees with it is the error to report, not the rank
  // that falls outside that count.
  KOLO_RETURN_IF_ERROR(step_layout(env, s));
  KOLO_ASSIGN_OR_RETURN(int64_t rank,
                        step_int(env, {"SLURM_PROCID"}, "this task's rank in the Slurm job step", 0,
                                 size - 1, "the step's tasks - 1"));
  s.rank = static_cast<int>(rank);
  if (s.rank == 0 && s.node != 0)
    return Status::InvalidArgument(
        "SLURM_PROCID=0 runs on node " + std::to_string(s.node) +
        " (SLURM_NODEID) of the step, not on its first node " + s.nodes[0] +
        ", where every task looks for Kolo's rendezvous store: use a block or cyclic task "
        "distribution (srun -m block), or set KOLO_STORE_ADDR=HOST:PORT on rank 0's node");
  return s;
}

Result<HostPort> slurm_store_address(const SlurmStep& step, const KnobSet& knobs) {
  if (knobs.is_set(KnobId::kStoreAddr))
    return parse_host_port(knobs.text(KnobId::kStoreAddr), "KOLO_STORE_ADDR");
  return HostPort{step.nodes.size() == 1 ? "127.0.0.1" : step.nodes[0],
                  slurm_store_port(step.job_id, step.step_id)};
}

Result<std::string> slurm_secret(const SlurmStep& step, const KnobSet& knobs) {
  if (!knobs.text(KnobId::kSecret).empty()) return knobs.text(KnobId::kSecret);
  if (!knobs.text(KnobId::kSecretFile).empty())
    return read_secret_file(knobs.text(KnobId::kSecretFile), "KOLO_SECRET_FILE");
  if (step.size == 1) return random_secret();
  return Status::InvalidArgument(
      "KOLO_SECRET and KOLO_SECRET_FILE are both unset in this Slurm job step (SLURM_JOB_ID=" +
      std::to_string(step.job_id) + ", " + std::to_string(step.size) +
      " tasks): Kolo's rendezvous store listens on the cluster network and needs the job's "
      "secret; export KOLO_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n') before srun "
      "(srun passes it on), or KOLO_SECRET_FILE=PATH naming a file that only you can read "
      "(chmod 600 PATH) on every node (docs/clusters.md)");
}

namespace {

// Where the address came from, for messages.
std::string address_origin(const SlurmStep& step, const KnobSet& knobs) {
  if (knobs.is_set(KnobId::kStoreAddr)) return "KOLO_STORE_ADDR";
  return "port derived from SLURM_JOB_ID=" + std::to_string(step.job_id) +
         " and SLURM_STEP_ID=" + std::to_string(step.step_id) +
         "; set KOLO_STORE_ADDR=HOST:PORT to choose another";
}

}  // namespace

Result<World> world_from_slurm_env(const EnvMap& env, const KnobSet& knobs) {
  KOLO_ASSIGN_OR_RETURN(SlurmStep step, parse_slurm_step(env));
  World w;
  w.rank = step.rank;
  w.size = step.size;
  w.local_rank = step.local_rank;
  w.local_size = step.local_size;
  w.cross_rank = step.cross_rank;
  w.cross_size = step.cross_size;
  KOLO_ASSIGN_OR_RETURN(w.secret, slurm_secret(step, knobs));
  if (w.size == 1) {
    w.store = std::make_unique<MemoryStore>();
    return w;
  }
  KOLO_ASSIGN_OR_RETURN(HostPort address, slurm_store_address(step, knobs));
  const std::string where = "slurm world: rank " + std::to_string(w.rank) + ": ";
  const std::string origin = " (" + address_origin(step, knobs) + ")";
  if (w.rank == 0) {
    const std::string bind = step.nodes.size() == 1 ? "127.0.0.1" : "0.0.0.0";
    auto server = TcpStoreServer::start(bind, address.port, w.secret);
    if (!server.ok())
      return Status::IoError(where + "could not start the rendezvous store on port " +
                             std::to_string(address.port) + origin + ": " +
                             server.status().message());
    w.server = std::move(server).value();
    address.host = "127.0.0.1";
  }
  const std::chrono::milliseconds bound = rendezvous_timeout(knobs);
  auto store = TcpStore::connect(address, w.secret, bound, bound);
  if (!store.ok())
    return with_rendezvous_timeout_hint(
        store.status().with_context(where + "connecting to rank 0's rendezvous store at " +
                                    address.to_string() + origin),
        knobs);
  w.store = std::move(store).value();
  return w;
}

Result<World> world_from_slurm(const KnobSet& knobs) {
  return world_from_slurm_env(slurm_environment(), knobs);
}

bool launched_by_srun() { return is_slurm_step(slurm_environment()); }

}  // namespace kolo
