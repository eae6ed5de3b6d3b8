#include "timeline/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "timeline/trace_event.h"
#include "timeline/trace_format.h"

namespace kolo {
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
  std::string path =
      ::testing::TempDir() + "kolo_timeline_" + std::to_string(::getpid()) + "_" + name;
  cleanup.paths.push_back(path);
  return path;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::string& path) { return json::parse(read_text(path)); }

// Events of one kind ("B", "E", "i", "M") in file order.
std::vector<json> of_phase(const json& events, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : events)
    if (e.at("ph") == ph) out.push_back(e);
  return out;
}

// tid -> track name, from the thread_name metadata.
std::map<int, std::string> track_names(const json& events) {
  std::map<int, std::string> names;
  for (const auto& e : events)
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  return names;
}

const json* find_meta(const json& events, std::string_view name) {
  for (const auto& e : events)
    if (e.at("ph") == "M" && e.at("name") == name) return &e;
  return nullptr;
}

TEST(Timeline, FileIsValidJsonWithRankAndClockMetadata) {
  std::string path = temp_path("valid.json");
  Timeline tl;
  EXPECT_FALSE(tl.active());
  int64_t before_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  ASSERT_TRUE(tl.start(path, 3).ok());
  EXPECT_TRUE(tl.active());
  tl.begin("grad/w1", "ALLREDUCE", {{"bytes", "4096"}});
  tl.end("grad/w1");
  tl.instant("grad/w1", "READY");
  tl.stop();
  EXPECT_FALSE(tl.active());
  tl.stop();  // idempotent

  json events = read_json(path);
  ASSERT_TRUE(events.is_array());
  for (const auto& e : events) EXPECT_EQ(e.at("pid"), 3) << e;
  const json* process = find_meta(events, "process_name");
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->at("args").at("name"), "rank 3");
  const json* clock = find_meta(events, tf::kClockSyncEvent);
  ASSERT_NE(clock, nullptr);
  ASSERT_TRUE(clock->at("args").at(tf::kWallClockUsArg).is_number_integer());
  EXPECT_GE(clock->at("args").at(tf::kWallClockUsArg).get<int64_t>(), before_us);
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->at("args").at(tf::kDroppedEventsArg), 0);
  EXPECT_EQ(stats->at("args").at(tf::kUnmatchedEndsArg), 0);
  EXPECT_EQ(of_phase(events, "B").size(), 1u);
  EXPECT_EQ(of_phase(events, "E").size(), 1u);
  auto instants = of_phase(events, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0].at("name"), "READY");
  EXPECT_EQ(instants[0].at("s"), "t");
  EXPECT_TRUE(instants[0].at("ts").is_number());
  EXPECT_EQ(tl.dropped_events(), 0u);
  EXPECT_TRUE(tl.status().ok());
}

TEST(Timeline, CounterEventsCarryTheirValuesAsNumbers) {
  std::string path = temp_path("counter.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 3).ok());
  tl.counter("autotune", {{"step_time_ms", "12.5"}, {"bucket_bytes", "4194304"}});
  tl.stop();
  std::vector<json> counters = of_phase(read_json(path), "C");
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0].at("name"), "autotune");
  EXPECT_EQ(counters[0].at("pid"), 3);
  EXPECT_FALSE(counters[0].contains("s"));
  EXPECT_EQ(counters[0].at("args"), (json{{"step_time_ms", 12.5}, {"bucket_bytes", 4194304}}));
}

