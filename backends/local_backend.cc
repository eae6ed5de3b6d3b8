#include "backends/local_backend.h"

#include <chrono>
#include <string>

#include "backends/channel_backend.h"
#include "ops/channel.h"

namespace kolo {

namespace {

// Rank 0 of a group of one: there is no peer to send to or receive from.
class LocalChannel : public ops::Channel {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  ops::Request isend(int peer, const void*, size_t bytes) override {
    return no_peer("send", peer, bytes);
  }
  ops::Request irecv(int peer, void*, size_t bytes) override {
    return no_peer("receive", peer, bytes);
  }
  // Nothing ever waits on this channel; any bound will do.
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(60); }

 private:
  static ops::Request no_peer(const char* what, int peer, size_t bytes) {
    return ops::Request::failed(Status::Internal(
        "local channel: asked to " + std::string(what) + " " + std::to_string(bytes) +
        " bytes with rank " + std::to_string(peer) + ", but a one-rank job has no peers"));
  }
};

}  // namespace

std::unique_ptr<Backend> make_local_backend(std::string name) {
  return std::make_unique<ChannelBackend>(std::move(name), std::make_unique<LocalChannel>());
}

}  // namespace kolo
