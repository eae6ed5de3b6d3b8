#include "framework/distributed/broadcast_state.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "framework/distributed/tensor_view.h"
#include "kolo/kolo.h"

namespace kolo::fw {
namespace {

void throw_if_error(const Status& status) {
  if (!status.ok()) throw Error(status);
}

// Submits every broadcast before waiting for any, so they negotiate and fuse as one batch.
void broadcast_all(const NamedTensors& named, const std::string& kind, int root) {
  std::vector<Handle> handles;
  handles.reserve(named.size());
  for (const auto& [name, tensor] : named) {
    handles.push_back(
        broadcast_async("bcast." + kind + "." + name, view_of_tensor(tensor), {.root = root}));
  }
  Status first_error;
  for (auto& handle : handles) {
    Status status = handle.wait();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  throw_if_error(first_error);
}

// Runs the root's file operation and turns whatever it throws into a Status: an exception
// escaping here would skip share_root_outcome's broadcast and leave the other ranks waiting
// in it until the operation timeout.
template <typename Fn>
Status run_on_root(const char* fn, const std::string& path, Fn&& operation) {
  try {
    operation();
    return Status::Ok();
  } catch (const Error& error) {
    return error.status();
  } catch (const std::exception& error) {
    return Status::IoError(std::string(fn) + ": '" + path + "': " + error.what());
  }
}

// The longest root error message passed to the other ranks (a message is a line or two; the
// cap keeps a pathological one from becoming a large broadcast).
constexpr int32_t kMaxSharedMessage = 4096;

// Collective: the root passes `root_status` (its outcome); every rank returns OK when the root
// succeeded. Otherwise the root returns its own status and the others one with the root's code
// and message, saying that the root failed, so that every rank's log shows the reason. Two
// broadcasts on failure, one on success; every rank takes the same path because the decision
// comes from the first broadcast.
Status share_root_outcome(const std::string& name, const Status& root_status, int root,
                          const char* verb, const std::string& path) {
  const bool is_root = rank() == root;
  int32_t header[3] = {1, 0, 0};  // ok, status code, message bytes
  if (is_root && !root_status.ok()) {
    header[0] = 0;
    header[1] = static_cast<int32_t>(root_status.code());
    header[2] = static_cast<int32_t>(
        std::min<size_t>(root_status.message().size(), static_cast<size_t>(kMaxSharedMessage)));
  }
  KOLO_RETURN_IF_ERROR(broadcast(name + ".ok", view_of(header, {3}), root));
  if (header[0] == 1) return Status::Ok();
  const int32_t length = std::clamp<int32_t>(header[2], 0, kMaxSharedMessage);
  std::string message(static_cast<size_t>(length), '\0');
  if (is_root) message = root_status.message().substr(0, static_cast<size_t>(length));
  if (length > 0) {
    KOLO_RETURN_IF_ERROR(broadcast(
        name + ".error", view_of(reinterpret_cast<uint8_t*>(message.data()), {length}), root));
  }
  if (is_root) return root_status;
  const bool known_code = header[1] > static_cast<int32_t>(StatusCode::kOk) &&
                          header[1] <= static_cast<int32_t>(StatusCode::kInternal);
  const StatusCode code = known_code ? static_cast<StatusCode>(header[1]) : StatusCode::kIoError;
  return Status(code, "checkpoint '" + path + "' could not be " + verb + " on root rank " +
                          std::to_string(root) + ": " + message);
}

}  // namespace

void broadcast_parameters(const NamedTensors& named, int root) {
  if (size() == 1) return;
  broadcast_all(named, "param", root);
}

void broadcast_optimizer_state(Optimizer& optimizer, int root) {
  if (size() == 1) return;
  broadcast_all(optimizer_state(optimizer), "optim", root);
}

void save_checkpoint_on_root(const std::string& path, const NamedTensors& model,
                             Optimizer* optimizer, int root) {
  Status saved;
  if (rank() == root) {
    saved = run_on_root("save_checkpoint_on_root", path,
                        [&] { save_checkpoint(path, model, optimizer); });
  }
  // Everyone waits until the file is complete and learns whether the root managed to write it.
  throw_if_error(share_root_outcome("checkpoint.save", saved, root, "written", path));
}

void load_checkpoint_from_root(const std::string& path, const NamedTensors& model,
                               Optimizer* optimizer, int root) {
  // A root that cannot read the file must not leave the others waiting in the broadcasts of
  // the tensors: it tells them first. load_checkpoint checks the whole file before writing
  // any tensor, so on failure no rank's model or optimizer has changed.
  Status loaded;
  if (rank() == root) {
    loaded = run_on_root("load_checkpoint_from_root", path,
                         [&] { load_checkpoint(path, model, optimizer); });
  }
  throw_if_error(share_root_outcome("checkpoint.load", loaded, root, "loaded", path));
  broadcast_parameters(model, root);
  if (optimizer != nullptr) broadcast_optimizer_state(*optimizer, root);
}

}  // namespace kolo::fw
