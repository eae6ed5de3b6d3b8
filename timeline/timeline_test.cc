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

// Events of one kind ("X", "i", "M") in file order.
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

// A complete event's end, in microseconds.
double span_end(const json& e) { return e.at("ts").get<double>() + e.at("dur").get<double>(); }

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
  tl.end(tl.begin_op("grad/w1", "ALLREDUCE", {{"bytes", "4096"}}));
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
  auto spans = of_phase(events, "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("name"), "ALLREDUCE");
  EXPECT_EQ(spans[0].at("args").at("bytes"), 4096);
  EXPECT_GE(spans[0].at("dur").get<double>(), 0.0);
  // Every event has "ts", metadata included (speedscope rejects a file otherwise).
  for (const auto& e : events) EXPECT_TRUE(e.at("ts").is_number()) << e;
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

// Viewers need complete events whose intervals nest per row, with every arg on them.
TEST(Timeline, SpansAreCompleteEventsNestedPerOperationWithBeginAndEndArgs) {
  std::string path = temp_path("nest.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 1).ok());
  const uint64_t t = tl.begin_op("t", "ALLREDUCE", {{"dtype", "float32"}, {"status", "pending"}});
  tl.begin(t, "NEGOTIATE");
  const uint64_t u = tl.begin_op("u", "BROADCAST");  // another operation between t's calls
  tl.begin(u, "QUEUE");
  tl.end(t);
  tl.begin(t, "TCP_ALLREDUCE");
  tl.end(t, {{"algorithm", "ring"}});
  tl.end(t, {{"bytes", "64"}, {"status", "OK"}});  // an end's arg replaces its begin's
  tl.end(u);
  tl.end(u);
  tl.end(t);  // t has ended: a stray end, counted
  tl.stop();

  json events = read_json(path);
  EXPECT_TRUE(of_phase(events, "B").empty());
  EXPECT_TRUE(of_phase(events, "E").empty());
  std::map<std::string, json> spans;  // t's spans by name
  for (const auto& e : of_phase(events, "X"))
    if (e.at("tid") == 1) spans[e.at("name")] = e;
  ASSERT_EQ(spans.size(), 3u);
  auto begin = [](const json& e) { return e.at("ts").get<double>(); };
  auto end = span_end;
  const json& op = spans["ALLREDUCE"];
  EXPECT_LE(begin(op), begin(spans["NEGOTIATE"]));
  EXPECT_LE(end(spans["NEGOTIATE"]), begin(spans["TCP_ALLREDUCE"]));
  EXPECT_LE(end(spans["TCP_ALLREDUCE"]), end(op) + 0.0005);  // rounding to ns decimals
  EXPECT_EQ(op.at("args"), json({{"dtype", "float32"}, {"status", "OK"}, {"bytes", 64}}));
  EXPECT_EQ(spans["TCP_ALLREDUCE"].at("args").at("algorithm"), "ring");
  EXPECT_FALSE(spans["NEGOTIATE"].contains("args"));
  std::map<int, std::string> rows = {{0, "markers"}, {1, "t"}, {2, "u"}};
  EXPECT_EQ(track_names(events), rows);
  EXPECT_EQ(find_meta(events, tf::kStatsEvent)->at("args").at(tf::kUnmatchedEndsArg), 1);
}

// begin_op with a first phase and next() record what begin_op + begin and end + begin do, from
// one clock read each; next() on the operation's own span ends the operation.
TEST(Timeline, FirstPhaseAndNextOpenAndCloseSpansAtOneInstant) {
  std::string path = temp_path("next.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  const uint64_t t = tl.begin_op("t", "ALLREDUCE", {{"bytes", "64"}}, tf::kQueuePhase);
  tl.next(t, tf::kNegotiatePhase, {{"queued", "1"}}, {{"ranks", "2"}});
  tl.end(t);                                // NEGOTIATE
  tl.next(t, "NEVER", {{"status", "OK"}});  // ends ALLREDUCE itself: no phase opens
  tl.next(t, "NEVER");                      // t has ended: a stray end, counted
  tl.stop();

  json events = read_json(path);
  std::map<std::string, json> spans;
  for (const auto& e : of_phase(events, "X")) spans[e.at("name")] = e;
  ASSERT_EQ(spans.size(), 3u) << events.dump();
  const json& op = spans["ALLREDUCE"];
  const json& queue = spans[std::string(tf::kQueuePhase)];
  const json& negotiate = spans[std::string(tf::kNegotiatePhase)];
  // One clock read for both edges, the later one 1 ns on (Note [Shared clock reads]): a
  // reader's ts + dur never puts NEGOTIATE inside QUEUE.
  EXPECT_NEAR(queue.at("ts").get<double>() - op.at("ts").get<double>(), 0.001, 1e-6);
  EXPECT_NEAR(negotiate.at("ts").get<double>() - span_end(queue), 0.001, 1e-6);
  EXPECT_GT(negotiate.at("ts").get<double>(), span_end(queue));
  EXPECT_EQ(queue.at("args"), json({{"queued", 1}}));
  EXPECT_EQ(negotiate.at("args"), json({{"ranks", 2}}));
  EXPECT_EQ(op.at("args"), json({{"bytes", 64}, {"status", "OK"}}));
  EXPECT_EQ(find_meta(events, tf::kStatsEvent)->at("args").at(tf::kUnmatchedEndsArg), 1);
}

TEST(Timeline, EndAllClosesEveryOpenSpanOfTheOperationWithTheStatus) {
  std::string path = temp_path("end_all.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  const uint64_t t = tl.begin_op("t", "ALLREDUCE", {{"bytes", "8"}});
  tl.begin(t, "NEGOTIATE");
  const uint64_t u = tl.begin_op("t", "ALLREDUCE");  // the same tensor again: a sibling row
  tl.begin(u, "QUEUE");
  tl.end_all(t, timeline_status_args(Status::PeerFailure("rank 1 died")), {{"backend", "tcp"}});
  tl.end(t);  // nothing left open of t
  tl.stop("bye");
  json events = read_json(path);
  auto spans = of_phase(events, "X");
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].at("name"), "NEGOTIATE");  // innermost first
  EXPECT_EQ(spans[1].at("name"), "ALLREDUCE");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(spans[i].at("args").at("status"), "PeerFailure");
    EXPECT_EQ(spans[i].at("args").at("error"), "rank 1 died");
    EXPECT_EQ(spans[i].at("tid"), 1);
  }
  EXPECT_EQ(spans[1].at("args").at("bytes"), 8);
  EXPECT_EQ(spans[1].at("args").at("backend"), "tcp");  // the outermost's own args
  EXPECT_FALSE(spans[0].at("args").contains("backend"));
  // The parent ends strictly after its child (1 ns), so begin/end viewers nest them.
  EXPECT_NEAR(span_end(spans[1]) - span_end(spans[0]), 0.001, 1e-6);
  EXPECT_EQ(spans[2].at("name"), "QUEUE");  // closed by stop(), on the sibling row
  EXPECT_EQ(spans[2].at("args"), json({{"status", "aborted"}, {"reason", "bye"}}));
  EXPECT_EQ(spans[3].at("name"), "ALLREDUCE");
  EXPECT_EQ(spans[2].at("tid"), 2);
  EXPECT_EQ(spans[3].at("tid"), 2);
  EXPECT_EQ(find_meta(events, tf::kStatsEvent)->at("args").at(tf::kUnmatchedEndsArg), 1);
}

// Note [Timeline rows]: an operation that begins while its tensor's row is held (a GPU
// operation still running, ended later from another thread) goes on the first free sibling
// row, which names its tensor; a row frees when its operation ends.
TEST(Timeline, AnOperationBeginningWhileItsRowIsHeldGoesOnASiblingRow) {
  std::string path = temp_path("rows.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  const uint64_t first = tl.begin_op("w", "ALLREDUCE", {{"bytes", "64"}});
  tl.begin(first, "NCCL_ALLREDUCE");
  const uint64_t second = tl.begin_op("w", "ALLREDUCE");  // w is held: "w (2)"
  tl.begin(second, "QUEUE");
  const uint64_t third = tl.begin_op("w", "ALLREDUCE");  // both held: "w (3)"
  std::thread([&] { tl.end_all(first, {}, {{"status", "OK"}}); }).join();
  const uint64_t fourth = tl.begin_op("w", "ALLREDUCE");  // w is free again
  tl.end_all(fourth, {});
  tl.instant("w (4)", "x");  // a tensor named like a sibling row: not one
  const uint64_t fifth = tl.begin_op("w", "ALLREDUCE");
  const uint64_t sixth = tl.begin_op("w", "ALLREDUCE");  // w and w (2) held: w (3) held, so w (5)
  tl.end_all(sixth, {});
  tl.end_all(fifth, {});
  tl.end_all(third, {});
  tl.end(second);
  tl.end(second, {{"status", "OK"}});
  tl.stop();
  const json events = read_json(path);
  std::map<int, std::string> rows = {{0, "markers"}, {1, "w"},     {2, "w (2)"},
                                     {3, "w (3)"},   {4, "w (4)"}, {5, "w (5)"}};
  EXPECT_EQ(track_names(events), rows);
  for (const json& e : events) {
    if (e.at("ph") != "M" || e.at("name") != "thread_name") continue;
    if (e.at("tid") == 2 || e.at("tid") == 3 || e.at("tid") == 5) {
      EXPECT_EQ(e.at("args").at(tf::kTensorArg), "w") << e;
    } else {
      EXPECT_FALSE(e.at("args").contains(tf::kTensorArg)) << e;
    }
  }
  std::vector<std::pair<int, std::string>> seen;  // in the order they ended
  for (const json& e : of_phase(events, "X")) seen.emplace_back(e.at("tid"), e.at("name"));
  std::vector<std::pair<int, std::string>> want = {
      {1, "NCCL_ALLREDUCE"}, {1, "ALLREDUCE"}, {1, "ALLREDUCE"}, {5, "ALLREDUCE"},
      {1, "ALLREDUCE"},      {3, "ALLREDUCE"}, {2, "QUEUE"},     {2, "ALLREDUCE"}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(find_meta(events, tf::kStatsEvent)->at("args").at(tf::kUnmatchedEndsArg), 0);
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
TEST(Timeline, DropsAndCountsPastTheLimit) {
  std::string path = temp_path("drop.json");
  TimelineOptions opts;
  opts.max_queued_events = 4;
  opts.flush_interval = std::chrono::minutes(10);
  opts.wake_writer_at = 1000;
  Timeline tl(opts);
  ASSERT_TRUE(tl.start(path, 0).ok());
  tl.end(tl.begin_op("kept", "OP"));  // queue: thread_name(kept), X = 2
  for (int i = 0; i < 10; ++i)        // 2 fit, 8 drop
    tl.instant("", "tick", {{"i", std::to_string(i)}});
  const uint64_t lost = tl.begin_op("lost", "OP");  // tid 2; nothing of it is kept, not its name
  tl.begin(lost, "INNER");
  tl.end(lost);
  tl.end(lost);
  EXPECT_EQ(tl.dropped_events(), 8u + 2u);
  tl.stop();

  json events = read_json(path);
  EXPECT_EQ(of_phase(events, "i").size(), 2u);
  auto spans = of_phase(events, "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("tid"), 1);
  EXPECT_EQ(spans[0].at("name"), "OP");
  std::map<int, std::string> expected_names = {{0, "markers"}, {1, "kept"}};
  EXPECT_EQ(track_names(events), expected_names);
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->at("args").at(tf::kDroppedEventsArg), 10);
  EXPECT_EQ(tl.dropped_events(), 10u);  // still readable after stop
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
        const uint64_t op = tl.begin_op(tensor, "OP", {{"i", std::to_string(i)}});
        tl.begin(op, "PHASE");
        tl.end(op);
        tl.end(op);
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
  std::map<int, int> phases;
  std::map<int, int> next_i;
  std::map<int, double> last_ts;
  std::map<std::string, int> completed_ops;
  int ticks = 0;
  for (const auto& e : events) {
    std::string ph = e.at("ph");
    if (ph == "M") continue;
    int tid = e.at("tid");
    double ts = e.at("ts");
    if (ph == "i") {  // instants are queued in time order; spans in order of their ends
      if (last_ts.count(tid)) {
        EXPECT_GE(ts, last_ts[tid]);
      }
      last_ts[tid] = ts;
    }
    if (ph == "i") {
      EXPECT_EQ(names[tid], "shared");
      ++ticks;
    } else if (e.at("name") == "OP") {  // written at its end: after its PHASE
      ASSERT_EQ(ph, "X");
      EXPECT_EQ(e.at("args").at("i"), next_i[tid]++);
      EXPECT_EQ(phases[tid], next_i[tid]);
      ++completed_ops[names[tid]];
    } else {
      ASSERT_EQ(e.at("name"), "PHASE");
      ++phases[tid];
    }
  }
  EXPECT_EQ(ticks, kThreads * kPairs);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(completed_ops["tensor" + std::to_string(t)], kPairs);
}

// Every recorded event is either in the file or counted as dropped, and stop() may race with
// recording threads: what they record after it is ignored.
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
        const uint64_t op = tl.begin_op(tensor, "OP");
        tl.instant(tensor, "tick");
        tl.begin(op, "PHASE");
        tl.end(op);
        tl.end(op);
        n += 3;
      }
      recorded += n;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  tl.stop();  // threads may still be inside begin/end
  go_on = false;
  for (auto& th : threads) th.join();

  json events = read_json(path);
  uint64_t written = 0;
  for (const auto& e : events) {
    if (e.at("ph") == "M") continue;
    ++written;
  }
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  uint64_t dropped = stats->at("args").at(tf::kDroppedEventsArg);
  EXPECT_EQ(dropped, tl.dropped_events());
  // Each round records 3 events (2 spans and an instant). Calls that raced with stop() and found
  // it stopped record nothing; stop() closes spans left open, at most 2 per thread.
  EXPECT_LE(written + dropped, recorded.load());
  EXPECT_GE(written + dropped + 3 * kThreads, recorded.load());
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

TEST(Timeline, OpenSpansAreAbortedAtStopAndStrayEndsCounted) {
  std::string path = temp_path("unfinished.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  const uint64_t ended = tl.begin_op("t", "OP");
  tl.end(ended);
  tl.end(ended);  // nothing open
  const uint64_t op = tl.begin_op("t", "OP", {{"bytes", "4"}});
  tl.begin(op, "PHASE");
  tl.stop();
  json events = read_json(path);
  auto spans = of_phase(events, "X");
  ASSERT_EQ(spans.size(), 3u);
  spans.erase(spans.begin());               // the ended one
  EXPECT_EQ(spans[0].at("name"), "PHASE");  // innermost first
  EXPECT_EQ(spans[1].at("name"), "OP");
  EXPECT_NEAR(span_end(spans[1]) - span_end(spans[0]), 0.001, 1e-6);  // strictly nested
  EXPECT_EQ(spans[1].at("args"), json({{"bytes", 4},
                                       {tf::kStatusArg, tf::kStatusAborted},
                                       {tf::kReasonArg, "the timeline was stopped"}}));
  const json* stats = find_meta(events, tf::kStatsEvent);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->at("args").at(tf::kUnmatchedEndsArg), 1);
}

// What a SIGKILL leaves: the file as of the last flush, valid JSON, spans open then written
// with "status": "open"; a later flush replaces them (no stale copy stays behind).
TEST(Timeline, FileIsValidJsonAfterEveryFlushWithOpenSpans) {
  std::string path = temp_path("prefix.json");
  TimelineOptions opts;
  opts.flush_interval = std::chrono::milliseconds(5);
  Timeline tl(opts);
  ASSERT_TRUE(tl.start(path, 5).ok());
  // The header is written by start() itself.
  json events = json::parse(read_text(path));
  EXPECT_NE(find_meta(events, tf::kClockSyncEvent), nullptr);

  const uint64_t op = tl.begin_op("a_long_tensor_name", "OP", {{"bytes", "1024"}});
  tl.begin(op, "NEGOTIATE");
  auto open_spans = [&] {
    std::vector<json> open;
    for (const auto& e : of_phase(json::parse(read_text(path)), "X"))
      if (e.value("args", json::object()).value(std::string(tf::kStatusArg), "") == tf::kStatusOpen)
        open.push_back(e);
    return open;
  };
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 2000 && open_spans().size() != n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return open_spans();
  };
  auto open = wait_for(2);
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(open[0].at("name"), "OP");
  EXPECT_EQ(open[0].at("args").at("bytes"), 1024);
  EXPECT_NEAR(span_end(open[0]) - span_end(open[1]), 0.001, 1e-6);  // strictly nested
  EXPECT_EQ(track_names(json::parse(read_text(path)))[1], "a_long_tensor_name");
  tl.end(op);  // the tail shrinks: NEGOTIATE is written for good
  open = wait_for(1);
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].at("name"), "OP");
  tl.end(op);
  EXPECT_TRUE(wait_for(0).empty());
  tl.stop();
  std::string text = read_text(path);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");  // truncated: no blanks left at the end
  EXPECT_EQ(of_phase(json::parse(text), "X").size(), 2u);
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
  EXPECT_EQ(marks[0].at("s"), "g");  // drawn across every row
}

