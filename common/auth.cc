#include "common/auth.h"

#include <string>
#include <vector>

namespace kolo {
namespace {

constexpr uint32_t kHelloMagic = 0x4c48484b;      // "KHHL"
constexpr uint32_t kChallengeMagic = 0x4c43484b;  // "KHCL"
constexpr uint32_t kProofMagic = 0x4c50484b;      // "KHPL"
constexpr uint32_t kVerdictMagic = 0x4c56484b;    // "KHVL"
constexpr uint32_t kVersion = 2;  // 2: the transcript binds the endpoints and the job

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}

Status check_header(std::span<const uint8_t> bytes, size_t need, uint32_t magic, const char* what) {
  if (bytes.size() < need)
    return Status::IoError(std::string("truncated handshake ") + what + ": got " +
                           std::to_string(bytes.size()) + " of " + std::to_string(need) + " bytes");
  if (get_u32(bytes.data()) != magic)
    return Status::IoError(std::string("malformed handshake ") + what +
                           ": wrong magic (the peer is not a Kolo rank)");
  return Status::Ok();
}

Status check_version(std::span<const uint8_t> bytes, const char* what) {
  const uint32_t version = get_u32(bytes.data() + 4);
  if (version != kVersion)
    return Status::IoError(std::string("handshake ") + what + " has protocol version " +
                           std::to_string(version) + ", this build speaks " +
                           std::to_string(kVersion) + " (mixed Kolo versions in one job?)");
  return Status::Ok();
}

// "label | binding | hello | acceptor rank, size, nonce": the transcript both tags cover. The
// binding's length goes first, so that no two (label, binding) pairs give the same bytes.
std::vector<uint8_t> transcript(std::string_view label, std::string_view binding,
                                const Hello& hello, const Challenge& challenge) {
  std::vector<uint8_t> t(label.begin(), label.end());
  uint8_t n[4];
  put_u32(n, static_cast<uint32_t>(binding.size()));
  t.insert(t.end(), n, n + 4);
  t.insert(t.end(), binding.begin(), binding.end());
  const auto h = encode(hello);
  t.insert(t.end(), h.begin(), h.end());
  Challenge untagged = challenge;
  untagged.tag = {};
  const auto c = encode(untagged);
  t.insert(t.end(), c.begin(), c.end());
  return t;
}

}  // namespace

std::array<uint8_t, kHelloBytes> encode(const Hello& m) {
  std::array<uint8_t, kHelloBytes> b{};
  put_u32(b.data(), kHelloMagic);
  put_u32(b.data() + 4, kVersion);
  put_u32(b.data() + 8, static_cast<uint32_t>(m.rank));
  put_u32(b.data() + 12, static_cast<uint32_t>(m.size));
  std::copy(m.nonce.begin(), m.nonce.end(), b.begin() + 16);
  return b;
}

std::array<uint8_t, kChallengeBytes> encode(const Challenge& m) {
  std::array<uint8_t, kChallengeBytes> b{};
  put_u32(b.data(), kChallengeMagic);
  put_u32(b.data() + 4, kVersion);
  put_u32(b.data() + 8, static_cast<uint32_t>(m.rank));
  put_u32(b.data() + 12, static_cast<uint32_t>(m.size));
  std::copy(m.nonce.begin(), m.nonce.end(), b.begin() + 16);
  std::copy(m.tag.begin(), m.tag.end(), b.begin() + 32);
  return b;
}

std::array<uint8_t, kProofBytes> encode(const Proof& m) {
  std::array<uint8_t, kProofBytes> b{};
  put_u32(b.data(), kProofMagic);
  put_u32(b.data() + 4, m.accept ? 1 : 0);
  std::copy(m.tag.begin(), m.tag.end(), b.begin() + 8);
  return b;
}

std::array<uint8_t, kVerdictBytes> encode(const Verdict& m) {
  std::array<uint8_t, kVerdictBytes> b{};
  put_u32(b.data(), kVerdictMagic);
  put_u32(b.data() + 4, m.accept ? 1 : 0);
  return b;
}

Result<Hello> decode_hello(std::span<const uint8_t> bytes) {
  KOLO_RETURN_IF_ERROR(check_header(bytes, kHelloBytes, kHelloMagic, "hello"));
  KOLO_RETURN_IF_ERROR(check_version(bytes, "hello"));
  Hello m;
  m.rank = static_cast<int32_t>(get_u32(bytes.data() + 8));
  m.size = static_cast<int32_t>(get_u32(bytes.data() + 12));
  std::copy(bytes.begin() + 16, bytes.begin() + 32, m.nonce.begin());
  return m;
}

Result<Challenge> decode_challenge(std::span<const uint8_t> bytes) {
  KOLO_RETURN_IF_ERROR(check_header(bytes, kChallengeBytes, kChallengeMagic, "challenge"));
  KOLO_RETURN_IF_ERROR(check_version(bytes, "challenge"));
  Challenge m;
  m.rank = static_cast<int32_t>(get_u32(bytes.data() + 8));
  m.size = static_cast<int32_t>(get_u32(bytes.data() + 12));
  std::copy(bytes.begin() + 16, bytes.begin() + 32, m.nonce.begin());
  std::copy(bytes.begin() + 32, bytes.begin() + 48, m.tag.begin());
  return m;
}

Result<Proof> decode_proof(std::span<const uint8_t> bytes) {
  KOLO_RETURN_IF_ERROR(check_header(bytes, kProofBytes, kProofMagic, "proof"));
  Proof m;
  m.accept = get_u32(bytes.data() + 4) == 1;
  std::copy(bytes.begin() + 8, bytes.begin() + 24, m.tag.begin());
  return m;
}

Result<Verdict> decode_verdict(std::span<const uint8_t> bytes) {
  KOLO_RETURN_IF_ERROR(check_header(bytes, kVerdictBytes, kVerdictMagic, "verdict"));
  Verdict m;
  m.accept = get_u32(bytes.data() + 4) == 1;
  return m;
}

Tag acceptor_tag(const AuthKey& key, std::string_view binding, const Hello& hello,
                 const Challenge& challenge) {
  // The labels say "kolo-tcp", where the handshake began: they enter every tag, so renaming them
  // is a protocol change (kVersion).
  return auth_tag(key, transcript("kolo-tcp acceptor", binding, hello, challenge));
}

Tag connector_tag(const AuthKey& key, std::string_view binding, const Hello& hello,
                  const Challenge& challenge) {
  return auth_tag(key, transcript("kolo-tcp connector", binding, hello, challenge));
}

AuthKey session_key(const AuthKey& key, const Hello& hello, const Challenge& challenge) {
  return derive_session_key(key, "kolo-tcp session", hello.nonce, challenge.nonce);
}

}  // namespace kolo