TEST(Timeline, OneTrackPerTensorWithStableIds) {
  std::string path = temp_path("tracks.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  tl.instant("a", "x");
  tl.instant("b", "x");
  tl.instant("a", "y");
  tl.instant("", "marker");
  tl.instant("42", "x");  // a numeric-looking tensor name stays a string label
  tl.stop();

  json events = read_json(path);
  std::map<int, std::string> names = track_names(events);
  std::map<int, std::string> expected = {{0, "markers"}, {1, "a"}, {2, "b"}, {3, "42"}};
  EXPECT_EQ(names, expected);
  std::vector<std::pair<int, std::string>> seen;
  for (const auto& e : of_phase(events, "i"))
    seen.emplace_back(e.at("tid").get<int>(), e.at("name").get<std::string>());
  std::vector<std::pair<int, std::string>> want = {
      {1, "x"}, {2, "x"}, {1, "y"}, {0, "marker"}, {3, "x"}};
  EXPECT_EQ(seen, want);
}

TEST(Timeline, SpansNestPerTrackAndEndCarriesNameAndArgs) {
  std::string path = temp_path("nest.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 1).ok());
  tl.begin("t", "ALLREDUCE", {{"dtype", "float32"}});
  tl.begin("t", "NEGOTIATE");
  tl.begin("u", "QUEUE");  // another track in between does not disturb t's stack
  tl.end("t");
  tl.begin("t", "TCP_ALLREDUCE");
  tl.end("t", {{"algorithm", "ring"}});
  tl.end("t", {{"bytes", "64"}});
  tl.end("u");
  tl.stop();

  json events = read_json(path);
  std::vector<std::string> seq;
  double last_ts = -1;
  for (const auto& e : events) {
    if (e.at("ph") != "B" && e.at("ph") != "E") continue;
    if (e.at("tid") != 1) continue;
    seq.push_back(e.at("ph").get<std::string>() + ":" + e.at("name").get<std::string>());
    EXPECT_GE(e.at("ts").get<double>(), last_ts);
    last_ts = e.at("ts").get<double>();
  }
  std::vector<std::string> want = {"B:ALLREDUCE",     "B:NEGOTIATE",     "E:NEGOTIATE",
                                   "B:TCP_ALLREDUCE", "E:TCP_ALLREDUCE", "E:ALLREDUCE"};
  EXPECT_EQ(seq, want);
  auto ends = of_phase(events, "E");
  ASSERT_EQ(ends.size(), 4u);
  EXPECT_EQ(ends[1].at("args").at("algorithm"), "ring");
  EXPECT_EQ(ends[2].at("args").at("bytes"), 64);
  EXPECT_EQ(of_phase(events, "B")[0].at("args").at("dtype"), "float32");
}

TEST(Timeline, ArgsAreNumbersOnlyWhenTheWholeValueIsAFiniteNumber) {
  std::string path = temp_path("args.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  std::string nasty = "quote\" backslash\\ newline\n tab\t ctrl\x01 end";
  tl.instant("t", "args",
             {{"int", "4096"},
              {"neg", "-3"},
              {"float", "-1.5"},
              {"exp", "1e6"},
              {"leading_zero", "007"},
              {"shape", "[4, 3]"},
              {"nan", "nan"},
              {"inf", "inf"},
              {"empty", ""},
              {"hex", "0x10"},
              {"plus", "+1"},
              {"trailing", "12abc"},
              {"big", "123456789012345678901234567890"},
              {"nasty", nasty},
              {"bad_utf8", std::string("a\xff") + "b"}});
  tl.stop();

  json events = read_json(path);
  auto instants = of_phase(events, "i");
  ASSERT_EQ(instants.size(), 1u);
  const json& a = instants[0].at("args");
  EXPECT_TRUE(a.at("int").is_number_integer());
  EXPECT_EQ(a.at("int"), 4096);
  EXPECT_EQ(a.at("neg"), -3);
  EXPECT_TRUE(a.at("float").is_number_float());
  EXPECT_DOUBLE_EQ(a.at("float").get<double>(), -1.5);
  EXPECT_DOUBLE_EQ(a.at("exp").get<double>(), 1e6);
  EXPECT_EQ(a.at("leading_zero"), 7);
  EXPECT_EQ(a.at("shape"), "[4, 3]");
  EXPECT_EQ(a.at("nan"), "nan");
  EXPECT_EQ(a.at("inf"), "inf");
  EXPECT_EQ(a.at("empty"), "");
  EXPECT_EQ(a.at("hex"), "0x10");
  EXPECT_EQ(a.at("plus"), "+1");
  EXPECT_EQ(a.at("trailing"), "12abc");
  EXPECT_TRUE(a.at("big").is_number_float());  // too big for int64: a double
  EXPECT_DOUBLE_EQ(a.at("big").get<double>(), 1.2345678901234568e29);
  EXPECT_EQ(a.at("nasty"), nasty);
  EXPECT_EQ(a.at("bad_utf8"),
            "a\xEF\xBF\xBD"
            "b");  // U+FFFD replaces the invalid byte
}

TEST(Timeline, TimestampsHaveNanosecondDecimals) {
  std::string out;
  timeline_detail::append_ts_us(out, 1234567);
  EXPECT_EQ(out, "1234.567");
  out.clear();
  timeline_detail::append_ts_us(out, 5);
  EXPECT_EQ(out, "0.005");
}

// With the writer woken only by stop(), exactly max_queued_events fit and the rest drop.
TEST(Timeline, DropsAndCountsPastTheLimitKeepingSpansNested) {
  std::string path = temp_path("drop.json");
  TimelineOptions opts;
  opts.max_queued_events = 4;
  opts.flush_interval = std::chrono::minutes(10);
  opts.wake_writer_at = 1000;
  Timeline tl(opts);
  ASSERT_TRUE(tl.start(path, 0).ok());
  tl.begin("kept", "OP");       // queue: thread_name(kept), B = 2
  for (int i = 0; i < 10; ++i)  // 2 fit, 8 drop
    tl.instant("", "tick", {{"i", std::to_string(i)}});
  tl.begin("lost", "OP");  // tid 2; nothing of it is kept, so not even its name
  tl.begin("lost", "INNER");
  tl.end("lost");  // dropped with its begin
  tl.end("lost");  // dropped with its begin
  tl.end("kept");  // kept although the queue is full: its begin was written
  EXPECT_EQ(tl.dropped_events(), 8u + 4u);
  tl.stop();

  json events = read_json(path);
  EXPECT_EQ(of_phase(events, "i").size(), 2u);
  auto begins = of_phase(events, "B");
  auto ends = of_phase(events, "E");
  ASSERT_EQ(begins.size(), 1u);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(begins[0].at("tid"), 1);
  EXPECT_EQ(ends[0].at("tid"), 1);
  EXPECT_EQ(ends[0].at("name"), "OP");
  std::map<int, std::string> expected_names = {{0, "markers"}, {1, "kept"}};
  EXPECT_EQ(track_names(events), expected_names);
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->at("args").at(tf::kDroppedEventsArg), 12);
  EXPECT_EQ(tl.dropped_events(), 12u);  // still readable after stop
}

TEST(Timeline, ConcurrentWritersKeepEveryEventAndPerTrackOrder) {
  std::string path = temp_path("threads.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 2).ok());
  constexpr int kThreads = 4;
  constexpr int kPairs = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tl, t] {
      std::string tensor = "tensor" + std::to_string(t);
      for (int i = 0; i < kPairs; ++i) {
        tl.begin(tensor, "OP", {{"i", std::to_string(i)}});
        tl.begin(tensor, "PHASE");
        tl.end(tensor);
        tl.end(tensor);
        tl.instant("shared", "tick");
      }
    });
  }
  for (auto& th : threads) th.join();
  tl.stop();
  EXPECT_EQ(tl.dropped_events(), 0u);

  json events = read_json(path);
  std::map<int, std::string> names = track_names(events);
  ASSERT_EQ(names.size(), kThreads + 2u);  // markers, shared, 4 tensors
  std::map<int, std::vector<std::string>> stacks;
  std::map<int, int> next_i;
  std::map<int, double> last_ts;
  std::map<std::string, int> completed_ops;
  int ticks = 0;
  for (const auto& e : events) {
    std::string ph = e.at("ph");
    if (ph == "M") continue;
    int tid = e.at("tid");
    double ts = e.at("ts");
    if (last_ts.count(tid)) {
      EXPECT_GE(ts, last_ts[tid]);
    }
    last_ts[tid] = ts;
    if (ph == "i") {
      EXPECT_EQ(names[tid], "shared");
      ++ticks;
    } else if (ph == "B") {
      if (e.at("name") == "OP") {
        EXPECT_EQ(e.at("args").at("i"), next_i[tid]++);
      }
      stacks[tid].push_back(e.at("name"));
    } else {
      ASSERT_FALSE(stacks[tid].empty());
      EXPECT_EQ(e.at("name"), stacks[tid].back());
      stacks[tid].pop_back();
      if (e.at("name") == "OP") ++completed_ops[names[tid]];
    }
  }
  EXPECT_EQ(ticks, kThreads * kPairs);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(completed_ops["tensor" + std::to_string(t)], kPairs);
  for (const auto& [tid, stack] : stacks) EXPECT_TRUE(stack.empty()) << tid;
}

