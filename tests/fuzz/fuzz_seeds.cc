// Writes the fuzz targets' seed corpora: valid inputs made by Kolo's own encoders, so that the
// fuzzers start inside each format. Usage: fuzz_seeds DIR (writes DIR/<target>/<seed>).
// The corpora in tests/fuzz/corpus were made with it; rerun it when a format changes.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "backends/tcp/wire.h"
#include "common/auth.h"
#include "common/knobs.h"
#include "coordinator/message.h"
#include "framework/data/idx_reader.h"
#include "framework/optim/serialize.h"
#include "rendezvous/tcp_store_protocol.h"

namespace fs = std::filesystem;
using namespace kolo;

namespace {

fs::path g_root;

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_root / target);
  std::ofstream(g_root / target / name, std::ios::binary) << bytes;
}

template <typename Bytes>
std::string to_string(const Bytes& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void units() {
  int n = 0;
  for (const char* text :
       {"4MiB", "64 KiB", "1GB", "0", "1.5s", "250ms", "10us", "tcp", "true", "100:120", "3"})
    write_seed("fuzz_units", "text" + std::to_string(n++), text);
}

// The message structs have members without default initializers, so they are filled in by
// assignment (designated initializers would warn about the members left out).
void negotiation() {
  coord::Request sum;
  sum.name = "grad.fc1";
  sum.shapes = {{4, 8}};
  coord::Request gather = sum;
  gather.name = "ids";
  gather.type = coord::OpType::kAllgather;
  gather.dtype = DataType::kInt64;
  gather.shapes = {{3}};
  coord::Request split = sum;
  split.name = "a2a";
  split.type = coord::OpType::kAlltoall;
  split.shapes = {{4}};
  split.splits = {1, 3};
  coord::Request counts =
      sum;  // the last dtype, so the parser's range check has a seed at its edge
  counts.name = "counts";
  counts.type = coord::OpType::kBroadcast;
  counts.dtype = DataType::kInt16;
  coord::RequestList requests;
  requests.requests = {sum, gather, split, counts};
  write_seed("fuzz_negotiation", "requests", coord::serialize(requests));
  coord::RequestList join;
  join.join = true;
  write_seed("fuzz_negotiation", "join", coord::serialize(join));

  coord::Response run;
  run.name = "grad.fc1";
  run.shapes = {{4, 8}};
  run.joined = {1};
  coord::Response error;
  error.kind = coord::Response::Kind::kError;
  error.name = "x";
  error.error_code = StatusCode::kMismatch;
  error.error = "shapes differ";
  coord::ResponseList list;
  list.responses = {run, error};
  list.evictions = {"old"};
  // An autotuner's decision with a categorical choice (the hierarchical allreduce on).
  list.tune.apply_step = 7;
  list.tune.fusion_threshold = 1 << 20;
  list.tune.cycle_time_ns = 500000;
  list.tune.bucket_bytes = 1 << 22;
  list.tune.choices = {{static_cast<int32_t>(KnobId::kHierarchicalAllreduce), 1}};
  write_seed("fuzz_negotiation", "responses", coord::serialize(list));
}

void store_protocol() {
  using namespace tcp_store;
  auto request = [](Op op, std::vector<std::string> keys) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    return r;
  };
  std::vector<Request> requests = {request(Op::kSet, {"kolo/k"}), request(Op::kGet, {"kolo/k"}),
                                   request(Op::kWait, {"a", "b"}), request(Op::kAdd, {"counter"}),
                                   request(Op::kCheck, {"kolo/k"})};
  requests[0].value = "value";
  requests[1].timeout_ms = 1000;
  requests[2].timeout_ms = 5;
  requests[3].delta = -3;
  write_seed("fuzz_store_protocol", "hello", to_string(encode_hello(random_nonce())));
  int n = 0;
  for (const Request& r : requests)
    write_seed("fuzz_store_protocol", "request" + std::to_string(n++), encode_request(r).substr(4));
  Response value;
  value.value = "v";
  write_seed("fuzz_store_protocol", "get-reply", encode_response(Op::kGet, value).substr(4));
  Response timeout;
  timeout.reply = Reply::kTimeout;
  timeout.missing = {"a"};
  write_seed("fuzz_store_protocol", "wait-timeout", encode_response(Op::kWait, timeout).substr(4));
  Response error;
  error.reply = Reply::kError;
  error.error_code = 3;
  error.error_message = "bad key";
  write_seed("fuzz_store_protocol", "error", encode_response(Op::kSet, error).substr(4));
}

