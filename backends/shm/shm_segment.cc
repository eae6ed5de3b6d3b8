#include "backends/shm/shm_segment.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/logging.h"

namespace kolo::shm {

namespace {

using Clock = std::chrono::steady_clock;
// How long one accepted connection may take to authenticate, so that a silent intruder cannot
// hold up the real peers for the whole connect timeout.
constexpr std::chrono::seconds kHandshakeLimit{10};

std::string errno_text(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits until fd is ready for `events` or the deadline passes.
Status wait_ready(int fd, short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return Status::Ok();
    if (n == 0) return Status::Timeout("shm: timed out " + std::string(what));
    if (errno != EINTR) return Status::IoError(errno_text("shm: poll while " + std::string(what)));
  }
}

Status send_all(int fd, std::span<const uint8_t> bytes, Clock::time_point deadline,
                std::string_view what) {
  size_t done = 0;
  while (done < bytes.size()) {
    KOLO_RETURN_IF_ERROR(wait_ready(fd, POLLOUT, deadline, what));
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR && errno != EAGAIN)
      return Status::IoError(errno_text("shm: " + std::string(what)));
    if (n > 0) done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status recv_all(int fd, std::span<uint8_t> bytes, Clock::time_point deadline,
                std::string_view what) {
  size_t done = 0;
  while (done < bytes.size()) {
    KOLO_RETURN_IF_ERROR(wait_ready(fd, POLLIN, deadline, what));
    const ssize_t n = ::recv(fd, bytes.data() + done, bytes.size() - done, 0);
    if (n == 0) return Status::IoError("shm: connection closed while " + std::string(what));
    if (n < 0 && errno != EINTR && errno != EAGAIN)
      return Status::IoError(errno_text("shm: " + std::string(what)));
    if (n > 0) done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';  // abstract: no file, gone with the socket
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

// What both ends bind the handshake to (auth.h, channel binding): the job's plane and the
// socket's name, which each side knows on its own (rank 0 chose it, a peer read it from the
// store). A relay would listen under another name.
std::string shm_binding(const BackendContext& ctx, const std::string& socket_name) {
  return ctx.store_prefix + " shm @" + socket_name;
}

std::string random_name() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "kolo-shm-";
  for (uint8_t b : random_nonce()) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name;
}

// One SCM_RIGHTS message: a 64-bit payload (the segment's size) and one file descriptor; the
// same buffers serve sendmsg and recvmsg.
struct FdMessage {
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;

  uint64_t payload = 0;
  iovec iov{&payload, sizeof payload};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
};

// Rank 0's side: accepts, authenticates and serves the peers.
class Host {
 public:
  Host(const BackendContext& ctx, Clock::time_point deadline)
      : ctx_(ctx), key_(derive_auth_key(ctx.secret)), deadline_(deadline) {}

  Result<std::unique_ptr<Segment>> run(const SegmentParams& params) {
    const uint64_t chunk =
        (std::max<uint64_t>(params.chunk_bytes, kLine) + kLine - 1) / kLine * kLine;
    const uint64_t total = Segment::bytes_for(ctx_.size, chunk);
    Fd memfd(::memfd_create("kolo-shm", MFD_CLOEXEC));
    if (memfd.get() < 0) return Status::IoError(errno_text("shm: memfd_create"));
    if (::ftruncate(memfd.get(), static_cast<off_t>(total)) != 0)
      return Status::IoError(
          errno_text("shm: ftruncate of a " + std::to_string(total) + "-byte segment"));
    void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
    if (base == MAP_FAILED) return Status::IoError(errno_text("shm: mmap"));
    auto segment = std::make_unique<Segment>(base, total);
    auto* header = new (base) SegmentHeader{};
    header->magic = kSegmentMagic;
    header->size = ctx_.size;
    header->chunk_bytes = chunk;
    header->threshold_bytes = params.threshold_bytes;
    header->total_bytes = total;
    for (int r = 0; r < ctx_.size; ++r) new (&segment->line(r)) RankLine{};
    segment->line(0).pid = ::getpid();
    if (ctx_.size == 1) return segment;

    KOLO_RETURN_IF_ERROR(listen());
    std::vector<Fd> peers(static_cast<size_t>(ctx_.size));
    int connected = 0;
    std::string rejected;
    while (connected < ctx_.size - 1) {
      Status ready = wait_ready(listener_.get(), POLLIN, deadline_, "waiting for peers");
      if (!ready.ok())
        return Status::Timeout("shm rank 0: " + std::to_string(connected) + " of " +
                               std::to_string(ctx_.size - 1) + " peers connected within " +
                               std::to_string(ctx_.connect_timeout.count()) + " ms" +
                               (rejected.empty() ? "" : "; rejected: " + rejected));
      Fd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (conn.get() < 0) continue;
      Result<int> rank = authenticate(conn.get(), peers);
      if (!rank.ok()) {
        // An intruder or a stale peer: refuse it and keep waiting for the real ones.
        KOLO_LOG_WARNING(rank.status().to_string());
        rejected += (rejected.empty() ? "" : "; ") + rank.status().message();
        continue;
      }
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return Status::IoError(errno_text("shm: SO_PEERCRED"));
      segment->line(*rank).pid = cred.pid;
      peers[static_cast<size_t>(*rank)] = std::move(conn);
      ++connected;
    }
    // Every pid is in place: hand out the segment.
    for (int r = 1; r < ctx_.size; ++r)
      KOLO_RETURN_IF_ERROR(send_fd(peers[static_cast<size_t>(r)].get(), memfd.get(), total, r));
    return segment;
  }

 private:
  Status listen() {
    listener_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (listener_.get() < 0) return Status::IoError(errno_text("shm: socket"));
    name_ = random_name();
    socklen_t len = 0;
    sockaddr_un addr = abstract_address(name_, &len);
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
      return Status::IoError(errno_text("shm: bind to @" + name_));
    if (::listen(listener_.get(), ctx_.size) != 0)
      return Status::IoError(errno_text("shm: listen"));
    return ctx_.store->set(ctx_.store_prefix + "/shm/name", name_);
  }

  // The acceptor's side of auth.h's handshake; returns the peer's rank.
  Result<int> authenticate(int fd, const std::vector<Fd>& peers) {
    const auto limit = std::min(deadline_, Clock::now() + kHandshakeLimit);
    std::array<uint8_t, kHelloBytes> hbytes{};
    KOLO_RETURN_IF_ERROR(recv_all(fd, hbytes, limit, "reading a peer's hello"));
    KOLO_ASSIGN_OR_RETURN(Hello hello, decode_hello(hbytes));
    const std::string who = "shm rank 0: a peer claiming rank " + std::to_string(hello.rank) +
                            " of " + std::to_string(hello.size);
    if (hello.size != ctx_.size || hello.rank <= 0 || hello.rank >= ctx_.size ||
        peers[static_cast<size_t>(hello.rank)].get() >= 0)
      return Status::PeerFailure(who + " does not fit this job of " + std::to_string(ctx_.size) +
                                 " ranks (or that rank already connected)");
    Challenge challenge{ctx_.rank, ctx_.size, random_nonce(), {}};
    const std::string binding = shm_binding(ctx_, name_);
    challenge.tag = acceptor_tag(key_, binding, hello, challenge);
    KOLO_RETURN_IF_ERROR(send_all(fd, encode(challenge), limit, "sending a challenge"));
    std::array<uint8_t, kProofBytes> pbytes{};
    KOLO_RETURN_IF_ERROR(recv_all(fd, pbytes, limit, "reading a proof"));
    KOLO_ASSIGN_OR_RETURN(Proof proof, decode_proof(pbytes));
    const bool good =
        proof.accept && tags_equal(proof.tag, connector_tag(key_, binding, hello, challenge));
    (void)send_all(fd, encode(Verdict{good}), limit, "sending a verdict");
    if (!good) return Status::PeerFailure(who + " failed authentication (wrong job secret?)");
    return hello.rank;
  }

  Status send_fd(int sock, int fd, uint64_t total, int rank) {
    KOLO_RETURN_IF_ERROR(wait_ready(sock, POLLOUT, deadline_, "sending the segment"));
    FdMessage m;
    m.payload = total;
    cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (::sendmsg(sock, &m.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof m.payload))
      return Status::IoError(
          errno_text("shm: sending the segment to rank " + std::to_string(rank)));
    return Status::Ok();
  }

  const BackendContext& ctx_;
  const AuthKey key_;
  const Clock::time_point deadline_;
  Fd listener_;
  std::string name_;  // the listener's abstract socket name
};

// A peer's side: connects to rank 0, proves the secret, receives and maps the segment.
Result<std::unique_ptr<Segment>> join(const BackendContext& ctx, Clock::time_point deadline) {
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  KOLO_ASSIGN_OR_RETURN(std::string name, ctx.store->get(ctx.store_prefix + "/shm/name", wait));
  if (name.empty() || name.size() > sizeof(sockaddr_un::sun_path) - 1)
    return Status::PeerFailure("shm rank " + std::to_string(ctx.rank) +
                               ": the store holds a bad socket name of " +
                               std::to_string(name.size()) + " bytes");
  Fd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (sock.get() < 0) return Status::IoError(errno_text("shm: socket"));
  socklen_t len = 0;
  sockaddr_un addr = abstract_address(name, &len);
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS)
    return Status::IoError(
        errno_text("shm rank " + std::to_string(ctx.rank) + ": connecting to rank 0 at @" + name));
  const AuthKey key = derive_auth_key(ctx.secret);
  const std::string binding = shm_binding(ctx, name);
  Hello hello{ctx.rank, ctx.size, random_nonce()};
  KOLO_RETURN_IF_ERROR(send_all(sock.get(), encode(hello), deadline, "sending hello"));
  std::array<uint8_t, kChallengeBytes> cbytes{};
  KOLO_RETURN_IF_ERROR(recv_all(sock.get(), cbytes, deadline, "reading rank 0's challenge"));
  KOLO_ASSIGN_OR_RETURN(Challenge challenge, decode_challenge(cbytes));
  if (challenge.rank != 0 || challenge.size != ctx.size ||
      !tags_equal(challenge.tag, acceptor_tag(key, binding, hello, challenge))) {
    (void)send_all(sock.get(), encode(Proof{false, {}}), deadline, "rejecting");
    return Status::PeerFailure("shm rank " + std::to_string(ctx.rank) +
                               ": authentication of rank 0 failed (wrong job secret?)");
  }
  KOLO_RETURN_IF_ERROR(send_all(sock.get(),
                                encode(Proof{true, connector_tag(key, binding, hello, challenge)}),
                                deadline, "sending proof"));
  std::array<uint8_t, kVerdictBytes> vbytes{};
  KOLO_RETURN_IF_ERROR(recv_all(sock.get(), vbytes, deadline, "reading rank 0's verdict"));
  KOLO_ASSIGN_OR_RETURN(Verdict verdict, decode_verdict(vbytes));
  if (!verdict.accept)
    return Status::PeerFailure("shm rank " + std::to_string(ctx.rank) +
                               ": rank 0 refused this rank's proof (wrong job secret?)");

  KOLO_RETURN_IF_ERROR(wait_ready(sock.get(), POLLIN, deadline, "waiting for the segment"));
  FdMessage m;
  const ssize_t n = ::recvmsg(sock.get(), &m.msg, MSG_CMSG_CLOEXEC);
  const uint64_t total = m.payload;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (n != static_cast<ssize_t>(sizeof total) || c == nullptr || c->cmsg_level != SOL_SOCKET ||
      c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
    return Status::PeerFailure("shm rank " + std::to_string(ctx.rank) +
                               ": rank 0 did not send the segment");
  int raw = -1;
  std::memcpy(&raw, CMSG_DATA(c), sizeof raw);
  Fd memfd(raw);
  struct stat st {};
  if (::fstat(memfd.get(), &st) != 0) return Status::IoError(errno_text("shm: fstat"));
  if (static_cast<uint64_t>(st.st_size) != total || total < Segment::bytes_for(ctx.size, kLine))
    return Status::PeerFailure("shm rank " + std::to_string(ctx.rank) + ": the segment has " +
                               std::to_string(st.st_size) + " bytes, rank 0 announced " +
                               std::to_string(total));
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (base == MAP_FAILED) return Status::IoError(errno_text("shm: mmap"));
  auto segment = std::make_unique<Segment>(base, total);
  const SegmentHeader& h = segment->header();
  if (h.magic != kSegmentMagic || h.size != ctx.size || h.total_bytes != total ||
      h.chunk_bytes % kLine != 0 ||
      h.chunk_bytes < sizeof(int64_t) * static_cast<uint64_t>(ctx.size) ||
      Segment::bytes_for(ctx.size, h.chunk_bytes) != total)
    return Status::PeerFailure("shm rank " + std::to_string(ctx.rank) +
                               ": the segment's header does not describe a job of " +
                               std::to_string(ctx.size) + " ranks in " + std::to_string(total) +
                               " bytes");
  return segment;
}

}  // namespace

Segment::~Segment() { ::munmap(base_, bytes_); }

uint64_t Segment::bytes_for(int size, uint64_t chunk_bytes) {
  const auto p = static_cast<uint64_t>(size);
  return kLine * (1 + p) + 2 * p * (kLine + chunk_bytes);
}

Result<std::unique_ptr<Segment>> connect_segment(const BackendContext& context,
                                                 const SegmentParams& params) {
  const std::string me = "shm: context.";
  if (context.size < 1 || context.rank < 0 || context.rank >= context.size)
    return Status::InvalidArgument(me + "rank must be in [0, " + std::to_string(context.size) +
                                   "), got " + std::to_string(context.rank));
  if (context.local_size != context.size)
    return Status::InvalidArgument("shm: every rank must be on one host, but this host has " +
                                   std::to_string(context.local_size) + " of the job's " +
                                   std::to_string(context.size) +
                                   " ranks (use tcp or mpi across hosts)");
  if (context.size > 1 && context.store == nullptr)
    return Status::InvalidArgument(me + "store must not be null for a group of " +
                                   std::to_string(context.size) + " ranks");
  const auto deadline = Clock::now() + context.connect_timeout;
  if (context.rank == 0) return Host(context, deadline).run(params);
  return join(context, deadline);
}

}  // namespace kolo::shm
