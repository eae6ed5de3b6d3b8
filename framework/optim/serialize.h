// Checkpoints: named tensors (a model's parameters and buffers, an optimizer's state) in one
// binary file, written atomically and verified on load.
//
// File format, version 1 (all integers little-endian; the writer refuses big-endian hosts):
//   offset 0   8 bytes   magic "KOLOCKPT"
//   offset 8   u32       format version (1)
//   offset 12  u32       entry count N
//   N entries, each:
//              u32       name length L (1..65535), then L bytes of name (no terminator)
//              u8        dtype (the kolo::DataType enumerator value, types.h)
//              u8        number of dimensions D (0..16), then D x i64 sizes (each >= 0)
//              u64       payload bytes B (must equal product(sizes) * dtype size)
//              B bytes   the elements, row-major, little-endian
//   trailer    u32       CRC-32 (zlib's crc32) of every byte before the trailer
// Names are unique within a file. save_checkpoint names a model's tensors "model/<name>" and an
// optimizer's "optim/<state name>" (optimizer.h lists the state names).
//
// Atomicity: the file is written to "<path>.tmp-<pid>-<n>" in the same directory, flushed and
// fsync'ed, then renamed over <path>. A failure at any point removes the temporary file and
// leaves any previous <path> untouched; a reader never sees a partial checkpoint.
//
// Errors (kolo::Error): IoError for files that cannot be created, written, renamed or opened
// and for a checksum mismatch; InvalidArgument for bad input to save (undefined tensor,
// duplicate or empty name) and for a malformed file, naming the file, the offset and what was
// expected ("checkpoint 'c.kolo': offset 52: expected 48 bytes of payload for entry
// 'model/fc.weight', file ends after 60 bytes"); Unsupported for another format version;
// Mismatch when a file's names, shapes or dtypes do not match what load_*_into expects, naming
// the entry and both values. The load_*_into functions check everything before writing any
// target, so on error the model and optimizer are unchanged.
// Thread-safety: the functions share no state; do not save and load the same path concurrently.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "framework/optim/optimizer.h"
#include "framework/tensor.h"

namespace kolo::fw {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

inline constexpr char kCheckpointMagic[8] = {'K', 'O', 'L', 'O', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;

// Writes the entries (any device: CUDA tensors are copied to the host) to `path`, atomically.
void save_tensors(const std::string& path, const NamedTensors& entries);

// Reads and verifies a whole file; the tensors are on the CPU, in file order.
NamedTensors load_tensors(const std::string& path);

// Loads `path` and copies each entry into the target of the same name (any device). The names
// in the file must be exactly the targets' names (order free); each dtype and shape must match.
void load_tensors_into(const std::string& path, const NamedTensors& targets);

// The optimizer's state as named tensors ("optim/" prefix); handles share storage with it.
NamedTensors optimizer_state(Optimizer& optimizer);

// The named parameters of a module and, when it has named_buffers() (e.g. batch-norm running
// statistics), its buffers, as one list for save_checkpoint/load_checkpoint. Works with any type
// whose named_parameters() (and named_buffers()) yields (name, Tensor) or (name, Tensor*) pairs,
// such as nn::Module. Throws InvalidArgument when a buffer name repeats a parameter name.
template <typename Module>
NamedTensors module_state(Module& module);

// A model (its named parameters and buffers, given as a list, e.g. from module_state) plus, when
// `optimizer` is not null, its state.
void save_checkpoint(const std::string& path, const NamedTensors& model, Optimizer* optimizer);
void load_checkpoint(const std::string& path, const NamedTensors& model, Optimizer* optimizer);

namespace detail {
inline const Tensor& as_tensor(const Tensor& t) { return t; }
inline const Tensor& as_tensor(const Tensor* t) { return *t; }
void check_unique_names(const NamedTensors& named, const char* fn);
}  // namespace detail

template <typename Module>
NamedTensors module_state(Module& module) {
  NamedTensors out;
  for (const auto& [name, t] : module.named_parameters()) {
    out.emplace_back(name, detail::as_tensor(t));
  }
  if constexpr (requires { module.named_buffers(); }) {
    for (const auto& [name, t] : module.named_buffers())
      out.emplace_back(name, detail::as_tensor(t));
  }
  detail::check_unique_names(out, "module_state");
  return out;
}

}  // namespace kolo::fw
