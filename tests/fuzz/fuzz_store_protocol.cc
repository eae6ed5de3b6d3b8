// The rendezvous store's wire format (rendezvous/tcp_store_protocol.h): the handshake's hello
// and the MAC'd frames as the server reads them from anyone, request bodies as the server reads
// them, response bodies as a client reads them. A body that decodes must encode to a frame whose
// body decodes again; any body sealed by one side must open, unchanged, on the other.
#include <span>

#include "common/mac.h"
#include "fuzz_input.h"
#include "rendezvous/tcp_store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo::tcp_store;
  if (size >= 4) (void)decode_length(data);
  const std::string body(kolo::fuzz::as_text(data, size));
  (void)decode_hello(std::span<const uint8_t>(data, size));

  static const kolo::AuthKey key = kolo::derive_auth_key("fuzz");
  const kolo::Nonce client_nonce{}, server_nonce{1};
  FrameMac server(key, client_nonce, server_nonce, true),
      client(key, client_nonce, server_nonce, false);
  std::string forged = body;
  (void)server.open(forged);  // random bytes: refused, without reading past them
  FrameMac server2(key, client_nonce, server_nonce, true);
  const std::string sealed = client.seal(std::string(4, '\0') + body);
  std::string opened = sealed.substr(4);
  FUZZ_CHECK(decode_length(reinterpret_cast<const unsigned char*>(sealed.data())) == opened.size());
  FUZZ_CHECK(server2.open(opened) && opened == body);
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
