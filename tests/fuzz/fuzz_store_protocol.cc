// The rendezvous store's wire format (rendezvous/tcp_store_protocol.h): request bodies as the
// server reads them from any client, response bodies as a client reads them. A body that
// decodes must encode to a frame whose body decodes again.
#include "fuzz_input.h"
#include "rendezvous/tcp_store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo::tcp_store;
  if (size >= 4) (void)decode_length(data);
  const std::string body(kolo::fuzz::as_text(data, size));
  if (auto request = decode_request(body)) {
    const std::string frame = encode_request(*request);
    FUZZ_CHECK(frame.size() >= 4 && decode_length(reinterpret_cast<const unsigned char*>(
                                        frame.data())) == frame.size() - 4);
    FUZZ_CHECK(decode_request(frame.substr(4)).has_value());
  }
  for (Op op : {Op::kSet, Op::kGet, Op::kWait, Op::kAdd, Op::kCheck}) {
    if (auto response = decode_response(op, body)) {
      const std::string frame = encode_response(op, *response);
      FUZZ_CHECK(frame.size() >= 4 && decode_response(op, frame.substr(4)).has_value());
    }
  }
  return 0;
}
