#include "ops/thread_channel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace kolo::ops {
namespace {

TEST(ThreadChannelTest, StreamIsOrderedWhateverTheChunking) {
  auto ch = make_thread_channels(2);
  std::vector<int> src(1000);
  std::iota(src.begin(), src.end(), 0);
  // Two sends before any receive (buffered), then receives of other sizes, one posted early.
  std::vector<int> dst(1000, -1);
  Request early = ch[1]->irecv(0, dst.data(), 10 * sizeof(int));
  EXPECT_FALSE(early.done());
  ASSERT_TRUE(ch[0]->send(1, src.data(), 300 * sizeof(int)).ok());
  EXPECT_TRUE(early.done());
  ASSERT_TRUE(ch[0]->send(1, src.data() + 300, 700 * sizeof(int)).ok());
  ASSERT_TRUE(ch[1]->recv(0, dst.data() + 10, 555 * sizeof(int)).ok());
  ASSERT_TRUE(ch[1]->recv(0, dst.data() + 565, 435 * sizeof(int)).ok());
  ASSERT_TRUE(ch[1]->wait(early).ok());
  EXPECT_EQ(dst, src);
  // Zero bytes complete at once.
  EXPECT_TRUE(ch[1]->irecv(0, nullptr, 0).done());
}

TEST(ThreadChannelTest, BadPeerIsInvalidArgument) {
  auto ch = make_thread_channels(2);
  char c = 0;
  Status s = ch[0]->send(0, &c, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("got 0"), std::string::npos) << s.message();
  EXPECT_EQ(ch[0]->recv(2, &c, 1).code(), StatusCode::kInvalidArgument);
}

TEST(ThreadChannelTest, ClosingFailsWaitingPeerButDeliversSentBytes) {
  auto ch = make_thread_channels(3);
  char sent = 'a';
  ASSERT_TRUE(ch[2]->send(0, &sent, 1).ok());
  char got[2] = {0, 0};
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ch[2].reset();  // destroys rank 2's channel
  });
  ASSERT_TRUE(ch[0]->recv(2, &got[0], 1).ok());  // sent before the close: still delivered
  EXPECT_EQ(got[0], 'a');
  Status s = ch[0]->recv(2, &got[1], 1);  // waits, then fails when rank 2 goes away
  closer.join();
  EXPECT_EQ(s.code(), StatusCode::kPeerFailure) << s.to_string();
  EXPECT_NE(s.message().find("closed by rank 2"), std::string::npos) << s.message();
  EXPECT_EQ(ch[0]->send(2, &sent, 1).code(), StatusCode::kPeerFailure);  // stays failed
  EXPECT_TRUE(ch[0]->send(1, &sent, 1).ok());                            // other links unaffected
}

TEST(ThreadChannelTest, TimeoutFailsAndClosesTheChannel) {
  auto ch = make_thread_channels(2, std::chrono::milliseconds(50));
  char c;
  Status s = ch[1]->recv(0, &c, 1);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  // The abandoned receive is gone: a later send fails instead of writing into `c`.
  EXPECT_EQ(ch[0]->send(1, "x", 1).code(), StatusCode::kPeerFailure);
}

}  // namespace
}  // namespace kolo::ops
