#include "tools/kolorun/exit_notices.h"

namespace kolo::kolorun {

ExitNotices::ExitNotices(Store& store) : store_(store) {
  thread_ = std::thread([this] { run(); });
}

ExitNotices::~ExitNotices() {
  {
    MutexLock lock(mu_);
    closing_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ExitNotices::publish(std::string key, std::string how) {
  {
    MutexLock lock(mu_);
    if (lost_) return;
    queue_.emplace_back(std::move(key), std::move(how));
  }
  wake_.notify_one();
}

void ExitNotices::run() {
  MutexLock lock(mu_);
  while (true) {
    wake_.wait(lock.native(), [&]() KOLO_REQUIRES(mu_) { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, and everything written
    auto [key, how] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const Status written = store_.set(key, how);
    lock.lock();
    // A lost store (node 0's kolorun gone) loses the rest: nobody is left to read them there.
    if (!written.ok()) {
      lost_ = true;
      queue_.clear();
    }
  }
}

}  // namespace kolo::kolorun
