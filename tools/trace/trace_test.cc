#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "timeline/timeline.h"
#include "timeline/trace_format.h"
#include "tools/trace/merge.h"
#include "tools/trace/summary.h"
#include "tools/trace/trace_file.h"

namespace kolo::trace {
namespace {

using nlohmann::json;
namespace tf = trace_format;

// A path under the test temp dir, removed when the test binary exits.
std::string temp_path(const std::string& name) {
  struct Cleanup {
    std::vector<std::string> paths;
    ~Cleanup() {
      for (const auto& p : paths) std::remove(p.c_str());
    }
  };
  static Cleanup cleanup;
  std::string path = ::testing::TempDir() + "kolo_trace_" + std::to_string(::getpid()) + "_" + name;
  cleanup.paths.push_back(path);
  return path;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json meta(int pid, int tid, const std::string& name, json args) {
  return {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

json clock_sync(int pid, int64_t wall_us) {
  return meta(pid, 0, std::string(tf::kClockSyncEvent), {{tf::kWallClockUsArg, wall_us}});
}

json span(const std::string& ph, int pid, int tid, const std::string& name, double ts,
          json args = nullptr) {
  json e = {{"name", name}, {"ph", ph}, {"pid", pid}, {"tid", tid}, {"ts", ts}};
  if (!args.is_null()) e["args"] = std::move(args);
  return e;
}

// Output lines with runs of spaces collapsed, so tests name rows, not column widths.
std::vector<std::string> normalized_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word, joined;
    while (words >> word) joined += (joined.empty() ? "" : " ") + word;
    lines.push_back(joined);
  }
  return lines;
}

bool has_line(const std::string& text, const std::string& want) {
  for (const auto& l : normalized_lines(text))
    if (l == want) return true;
  return false;
}

bool has_line_prefix(const std::string& text, const std::string& prefix) {
  for (const auto& l : normalized_lines(text))
    if (l.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(TraceFile, ParsesArraysAndTraceEventsObjects) {
  auto a = parse_trace(R"([{"ph":"i","ts":1,"pid":0,"tid":0,"name":"x"}])", "a.json");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->events.size(), 1u);
  EXPECT_FALSE(a->recovered);
  auto b = parse_trace(R"({"traceEvents":[{"ph":"i","ts":1},{"ph":"i","ts":2}]})", "b.json");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->events.size(), 2u);
}

TEST(TraceFile, CompletesArraysCutShortByACrash) {
  const std::string e1 = R"({"name":"a","ph":"i","ts":1})";
  const std::string e2 = R"({"name":"b\"}","ph":"i","ts":2})";  // braces inside a string
  struct Case {
    std::string text;
    size_t events;
    size_t discarded;
  };
  std::vector<Case> cases = {
      {"[\n" + e1 + ",\n" + e2, 2, 0},                                 // no closing bracket
      {"[\n" + e1 + ",\n" + e2 + ",\n", 2, 0},                         // trailing separator
      {"[\n" + e1 + ",\n{\"name\":\"x\",\"p", 1, 14},                  // half-written event
      {"[\n" + e1 + ",\n{\"name\":\"x\",\"args\":{\"k\":[1,", 1, 27},  // cut inside nesting
      {"[", 0, 0},                                                     // nothing but the bracket
  };
  for (const Case& c : cases) {
    auto r = parse_trace(c.text, "crashed.json");
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().to_string();
    EXPECT_TRUE(r->recovered) << c.text;
    EXPECT_EQ(r->events.size(), c.events) << c.text;
    EXPECT_EQ(r->discarded_bytes, c.discarded) << c.text;
  }
}

TEST(TraceFile, ReportsCorruptionWithFileAndPosition) {
  // "{bad}" starts at byte 11 (line 3, column 1); the parser stops at the 'b' (byte 12).
  auto r = parse_trace("[\n{\"a\":1},\n{bad},\n{\"b\":2}\n]", "rank1.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("'rank1.json': invalid JSON at byte 12 (line 3, column 2)"), std::string::npos)
      << m;

  auto not_array = parse_trace(R"({"foo":1})", "obj.json");
  ASSERT_FALSE(not_array.ok());
  EXPECT_NE(not_array.status().message().find("'obj.json': expected a JSON array"),
            std::string::npos)
      << not_array.status().message();

  auto not_object = parse_trace("[1]", "num.json");
  ASSERT_FALSE(not_object.ok());
  EXPECT_NE(not_object.status().message().find(
                "'num.json': event 0 must be a JSON object, got a JSON number"),
            std::string::npos)
      << not_object.status().message();

  auto bad_ts = parse_trace(R"([{"ph":"i","ts":"soon"}])", "ts.json");
  ASSERT_FALSE(bad_ts.ok());
  EXPECT_NE(bad_ts.status().message().find("event 0 has a non-numeric \"ts\": \"soon\""),
            std::string::npos)
      << bad_ts.status().message();

  // A field of the wrong type is an error, not an exception out of kolo-trace (a fuzzer's find:
  // a numeric "ph" ended the process with nlohmann's type_error).
  auto bad_ph = parse_trace(R"([{"ph":1,"ts":0}])", "ph.json");
  ASSERT_FALSE(bad_ph.ok());
  EXPECT_EQ(bad_ph.status().message(), "'ph.json': event 0 has a \"ph\" that is not a string: 1");
  auto bad_pid = parse_trace(R"([{"ph":"i","ts":0,"pid":4.4e36}])", "pid.json");
  ASSERT_FALSE(bad_pid.ok());
  EXPECT_EQ(bad_pid.status().message(),
            "'pid.json': event 0 has a \"pid\" that is not an integer: 4.4e+36");
  auto huge = parse_trace(R"([{"ph":"i","ts":1E999999}])", "huge.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message().rfind("'huge.json': unreadable JSON: ", 0), 0u)
      << huge.status().message();
  auto bad_args = parse_trace(R"([{"ph":"X","ts":0,"dur":1,"args":[1]}])", "args.json");
  ASSERT_FALSE(bad_args.ok());
  EXPECT_EQ(bad_args.status().message(),
            "'args.json': event 0 has \"args\" that are not an object: [1]");

  auto empty = parse_trace("", "empty.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("'empty.json': invalid JSON at byte 0"),
            std::string::npos)
      << empty.status().message();
}

TEST(TraceFile, MissingFileIsAnIoErrorNamingIt) {
  auto r = load_trace("/nonexistent-kolo/rank0.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_EQ(r.status().message(),
            "cannot open '/nonexistent-kolo/rank0.json': No such file or directory");
}

TEST(Merge, ShiftsEachRankByItsWallClockZero) {
  TraceFile r0, r1;
  r0.path = "r0.json";
  r0.events = json::array(
      {clock_sync(0, 1'000'000'000), span("i", 0, 1, "x", 10.5), span("i", 0, 1, "y", 0.001)});
  r0.wall_clock_us[0] = 1'000'000'000;
  r1.path = "r1.json";
  r1.events = json::array(
      {span("i", 1, 1, "x", 10.5), clock_sync(1, 1'000'000'250), span("i", 1, 1, "y", 0.123)});
  r1.wall_clock_us[1] = 1'000'000'250;  // started 250 us after rank 0

  MergedTrace m = merge_traces({r1, r0});
  ASSERT_TRUE(m.wall_clock_us.has_value());
  EXPECT_EQ(*m.wall_clock_us, 1'000'000'000);
  EXPECT_TRUE(m.warnings.empty());
  ASSERT_EQ(m.events.size(), 6u);
  // Metadata first, both naming the common zero.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(m.events[i].at("ph"), "M");
    EXPECT_EQ(m.events[i].at("args").at(tf::kWallClockUsArg), 1'000'000'000);
  }
  std::map<std::pair<int, std::string>, double> ts;
  for (const auto& e : m.events)
    if (e.at("ph") == "i")
      ts[{e.at("pid").get<int>(), e.at("name").get<std::string>()}] = e.at("ts");
  EXPECT_EQ((ts[{0, "x"}]), 10.5);
  EXPECT_EQ((ts[{0, "y"}]), 0.001);
  EXPECT_EQ((ts[{1, "x"}]), 260.5);
  EXPECT_EQ((ts[{1, "y"}]), 250.123);

  // Merging the merged trace again changes nothing: every rank now names the same zero.
  std::string path = temp_path("merged.json");
  ASSERT_TRUE(write_trace(path, m.events).ok());
  auto again = load_trace(path);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(merge_traces({*again}).events, m.events);
}

TEST(Merge, WarnsAboutUnalignableAndCollidingInputs) {
  TraceFile plain, a, b;
  plain.path = "plain.json";
  plain.events = json::array({span("i", 7, 1, "x", 5)});
  a.path = "a.json";
  a.events = json::array({clock_sync(0, 100), span("i", 0, 1, "x", 1)});
  a.wall_clock_us[0] = 100;
  b = a;
  b.path = "b.json";
  b.recovered = true;
  b.discarded_bytes = 9;
  MergedTrace m = merge_traces({plain, a, b});
  std::vector<std::string> want = {
      "'plain.json' has no kolo_clock_sync metadata: its timestamps are not shifted",
      "'b.json' was cut short (crashed run?): kept its 2 complete events, discarded 9 bytes of "
      "a partial event",
      "pid 0 appears in both 'a.json' and 'b.json': their tracks are shown together"};
  EXPECT_EQ(m.warnings, want);
  EXPECT_EQ(m.events.size(), 5u);
}

// A timeline file cut short mid-event (a .gz stream, or a file from an older Kolo) still merges.
TEST(Merge, ReadsAnUnterminatedTimelineFile) {
  std::string path = temp_path("crashed_rank.json");
  {
    Timeline tl;
    ASSERT_TRUE(tl.start(path, 4).ok());
    tl.end(tl.begin_op("grad/w", "ALLREDUCE", {{"bytes", "64"}}));
    tl.begin_op("grad/w", "ALLREDUCE", {{"bytes", "64"}});
    tl.stop();
  }
  std::string full = read_text(path);
  // Drop the closing bracket, the stats event and the middle of the last (aborted) span.
  size_t cut = full.rfind("\"status\":\"aborted\"");
  ASSERT_NE(cut, std::string::npos);
  write_text(path, full.substr(0, cut));

  auto file = load_trace(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_TRUE(file->recovered);
  EXPECT_GT(file->discarded_bytes, 0u);
  ASSERT_EQ(file->wall_clock_us.count(4), 1u);
  MergedTrace m = merge_traces({*file});
  int spans = 0;
  for (const auto& e : m.events) {
    EXPECT_EQ(e.at("pid"), 4);
    spans += e.at("ph") == "X";
  }
  EXPECT_EQ(spans, 1);
  TraceSummary s = summarize(m.events);
  EXPECT_EQ(s.operations, 1u);
  EXPECT_TRUE(s.open_at_end.empty());
}

// Two ranks, rank 1 started 20 us after rank 0. Times below are each rank's own ts; the
// comments give them on the common clock.
std::vector<TraceFile> two_rank_job() {
  auto op = [](int pid, int tid, double begin, double neg_begin, double neg_end, double tcp_end,
               double end, json bytes) {
    return std::vector<json>{span("B", pid, tid, "ALLREDUCE", begin, {{"bytes", bytes}}),
                             span("B", pid, tid, "NEGOTIATE", neg_begin),
                             span("E", pid, tid, "NEGOTIATE", neg_end),
                             span("B", pid, tid, "TCP_ALLREDUCE", neg_end),
                             span("E", pid, tid, "TCP_ALLREDUCE", tcp_end),
                             span("E", pid, tid, "ALLREDUCE", end)};
  };
  auto rank = [&](int pid, int64_t wall, std::vector<std::vector<json>> ops) {
    TraceFile f;
    f.path = "rank" + std::to_string(pid) + ".json";
    f.events = json::array({clock_sync(pid, wall), meta(pid, 1, "thread_name", {{"name", "w"}}),
                            meta(pid, 2, "thread_name", {{"name", "b"}})});
    for (auto& o : ops)
      for (auto& e : o) f.events.push_back(e);
    f.wall_clock_us[pid] = wall;
    return f;
  };
  TraceFile r0 = rank(0, 5'000'000,
                      {op(0, 1, 0, 0, 50, 70, 80, 400),         // w#0: NEGOTIATE at 0
                       op(0, 1, 100, 130, 150, 170, 180, 400),  // w#1: at 130 (last, lag 20)
                       op(0, 2, 0, 10, 60, 60, 60, "8")});      // b#0: at 10
  TraceFile r1 = rank(1, 5'000'020,
                      {op(1, 1, 10, 10, 30, 50, 60, 400),     // w#0: at 30 (last, lag 30)
                       op(1, 1, 90, 90, 130, 150, 160, 400),  // w#1: at 110
                       op(1, 2, 0, 25, 40, 40, 40, "8")});    // b#0: at 45 (last, lag 35)
  return {r0, r1};
}

TEST(Summary, CountsBytesAndTimePerKindTensorAndPhase) {
  TraceSummary s = summarize(merge_traces(two_rank_job()).events);
  EXPECT_EQ(s.operations, 6u);
  const PhaseStats& op = s.by_kind.at({"ALLREDUCE", 0, ""});
  EXPECT_EQ(op.count, 6u);
  EXPECT_EQ(op.bytes, 4u * 400 + 2u * 8);
  EXPECT_DOUBLE_EQ(op.total_us, 380);
  const PhaseStats& neg = s.by_kind.at({"ALLREDUCE", 2, "NEGOTIATE"});
  EXPECT_EQ(neg.count, 6u);
  EXPECT_DOUBLE_EQ(neg.total_us, 195);
  const PhaseStats& tcp = s.by_kind.at({"ALLREDUCE", 5, "TCP_ALLREDUCE"});
  EXPECT_EQ(tcp.count, 6u);  // b's are zero-length but still counted
  EXPECT_DOUBLE_EQ(tcp.total_us, 80);
  EXPECT_EQ(s.by_kind.size(), 3u);
  const PhaseStats& w = s.by_tensor.at({"w", "ALLREDUCE", 0, ""});
  EXPECT_EQ(w.count, 4u);
  EXPECT_EQ(w.bytes, 1600u);
  EXPECT_DOUBLE_EQ(w.total_us, 280);
  EXPECT_EQ(s.by_tensor.at({"b", "ALLREDUCE", 0, ""}).bytes, 16u);
  EXPECT_EQ(s.unclosed_spans, 0u);
  EXPECT_EQ(s.unmatched_ends, 0u);
}

// Numbers out of an integer's range (a float in JSON) are clamped, not converted with undefined
// behaviour (a libFuzzer finding, fuzz_trace_reader: "bytes":4.2e47).
TEST(Summary, NumbersOutOfRangeAreClamped) {
  const json events = json::parse(
      R"([{"name":"thread_name","ph":"M","pid":0,"tid":1,"ts":0,"args":{"name":"g"}},)"
      R"({"name":"ALLREDUCE","ph":"X","pid":0,"tid":1,"ts":15,"dur":60,"args":{"bytes":4.2e47}},)"
      R"({"name":"ALLREDUCE","ph":"X","pid":0,"tid":1,"ts":80,"dur":5,"args":{"bytes":-1e300}}])");
  TraceSummary s = summarize(events);
  EXPECT_EQ(s.by_kind.at({"ALLREDUCE", 0, ""}).bytes, uint64_t{INT64_MAX});
  EXPECT_EQ(integer_or(json::parse(R"({"pid":1e300})"), "pid", 7), INT64_MAX);
  EXPECT_EQ(integer_or(json::parse(R"({"pid":-1e300})"), "pid", 7), INT64_MIN);
  EXPECT_EQ(integer_or(json::parse(R"({"pid":18446744073709551615})"), "pid", 7), INT64_MAX);
  EXPECT_EQ(integer_or(json::parse(R"({"pid":-3.7})"), "pid", 7), -3);
  EXPECT_EQ(integer_or(json::parse(R"({"pid":"x"})"), "pid", 7), 7);
}

// A span's status and reason args that are not strings (another tool's trace) are read as
// absent, not thrown from (a libFuzzer finding, fuzz_trace_reader: "status":0 ended the
// process through an uncaught nlohmann type_error).
TEST(Summary, ArgsOfTheWrongTypeAreIgnored) {
  const json events = json::parse(
      R"([{"name":"thread_name","ph":"M","pid":0,"tid":1,"ts":0,"args":{"name":"g"}},)"
      R"({"name":"ALLREDUCE","ph":"X","pid":0,"tid":1,"ts":15,"dur":60,"args":{"status":0}},)"
      R"({"name":"ALLREDUCE","ph":"X","pid":0,"tid":1,"ts":80,"dur":5,)"
      R"("args":{"status":"aborted","reason":[1]}}])");
  TraceSummary s = summarize(events);
  EXPECT_EQ(s.operations, 1u);  // the first counts; the second is listed as open at the end
  ASSERT_EQ(s.open_at_end.size(), 1u);
  EXPECT_EQ(s.open_at_end[0].reason, "");
  EXPECT_EQ(string_or(json::parse(R"({"k":"v"})"), "k", "x"), "v");
  EXPECT_EQ(string_or(json::parse(R"({"k":1})"), "k", "x"), "x");
}

TEST(Summary, StragglerIsTheRankWhoseNegotiateBeganLastOnTheCommonClock) {
  TraceSummary s = summarize(merge_traces(two_rank_job()).events);
  EXPECT_EQ(s.negotiations, 3u);
  ASSERT_EQ(s.stragglers.size(), 2u);
  EXPECT_EQ(s.stragglers.at(0).last_count, 1u);
  EXPECT_DOUBLE_EQ(s.stragglers.at(0).lag_us, 20);
  EXPECT_EQ(s.stragglers.at(1).last_count, 2u);
  EXPECT_DOUBLE_EQ(s.stragglers.at(1).lag_us, 65);  // 25 if the clocks were not aligned
}

TEST(Summary, ReportPrintsTheTables) {
  std::string out = format_summary(summarize(merge_traces(two_rank_job()).events));
  EXPECT_TRUE(has_line(out, "Ranks: 0, 1; operations: 6")) << out;
  EXPECT_TRUE(has_line(out, "kind phase count bytes total_ms mean_us")) << out;
  EXPECT_TRUE(has_line(out, "ALLREDUCE (op) 6 1616 0.380 63.3")) << out;
  EXPECT_TRUE(has_line(out, "ALLREDUCE NEGOTIATE 6 - 0.195 32.5")) << out;
  EXPECT_TRUE(has_line(out, "ALLREDUCE TCP_ALLREDUCE 6 - 0.080 13.3")) << out;
  EXPECT_TRUE(has_line(out, "w ALLREDUCE (op) 4 1600 0.280 70.0")) << out;
  EXPECT_TRUE(has_line(out, "b ALLREDUCE NEGOTIATE 2 - 0.065 32.5")) << out;
  EXPECT_TRUE(has_line(out, "rank last share total_lag_ms mean_lag_us")) << out;
  EXPECT_TRUE(has_line(out, "0 1 33.3% 0.020 20.0")) << out;
  EXPECT_TRUE(has_line(out, "1 2 66.7% 0.065 32.5")) << out;
  // Phases print in pipeline order: the op, NEGOTIATE, then the backend's op.
  std::vector<std::string> lines = normalized_lines(out);
  auto index_of = [&](const std::string& prefix) {
    for (size_t i = 0; i < lines.size(); ++i)
      if (lines[i].rfind(prefix, 0) == 0) return i;
    return lines.size();
  };
  EXPECT_LT(index_of("ALLREDUCE (op)"), index_of("ALLREDUCE NEGOTIATE"));
  EXPECT_LT(index_of("ALLREDUCE NEGOTIATE"), index_of("ALLREDUCE TCP_ALLREDUCE"));
}

json complete(int pid, int tid, const std::string& name, double ts, double dur,
              json args = nullptr) {
  json e = span("X", pid, tid, name, ts, std::move(args));
  e["dur"] = dur;
  return e;
}

// Issue 33: a tensor's sibling row ("w (2)": an operation that began while its previous one
// still held the row) counts as the tensor's, its k-th NEGOTIATE matched across ranks in time
// order whatever the row; a CALLBACK on a row of callbacks is a phase of the operation its
// args name, not an operation.
TEST(Summary, SiblingRowsAreTheirTensorsAndCallbacksArePhasesOfTheirOperation) {
  json events = json::array();
  for (int pid = 0; pid < 2; ++pid) {
    const double late = pid == 1 ? 5 : 0;  // rank 1 negotiates 5 us after rank 0
    for (const json& e :
         {meta(pid, 1, "thread_name", {{"name", "w"}}),
          meta(pid, 2, "thread_name", {{"name", "w (2)"}, {"tensor", "w"}}),
          meta(pid, 3, "thread_name", {{"name", "kolo:callbacks"}}),
          complete(pid, 1, "ALLREDUCE", 0, 100, {{"bytes", 8}, {"status", "OK"}}),
          complete(pid, 1, "QUEUE", 0, 10), complete(pid, 1, "NEGOTIATE", 10 + late, 20),
          complete(pid, 2, "ALLREDUCE", 50, 100, {{"bytes", 8}, {"status", "OK"}}),
          complete(pid, 2, "QUEUE", 50, 10), complete(pid, 2, "NEGOTIATE", 60 + 2 * late, 20),
          complete(pid, 3, "CALLBACK", 100, 3, {{"tensor", "w"}, {"op", "ALLREDUCE"}}),
          complete(pid, 3, "CALLBACK", 150, 3, {{"tensor", "w"}, {"op", "ALLREDUCE"}})})
      events.push_back(e);
  }
  TraceSummary s = summarize(events);
  EXPECT_EQ(s.operations, 4u);
  EXPECT_EQ(s.by_tensor.at({"w", "ALLREDUCE", 0, ""}).count, 4u);
  EXPECT_EQ(s.by_tensor.at({"w", "ALLREDUCE", 1, "QUEUE"}).count, 4u);
  const PhaseStats& callbacks = s.by_tensor.at({"w", "ALLREDUCE", 7, "CALLBACK"});
  EXPECT_EQ(callbacks.count, 4u);
  EXPECT_DOUBLE_EQ(callbacks.total_us, 12);
  EXPECT_EQ(s.by_kind.size(), 4u);  // ALLREDUCE: the op, QUEUE, NEGOTIATE, CALLBACK
  EXPECT_EQ(s.by_tensor.size(), 4u);
  EXPECT_EQ(s.negotiations, 2u);
  EXPECT_EQ(s.stragglers.at(1).last_count, 2u);
  EXPECT_DOUBLE_EQ(s.stragglers.at(1).lag_us, 15);
  EXPECT_EQ(s.partial_overlaps, 0u);
}

// A file whose rows do not nest (an older Kolo's: the next operation began inside the last
// one's CALLBACK and outlived it) is counted and said to be unreliable.
TEST(Summary, SpansThatOverlapPartlyOnARowAreCountedAndNoted) {
  const json events =
      json::array({meta(0, 1, "thread_name", {{"name", "w"}}), complete(0, 1, "ALLREDUCE", 0, 100),
                   complete(0, 1, "CALLBACK", 60, 40),
                   complete(0, 1, "ALLREDUCE", 80, 100),  // partly over both
                   complete(0, 1, "QUEUE", 80, 10)});
  TraceSummary s = summarize(events);
  EXPECT_EQ(s.partial_overlaps, 2u);
  EXPECT_EQ(s.operations, 2u);
  const std::string out = format_summary(s);
  EXPECT_NE(out.find("Note: 2 spans began inside another span of their row and outlived it"),
            std::string::npos)
      << out;
}

TEST(Summary, NotesDroppedEventsAndStrayEnds) {
  json events =
      json::array({meta(0, 0, std::string(tf::kStatsEvent), {{tf::kDroppedEventsArg, 12}}),
                   span("E", 0, 1, "OP", 1), span("B", 0, 1, "OP", 2)});
  TraceSummary s = summarize(events);
  EXPECT_EQ(s.dropped_events.at(0), 12u);
  EXPECT_EQ(s.unmatched_ends, 1u);
  EXPECT_EQ(s.unclosed_spans, 1u);
  std::string out = format_summary(s);
  EXPECT_NE(out.find("rank 0 dropped 12 events"), std::string::npos) << out;
  EXPECT_NE(out.find("1 spans never ended"), std::string::npos) << out;
}

TEST(Summary, PerStepNamesTheRankTheStepWaitedForInEveryFormat) {
  std::vector<TraceFile> files = two_rank_job();
  // Step 1 begins at 90 on the common clock on both ranks (rank 1's own clock is 20 us behind).
  auto step = [](int pid, double ts) {
    json e = span("i", pid, 0, std::string(tf::kStepMarker), ts, {{tf::kStepArg, 1}});
    e["s"] = "g";
    return e;
  };
  files[0].events.push_back(step(0, 90));
  files[1].events.push_back(step(1, 70));
  TraceSummary s = summarize(merge_traces(files).events);
  ASSERT_EQ(s.per_step.size(), 2u);
  EXPECT_EQ(s.per_step[0].step, 0);
  EXPECT_EQ(s.per_step[0].negotiations, 2u);  // w#0 and b#0: rank 1 late by 30 and 35
  EXPECT_EQ(s.per_step[0].late_rank, 1);
  EXPECT_DOUBLE_EQ(s.per_step[0].lag_us, 65);
  EXPECT_DOUBLE_EQ(s.per_step[0].max_lag_us, 35);
  EXPECT_EQ(s.per_step[1].late_rank, 0);  // w#1: rank 0 late by 20
  EXPECT_DOUBLE_EQ(s.per_step[1].lag_us, 20);

  std::string text = format_per_step(s, TableFormat::kText);
  EXPECT_TRUE(has_line(text, "step negotiations late_rank lag_ms max_lag_ms")) << text;
  EXPECT_TRUE(has_line(text, "0 2 1 0.065 0.035")) << text;
  EXPECT_TRUE(has_line(text, "1 1 0 0.020 0.020")) << text;
  EXPECT_EQ(
      format_per_step(s, TableFormat::kCsv),
      "step,negotiations,late_rank,lag_ms,max_lag_ms\n0,2,1,0.065,0.035\n1,1,0,0.020,0.020\n");
  json rows = json::parse(format_per_step(s, TableFormat::kJson));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["late_rank"], 1);
  EXPECT_DOUBLE_EQ(rows[0]["lag_ms"].get<double>(), 0.065);
  EXPECT_EQ(rows[1]["step"], 1);
}

// Note [Submission marks]: on each rank's row, when every rank submitted the operation.
TEST(Merge, MarksWhenEachRankSubmittedOnEveryRanksRow) {
  auto rank = [](int pid, int64_t wall, double queue_ts) {
    TraceFile f;
    f.path = "r" + std::to_string(pid);
    f.events = json::array({clock_sync(pid, wall), meta(pid, 3, "thread_name", {{"name", "w"}}),
                            span("X", pid, 3, "QUEUE", queue_ts)});
    f.events.back()["dur"] = 5;
    f.wall_clock_us[pid] = wall;
    return f;
  };
  // Common clock: rank 0 submits at 100, rank 1 at 20 + 200 = 220.
  MergedTrace m = merge_traces({rank(0, 1'000'000, 100), rank(1, 1'000'020, 200)});
  auto marks = [](const json& events) {
    std::map<std::pair<int, int>, json> by_row_and_rank;  // (row's pid, submitting rank)
    for (const auto& e : events)
      if (e.at("ph") == "i" && e.at("name") == tf::kSubmittedMark)
        by_row_and_rank[{e.at("pid").get<int>(), e.at("args").at("rank").get<int>()}] = e;
    return by_row_and_rank;
  };
  auto got = marks(m.events);
  ASSERT_EQ(got.size(), 4u);
  for (int row = 0; row < 2; ++row) {
    const json& first = got[std::make_pair(row, 0)];
    const json& late = got[std::make_pair(row, 1)];
    EXPECT_EQ(first.at("ts"), 100.0);
    EXPECT_EQ(first.at("args").at("lag_us"), 0.0);
    EXPECT_EQ(late.at("ts"), 220.0);
    EXPECT_EQ(late.at("args").at("lag_us"), 120.0);
    EXPECT_EQ(late.at("tid"), 3);
    EXPECT_EQ(late.at("s"), "t");
  }
  TraceFile again;
  again.path = "merged";
  again.events = m.events;
  again.wall_clock_us = {{0, 1'000'000}, {1, 1'000'000}};
  EXPECT_EQ(marks(merge_traces({again}).events).size(), 4u);  // not doubled
}

// KOLO_TIMELINE=....gz: gzip, read back by kolo-trace, also when cut short by a crash.
TEST(TraceFile, ReadsGzipTimelinesWholeAndCutShort) {
  std::string path = temp_path("z.json.gz");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 2).ok());
  for (int i = 0; i < 100; ++i) {
    tl.end(tl.begin_op("w", "ALLREDUCE", {{"bytes", "64"}}));
  }
  tl.stop();
  std::string gz = read_text(path);
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
  auto file = load_trace(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_FALSE(file->recovered);
  EXPECT_EQ(summarize(file->events).operations, 100u);
  write_text(path, gz.substr(0, gz.size() * 2 / 3));  // a killed writer's stream
  file = load_trace(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_TRUE(file->recovered);
  EXPECT_GT(summarize(file->events).operations, 0u);
}

// The first thing one looks for in a hang: what each rank still had open, and since when.
TEST(Summary, ListsSpansOpenAtTheEnd) {
  json events = json::array(
      {meta(0, 1, "thread_name", {{"name", "grad/w"}}), meta(1, 1, "thread_name", {{"name", "b"}}),
       span("X", 0, 1, "ALLREDUCE", 100,
            {{"status", "aborted"}, {"reason", "the process received SIGTERM"}}),
       span("X", 0, 1, "NEGOTIATE", 110,
            {{"status", "aborted"}, {"reason", "the process received SIGTERM"}}),
       span("X", 1, 1, "ALLREDUCE", 50, {{"status", "open"}}),
       span("X", 1, 1, "ALLREDUCE", 10, {{"status", "OK"}})});
  for (auto& e : events)  // the unfinished ones end together at 130, as stop() closes them
    if (e["ph"] == "X") e["dur"] = e["args"]["status"] == "OK" ? 20 : 130 - e["ts"].get<double>();
  TraceSummary s = summarize(events);
  ASSERT_EQ(s.open_at_end.size(), 3u);
  EXPECT_EQ(s.operations, 1u);  // the completed one only
  const OpenSpanAtEnd& negotiate = s.open_at_end[1];
  EXPECT_EQ(negotiate.rank, 0);
  EXPECT_EQ(negotiate.tensor, "grad/w");
  EXPECT_EQ(negotiate.kind, "ALLREDUCE");
  EXPECT_EQ(negotiate.phase, "NEGOTIATE");
  EXPECT_DOUBLE_EQ(negotiate.since_us, 110);
  std::string out = format_summary(s);
  EXPECT_TRUE(has_line(out, "rank tensor kind phase since_ms status reason")) << out;
  EXPECT_TRUE(
      has_line(out, "0 grad/w ALLREDUCE NEGOTIATE 0.110 aborted the process received SIGTERM"))
      << out;
  EXPECT_TRUE(has_line(out, "1 b ALLREDUCE (op) 0.050 open")) << out;
}

// The binary end to end: real timeline files in, merged file and report out.
TEST(KoloTraceCli, MergesAndSummarisesTimelineFiles) {
  std::vector<std::string> inputs;
  for (int rank = 0; rank < 2; ++rank) {
    inputs.push_back(temp_path("cli_rank" + std::to_string(rank) + ".json"));
    Timeline tl;
    ASSERT_TRUE(tl.start(inputs.back(), rank).ok());
    const uint64_t op = tl.begin_op("grad/w", "ALLREDUCE", {{"bytes", "1024"}});
    tl.begin(op, "NEGOTIATE");
    tl.end(op);
    tl.end(op);
    tl.stop();
  }
  std::string merged = temp_path("cli_merged.json");
  std::string log = temp_path("cli.log");
  std::string cmd = std::string(KOLO_TRACE_BINARY) + " merge -o " + merged + " " + inputs[0] + " " +
                    inputs[1] + " 2>" + log;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(log);
  auto file = load_trace(merged);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_FALSE(file->recovered);
  EXPECT_EQ(file->wall_clock_us.size(), 2u);

  std::string report = temp_path("cli_report.txt");
  cmd = std::string(KOLO_TRACE_BINARY) + " summary " + merged + " >" + report + " 2>" + log;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(log);
  std::string out = read_text(report);
  EXPECT_TRUE(has_line_prefix(out, "ALLREDUCE (op) 2 2048 ")) << out;
  EXPECT_TRUE(has_line_prefix(out, "grad/w ALLREDUCE NEGOTIATE 2 - ")) << out;
  EXPECT_NE(out.find("Negotiation stragglers"), std::string::npos) << out;

  // The output is never an input, and an existing one is replaced only with --force.
  const std::string rank0 = read_text(inputs[0]);
  auto run = [&](const std::string& args) {
    int rc = std::system((std::string(KOLO_TRACE_BINARY) + " " + args + " 2>" + log).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(run("merge " + inputs[0] + " " + inputs[1]), 2);  // the old clobbering form
  EXPECT_NE(read_text(log).find("merge needs the output file: -o OUT.json"), std::string::npos);
  EXPECT_EQ(run("merge --force -o " + inputs[0] + " " + inputs[0] + " " + inputs[1]), 1);
  EXPECT_NE(read_text(log).find("merge: the output '" + inputs[0] + "' is also an input"),
            std::string::npos)
      << read_text(log);
  EXPECT_EQ(run("merge -o " + ::testing::TempDir() + "/./" +
                inputs[1].substr(inputs[1].rfind('/') + 1) + " " + inputs[1]),
            1);
  EXPECT_EQ(read_text(inputs[0]), rank0);
  EXPECT_EQ(run("merge -o " + merged + " " + inputs[0] + " " + inputs[1]), 1);
  EXPECT_EQ(read_text(log),
            "kolo-trace: merge: the output '" + merged + "' exists; pass --force to replace it\n");
  EXPECT_EQ(run("merge --force -o " + merged + " " + inputs[0]), 0) << read_text(log);
  EXPECT_EQ(load_trace(merged)->wall_clock_us.size(), 1u);

  cmd = std::string(KOLO_TRACE_BINARY) + " summary /nonexistent-kolo/x.json 2>" + log;
  int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
  EXPECT_EQ(read_text(log),
            "kolo-trace: cannot open '/nonexistent-kolo/x.json': No such file or directory\n");

  cmd = std::string(KOLO_TRACE_BINARY) + " frobnicate 2>" + log;
  rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << rc;
  EXPECT_NE(read_text(log).find("unknown command 'frobnicate'"), std::string::npos);
}

}  // namespace
}  // namespace kolo::trace