TEST(Timeline, RecordingWhileStoppedIsANoOp) {
  Timeline tl;
  EXPECT_EQ(tl.begin_op("t", "OP"), 0u);
  tl.end(0);
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

// An operation still open when the recording stops is aborted; its token is then stale, also
// for the next recording, whose operations it never touches.
TEST(Timeline, OperationsStillOpenAtStopAreAbortedAndTheirTokensGoStale) {
  std::string path = temp_path("open_stop.json");
  Timeline tl;
  ASSERT_TRUE(tl.start(path, 0).ok());
  const uint64_t old = tl.begin_op("w", "ALLGATHER");
  tl.stop("the job ended");
  tl.end_all(old, {});  // after stop: nothing
  std::vector<json> spans = of_phase(read_json(path), "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("name"), "ALLGATHER");
  EXPECT_EQ(spans[0].at("args").at(tf::kStatusArg), std::string(tf::kStatusAborted));
  EXPECT_EQ(spans[0].at("args").at(tf::kReasonArg), "the job ended");

  ASSERT_TRUE(tl.start(path, 0).ok());
  const uint64_t fresh = tl.begin_op("w", "ALLGATHER");  // reuses the slot of `old`
  tl.end(old);                                           // of the last recording: ignored
  tl.end(fresh, {{"status", "OK"}});
  tl.stop();
  const json events = read_json(path);
  spans = of_phase(events, "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("args"), (json{{"status", "OK"}}));
  EXPECT_EQ(spans[0].at("tid"), 1);  // w's own row: the old operation holds nothing
  EXPECT_EQ(find_meta(events, tf::kStatsEvent)->at("args").at(tf::kUnmatchedEndsArg), 0);
}

}  // namespace
}  // namespace kolo
