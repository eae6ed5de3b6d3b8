// kolo::Handle and the small value helpers of kolo/tensor.h.
#include "kolo/handle.h"

#include "coordinator/op_state.h"

namespace kolo {

namespace {
const std::string kEmptyName;
Status empty_handle() {
  return Status::PreconditionFailed("empty kolo::Handle (default-constructed)");
}
}  // namespace

const std::string& Handle::name() const { return state_ ? state_->name() : kEmptyName; }

Status Handle::wait(std::optional<std::chrono::milliseconds> timeout) const {
  return state_ ? state_->wait(timeout) : empty_handle();
}
bool Handle::poll() const { return state_ && state_->done(); }
Status Handle::status() const { return state_ ? state_->status() : empty_handle(); }
void Handle::then(Callback callback) const {
  if (state_)
    state_->then(std::move(callback));
  else
    callback(empty_handle());
}
std::vector<int64_t> Handle::output_shape() const {
  return state_ ? state_->output_shape() : std::vector<int64_t>{};
}
void* Handle::output_data() const { return state_ ? state_->output_data() : nullptr; }
HostTensor Handle::take_output() const { return state_ ? state_->take_output() : HostTensor{}; }
std::vector<int64_t> Handle::received_splits() const {
  return state_ ? state_->received_splits() : std::vector<int64_t>{};
}
void* Handle::completion_event() const { return state_ ? state_->completion_event() : nullptr; }

int Handle::last_joined_rank() const { return state_ ? state_->last_joined_rank() : -1; }

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace kolo
