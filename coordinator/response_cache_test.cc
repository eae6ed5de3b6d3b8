#include "coordinator/response_cache.h"

#include <gtest/gtest.h>

namespace kolo::coord {
namespace {

Request req(const std::string& name, int64_t n) {
  Request q;
  q.name = name;
  q.shapes = {{n}};
  return q;
}
Response resp(const Request& q) {
  Response p;
  p.name = q.name;
  p.shapes = q.shapes;
  return p;
}

TEST(ResponseCacheTest, HitsOnlyWithTheSameParameters) {
  ResponseCache cache(4);
  Request a = req("a", 10);
  EXPECT_FALSE(cache.lookup(a));
  cache.put(resp(a), &a);
  ASSERT_TRUE(cache.lookup(a));
  EXPECT_EQ(*cache.lookup(a), 0u);
  EXPECT_EQ(cache.response(0).name, "a");
  EXPECT_FALSE(cache.lookup(req("a", 11)));  // shape changed: miss
  EXPECT_TRUE(cache.contains("a"));
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsedAndReusesSlots) {
  ResponseCache cache(2);
  Request a = req("a", 1), b = req("b", 1), c = req("c", 1);
  cache.put(resp(a), &a);
  cache.put(resp(b), &b);
  cache.put(resp(a), &a);  // a is now the most recent
  auto evicted = cache.put(resp(c), &c);
  ASSERT_TRUE(evicted);
  EXPECT_EQ(*evicted, "b");
  EXPECT_EQ(*cache.slot_of("c"), 1u);  // b's slot
  EXPECT_EQ(cache.size(), 2u);
}

TEST(ResponseCacheTest, TwoCachesFedTheSameSequenceAgree) {
  ResponseCache x(3), y(3);
  for (int i = 0; i < 20; ++i) {
    Request q = req("t" + std::to_string(i % 5), 1);
    x.put(resp(q), &q);
    y.put(resp(q), nullptr);  // another rank (joined) has no own request
    if (i % 7 == 0) {
      x.erase("t1");
      y.erase("t1");
    }
  }
  for (size_t s = 0; s < 3; ++s) {
    ASSERT_EQ(x.name_at(s) == nullptr, y.name_at(s) == nullptr);
    if (x.name_at(s)) EXPECT_EQ(*x.name_at(s), *y.name_at(s));
  }
}

TEST(ResponseCacheTest, CapacityZeroCachesNothing) {
  ResponseCache cache(0);
  Request a = req("a", 1);
  cache.put(resp(a), &a);
  EXPECT_FALSE(cache.lookup(a));
}

}  // namespace
}  // namespace kolo::coord
