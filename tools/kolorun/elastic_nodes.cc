#include "tools/kolorun/elastic_nodes.h"

#include <algorithm>
#include <sstream>

#include "rendezvous/elastic_plan.h"

namespace kolo::kolorun {
namespace {

std::string node_key(int node, const std::string& what) {
  return "kolorun/elastic/node/" + std::to_string(node) + "/" + what;
}

constexpr const char* kLateKey = "kolorun/elastic/late";

// A missing key, or a counter that reads 0, is the same "nothing yet": add(0) reads in one trip.
Result<int64_t> counter(Store& store, const std::string& key) { return store.add(key, 0); }

std::string encode(const NodeEvent& e) {
  return "exit " + std::to_string(e.worker) + " " + (e.clean ? "1" : "0") + " " +
         (e.stopped ? "1" : "0") + " " + e.how;
}

Result<NodeEvent> parse_event(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  NodeEvent e;
  int clean = 0, stopped = 0;
  if (!(in >> word >> e.worker >> clean >> stopped) || word != "exit")
    return Status::InvalidArgument("kolorun: a node's event \"" + text +
                                   "\" is not \"exit <W> <clean> <stopped> <how>\"");
  e.clean = clean != 0;
  e.stopped = stopped != 0;
  std::getline(in >> std::ws, e.how);
  return e;
}

}  // namespace

std::string node_host_key(int node) { return "kolorun/node/" + std::to_string(node) + "/host"; }

NodeRoster::NodeRoster(Store& store, std::string node0_host, int np) : store_(store) {
  Node& zero = nodes_[0];
  zero.host = zero.name = std::move(node0_host);
  zero.np = np;
}

std::string NodeRoster::unique_name(const std::string& host, int node) const {
  for (const auto& [k, n] : nodes_)
    if (k != node && n.host == host) return host + "/node" + std::to_string(node);
  return host;
}

Status NodeRoster::add_initial(int nnodes, int np, Clock::time_point now) {
  for (int k = 1; k < nnodes; ++k) {
    KOLO_ASSIGN_OR_RETURN(std::string host, store_.get(node_host_key(k), std::chrono::seconds(2)));
    const std::string name = unique_name(host, k);
    Node& n = nodes_[k];
    n.host = host;
    n.name = name;
    n.np = np;
    n.beat_seen = now;
  }
  return Status::Ok();
}

const std::string& NodeRoster::name_of(int node) const { return nodes_.at(node).name; }

Status NodeRoster::poll_late(Clock::time_point now, News& news) {
  KOLO_ASSIGN_OR_RETURN(int64_t late, counter(store_, kLateKey));
  while (late_seen_ < late) {
    const std::string key = std::string(kLateKey) + "/" + std::to_string(late_seen_);
    KOLO_ASSIGN_OR_RETURN(bool there, store_.check(key));
    if (!there) return Status::Ok();  // raised, not yet written: next turn
    KOLO_ASSIGN_OR_RETURN(std::string text, store_.get(key, std::chrono::seconds(2)));
    ++late_seen_;
    int node = 0, np = 0;
    std::istringstream in(text);
    if (!(in >> node >> np) || node <= 0 || nodes_.count(node)) continue;  // gather refused it
    KOLO_ASSIGN_OR_RETURN(std::string host,
                          store_.get(node_host_key(node), std::chrono::seconds(2)));
    const std::string name = unique_name(host, node);
    Node& n = nodes_[node];
    n.host = host;
    n.name = name;
    n.np = np;
    n.beat_seen = now;
    news.joined.push_back(node);
  }
  return Status::Ok();
}

Result<NodeRoster::News> NodeRoster::poll(Clock::time_point now) {
  News news;
  KOLO_RETURN_IF_ERROR(poll_late(now, news));
  const bool beats_due = now - last_beats_ >= kBeatEvery;
  if (beats_due) last_beats_ = now;
  for (auto& [k, n] : nodes_) {
    if (k == 0 || n.lost) continue;
    KOLO_ASSIGN_OR_RETURN(int64_t events, counter(store_, node_key(k, "events")));
    for (; n.events < events; ++n.events) {
      KOLO_ASSIGN_OR_RETURN(
          std::string text,
          store_.get(node_key(k, "event/" + std::to_string(n.events)), std::chrono::seconds(2)));
      KOLO_ASSIGN_OR_RETURN(NodeEvent e, parse_event(text));
      news.exits.emplace_back(k, std::move(e));
    }
    if (!beats_due) continue;
    KOLO_ASSIGN_OR_RETURN(int64_t beat, counter(store_, node_key(k, "beat")));
    if (beat != n.beat) {
      n.beat = beat;
      n.beat_seen = now;
    } else if (now - n.beat_seen >= kNodeLossBound) {
      n.lost = true;
      KOLO_ASSIGN_OR_RETURN(bool left, store_.check(node_key(k, "done")));
      (left ? news.left : news.lost).push_back(k);
    }
  }
  return news;
}

Status NodeRoster::order(int node, NodeOrder order) {
  Node& n = nodes_.at(node);
  KOLO_RETURN_IF_ERROR(
      store_.set(node_key(node, "order/" + std::to_string(n.orders)),
                 (order.start ? "start " : "stop ") + std::to_string(order.worker)));
  ++n.orders;
  return store_.add(node_key(node, "orders"), 1).status();
}

Status NodeRoster::give_up(int node, const std::string& why) {
  nodes_.at(node).lost = true;
  return store_.set(node_key(node, "lost"), why);
}

Status NodeRoster::finish(int code, std::chrono::milliseconds bound) {
  KOLO_RETURN_IF_ERROR(store_.set(kOverKey, std::to_string(code)));
  std::vector<std::string> keys;
  for (const auto& [k, n] : nodes_)
    if (k != 0 && !n.lost) keys.push_back(node_key(k, "done"));
  if (keys.empty()) return Status::Ok();
  return store_.wait(keys, bound).with_context("waiting for the other nodes' kolorun to leave");
}

NodeTargets node_targets(const std::vector<HostSlots>& hosts,
                         const std::map<int, NodeRoster::Node>& nodes, int max_np) {
  NodeTargets t;
  const LocalShare here = local_share(hosts, nodes.at(0).host);
  std::map<std::string, int> slots_of;
  for (const HostSlots& h : hosts) slots_of[h.host] = h.slots;
  for (const auto& [k, n] : nodes) {
    int slots = 0;
    if (k == 0) {
      slots = here.slots;
    } else if (auto it = slots_of.find(n.name); it != slots_of.end() && !n.lost) {
      slots = it->second;
    }
    t.listed += slots;
    t.workers[k] = std::min(slots, max_np - t.total);
    t.total += t.workers[k];
  }
  for (const std::string& host : here.other_hosts) {
    bool claimed = false;
    for (const auto& [k, n] : nodes) claimed |= k != 0 && n.name == host && !n.lost;
    if (!claimed && slots_of[host] > 0) t.unclaimed.push_back(host);
  }
  return t;
}

NodeLink::NodeLink(Store& store, int node) : store_(store), node_(node) {}

Status NodeLink::register_late(int np) {
  KOLO_ASSIGN_OR_RETURN(int64_t slot, store_.add(kLateKey, 1));
  return store_.set(std::string(kLateKey) + "/" + std::to_string(slot - 1),
                    std::to_string(node_) + " " + std::to_string(np));
}

Status NodeLink::beat(std::chrono::steady_clock::time_point now) {
  if (now - last_beat_ < kBeatEvery) return Status::Ok();
  last_beat_ = now;
  return store_.add(node_key(node_, "beat"), 1).status();
}

Result<std::vector<NodeOrder>> NodeLink::take_orders() {
  std::vector<NodeOrder> out;
  KOLO_ASSIGN_OR_RETURN(int64_t orders, counter(store_, node_key(node_, "orders")));
  for (; orders_seen_ < orders; ++orders_seen_) {
    KOLO_ASSIGN_OR_RETURN(std::string text,
                          store_.get(node_key(node_, "order/" + std::to_string(orders_seen_)),
                                     std::chrono::seconds(2)));
    std::istringstream in(text);
    std::string verb;
    NodeOrder o;
    if (!(in >> verb >> o.worker)) continue;
    o.start = verb == "start";
    out.push_back(o);
  }
  return out;
}

Status NodeLink::report(const NodeEvent& event) {
  KOLO_RETURN_IF_ERROR(
      store_.set(node_key(node_, "event/" + std::to_string(events_)), encode(event)));
  ++events_;
  return store_.add(node_key(node_, "events"), 1).status();
}

Result<NodeLink::Word> NodeLink::read_word() {
  Word w;
  KOLO_ASSIGN_OR_RETURN(bool lost, store_.check(node_key(node_, "lost")));
  if (lost) {
    KOLO_ASSIGN_OR_RETURN(std::string why, store_.get(node_key(node_, "lost"), kBeatEvery * 20));
    w.lost = why;
  }
  KOLO_ASSIGN_OR_RETURN(bool over, store_.check(kOverKey));
  if (over) {
    KOLO_ASSIGN_OR_RETURN(std::string code, store_.get(kOverKey, kBeatEvery * 20));
    w.over = std::atoi(code.c_str());
  }
  KOLO_ASSIGN_OR_RETURN(bool ended, store_.check(elastic_protocol::kEndKey));
  if (ended) {
    KOLO_ASSIGN_OR_RETURN(std::string why, store_.get(elastic_protocol::kEndKey, kBeatEvery * 20));
    w.end = why;
  }
  return w;
}

void NodeLink::done() { (void)store_.set(node_key(node_, "done"), "1"); }

}  // namespace kolo::kolorun
