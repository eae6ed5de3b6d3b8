#include "framework/distributed/broadcast_state.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "framework/distributed/rank_zero.h"
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
// escaping here would skip share_root_outcome's broadcast (rank_zero.h) and leave the other ranks
// waiting in it until the operation timeout.
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
  throw_if_error(share_root_outcome("checkpoint.save", saved, root,
                                    "checkpoint '" + path + "' could not be written"));
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
  throw_if_error(share_root_outcome("checkpoint.load", loaded, root,
                                    "checkpoint '" + path + "' could not be loaded"));
  broadcast_parameters(model, root);
  if (optimizer != nullptr) broadcast_optimizer_state(*optimizer, root);
}

}  // namespace kolo::fw
