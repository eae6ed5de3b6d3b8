#include "backends/tcp/host_address.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kolo::tcp {
namespace {

TEST(HostAddressTest, SplitsHostAndPort) {
  Result<HostPortText> a = split_host_port("node7:29500", "addr");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->host, "node7");
  EXPECT_EQ(a->port, 29500);
  Result<HostPortText> b = split_host_port("[::1]:80", "addr");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 80);
}

TEST(HostAddressTest, RejectsBadAddressesNamingThem) {
  for (const char* text : {"node7", ":80", "node7:", "node7:x1", "node7:70000", "[::1]80", "h:0"}) {
    Result<HostPortText> r = split_host_port(text, "kolo/tcp/addr/3");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("kolo/tcp/addr/3"), std::string::npos);
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
  }
}

TEST(HostAddressTest, JoinsBracketingIpv6) {
  EXPECT_EQ(join_host_port("10.0.0.1", 5), "10.0.0.1:5");
  EXPECT_EQ(join_host_port("::1", 5), "[::1]:5");
}

TEST(HostAddressTest, PublishHostPrefersTheChosenHostThenLoopbackForLocalJobs) {
  EXPECT_EQ(publish_host("", 4, 4), "127.0.0.1");
  EXPECT_EQ(publish_host("10.1.2.3", 1, 4), "10.1.2.3");
  EXPECT_FALSE(publish_host("", 1, 4).empty());
}

}  // namespace
}  // namespace kolo::tcp
