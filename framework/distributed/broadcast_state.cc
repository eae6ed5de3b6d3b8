#include "framework/distributed/broadcast_state.h"

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
  int32_t ok = 1;
  Status saved;
  if (rank() == root) {
    try {
      save_checkpoint(path, model, optimizer);
    } catch (const Error& error) {
      saved = error.status();
      ok = 0;
    }
  }
  // Everyone waits until the file is complete and learns whether the root managed to write it.
  throw_if_error(broadcast("checkpoint.save.ok", view_of(&ok, {}), root));
  if (!saved.ok()) throw Error(saved);
  if (!ok) {
    throw Error(Status::IoError("checkpoint '" + path + "' could not be written on root rank " +
                                std::to_string(root)));
  }
}

void load_checkpoint_from_root(const std::string& path, const NamedTensors& model,
                               Optimizer* optimizer, int root) {
  // A root that cannot read the file must not leave the others waiting in the broadcast: it
  // tells them through a one-element broadcast first.
  int32_t ok = 1;
  Status loaded;
  if (rank() == root) {
    try {
      load_checkpoint(path, model, optimizer);
    } catch (const Error& error) {
      loaded = error.status();
      ok = 0;
    }
  }
  throw_if_error(broadcast("checkpoint.load.ok", view_of(&ok, {}), root));
  if (!ok) {
    throw_if_error(loaded.ok() ? Status::IoError("checkpoint '" + path + "' could not be "
                                                 "loaded on root rank " + std::to_string(root))
                               : loaded);
  }
  broadcast_parameters(model, root);
  if (optimizer != nullptr) broadcast_optimizer_state(*optimizer, root);
}

}  // namespace kolo::fw
