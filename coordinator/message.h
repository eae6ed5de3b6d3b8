// The negotiation vocabulary: what a rank asks for (Request), what the coordinator decides
// (Response), and the byte format both travel in over the control plane.
//
// A Request is the metadata of one submitted operation (never its data). The coordinator
// (rank 0) collects requests until every rank has submitted a name, checks that they agree,
// and answers with a Response that every rank executes in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::coord {

enum class OpType : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
};
inline constexpr int kNumOpTypes = 7;

// Names of Kolo's own operations start with this prefix, which no user submission may use
// (check at submission), so that a user's tensor can never be taken for one of them.
inline constexpr std::string_view kInternalNamePrefix = "kolo:";
// The name of join()'s operation.
inline constexpr std::string_view kJoinName = "kolo:join";
// "allreduce", "allgather", ...
const char* op_type_name(OpType type);

struct Request {
  std::string name;
  OpType type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device;
  Reduction reduction;  // allreduce, reducescatter
  int32_t root = 0;
  // One shape per tensor: several for a grouped allreduce, none for barrier/join.
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank

  bool operator==(const Request&) const = default;
};

// The coordinator's decision for one name. Identical on every rank.
struct Response {
  enum class Kind : uint8_t { kExecute, kError };
  Kind kind = Kind::kExecute;
  std::string name;
  OpType type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device;
  Reduction reduction;
  int32_t root = 0;
  std::vector<std::vector<int64_t>> shapes;  // from a rank that submitted (joined ranks need it)
  // allgather: each rank's first dimension (0 for joined ranks).
  // alltoall: size*size matrix, row i = rank i's splits.
  std::vector<int64_t> rank_dims;
  // Ranks that had joined when this response was made (they contribute the identity).
  std::vector<int32_t> joined;
  StatusCode error_code = StatusCode::kOk;
  std::string error;  // for kError: the message every rank's handle fails with

  bool operator==(const Response&) const = default;
};

// One categorical knob's value in a TuneDecision: the knob (a KnobId, common/knobs.h) and the
// index of its value among knob_choices() (for a bool: 0 or 1). The parser checks only that
// both are non-negative and the knob a registry row; the runtime checks that the knob is
// categorical and tunable and the index in range (it fails the job otherwise).
struct TunedChoice {
  int32_t knob = 0;
  int32_t choice = 0;

  bool operator==(const TunedChoice&) const = default;
};

// The autotuner's new configuration (Note [Autotune] in autotune.h). Every rank applies the
// fusion threshold, the cycle time and the choices in the cycle that carries it, the bucket
// size from its apply_step-th step boundary on. apply_step < 0: no change.
struct TuneDecision {
  int64_t apply_step = -1;
  uint64_t fusion_threshold = 0;
  int64_t cycle_time_ns = 0;
  int64_t bucket_bytes = 0;
  // The categorical knobs the tuner searches (none it leaves alone), e.g. the hierarchical
  // allreduce.
  std::vector<TunedChoice> choices;

  bool operator==(const TuneDecision&) const = default;
};

// One cycle's answer from the coordinator.
struct ResponseList {
  std::vector<Response> responses;
  std::vector<std::string> evictions;  // cache entries every rank drops before executing
  int32_t shutdown_rank = -1;          // >= 0: that rank shut down; everyone stops
  std::string fatal;                   // non-empty: the job fails with this message
  std::vector<int32_t> joined;         // ranks currently joined (after this cycle)
  TuneDecision tune;

  bool operator==(const ResponseList&) const = default;
};

// What one rank tells the coordinator in a slow-path cycle.
struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;
  bool join = false;

  bool operator==(const RequestList&) const = default;
};

// Binary encodings. Parsing checks every length against the remaining bytes and every enum
// against its range; a malformed message returns Internal naming what was wrong.
std::string serialize(const RequestList& list);
Result<RequestList> parse_request_list(const std::string& bytes);
std::string serialize(const ResponseList& list);
Result<ResponseList> parse_response_list(const std::string& bytes);

int64_t num_elements(const std::vector<int64_t>& shape);

}  // namespace kolo::coord
