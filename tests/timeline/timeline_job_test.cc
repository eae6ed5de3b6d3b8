// Issue 33: the timeline of real jobs, as a new user records it (KOLO_TIMELINE through kolorun)
// and opens it in a viewer or `kolo-trace summary`.
//
// Every rank's file must draw right: on each row (thread track) any two spans are disjoint or
// one contains the other, and no operation lies inside another (the next step's allreduce used
// to begin inside the last one's CALLBACK); every phase lies inside an operation, but the
// CALLBACK spans, which lie on the callbacks row: an operation ends when Kolo is done with it,
// and what the user's callbacks do after that is not its time. The summary of the job's files must
// count each operation once (its count equals the operation spans of the files, and so does the
// count of its QUEUE and CALLBACK phases) and name only phases that exist. And every operation is
// there: those of process sets on rows named after the set, point-to-point, grouped and object
// operations.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/support/run_command.h"
#include "tools/trace/merge.h"
#include "tools/trace/summary.h"
#include "tools/trace/trace_file.h"

namespace kolo::trace {
namespace {

using nlohmann::json;

const std::set<std::string> kOperationKinds = {"ALLREDUCE", "ALLGATHER",     "BROADCAST",
                                               "ALLTOALL",  "REDUCESCATTER", "BARRIER",
                                               "JOIN",      "SEND",          "RECV"};

// A temporary directory for one job's files, removed with its contents.
class TempDir {
 public:
  TempDir() {
    char dir[] = "/tmp/kolo-timeline-job-XXXXXX";
    if (mkdtemp(dir) != nullptr) path_ = dir;
  }
  ~TempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What a rank's file holds, as a viewer draws it.
struct RowReport {
  std::map<int, std::string> rows;                            // tid -> row name
  std::map<std::string, std::set<std::string>> kinds_by_row;  // operation kinds on each row
  std::map<std::string, json> last_op_args;  // the args of each row's last operation
  std::map<std::string, int> operations;     // kind -> spans
  int queues = 0, callbacks = 0;
  int partial_overlaps = 0;   // spans that begin inside another of their row and outlive it
  int nested_operations = 0;  // operation spans inside another operation span
  int stray_phases = 0;  // phase spans inside no operation (CALLBACKs of the callbacks row aside)
  // CALLBACK spans inside an operation: the operation's span must end when Kolo is done with
  // it, before the handle completes and the user's callbacks run.
  int callbacks_in_operations = 0;
  int total_operations() const {
    int n = 0;
    for (const auto& [kind, count] : operations) n += count;
    return n;
  }
};

struct Span {
  double begin, end;
  std::string name;
  json args;
};

RowReport report_rows(const json& events) {
  RowReport r;
  std::map<int, std::vector<Span>> spans;
  for (const json& e : events) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      r.rows[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts");
    spans[e.at("tid")].push_back(
        {ts, ts + e.at("dur").get<double>(), e.at("name"), e.value("args", json::object())});
  }
  constexpr double kSlack = 0.0015;  // the file's nanosecond rounding
  for (auto& [tid, row] : spans) {
    std::sort(row.begin(), row.end(), [](const Span& a, const Span& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<const Span*> open;  // the spans containing the current one, outermost first
    for (const Span& s : row) {
      while (!open.empty() && open.back()->end <= s.begin + kSlack) open.pop_back();
      if (!open.empty() && s.end > open.back()->end + kSlack) ++r.partial_overlaps;
      const bool inside_op = std::any_of(open.begin(), open.end(), [](const Span* o) {
        return kOperationKinds.count(o->name) > 0;
      });
      if (kOperationKinds.count(s.name)) {
        ++r.operations[s.name];
        r.kinds_by_row[r.rows[tid]].insert(s.name);
        r.last_op_args[r.rows[tid]] = s.args;
        if (inside_op) ++r.nested_operations;
      } else if (!inside_op && !(s.name == "CALLBACK" && open.empty())) {
        ++r.stray_phases;
      }
      if (s.name == "CALLBACK" && inside_op) ++r.callbacks_in_operations;
      r.queues += s.name == "QUEUE";
      r.callbacks += s.name == "CALLBACK";
      open.push_back(&s);
    }
  }
  return r;
}

struct Job {
  std::vector<json> files;  // each rank's events
  std::vector<RowReport> ranks;
  TraceSummary summary;  // of the files merged, as `kolo-trace summary` reads them
  std::string output;
};

// Runs the worker on `np` ranks with KOLO_TIMELINE and reads back every rank's file.
Job run_job(int np, const std::string& worker_args, const std::string& env = "") {
  Job job;
  TempDir dir;
  EXPECT_FALSE(dir.path().empty());
  const kolo::testing::ProcessRun run = kolo::testing::run_command(
      env + " KOLO_TIMELINE=" + dir.path() + "/trace.json " + KOLO_TEST_KOLORUN + " -np " +
          std::to_string(np) + " " + KOLO_TEST_WORKER + " " + worker_args,
      150);
  job.output = run.output;
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::vector<TraceFile> files;
  for (int rank = 0; rank < np; ++rank) {
    Result<TraceFile> file =
        load_trace(dir.path() + "/trace.rank" + std::to_string(rank) + ".json");
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    if (!file.ok()) return job;
    EXPECT_FALSE(file->recovered) << "rank " << rank << "'s file was cut short";
    job.files.push_back(file->events);
    job.ranks.push_back(report_rows(file->events));
    files.push_back(std::move(*file));
  }
  job.summary = summarize(merge_traces(files).events);
  return job;
}

// Every row of every rank nests; the summary counts each operation once and its phases as
// many times as there are operations with them; it names no phase after an operation kind.
void expect_rows_nest_and_the_summary_counts_right(const Job& job) {
  std::map<std::string, int> operations;
  int queues = 0, callbacks = 0;
  for (size_t rank = 0; rank < job.ranks.size(); ++rank) {
    const RowReport& r = job.ranks[rank];
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(r.partial_overlaps, 0);
    EXPECT_EQ(r.nested_operations, 0);
    EXPECT_EQ(r.stray_phases, 0);
    EXPECT_EQ(r.callbacks_in_operations, 0);
    // Every operation was queued once and completed once (every one succeeded).
    EXPECT_EQ(r.queues, r.total_operations());
    EXPECT_EQ(r.callbacks, r.total_operations());
    for (const auto& [kind, n] : r.operations) operations[kind] += n;
    queues += r.queues;
    callbacks += r.callbacks;
  }
  const TraceSummary& s = job.summary;
  int total = 0;
  for (const auto& [kind, n] : operations) total += n;
  EXPECT_GT(total, 0);
  EXPECT_EQ(s.operations, static_cast<uint64_t>(total));
  EXPECT_EQ(s.partial_overlaps, 0u);
  uint64_t summary_queues = 0, summary_callbacks = 0;
  for (const auto& [key, stats] : s.by_kind) {
    const auto& [kind, order, phase] = key;
    EXPECT_TRUE(kOperationKinds.count(kind)) << "a kind that is no operation: " << kind;
    EXPECT_FALSE(kOperationKinds.count(phase)) << kind << " has a phase named " << phase;
    if (phase.empty()) {
      EXPECT_EQ(stats.count, static_cast<uint64_t>(operations[kind])) << kind;
    }
    if (phase == "QUEUE") {
      EXPECT_EQ(stats.count, static_cast<uint64_t>(operations[kind])) << kind;
      summary_queues += stats.count;
    }
    if (phase == "CALLBACK") {
      EXPECT_EQ(stats.count, static_cast<uint64_t>(operations[kind])) << kind;
      summary_callbacks += stats.count;
    }
  }
  EXPECT_EQ(summary_queues, static_cast<uint64_t>(queues));
  EXPECT_EQ(summary_callbacks, static_cast<uint64_t>(callbacks));
  EXPECT_TRUE(s.open_at_end.empty());
}

// The rows of a rank's file whose name starts with `prefix`.
std::set<std::string> rows_starting(const RowReport& r, const std::string& prefix) {
  std::set<std::string> out;
  for (const auto& [tid, name] : r.rows)
    if (name.rfind(prefix, 0) == 0) out.insert(name);
  return out;
}

// The default gradient bucket: one bucket, the same name every step (the case of the issue).
// Its allreduce is one operation of all four parameters: the span says so with their total
// bytes and count, not one member's shape.
TEST(TimelineJob, TrainingWithTheDefaultBucketDrawsRightAndSummarisesExactly) {
  const Job job = run_job(2, "--mode train --steps 30");
  expect_rows_nest_and_the_summary_counts_right(job);
  ASSERT_EQ(job.ranks.size(), 2u);
  // 16x8 + 16 + 4x16 + 4 floats.
  EXPECT_EQ(kolo::testing::count_occurrences(job.output, "parameters: 4 848"), 2) << job.output;
  for (const RowReport& r : job.ranks) {
    // Beside grad.__samples__, the step's sample counts (Note [Exact averaging]).
    const std::set<std::string> buckets = rows_starting(r, "grad.bucket");
    ASSERT_EQ(buckets.size(), 1u);
    const std::string& bucket = *buckets.begin();
    EXPECT_EQ(r.kinds_by_row.at(bucket), std::set<std::string>{"ALLREDUCE"});
    const json& args = r.last_op_args.at(bucket);
    EXPECT_EQ(args.at("members"), 4) << args;
    EXPECT_EQ(args.at("bytes"), 848) << args;
    EXPECT_FALSE(args.contains("shape")) << args;
    EXPECT_EQ(args.at("status"), "OK") << args;
  }
}

TEST(TimelineJob, TrainingWithABucketPerParameterDrawsRightAndSummarisesExactly) {
  const Job job = run_job(2, "--mode train --steps 20 --bucket-bytes 0");
  expect_rows_nest_and_the_summary_counts_right(job);
  for (const RowReport& r : job.ranks) {
    EXPECT_EQ(rows_starting(r, "grad.fc").size(), 4u);
    const json& args = r.last_op_args.at("grad.fc1.weight");
    EXPECT_EQ(args.at("shape"), "[16, 8]") << args;
    EXPECT_EQ(args.at("bytes"), 512) << args;
  }
}

// The autotuner changes the fusion threshold and the bucket size between steps (the ranges
// are small for the tiny model), so buckets come and go.
TEST(TimelineJob, TrainingWithTheAutotunerDrawsRightAndSummarisesExactly) {
  const Job job = run_job(2, "--mode train --steps 40",
                          "KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_SAMPLES=1 KOLO_AUTOTUNE_BUCKET_FROM=64 "
                          "KOLO_AUTOTUNE_BUCKET_TO=512 KOLO_AUTOTUNE_FUSION_FROM=64 "
                          "KOLO_AUTOTUNE_FUSION_TO=512 KOLO_CYCLE_TIME=1ms");
  expect_rows_nest_and_the_summary_counts_right(job);
  for (size_t rank = 0; rank < job.files.size(); ++rank) {
    int changes = 0;
    for (const json& e : job.files[rank])
      changes += e.at("ph") == "C" && e.at("name") == "autotune";
    EXPECT_GE(changes, 2) << "rank " << rank;
    EXPECT_GE(rows_starting(job.ranks[rank], "grad.bucket").size(), 2u) << "rank " << rank;
  }
}

// Issue 33 item 2: a process set's operations were missing from the timeline. Ranks 1 and 2
// train on the set of both; rank 0 only adds it.
TEST(TimelineJob, TrainingOnAProcessSetIsOnTheSetsRows) {
  const Job job = run_job(3, "--mode train --steps 20 --set 1,2");
  expect_rows_nest_and_the_summary_counts_right(job);
  ASSERT_EQ(job.ranks.size(), 3u);
  EXPECT_TRUE(rows_starting(job.ranks[0], "set 1: ").empty());
  for (int rank : {1, 2}) {
    const RowReport& r = job.ranks[rank];
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(rows_starting(r, "set 1: grad.bucket").size(), 1u);
    EXPECT_TRUE(rows_starting(r, "grad.").empty());  // nothing of it on global rows
    EXPECT_EQ(rows_starting(r, "set 1: kolo:callbacks").size(), 1u);
  }
  // The set's negotiations are matched across its members like the global set's.
  EXPECT_GE(job.summary.negotiations, 20u);
}

// Every kind of operation, on the global set and on a set, each on its own row.
TEST(TimelineJob, EveryOperationIsOnTheTimeline) {
  const Job job = run_job(3, "--mode every-op");
  expect_rows_nest_and_the_summary_counts_right(job);
  ASSERT_EQ(job.ranks.size(), 3u);
  const std::map<std::string, std::string> global = {
      {"op.allreduce", "ALLREDUCE"},         {"op.grouped_allreduce", "ALLREDUCE"},
      {"op.allgather", "ALLGATHER"},         {"op.broadcast", "BROADCAST"},
      {"op.alltoall", "ALLTOALL"},           {"op.reducescatter", "REDUCESCATTER"},
      {"op.grouped_allgather", "ALLGATHER"}, {"op.grouped_reducescatter", "REDUCESCATTER"},
      {"op.object.size", "BROADCAST"},       {"op.object", "BROADCAST"},
      {"op.objects", "ALLGATHER"},           {"op.barrier", "BARRIER"}};
  const std::map<std::string, std::string> set = {{"set 1: set.allreduce", "ALLREDUCE"},
                                                  {"set 1: set.allgather", "ALLGATHER"},
                                                  {"set 1: set.barrier", "BARRIER"}};
  for (int rank = 0; rank < 3; ++rank) {
    const RowReport& r = job.ranks[rank];
    SCOPED_TRACE("rank " + std::to_string(rank));
    for (const auto& [row, kind] : global) EXPECT_EQ(r.kinds_by_row.at(row), std::set{kind}) << row;
    for (const auto& [row, kind] : set) {
      if (rank == 0) {
        EXPECT_FALSE(r.kinds_by_row.count(row)) << row;
      } else {
        EXPECT_EQ(r.kinds_by_row.at(row), std::set{kind}) << row;
      }
    }
  }
  EXPECT_EQ(job.ranks[0].last_op_args.at("op.grouped_allreduce").at("members"), 2);
  // Point-to-point: on the pair's rows, a send on the sender's, a recv on the receiver's.
  EXPECT_EQ(job.ranks[0].kinds_by_row.at("pair 0-1: op.p2p"), std::set<std::string>{"SEND"});
  EXPECT_EQ(job.ranks[1].kinds_by_row.at("pair 0-1: op.p2p"), std::set<std::string>{"RECV"});
  EXPECT_EQ(job.ranks[1].kinds_by_row.at("pair 1-2: set.p2p"), std::set<std::string>{"SEND"});
  EXPECT_EQ(job.ranks[2].kinds_by_row.at("pair 1-2: set.p2p"), std::set<std::string>{"RECV"});
  EXPECT_FALSE(job.ranks[2].kinds_by_row.count("pair 0-1: op.p2p"));
}

}  // namespace
}  // namespace kolo::trace
