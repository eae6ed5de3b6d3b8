// The size and duration parsers (include/kolo/units.h) and every knob's value parser
// (common/knobs.h): text from the environment and the command line. format_size and
// format_duration are for people (one decimal), so what they print need not parse back exactly;
// when it parses, it must be the value it stands for to within that rounding.
#include <cmath>

#include "common/knobs.h"
#include "fuzz_input.h"
#include "kolo/units.h"

namespace {

// Within what the formats round away: one decimal of the unit printed (at most 5% once the
// value is at least 1 of that unit), or half a microsecond (durations below 1 ms print whole
// microseconds).
bool close_to(double printed, double original, double slack) {
  return std::fabs(printed - original) <= 0.05 * std::fabs(original) + slack;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo;
  const std::string_view text = fuzz::as_text(data, size);
  if (auto bytes = parse_size(text); bytes.ok()) {
    if (auto again = parse_size(format_size(*bytes)); again.ok())
      FUZZ_CHECK(close_to(static_cast<double>(*again), static_cast<double>(*bytes), 1));
  }
  if (auto d = parse_duration(text); d.ok()) {
    if (auto again = parse_duration(format_duration(*d)); again.ok())
      FUZZ_CHECK(
          close_to(static_cast<double>(again->count()), static_cast<double>(d->count()), 500));
  }
  for (const Knob& k : all_knobs()) (void)parse_knob(k, text);
  return 0;
}
