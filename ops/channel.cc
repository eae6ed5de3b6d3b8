#include "ops/channel.h"

#include <string>

namespace kolo::ops {

void Completion::complete(Status status) {
  {
    MutexLock lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

Status Completion::wait_until(std::chrono::steady_clock::time_point deadline, const char* what) {
  MutexLock lock(mu_);
  if (!cv_.wait_until(lock.native(), deadline, [&]() KOLO_REQUIRES(mu_) { return done_; }))
    return Status::Timeout(std::string(what) + " did not complete within the channel timeout");
  return status_;
}

bool Completion::done() const {
  MutexLock lock(mu_);
  return done_;
}

Request Request::failed(Status status) {
  auto c = std::make_shared<Completion>();
  c->complete(std::move(status));
  return Request(std::move(c));
}

Status Channel::wait(const Request& request) {
  if (!request.completion()) return Status::Ok();
  return request.completion()->wait_until(std::chrono::steady_clock::now() + timeout(),
                                          "a point-to-point transfer");
}

Status Channel::sendrecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                         void* recv_data, size_t recv_bytes) {
  Request r = irecv(recv_peer, recv_data, recv_bytes);
  Request s = isend(send_peer, send_data, send_bytes);
  Status ss = wait(s);
  Status rs = wait(r);
  return ss.ok() ? rs : ss;
}

}  // namespace kolo::ops