// Every recorded event is either in the file or counted as dropped, spans in the file nest, and
// stop() may race with recording threads: what they record after it is ignored.
TEST(Timeline, TinyQueueUnderConcurrencyAccountsForEveryEvent) {
  std::string path = temp_path("tiny.json");
  TimelineOptions opts;
  opts.max_queued_events = 8;
  Timeline tl(opts);
  ASSERT_TRUE(tl.start(path, 0).ok());
  constexpr int kThreads = 3;
  std::atomic<uint64_t> recorded{0};
  std::atomic<bool> go_on{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string tensor = "t";
      tensor += std::to_string(t);  // (not "t" + ...: GCC 12 warns falsely)
      uint64_t n = 0;
      // At least 200 rounds each, then until stop() has been called.
      for (int i = 0; i < 200 || go_on.load(); ++i) {
        if (!tl.active()) break;
        tl.begin(tensor, "OP");
        tl.instant(tensor, "tick");
        tl.begin(tensor, "PHASE");
        tl.end(tensor);
        tl.end(tensor);
        n += 5;
      }
      recorded += n;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  tl.stop();  // threads may still be inside begin/end
  go_on = false;
  for (auto& th : threads) th.join();

  json events = read_json(path);
  std::map<int, std::vector<std::string>> stacks;
  uint64_t written = 0;
  for (const auto& e : events) {
    std::string ph = e.at("ph");
    if (ph == "M") continue;
    ++written;
    int tid = e.at("tid");
    if (ph == "B") stacks[tid].push_back(e.at("name"));
    if (ph == "E") {
      ASSERT_FALSE(stacks[tid].empty());
      EXPECT_EQ(e.at("name"), stacks[tid].back());
      stacks[tid].pop_back();
    }
  }
  for (const auto& [tid, stack] : stacks) EXPECT_TRUE(stack.empty()) << tid;
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  uint64_t dropped = stats->at("args").at(tf::kDroppedEventsArg);
  EXPECT_EQ(dropped, tl.dropped_events());
  // Calls that raced with stop() and found it stopped record nothing; stop() closes spans left
  // open, adding ends nobody recorded. So the file plus drops is within those bounds.
  EXPECT_LE(written + dropped, recorded.load() + 2 * kThreads);
  EXPECT_GE(written + dropped + 5 * kThreads, recorded.load());
}

TEST(Timeline, JsonStringsMatchNlohmannEscaping) {
  for (std::string s : {std::string("plain/name.weight"), std::string("quote\""),
                        std::string("back\\slash"), std::string("ctrl\x01\x1f"),
                        std::string("del\x7f"), std::string("utf8 \xc3\xa9"), std::string()}) {
    std::string out;
    timeline_detail::append_json_string(out, s);
    EXPECT_EQ(out, json(s).dump()) << s;
    EXPECT_EQ(json::parse(out).get<std::string>(), s);
  }
}

TEST(Timeline, OpenSpansAreClosedAtStopAndStrayEndsCounted) {
  std::string path = temp_path("unfinished.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  tl.end("t");  // nothing open
  tl.begin("t", "OP");
  tl.begin("t", "PHASE");
  tl.stop();
  json events = read_json(path);
  auto ends = of_phase(events, "E");
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0].at("name"), "PHASE");  // innermost first
  EXPECT_EQ(ends[1].at("name"), "OP");
  EXPECT_EQ(ends[0].at("args").at(tf::kUnfinishedArg), 1);
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->at("args").at(tf::kUnmatchedEndsArg), 1);
}

