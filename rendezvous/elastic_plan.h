// The elastic rendezvous protocol: the store keys and the plan text through which kolorun (the
// driver, tools/kolorun/elastic_driver.h) and the ranks of an elastic job (rendezvous/
// elastic_world.h) agree on each generation of the world. This header is the whole protocol.
//
// Note [Elastic rendezvous]
// Workers. kolorun starts every process of an elastic job with KOLO_ELASTIC_WORKER=<id>, a
// decimal id unique within the job and never reused (0..np-1 at the start; np, np+1, ... for
// replacements and ranks on discovered slots), with KOLO_STORE_ADDR and KOLO_SECRET but without
// KOLO_RANK: a worker's rank belongs to a generation.
// Generations. The membership of the world is numbered, 0 the first. kolorun writes generation
// G's plan under plan_key(G) and only then raises kGenerationKey to G (a store add), so that a
// worker that reads G there finds G's plan. A plan is written once and never changed.
// Joining. Each kolo::init() of a worker (the first, and each re-form's) joins the newest
// generation newer than the last it joined that names it; a worker not yet named sets
// ready_key(worker) once, so that kolorun knows it is up, and waits. Its rank and coordinates are
// the plan's, and every key of its session lives under generation_prefix(G): nothing an older
// generation wrote can be read as this one's.
// Superseded. A member of G may die before G has connected; kolorun then publishes G+1. Every
// store wait of G's connect is watched and fails with Aborted ("generation G was superseded")
// as soon as kGenerationKey passes G, and init() joins the newer generation instead.
// Re-forming. A rank whose world broke (a peer lost) asks for a new generation with
// add(reform_key(G), 1) unless a newer generation exists already. kolorun forms G+1 from the
// live workers when it reaps a worker that died, on a re-form request of its newest generation
// (a request of an older one is stale and ignored), and when new workers are ready and the
// world may grow. Ranks that are training learn of a newer generation at their next
// State::commit(), never inside a step: rank 0 reads kGenerationKey and broadcasts it.
// Ending. When the job cannot go on (fewer live workers than --min-np), kolorun sets kEndKey to
// a message that says why; every wait above ends with it (Aborted carrying the message).
// Joined. A worker whose kolo::init() connected generation G sets joined_key(G, worker), so that
// kolorun can tell a member that never comes (alive but stuck: stopped, or deadlocked outside
// Kolo) from one still on its way.
// Exits. kolorun records how each worker ended under exit_key(worker); a rank maps its peers'
// ranks to workers through its plan (Note [Departures] in coordinator/departures.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/status.h"

namespace kolo::elastic_protocol {

inline constexpr const char* kGenerationKey = "kolo/elastic/generation";
inline constexpr const char* kEndKey = "kolo/elastic/end";
std::string plan_key(int64_t generation);    // "kolo/elastic/g<G>/plan"
std::string reform_key(int64_t generation);  // "kolo/elastic/g<G>/reform" (a counter)
std::string ready_key(int64_t worker);       // "kolo/elastic/ready/<W>"
std::string exit_key(int64_t worker);        // "kolo/elastic/exit/<W>"
std::string joined_key(int64_t generation, int64_t worker);  // "kolo/elastic/g<G>/joined/<W>"
std::string generation_prefix(int64_t generation);           // "kolo/g<G>": a generation's sessions

// One rank of a generation: the worker that holds it and its coordinates (rendezvous/world.h).
struct PlanMember {
  int64_t worker = 0;
  std::string host;  // the host kolorun started it on, as kolorun names it
  int local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  bool operator==(const PlanMember&) const = default;
};

// A generation's world: members[r] holds rank r.
struct Plan {
  int64_t generation = 0;
  std::vector<PlanMember> members;

  int size() const { return static_cast<int>(members.size()); }
  // The rank `worker` holds in this generation; nullopt when it is not a member.
  std::optional<int> rank_of(int64_t worker) const;
  // The worker ids, in rank order, as "0, 2, 5": for messages.
  std::string workers_text() const;

  // The text stored under plan_key(): a header line, then one line per rank in rank order:
  //   kolo-elastic-plan 1 generation <G> size <S>
  //   rank <r> worker <W> host <H> local <lr>/<ls> cross <cr>/<cs>
  std::string encode() const;
  // The inverse of encode(). InvalidArgument naming the line and what was expected for
  // anything else (a store written by another program, a version this build does not read),
  // and for plans that are not a world: no member, a worker twice, coordinates out of range.
  static Result<Plan> parse(std::string_view text);
};

// The plan of `generation` for `workers` (worker id and host, in the order their ranks should
// follow: survivors in their old rank order, then new workers). Ranks are grouped by host, hosts
// in order of first appearance, workers of a host in the given order; local_* count within a
// host and cross_* number the hosts, as kolorun does for a multi-node job.
// InvalidArgument for no workers or a worker id given twice.
Result<Plan> make_plan(int64_t generation,
                       const std::vector<std::pair<int64_t, std::string>>& workers);

}  // namespace kolo::elastic_protocol
