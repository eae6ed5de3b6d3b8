#include "coordinator/op_state.h"

#include <algorithm>
#include <thread>

namespace kolo::detail {

namespace {
thread_local DeferCallbacks* t_defer = nullptr;
}  // namespace

DeferCallbacks::DeferCallbacks(Later later) : later_(std::move(later)), outer_(t_defer) {
  t_defer = this;
}

DeferCallbacks::~DeferCallbacks() { t_defer = outer_; }

bool OpState::complete(Status status) {
  std::vector<Handle::Callback> callbacks;
  {
    MutexLock lock(mu_);
    if (done_ || completing_) return false;
    completing_ = true;
    status_ = status;
    callbacks.swap(callbacks_);
    settled_flag_.store(true, std::memory_order_release);
  }
  if (!callbacks.empty() && t_defer != nullptr) {
    t_defer->later_([self = shared_from_this(), callbacks = std::move(callbacks),
                     status = std::move(status)]() mutable { self->finish(callbacks, status); });
    return true;
  }
  finish(callbacks, status);
  return true;
}

void OpState::finish(std::vector<Handle::Callback>& callbacks, const Status& status) {
  // Callbacks run before waiters wake, so that wait() returning means they have run.
  for (auto& cb : callbacks) cb(status);
  {
    MutexLock lock(mu_);
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

Status OpState::wait(std::optional<std::chrono::milliseconds> timeout) {
  // A blocking call's operation: run its cycles here when no other thread does.
  if (driver_ && !timeout && !settled()) driver_->drive(*this);
  // A small operation completes within tens of microseconds of its submission: watching the
  // flag for that long (yielding the core to whoever needs it) saves the sleep and the
  // wake-up, which on a busy host cost more than the operation.
  constexpr auto kSpin = std::chrono::microseconds(50);
  auto spin = timeout ? std::min<std::chrono::nanoseconds>(kSpin, *timeout) : kSpin;
  const auto until = std::chrono::steady_clock::now() + spin;
  while (!done_flag_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  MutexLock lock(mu_);
  if (!timeout) {
    cv_.wait(lock.native(), [&]() KOLO_REQUIRES(mu_) { return done_; });
  } else if (!cv_.wait_for(lock.native(), *timeout, [&]() KOLO_REQUIRES(mu_) { return done_; })) {
    return Status::Timeout("operation '" + name_ + "' did not complete within " +
                           std::to_string(timeout->count()) + " ms (it continues)");
  }
  return status_;
}

void OpState::set_driver(std::shared_ptr<CycleDriver> driver) { driver_ = std::move(driver); }

bool OpState::done() const {
  MutexLock lock(mu_);
  return done_;
}

Status OpState::status() const {
  MutexLock lock(mu_);
  if (!done_) return Status::PreconditionFailed("operation '" + name_ + "' is still pending");
  return status_;
}

void OpState::then(Handle::Callback callback) {
  Status status;
  {
    MutexLock lock(mu_);
    if (!done_ && !completing_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    status = status_;
  }
  callback(status);
}

void OpState::set_output(std::vector<int64_t> shape, void* data) {
  MutexLock lock(mu_);
  output_shape_ = std::move(shape);
  output_data_ = data;
}

void OpState::set_owned_output(HostTensor tensor) {
  MutexLock lock(mu_);
  owned_ = std::move(tensor);
  output_shape_ = owned_.shape;
  output_data_ = owned_.bytes.data();
}

void OpState::set_received_splits(std::vector<int64_t> splits) {
  MutexLock lock(mu_);
  received_splits_ = std::move(splits);
}

std::vector<int64_t> OpState::output_shape() const {
  MutexLock lock(mu_);
  return output_shape_;
}

void* OpState::output_data() const {
  MutexLock lock(mu_);
  return output_data_;
}

HostTensor OpState::take_output() {
  MutexLock lock(mu_);
  HostTensor out = std::move(owned_);
  owned_ = HostTensor{};
  if (output_data_ == static_cast<void*>(out.bytes.data())) output_data_ = nullptr;
  return out;
}

std::vector<int64_t> OpState::received_splits() const {
  MutexLock lock(mu_);
  return received_splits_;
}

void OpState::set_last_joined_rank(int rank) {
  MutexLock lock(mu_);
  last_joined_rank_ = rank;
}

int OpState::last_joined_rank() const {
  MutexLock lock(mu_);
  return last_joined_rank_;
}

void OpState::set_completion_event(std::shared_ptr<void> event) {
  MutexLock lock(mu_);
  completion_event_ = std::move(event);
}

void* OpState::completion_event() const {
  MutexLock lock(mu_);
  return completion_event_.get();
}

}  // namespace kolo::detail
