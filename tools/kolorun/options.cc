#include "tools/kolorun/options.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "kolo/units.h"

namespace kolo::kolorun {
namespace {

Status bad(const std::string& flag, const std::string& value, const std::string& expected) {
  return Status::InvalidArgument(flag + " " + value + " is invalid: expected " + expected);
}

Result<int> parse_int(const std::string& flag, const std::string& v, int min) {
  int out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  std::string form = "an integer >= " + std::to_string(min);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return bad(flag, v, form);
  if (out < min) return bad(flag, v, form);
  return out;
}

Result<std::chrono::milliseconds> parse_ms(const std::string& flag, const std::string& v) {
  auto d = parse_duration(v);
  if (!d.ok()) return bad(flag, v, "a duration such as 30s, 500ms or 2min");
  return std::chrono::duration_cast<std::chrono::milliseconds>(*d);
}

// "SIZE", "DUR", ...: the value a knob flag takes, in --help.
std::string metavar(const Knob& k) {
  switch (k.kind) {
    case KnobKind::kSize:
      return "SIZE";
    case KnobKind::kDuration:
      return "DUR";
    case KnobKind::kInteger:
      return "N";
    case KnobKind::kBool:
      return "[=0|1]";
    case KnobKind::kChoice: {
      std::string names;
      for (std::string_view n : k.choices()) names += (names.empty() ? "" : "|") + std::string(n);
      return names;
    }
    case KnobKind::kText:
      return "TEXT";
    case KnobKind::kRange:
      return "FIRST:END";
    case KnobKind::kRankSets:
      return "R,R;R,R";
  }
  return "";
}

// The knob whose flag `arg` is ("--cycle-time" or "--cycle-time=5ms"), or nullptr.
const Knob* knob_of_flag(const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  for (const Knob& k : all_knobs())
    if (!flag_name(k).empty() && flag_name(k) == name) return &k;
  return nullptr;
}

// Reads argv[1..] flag by flag: each parse_*_flag takes the flag at the cursor when it is one
// of its topic's and returns whether it did.
class OptionParser {
 public:
  explicit OptionParser(const std::vector<std::string>& args) : args_(args) {}
  Result<LaunchOptions> parse();

 private:
  // Accepts "--flag value" and "--flag=value"; true when args_[i_] is `flag`.
  Result<bool> take(const std::string& flag, std::string& value);
  // -np, --np-total, --nnodes, --node-rank, --rdzv: how many ranks run where.
  Result<bool> parse_shape_flag();
  // --timeout, --grace, --bind-to, --secret, --secret-file, -x: how the ranks are run.
  Result<bool> parse_run_flag();
  // --print-config[=markdown] and the knobs' own flags (--cycle-time ...).
  Result<bool> parse_config_flag(const std::string& a);
  // --min-np, --max-np, --respawn, --host-discovery-script, --discovery-interval,
  // --discovery-timeout, --blacklist-after: an elastic job.
  Result<bool> parse_elastic_flag(const std::string& a);
  // The elastic flags' defaults (from -np) and how they must relate to -np and --nnodes.
  Status finish_elastic();
  // --np-total N: N / --nnodes processes on this node, when that divides.
  Status share_np_total();
  // What the flags must say together: -np and a command (unless only printing), a node rank
  // within --nnodes, a fixed --rdzv when there are several nodes.
  Status check_complete() const;

