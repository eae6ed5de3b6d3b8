#include "common/auth.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kolo {
namespace {

// The reference test vectors (Aumasson and Bernstein): key 00..0f, message 00..n-1.
uint64_t reference_vector(size_t n) {
  SipKey key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  std::vector<uint8_t> msg(n);
  for (size_t i = 0; i < n; ++i) msg[i] = static_cast<uint8_t>(i);
  return siphash24(key, msg);
}

TEST(SipHashTest, MatchesReferenceVectors) {
  EXPECT_EQ(reference_vector(0), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(reference_vector(1), 0x74f839c593dc67fdULL);
  EXPECT_EQ(reference_vector(15), 0xa129ca6149be45e5ULL);  // the paper's worked example
}

constexpr char kBinding[] = "test|127.0.0.1:40000|127.0.0.1:50000";

Hello make_hello() { return Hello{3, 4, random_nonce()}; }
Challenge make_challenge(const AuthKey& key, const Hello& h) {
  Challenge c{1, 4, random_nonce(), {}};
  c.tag = acceptor_tag(key, kBinding, h, c);
  return c;
}

TEST(AuthTest, SameSecretVerifiesBothWays) {
  const AuthKey a = derive_auth_key("job-secret");
  const AuthKey b = derive_auth_key("job-secret");
  const Hello h = make_hello();
  const Challenge c = make_challenge(a, h);
  EXPECT_TRUE(tags_equal(c.tag, acceptor_tag(b, kBinding, h, c)));
  EXPECT_TRUE(tags_equal(connector_tag(a, kBinding, h, c), connector_tag(b, kBinding, h, c)));
}

TEST(AuthTest, DifferentSecretFails) {
  const AuthKey a = derive_auth_key("job-secret");
  const AuthKey b = derive_auth_key("job-secreT");
  const Hello h = make_hello();
  const Challenge c = make_challenge(a, h);
  EXPECT_FALSE(tags_equal(c.tag, acceptor_tag(b, kBinding, h, c)));
  EXPECT_FALSE(tags_equal(connector_tag(a, kBinding, h, c), connector_tag(b, kBinding, h, c)));
}

TEST(AuthTest, TagsBindNoncesRanksAndRole) {
  const AuthKey k = derive_auth_key("s");
  const Hello h = make_hello();
  const Challenge c = make_challenge(k, h);
  // A connector tag is not the acceptor tag reflected back.
  EXPECT_FALSE(tags_equal(acceptor_tag(k, kBinding, h, c), connector_tag(k, kBinding, h, c)));
  Hello h2 = h;
  h2.nonce[0] ^= 1;
  EXPECT_FALSE(tags_equal(acceptor_tag(k, kBinding, h, c), acceptor_tag(k, kBinding, h2, c)));
  Challenge c2 = c;
  c2.rank = 2;
  EXPECT_FALSE(tags_equal(connector_tag(k, kBinding, h, c), connector_tag(k, kBinding, h, c2)));
  // The tag field itself is not part of the transcript.
  Challenge c3 = c;
  c3.tag[0] ^= 1;
  EXPECT_TRUE(tags_equal(connector_tag(k, kBinding, h, c), connector_tag(k, kBinding, h, c3)));
}

// What each side sees of the connection is part of the transcript: a relay in between makes the
// two ranks see different endpoints, and a connection of another job or plane another prefix.
TEST(AuthTest, TagsBindWhatEachSideSeesOfTheConnection) {
  const AuthKey k = derive_auth_key("s");
  const Hello h = make_hello();
  const Challenge c = make_challenge(k, h);
  for (const char* other : {"test|127.0.0.1:40000|127.0.0.1:50001",  // dialed a relay's port
                            "test|127.0.0.1:40001|127.0.0.1:50000",  // accepted from a relay
                            "tesT|127.0.0.1:40000|127.0.0.1:50000",  // another job or plane
                            ""}) {
    EXPECT_FALSE(tags_equal(c.tag, acceptor_tag(k, other, h, c))) << other;
    EXPECT_FALSE(tags_equal(connector_tag(k, kBinding, h, c), connector_tag(k, other, h, c)))
        << other;
  }
  // Both sides derive one session key, and every connection gets its own.
  Challenge c2 = c;
  c2.nonce[5] ^= 1;
  const AuthKey s1 = session_key(k, h, c), s2 = session_key(k, h, c2);
  EXPECT_EQ(session_key(derive_auth_key("s"), h, c).a.k0, s1.a.k0);
  EXPECT_NE(s1.a.k0, s2.a.k0);
  EXPECT_NE(s1.b.k1, s2.b.k1);
}

TEST(AuthTest, NoncesDiffer) { EXPECT_NE(random_nonce(), random_nonce()); }

TEST(AuthTest, MessagesRoundTrip) {
  const Hello h = make_hello();
  Result<Hello> h2 = decode_hello(encode(h));
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(h2->rank, 3);
  EXPECT_EQ(h2->size, 4);
  EXPECT_EQ(h2->nonce, h.nonce);
  const Challenge c = make_challenge(derive_auth_key("x"), h);
  Result<Challenge> c2 = decode_challenge(encode(c));
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2->rank, 1);
  EXPECT_EQ(c2->tag, c.tag);
  Result<Proof> p = decode_proof(encode(Proof{true, c.tag}));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->accept);
  EXPECT_EQ(p->tag, c.tag);
  Result<Verdict> v = decode_verdict(encode(Verdict{false}));
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->accept);
}

TEST(AuthTest, DecodersRejectGarbage) {
  std::vector<uint8_t> garbage(64, 0xab);
  Result<Hello> h = decode_hello(garbage);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("not a Kolo"), std::string::npos);
  auto bytes = encode(make_hello());
  Result<Hello> short_hello = decode_hello(std::span<const uint8_t>(bytes.data(), 10));
  ASSERT_FALSE(short_hello.ok());
  EXPECT_NE(short_hello.status().message().find("truncated"), std::string::npos);
  bytes[4] = 9;  // another protocol version
  Result<Hello> other = decode_hello(bytes);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("version 9"), std::string::npos);
  EXPECT_FALSE(decode_challenge(encode(make_hello())).ok());  // wrong message kind
}

TEST(AuthTest, DecodersNeverCrashOnRandomBytes) {
  std::mt19937 rng(16);
  int accepted = 0, hello_shaped = 0;
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint8_t> bytes(rng() % 64);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    if (bytes.size() >= 8 && i % 2) {  // a valid magic and version, random fields
      const auto real = encode(make_hello());
      std::copy_n(real.begin(), 8, bytes.begin());
      hello_shaped += bytes.size() >= kHelloBytes;
    }
    accepted += decode_hello(bytes).ok() + decode_challenge(bytes).ok() + decode_proof(bytes).ok() +
                decode_verdict(bytes).ok();
  }
  // Exactly the hello-shaped ones of full length decode, and only as a hello.
  EXPECT_GT(hello_shaped, 0);
  EXPECT_EQ(accepted, hello_shaped);
}

}  // namespace
}  // namespace kolo
