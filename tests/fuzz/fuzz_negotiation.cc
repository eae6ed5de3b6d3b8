// The coordinator's negotiation messages (coordinator/message.h), which every rank parses from
// its peers' bytes. A message that parses must serialise to bytes that parse to a message with
// the same bytes.
#include "coordinator/message.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo::coord;
  const std::string bytes(kolo::fuzz::as_text(data, size));
  if (auto requests = parse_request_list(bytes); requests.ok()) {
    auto again = parse_request_list(serialize(*requests));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(serialize(*again) == serialize(*requests));  // bytes: a NaN scale != itself
  }
  if (auto responses = parse_response_list(bytes); responses.ok()) {
    auto again = parse_response_list(serialize(*responses));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(serialize(*again) == serialize(*responses));
  }
  return 0;
}
