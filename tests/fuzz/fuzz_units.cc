// The size and duration parsers (include/kolo/units.h) and every knob's value parser
// (common/knobs.h): text from the environment and the command line. A value that parses must
// print back to text that parses to the same value.
#include "common/knobs.h"
#include "fuzz_input.h"
#include "kolo/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo;
  const std::string_view text = fuzz::as_text(data, size);
  if (auto bytes = parse_size(text); bytes.ok()) {
    auto again = parse_size(format_size(*bytes));
    FUZZ_CHECK(again.ok());
  }
  if (auto d = parse_duration(text); d.ok()) {
    auto again = parse_duration(format_duration(*d));
    FUZZ_CHECK(again.ok());
  }
  for (const Knob& k : all_knobs()) (void)parse_knob(k, text);
  return 0;
}
