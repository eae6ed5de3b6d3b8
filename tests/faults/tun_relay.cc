// An attacker on the network path for tests/faults (issue 16): forwards IPv4 packets between two
// TUN devices, so that two network namespaces talk only through this process, and flips a bit
// in tcp data frames of the Kolo backend on the way. The endpoints each side sees are the real
// ones, so the handshake's channel binding cannot notice it: only per-frame integrity
// (KOLO_TCP_INTEGRITY) can.
//
// Usage: tun_relay DEV_A DEV_B frames MIN MAX | tun_relay DEV_A DEV_B offer
// Creates TUN devices DEV_A and DEV_B (the test moves them into the namespaces and addresses
// them), prints "ready", then forwards. Mode "frames": in a TCP segment whose payload starts
// with a frame header ("KLF1") of a payload of MIN..MAX bytes that lies whole in the segment, it
// flips the lowest bit of the payload's last byte (for int64 data: the value changes by 2^56).
// Mode "offer": it turns the tcp backend's same-host offer of "no offer" (54 bytes: 0, 37 zero
// bytes, tag) into an offer of an AF_UNIX socket of the attacker's. Either way it fixes the TCP
// checksum and prints "flipped N". Runs until killed.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int open_tun(const char* name) {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (::ioctl(fd, TUNSETIFF, &ifr) != 0) return -1;
  return fd;
}

uint32_t sum16(const uint8_t* p, size_t n, uint32_t sum) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t{p[i]} << 8 | p[i + 1];
  if (n & 1) sum += uint32_t{p[n - 1]} << 8;
  return sum;
}

// Recomputes the TCP checksum of an IPv4 packet (header length ihl bytes, total length len).
void fix_tcp_checksum(uint8_t* ip, size_t ihl, size_t len) {
  uint8_t* tcp = ip + ihl;
  const size_t tcp_len = len - ihl;
  tcp[16] = tcp[17] = 0;
  uint32_t sum = sum16(ip + 12, 8, 0);  // source and destination addresses
  sum += 6 + static_cast<uint32_t>(tcp_len);
  sum = sum16(tcp, tcp_len, sum);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const uint16_t c = static_cast<uint16_t>(~sum);
  tcp[16] = static_cast<uint8_t>(c >> 8);
  tcp[17] = static_cast<uint8_t>(c);
}

long flipped = 0;

bool offer_mode = false;

void tamper(uint8_t* ip, size_t len, uint64_t min, uint64_t max) {
  if (len < 20 || (ip[0] >> 4) != 4 || ip[9] != 6) return;  // IPv4 TCP only
  const size_t ihl = size_t{ip[0] & 15u} * 4;
  if (len < ihl + 20) return;
  const size_t doff = static_cast<size_t>(ip[ihl + 12] >> 4) * 4;
  const size_t at = ihl + doff;  // the segment's payload
  if (offer_mode) {
    constexpr size_t kOfferBytes = 1 + 37 + 16;
    if (len != at + kOfferBytes) return;
    for (size_t i = 0; i < 38; ++i)
      if (ip[at + i] != 0) return;
    ip[at] = 1;
    std::memcpy(ip + at + 1, "kolo-00000000000000000000000000attack", 37);
    fix_tcp_checksum(ip, ihl, len);
    std::printf("flipped %ld\n", ++flipped);
    std::fflush(stdout);
    return;
  }
  if (len < at + 16 || std::memcmp(ip + at, "KLF1", 4) != 0) return;
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{ip[at + 8 + i]} << (8 * i);
  if (length < min || length > max || len < at + 16 + length) return;
  ip[at + 16 + length - 1] ^= 1;
  fix_tcp_checksum(ip, ihl, len);
  std::printf("flipped %ld\n", ++flipped);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  offer_mode = argc == 4 && std::strcmp(argv[3], "offer") == 0;
  if (!offer_mode && (argc != 6 || std::strcmp(argv[3], "frames") != 0)) {
    std::fprintf(stderr, "usage: tun_relay DEV_A DEV_B frames MIN MAX | DEV_A DEV_B offer\n");
    return 2;
  }
  const int a = open_tun(argv[1]), b = open_tun(argv[2]);
  if (a < 0 || b < 0) {
    std::perror("tun_relay: cannot create the TUN devices");
    return 1;
  }
  const uint64_t min = offer_mode ? 0 : std::strtoull(argv[4], nullptr, 10);
  const uint64_t max = offer_mode ? 0 : std::strtoull(argv[5], nullptr, 10);
  std::printf("ready\n");
  std::fflush(stdout);
  static uint8_t packet[65536];
  for (;;) {
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      const ssize_t n = ::read(fds[i].fd, packet, sizeof packet);
      if (n <= 0) continue;
      tamper(packet, static_cast<size_t>(n), min, max);
      (void)!::write(i == 0 ? b : a, packet, static_cast<size_t>(n));
    }
  }
}
