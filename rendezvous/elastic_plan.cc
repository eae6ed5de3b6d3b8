#include "rendezvous/elastic_plan.h"

#include <charconv>
#include <map>
#include <set>
#include <sstream>

namespace kolo::elastic_protocol {

namespace {

constexpr std::string_view kHeader = "kolo-elastic-plan 1";

std::string numbered(std::string_view stem, int64_t n, std::string_view tail = "") {
  return std::string(stem) + std::to_string(n) + std::string(tail);
}

// Whitespace-separated words of one line.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<int64_t> to_int(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// "<a>/<b>" with 0 <= a < b.
bool to_pair(std::string_view s, int& a, int& b) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return false;
  auto x = to_int(s.substr(0, slash)), y = to_int(s.substr(slash + 1));
  if (!x || !y || *x >= *y || *y > (1 << 30)) return false;
  a = static_cast<int>(*x);
  b = static_cast<int>(*y);
  return true;
}

Status bad_line(size_t number, std::string_view line, std::string_view expected) {
  return Status::InvalidArgument("elastic plan line " + std::to_string(number) + " '" +
                                 std::string(line) + "': expected " + std::string(expected));
}

// One "rank ..." line, whose rank must be `rank`.
Result<PlanMember> parse_member(size_t number, std::string_view line, int rank) {
  constexpr std::string_view kForm =
      "'rank <r> worker <W> host <H> local <lr>/<ls> cross <cr>/<cs>'";
  const std::vector<std::string_view> w = words(line);
  if (w.size() != 10 || w[0] != "rank" || w[2] != "worker" || w[4] != "host" || w[6] != "local" ||
      w[8] != "cross")
    return bad_line(number, line, kForm);
  PlanMember m;
  const auto r = to_int(w[1]);
  const auto worker = to_int(w[3]);
  if (!r || *r != rank) return bad_line(number, line, "rank " + std::to_string(rank));
  if (!worker) return bad_line(number, line, "a worker id (an integer >= 0)");
  m.worker = *worker;
  m.host = std::string(w[5]);
  if (!to_pair(w[7], m.local_rank, m.local_size) || !to_pair(w[9], m.cross_rank, m.cross_size))
    return bad_line(number, line, "coordinates '<rank>/<size>' with 0 <= rank < size");
  return m;
}

}  // namespace

std::string plan_key(int64_t generation) { return numbered("kolo/elastic/g", generation, "/plan"); }
std::string reform_key(int64_t generation) {
  return numbered("kolo/elastic/g", generation, "/reform");
}
std::string ready_key(int64_t worker) { return numbered("kolo/elastic/ready/", worker); }
std::string exit_key(int64_t worker) { return numbered("kolo/elastic/exit/", worker); }
std::string joined_key(int64_t generation, int64_t worker) {
  return numbered("kolo/elastic/g", generation, "/joined/") + std::to_string(worker);
}
std::string generation_prefix(int64_t generation) { return numbered("kolo/g", generation); }

std::optional<int> Plan::rank_of(int64_t worker) const {
  for (size_t r = 0; r < members.size(); ++r)
    if (members[r].worker == worker) return static_cast<int>(r);
  return std::nullopt;
}

std::string Plan::workers_text() const {
  std::string out;
  for (const PlanMember& m : members) out += (out.empty() ? "" : ", ") + std::to_string(m.worker);
  return out;
}

std::string Plan::encode() const {
  std::ostringstream out;
  out << kHeader << " generation " << generation << " size " << members.size() << "\n";
  for (size_t r = 0; r < members.size(); ++r) {
    const PlanMember& m = members[r];
    out << "rank " << r << " worker " << m.worker << " host " << m.host << " local " << m.local_rank
        << "/" << m.local_size << " cross " << m.cross_rank << "/" << m.cross_size << "\n";
  }
  return out.str();
}

Result<Plan> Plan::parse(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t i = 0; i < text.size();) {
    size_t j = text.find('\n', i);
    if (j == std::string_view::npos) j = text.size();
    lines.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  if (lines.empty()) return Status::InvalidArgument("elastic plan: empty");
  const std::vector<std::string_view> head = words(lines[0]);
  constexpr std::string_view kHead = "'kolo-elastic-plan 1 generation <G> size <S>'";
  if (head.size() != 6 || head[0] != "kolo-elastic-plan" || head[1] != "1" ||
      head[2] != "generation" || head[4] != "size")
    return bad_line(1, lines[0], kHead);
  const auto generation = to_int(head[3]);
  const auto size = to_int(head[5]);
  if (!generation || !size || *size == 0 || *size != static_cast<int64_t>(lines.size() - 1))
    return bad_line(1, lines[0],
                    std::string(kHead) + " with S > 0 rank lines after it (there are " +
                        std::to_string(lines.size() - 1) + ")");
  Plan plan;
  plan.generation = *generation;
  std::set<int64_t> seen;
  for (size_t r = 0; r < static_cast<size_t>(*size); ++r) {
    KOLO_ASSIGN_OR_RETURN(PlanMember m, parse_member(r + 2, lines[r + 1], static_cast<int>(r)));
    if (!seen.insert(m.worker).second)
      return bad_line(
          r + 2, lines[r + 1],
          "a worker not named before (worker " + std::to_string(m.worker) + " is twice)");
    plan.members.push_back(std::move(m));
  }
  return plan;
}

Result<Plan> make_plan(int64_t generation,
                       const std::vector<std::pair<int64_t, std::string>>& workers) {
  if (workers.empty())
    return Status::InvalidArgument("elastic plan of generation " + std::to_string(generation) +
                                   ": no workers");
  std::vector<std::string> hosts;  // in order of first appearance
  std::map<std::string, std::vector<int64_t>> on_host;
  std::set<int64_t> seen;
  for (const auto& [worker, host] : workers) {
    if (!seen.insert(worker).second)
      return Status::InvalidArgument("elastic plan of generation " + std::to_string(generation) +
                                     ": worker " + std::to_string(worker) + " given twice");
    if (host.empty() || host.find_first_of(" \t\n") != std::string::npos)
      return Status::InvalidArgument("elastic plan of generation " + std::to_string(generation) +
                                     ": worker " + std::to_string(worker) + " has host '" + host +
                                     "' (expected a non-empty name without white space)");
    if (!on_host.contains(host)) hosts.push_back(host);
    on_host[host].push_back(worker);
  }
  Plan plan;
  plan.generation = generation;
  for (size_t h = 0; h < hosts.size(); ++h) {
    const std::vector<int64_t>& local = on_host[hosts[h]];
    for (size_t l = 0; l < local.size(); ++l)
      plan.members.push_back({local[l], hosts[h], static_cast<int>(l),
                              static_cast<int>(local.size()), static_cast<int>(h),
                              static_cast<int>(hosts.size())});
  }
  return plan;
}

}  // namespace kolo::elastic_protocol