  const std::vector<std::string>& args_;
  size_t i_ = 0;
  LaunchOptions o_;
  bool have_np_ = false;
  ElasticOptions elastic_;
  std::vector<std::string> elastic_flags_;  // the elastic flags given, in order, for messages
  std::optional<int> min_np_, max_np_;
};

Result<bool> OptionParser::take(const std::string& flag, std::string& value) {
  const std::string& arg = args_[i_];
  if (arg == flag) {
    if (i_ + 1 >= args_.size())
      return Status::InvalidArgument(flag + " needs a value (kolorun --help lists the forms)");
    value = args_[++i_];
    return true;
  }
  if (arg.rfind(flag + "=", 0) == 0) {
    value = arg.substr(flag.size() + 1);
    return true;
  }
  return false;
}

Result<bool> OptionParser::parse_shape_flag() {
  std::string v;
  KOLO_ASSIGN_OR_RETURN(bool np, take("-np", v));
  if (!np) {
    KOLO_ASSIGN_OR_RETURN(np, take("-n", v));
  }
  if (np) {
    KOLO_ASSIGN_OR_RETURN(o_.np, parse_int("-np", v, 1));
    have_np_ = true;
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(bool m, take("--np-total", v));
  if (m) {
    KOLO_ASSIGN_OR_RETURN(o_.np_total, parse_int("--np-total", v, 1));
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--nnodes", v));
  if (m) {
    KOLO_ASSIGN_OR_RETURN(o_.nnodes, parse_int("--nnodes", v, 1));
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--node-rank", v));
  if (m) {
    KOLO_ASSIGN_OR_RETURN(o_.node_rank, parse_int("--node-rank", v, 0));
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--rdzv", v));
  if (m) {
    KOLO_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(v, "--rdzv"));
    o_.rdzv = hp;
    return true;
  }
  return false;
}

Result<bool> OptionParser::parse_run_flag() {
  std::string v;
  KOLO_ASSIGN_OR_RETURN(bool m, take("--timeout", v));
  if (m) {  // kolorun's older name of --rendezvous-timeout: one knob bounds both sides' waits
    const Knob& k = knob(KnobId::kRendezvousTimeout);
    KOLO_RETURN_IF_ERROR(parse_knob(k, v, "--timeout").status());
    o_.knob_flags[std::string(k.name)] = v;
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--grace", v));
  if (m) {
    KOLO_ASSIGN_OR_RETURN(o_.grace, parse_ms("--grace", v));
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--bind-to", v));
  if (m) {
    KOLO_ASSIGN_OR_RETURN(o_.bind_to, parse_bind_to(v));
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--secret", v));
  if (m) {
    if (v.empty()) return bad("--secret", "\"\"", "a non-empty string, e.g. 32 hex digits");
    o_.secret = v;
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("--secret-file", v));
  if (m) {
    if (v.empty()) return bad("--secret-file", "\"\"", "the path of a file only you can read");
    o_.secret_file = v;
    return true;
  }
  KOLO_ASSIGN_OR_RETURN(m, take("-x", v));
  if (!m) return false;
  size_t eq = v.find('=');
  std::string name = v.substr(0, eq);
  if (name.empty() || name.find_first_of(" \t") != std::string::npos)
    return bad("-x", v, "VAR=VALUE or VAR (passes this shell's VAR)");
  if (eq != std::string::npos) {
    o_.env[name] = v.substr(eq + 1);
  } else if (const char* cur = std::getenv(name.c_str())) {
    o_.env[name] = cur;
  }
  return true;
}

Result<bool> OptionParser::parse_config_flag(const std::string& a) {
  if (a == "--print-config" || a == "--print-config=markdown") {
    o_.print_config = a == "--print-config" ? PrintConfig::kValues : PrintConfig::kMarkdown;
    return true;
  }
  const Knob* k = knob_of_flag(a);
  if (k == nullptr) return false;
  std::string v;
  // A bool flag alone means 1; it takes no separate value, which would be the command.
  if (k->kind == KnobKind::kBool && a == flag_name(*k)) {
    v = "1";
  } else {
    KOLO_RETURN_IF_ERROR(take(flag_name(*k), v).status());
  }
  KOLO_RETURN_IF_ERROR(parse_knob(*k, v, flag_name(*k)).status());
  o_.knob_flags[std::string(k->name)] = v;
  return true;
}

Result<bool> OptionParser::parse_elastic_flag(const std::string& a) {
  const std::string name = a.substr(0, a.find('='));
  if (a == "--respawn") {
    elastic_.respawn = true;
  } else if (name == "--min-np" || name == "--max-np" || name == "--blacklist-after") {
    std::string v;
    KOLO_RETURN_IF_ERROR(take(name, v).status());
    KOLO_ASSIGN_OR_RETURN(int n, parse_int(name, v, 1));
    if (name == "--min-np") min_np_ = n;
    if (name == "--max-np") max_np_ = n;
    if (name == "--blacklist-after") elastic_.blacklist_after = n;
  } else if (name == "--discovery-interval" || name == "--discovery-timeout") {
    std::string v;
    KOLO_RETURN_IF_ERROR(take(name, v).status());
    KOLO_ASSIGN_OR_RETURN(auto d, parse_ms(name, v));
    if (d.count() <= 0) return bad(name, v, "a duration above 0, such as 1s or 500ms");
    (name == "--discovery-interval" ? elastic_.discovery_interval : elastic_.discovery_timeout) = d;
  } else if (name == "--host-discovery-script") {
    std::string v;
    KOLO_RETURN_IF_ERROR(take(name, v).status());
    if (v.empty())
      return bad(name, "\"\"", "the path of an executable that prints host:slots lines");
    elastic_.discovery_script = v;
  } else {
    return false;
  }
  if (std::find(elastic_flags_.begin(), elastic_flags_.end(), name) == elastic_flags_.end())
    elastic_flags_.push_back(name);
  return true;
}

Status OptionParser::finish_elastic() {
  if (elastic_flags_.empty()) return Status::Ok();
  std::string given;
  for (size_t k = 0; k < elastic_flags_.size(); ++k)
    given += (k == 0 ? "" : k + 1 == elastic_flags_.size() ? " and " : ", ") + elastic_flags_[k];
  const bool several = o_.nnodes > 1 || o_.node_rank > 0;
  // -np counts this node's workers; --min-np and --max-np the job's (Note [Elastic nodes]).
  const int start = o_.np * o_.nnodes;
  const std::string np = several ? "-np " + std::to_string(o_.np) + " x --nnodes " +
                                       std::to_string(o_.nnodes) + " = " + std::to_string(start)
                                 : "-np " + std::to_string(o_.np);
  const std::string workers = several ? "that many workers" : "-np workers";
  elastic_.min_np = min_np_.value_or(start);
  elastic_.max_np = max_np_.value_or(start);
  if (elastic_.min_np > start)
    return bad("--min-np", std::to_string(elastic_.min_np),
               "an integer in [1, " + np + "]: the job starts with " + workers);
  if (elastic_.max_np < start)
    return bad("--max-np", std::to_string(elastic_.max_np),
               "an integer >= " + np + ": the job starts with " + workers);
  o_.elastic = elastic_;
  return Status::Ok();
}

Status OptionParser::share_np_total() {
  if (o_.np_total == 0) return Status::Ok();
  const std::string total = "--np-total " + std::to_string(o_.np_total);
  const std::string nodes = "--nnodes " + std::to_string(o_.nnodes);
  if (have_np_)
    return Status::InvalidArgument("-np " + std::to_string(o_.np) + " and " + total +
                                   " are both given: -np counts the processes of one node, " +
                                   "--np-total those of the whole job; give one");
  if (o_.np_total % o_.nnodes != 0)
    return Status::InvalidArgument(total + " does not divide evenly over " + nodes +
                                   ": give a multiple of " + std::to_string(o_.nnodes) +
                                   ", or -np N, the processes of each node");
  o_.np = o_.np_total / o_.nnodes;
  have_np_ = true;
  return Status::Ok();
}

Status OptionParser::check_complete() const {
  if (o_.print_config != PrintConfig::kNo) return Status::Ok();
  if (!have_np_)
    return Status::InvalidArgument(
        "-np N (the processes on this node) or --np-total N (in the whole job) is required");
  if (o_.command.empty())
    return Status::InvalidArgument("no command given: kolorun [options] -np N cmd args...");
  // An elastic job takes nodes that join later (Note [Elastic nodes]).
  if (o_.node_rank >= o_.nnodes && elastic_flags_.empty())
    return bad("--node-rank", std::to_string(o_.node_rank),
               "an integer in [0, --nnodes=" + std::to_string(o_.nnodes) + ")");
  if ((o_.nnodes > 1 || o_.node_rank > 0) && !o_.rdzv)
    return Status::InvalidArgument("--nnodes " + std::to_string(o_.nnodes) +
                                   " needs --rdzv HOST:PORT: the address node 0 serves the "
                                   "store on and the other nodes connect to");
  if (o_.rdzv && (o_.nnodes > 1 || o_.node_rank > 0) && o_.rdzv->port == 0)
    return bad("--rdzv", o_.rdzv->to_string(), "HOST:PORT with a fixed port when --nnodes > 1");
  return Status::Ok();
}

Result<LaunchOptions> OptionParser::parse() {
  for (; i_ < args_.size(); ++i_) {
    const std::string& a = args_[i_];
    if (a == "--") {
      ++i_;
      break;
    }
    if (a.empty() || a[0] != '-') break;  // the command starts here
    if (a == "-h" || a == "--help") {
      o_.help = true;
      return o_;
    }
    if (a == "--tag-output" || a == "--no-tag-output") {
      o_.tag_output = a == "--tag-output";
      continue;
    }
    KOLO_ASSIGN_OR_RETURN(bool taken, parse_shape_flag());
    if (!taken) {
      KOLO_ASSIGN_OR_RETURN(taken, parse_run_flag());
    }
    if (!taken) {
      KOLO_ASSIGN_OR_RETURN(taken, parse_config_flag(a));
    }
    if (!taken) {
      KOLO_ASSIGN_OR_RETURN(taken, parse_elastic_flag(a));
    }
    if (!taken)
      return Status::InvalidArgument("unknown option " + a + " (kolorun --help lists the options)");
  }
  o_.command.assign(args_.begin() + static_cast<long>(i_), args_.end());
  KOLO_RETURN_IF_ERROR(share_np_total());
  KOLO_RETURN_IF_ERROR(check_complete());
  if (o_.print_config == PrintConfig::kNo) KOLO_RETURN_IF_ERROR(finish_elastic());
  return o_;
}

// One entry per knob flag: "  --cycle-time DUR" then its help and default, wrapped to the
// width of the rest of --help.
std::string knob_help() {
  constexpr size_t kIndent = 25, kWidth = 95;
  std::string out;
  for (const Knob& k : all_knobs()) {
    const std::string flag = flag_name(k);
    if (flag.empty()) continue;
    std::string line = "  " + flag + (k.kind == KnobKind::kBool ? "" : " ") + metavar(k);
    std::istringstream words(std::string(k.help) +
                             " [default: " + std::string(documented_default(k)) + "]");
    bool first = true;
    for (std::string w; words >> w; first = false) {
      if (first || line.size() + 1 + w.size() > kWidth) {
        if (line.size() + 1 > kIndent) {
          out += line + "\n";
          line.clear();
        }
        line.resize(kIndent, ' ');
      } else {
        line += ' ';
      }
      line += w;
    }
    out += line + "\n";
  }
  std::erase(out, '`');  // the registry's texts are markdown
  return out;
}

}  // namespace

Result<LaunchOptions> parse_options(const std::vector<std::string>& args) {
  return OptionParser(args).parse();
}

std::string usage() {
  return R"(usage: kolorun [options] -np N cmd args...

Starts N copies of cmd on this node with KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK,
KOLO_LOCAL_SIZE, KOLO_CROSS_RANK, KOLO_CROSS_SIZE, KOLO_STORE_ADDR and KOLO_SECRET set,
serves the rendezvous store, prefixes each output line with "[rank] ", forwards SIGINT and
SIGTERM, and stops every rank when one fails. Each rank is bound to an equal share of
the CPUs kolorun may use (see --bind-to), and OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
default to the size of that share, so that the ranks do not oversubscribe the node.

  -np N, -n N            processes on this node, not in the job: with --nnodes M the job has
                         M*N ranks (required, or --np-total)
  --np-total T           processes in the whole job instead, T/M on each of the M nodes (T must
                         be a multiple of M)
  --nnodes M             nodes in the job (default 1); run one kolorun per node, each with the
                         same -np N (per node) or --np-total T (the job's)
  --node-rank K          this node's rank in [0, M) (default 0); global rank = K*N + local rank
  --rdzv HOST:PORT       store address: node 0 serves it, the others connect (required if M > 1)
  --timeout DUR          how long nodes, and then their ranks, wait for each other at start
                         and nodes after a success: --rendezvous-timeout (below) by its older
                         name; once ranks run, a lost node 0 costs kolorun seconds
  --secret-file PATH     read the job secret from PATH (mode 600: others must not read it)
  --secret S             job secret on the command line, visible to every user in the process
                         list: prefer --secret-file or $KOLO_SECRET (default: $KOLO_SECRET;
                         one node: random 128-bit hex)
  --grace DUR            SIGTERM to SIGKILL delay when stopping ranks (default 3s)
  --bind-to auto|cores|none
                         auto (default): bind rank r to the r-th of N equal shares of the
                         CPUs when there are at least N; cores: the same, an error when there
                         are fewer CPUs than ranks; none: no binding
  --tag-output           prefix lines with "[rank] " (default)
  --no-tag-output        pass output through untouched
  -x VAR=VALUE, -x VAR   set VAR for every rank (VAR alone: this shell's value)
  --print-config         print every KOLO_* knob, its value and where it came from (default,
                         environment or flag), then exit without starting anything; with -np
                         (and --nnodes), the backends this job's ranks will use here and why
  --print-config=markdown  print README's configuration table, generated from the registry
  -h, --help             this text

Elastic jobs (docs/elastic.md): any of these flags makes the job elastic. Each
process is then a worker (KOLO_ELASTIC_WORKER=W; 0..N-1 first, then N, N+1, ... never reused)
whose rank comes from the world's current generation, not from KOLO_RANK. A worker that fails
no longer stops the others: the survivors re-form the world and go on while at least --min-np
workers live; new workers join at the running ranks' next commit(). A worker stuck past
KOLO_STALL_SHUTDOWN_TIME (60s in an elastic job unless given) is stopped and left out. On several nodes (one
kolorun each, the same flags; --min-np and --max-np count the job's workers, default -np x
--nnodes), node 0 drives: a node whose kolorun stops beating for 1.5s is lost with its workers,
and a kolorun started later with --node-rank K >= --nnodes (same flags, --rdzv, secret) joins
with its -np workers; give --rdzv on node 0 even with --nnodes 1 for that. Node 0 lost ends
the job on every node.
  --min-np N             fewer live workers end the job, naming the lost ones (default -np)
  --max-np N             never more live workers than N (default -np)
  --respawn              start a replacement on the same host when a worker fails
  --host-discovery-script PATH
                         run PATH every --discovery-interval; it prints one "host:slots" (or
                         "host", one slot) line per host; workers follow this host's slots
                         (localhost, 127.0.0.1 or its hostname), up to --max-np; on several
                         nodes node 0 runs it and each node follows the line naming its host
                         (hostname, or hostname/nodeK when two nodes share one)
  --discovery-interval DUR  how often the script runs (default 1s)
  --discovery-timeout DUR   a run that takes longer is killed and warned about (default 10s)
  --blacklist-after K    a host whose workers failed K times gets no new ones (default 3)

Knobs: each flag sets the KOLO_* variable of the same name for every rank. Before starting
any rank, kolorun checks every KOLO_* value, from these flags and from its environment (and
-x), and warns about unknown KOLO_* names that are near misses of real ones.
)" + knob_help() +
         R"(
Exit status: 0 when every rank exits 0 (elastic: every member of the last generation); 2 for
a bad flag, KOLO_* value or discovery script output at start; elastic: 1 when fewer than
--min-np workers remain; otherwise the exit
status of the first rank to fail (128+signal when it was killed by a signal), or 128+signal
when kolorun itself was interrupted. kolorun names the first rank to end while the others still
ran, by the time it saw each end; one that exited 0 before a failure is named first, as the
first rank to leave.
)";
}

Result<KnobSet> knobs_for_ranks(const LaunchOptions& o) {
  std::map<std::string, std::string> env = kolo_environment();
  for (const auto& [name, value] : o.env)
    if (name.rfind("KOLO_", 0) == 0) env[name] = value;
  return KnobSet::read(env, o.knob_flags);
}

}  // namespace kolo::kolorun
