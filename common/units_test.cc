#include "kolo/units.h"

#include <gtest/gtest.h>

namespace kolo {
namespace {

using std::chrono::nanoseconds;

TEST(ParseSize, AcceptsUnits) {
  EXPECT_EQ(parse_size("0").value(), 0u);
  EXPECT_EQ(parse_size("4096").value(), 4096u);
  EXPECT_EQ(parse_size("64MiB").value(), 64u << 20);
  EXPECT_EQ(parse_size("64 mib").value(), 64u << 20);
  EXPECT_EQ(parse_size("1.5KiB").value(), 1536u);
  EXPECT_EQ(parse_size("2MB").value(), 2000000u);
  EXPECT_EQ(parse_size("1GiB").value(), 1ull << 30);
  EXPECT_EQ(parse_size("3k").value(), 3000u);
  EXPECT_EQ(parse_size("10B").value(), 10u);
}

TEST(ParseSize, RejectsBadInputNamingIt) {
  for (const char* bad : {"", "abc", "-1MiB", "1.3B", "5 parsecs", "1e30GiB", "MiB"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(ParseDuration, AcceptsUnits) {
  EXPECT_EQ(parse_duration("5ms").value(), nanoseconds(5'000'000));
  EXPECT_EQ(parse_duration("60").value(), nanoseconds(60'000'000'000));
  EXPECT_EQ(parse_duration("2.5s").value(), nanoseconds(2'500'000'000));
  EXPECT_EQ(parse_duration("500us").value(), nanoseconds(500'000));
  EXPECT_EQ(parse_duration("7ns").value(), nanoseconds(7));
  EXPECT_EQ(parse_duration("1min").value(), nanoseconds(60'000'000'000));
  EXPECT_EQ(parse_duration("1h").value(), nanoseconds(3'600'000'000'000));
}

TEST(ParseDuration, RejectsBadInput) {
  for (const char* bad : {"", "soon", "-5ms", "3 fortnights"}) {
    auto r = parse_duration(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("ms"), std::string::npos);  // lists accepted units
  }
}

TEST(FormatSize, BinaryUnits) {
  EXPECT_EQ(format_size(512), "512 B");
  EXPECT_EQ(format_size(4096), "4 KiB");
  EXPECT_EQ(format_size(1536 * 1024), "1.5 MiB");
  EXPECT_EQ(format_size(256ull << 20), "256 MiB");
}

TEST(FormatDuration, PicksUnit) {
  EXPECT_EQ(format_duration(nanoseconds(850'000)), "850 us");
  EXPECT_EQ(format_duration(nanoseconds(12'300'000)), "12.3 ms");
  EXPECT_EQ(format_duration(nanoseconds(2'000'000'000)), "2.0 s");
}

}  // namespace
}  // namespace kolo