TEST(Timeline, FileIsAReadablePrefixWhileRecording) {
  std::string path = temp_path("prefix.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 5).ok());
  tl.begin("t", "OP");
  // The header is written by start() itself: a crash now leaves an unterminated array that
  // completes to valid JSON with a closing bracket, which is what viewers and kolo-trace do.
  std::string text = read_text(path);
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.back(), ']');
  json events = json::parse(text + "\n]");
  EXPECT_NE(find_meta(events, tf::kClockSyncEvent), nullptr);
  tl.stop();
}

TEST(Timeline, MarkCycleOnlyWhenAskedFor) {
  std::string path = temp_path("cycles.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  tl.mark_cycle();
  tl.stop();
  EXPECT_TRUE(of_phase(read_json(path), "i").empty());

  ASSERT_TRUE(tl.start(path, 0, /*mark_cycles=*/true).ok());  // restart after stop
  tl.mark_cycle();
  tl.mark_cycle();
  tl.stop();
  auto marks = of_phase(read_json(path), "i");
  ASSERT_EQ(marks.size(), 2u);
  EXPECT_EQ(marks[0].at("name"), "CYCLE_START");
  EXPECT_EQ(marks[0].at("tid"), tf::kMarkersTid);
}

TEST(Timeline, RecordingWhileStoppedIsANoOp) {
  Timeline tl;
  tl.begin("t", "OP");
  tl.end("t");
  tl.instant("t", "x");
  tl.mark_cycle();
  EXPECT_EQ(tl.dropped_events(), 0u);
  tl.stop();
}

TEST(Timeline, StartRejectsBadArgumentsNamingThem) {
  Timeline tl;
  Status s = tl.start("", 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("path"), std::string::npos) << s.message();

  s = tl.start(temp_path("neg.json"), -2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank must be >= 0, got -2"), std::string::npos) << s.message();

  s = tl.start("/nonexistent-dir/x/trace.json", 0);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("'/nonexistent-dir/x/trace.json'"), std::string::npos) << s.message();

  TimelineOptions zero;
  zero.max_queued_events = 0;
  Timeline tl0(zero);
  s = tl0.start(temp_path("zero.json"), 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_queued_events must be >= 1, got 0"), std::string::npos);

  TimelineOptions no_interval;
  no_interval.flush_interval = std::chrono::milliseconds(0);
  Timeline tl1(no_interval);
  s = tl1.start(temp_path("interval.json"), 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("flush_interval must be > 0"), std::string::npos);

  std::string path = temp_path("twice.json");
  ASSERT_TRUE(tl.start(path, 0).ok());
  s = tl.start(temp_path("other.json"), 0);
  EXPECT_EQ(s.code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  tl.stop();
}

TEST(Timeline, WriteErrorsAreReportedNotFatal) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "/dev/full is not available";
  Timeline tl;
  ASSERT_TRUE(tl.start("/dev/full", 0).ok());
  tl.instant("t", "x");
  tl.stop();
  Status s = tl.status();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("'/dev/full'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kolo