void tcp_wire() {
  write_seed("fuzz_tcp_wire", "frame-header", to_string(tcp::encode_frame_header(4096)));
  Hello hello{.rank = 1, .size = 4, .nonce = random_nonce()};
  write_seed("fuzz_tcp_wire", "hello", to_string(encode(hello)));
  Challenge challenge{.rank = 0, .size = 4, .nonce = random_nonce()};
  write_seed("fuzz_tcp_wire", "challenge", to_string(encode(challenge)));
  write_seed("fuzz_tcp_wire", "proof", to_string(encode(Proof{.accept = true})));
  write_seed("fuzz_tcp_wire", "verdict", to_string(encode(Verdict{.accept = true})));
}

void data_files() {
  const fs::path scratch = g_root / "scratch";
  fs::create_directories(scratch);
  fw::IdxArray labels{fw::IdxType::kUInt8, {4}, {1, 2, 3, 9}};
  fw::IdxArray images{fw::IdxType::kFloat32, {2, 2}, std::vector<uint8_t>(16, 0x3f)};
  for (auto [name, array, gzip] :
       {std::tuple{"idx-labels", labels, false}, std::tuple{"idx-images-gz", images, true}}) {
    fw::write_idx(scratch / name, array, gzip);
    write_seed("fuzz_data_files", name, std::string(1, '\0') + read_file(scratch / name));
  }
  std::string cifar(1 + 3 * 32 * 32, '\x40');
  cifar[0] = 7;  // the label
  write_seed("fuzz_data_files", "cifar", std::string(1, '\1') + cifar);
  fw::save_tensors(scratch / "ckpt",
                   {{"w", fw::Tensor::ones({2, 3})}, {"b", fw::Tensor::zeros({3})}});
  write_seed("fuzz_data_files", "checkpoint", std::string(1, '\2') + read_file(scratch / "ckpt"));
  fs::remove_all(scratch);
}

void trace_reader() {
  // A rank's file as Kolo writes it (metadata, a tensor row, an operation with its phases, a
  // step marker), the same cut short by a crash, and the same gzip-compressed.
  const std::string events =
      R"([{"name":"process_name","ph":"M","pid":0,"tid":0,"ts":0,"args":{"name":"rank 0"}},)"
      R"({"name":"kolo_clock_sync","ph":"M","pid":0,"tid":0,"ts":0,"args":{"wall_clock_us":1700000000000000}},)"
      R"({"name":"thread_name","ph":"M","pid":0,"tid":1,"ts":0,"args":{"name":"grad.fc1"}},)"
      R"({"name":"QUEUE","ph":"X","pid":0,"tid":1,"ts":10,"dur":3},)"
      R"({"name":"NEGOTIATE","ph":"X","pid":0,"tid":1,"ts":13,"dur":20},)"
      R"({"name":"ALLREDUCE","ph":"X","pid":0,"tid":1,"ts":10,"dur":60,"args":{"bytes":4096,"dtype":"float32","shape":"[1024]","status":"OK"}},)"
      R"({"name":"STEP","ph":"i","s":"g","pid":0,"tid":0,"ts":80,"args":{"step":1}}])";
  write_seed("fuzz_trace_reader", "trace", std::string(1, '\0') + events);
  write_seed("fuzz_trace_reader", "trace-cut", std::string(1, '\0') + events.substr(0, 400));
  const fs::path gz = g_root / "trace.json.gz";
  gzFile out = gzopen(gz.c_str(), "wb");
  gzwrite(out, events.data(), static_cast<unsigned>(events.size()));
  gzclose(out);
  write_seed("fuzz_trace_reader", "trace-gz", std::string(1, '\1') + read_file(gz));
  fs::remove(gz);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  g_root = argv[1];
  units();
  negotiation();
  store_protocol();
  tcp_wire();
  data_files();
  trace_reader();
  return 0;
}
