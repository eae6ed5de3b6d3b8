#include "framework/distributed/sharded_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "framework/distributed/tensor_view.h"
#include "kolo/kolo.h"

namespace kolo::fw {
namespace {

constexpr char kSlicePrefix[] = "optim/param.";

Tensor int64_tensor(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, Device::cpu(), DataType::kInt64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

std::vector<int64_t> int64_values(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

std::vector<int64_t> parameter_sizes(ShardedOptimizer& opt) {
  std::vector<int64_t> sizes;
  for (const Tensor& p : opt.inner().parameters()) sizes.push_back(p.numel());
  return sizes;
}

Tensor* counter(ShardedOptimizer& opt, const std::string& name) {
  for (auto& [n, t] : opt.inner().state_tensors())
    if (n == name) return t;
  throw Error(Status::Internal("sharded checkpoint: the optimizer has no '" + name + "'"));
}

// Runs `work` on every rank of the set; when it fails on any rank, every rank throws the first
// failing rank's error (so no rank goes on alone after a collective checkpoint failed).
void on_every_rank(const std::string& what, const ProcessSet& set,
                   const std::function<void()>& work) {
  std::string error;
  StatusCode code = StatusCode::kOk;
  try {
    work();
  } catch (const Error& e) {
    error = e.status().message();
    code = e.status().code();
  }
  if (set.size() == 1) {
    if (!error.empty()) throw Error(Status(code, error));
    return;
  }
  const std::string mine = std::to_string(static_cast<int>(code)) + " " + error;
  auto all = allgather_object("zero.ckpt." + what, mine, set);
  if (!all.ok()) throw Error(all.status());
  for (size_t r = 0; r < all->size(); ++r) {
    const std::string& s = (*all)[r];
    const size_t space = s.find(' ');
    const auto c = static_cast<StatusCode>(std::stoi(s.substr(0, space)));
    if (c == StatusCode::kOk) continue;
    throw Error(Status(c, "sharded checkpoint " + what + " failed on rank " + std::to_string(r) +
                              " of " + set.to_string() + ": " + s.substr(space + 1)));
  }
}

using Entries = std::map<std::string, Tensor>;

[[noreturn]] void mismatch(const std::string& what) {
  throw Error(Status::Mismatch("sharded checkpoint: " + what));
}

// " (the files there are of a 3-shard checkpoint: pass saved_shards = 3)" when shard 0 of
// another count sits beside `path`.
std::string other_counts(const std::string& path, int saved) {
  namespace fs = std::filesystem;
  const fs::path base(path);
  const fs::path dir = base.has_parent_path() ? base.parent_path() : fs::path(".");
  const std::string stem = base.filename().string() + ".shard0-of-";
  std::string found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(stem, 0) != 0 || name.find(".tmp-") != std::string::npos) continue;
    const std::string count = name.substr(stem.size());
    if (count != std::to_string(saved)) found += (found.empty() ? "" : ", ") + count;
  }
  if (found.empty()) return "";
  return " (the files there are of a " + found + "-shard checkpoint: pass that shard count)";
}

std::vector<Entries> read_shards(const std::string& path, int saved) {
  std::vector<Entries> files;
  for (int r = 0; r < saved; ++r) {
    const std::string file = shard_file(path, r, saved);
    if (!std::filesystem::exists(file))
      throw Error(Status::IoError("sharded checkpoint: shard file '" + file + "' of the " +
                                  std::to_string(saved) + "-shard checkpoint '" + path +
                                  "' does not exist" + other_counts(path, saved)));
    Entries entries;
    for (auto& [name, t] : load_tensors(file)) entries[name] = t;
    for (const char* key : {"meta/shard", "meta/sizes", "optim/step", "optim/param_steps"})
      if (!entries.count(key)) mismatch("'" + file + "' has no entry '" + key + "'");
    const auto shard = int64_values(entries["meta/shard"]);
    if (shard != std::vector<int64_t>{r, saved})
      mismatch("'" + file + "' says it is shard " + std::to_string(shard.at(0)) + " of " +
               std::to_string(shard.at(1)) + ", expected " + std::to_string(r) + " of " +
               std::to_string(saved));
    files.push_back(std::move(entries));
  }
  return files;
}

void check_model_and_optimizer(const Entries& first, const std::string& file,
                               const NamedTensors& model, ShardedOptimizer& opt) {
  const auto sizes = int64_values(first.at("meta/sizes"));
  const auto mine = parameter_sizes(opt);
  if (sizes.size() != mine.size())
    mismatch("'" + file + "' is of a model of " + std::to_string(sizes.size()) +
             " parameters, this optimizer holds " + std::to_string(mine.size()));
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] != mine[i])
      mismatch("'" + file + "': parameter " + std::to_string(i) + " has " +
               std::to_string(sizes[i]) + " elements in the checkpoint, " +
               std::to_string(mine[i]) + " here (a checkpoint of another model)");
  const std::string type = "meta/optimizer/" + opt.inner().name();
  if (!first.count(type)) {
    std::string saved = "none";
    for (const auto& [name, t] : first)
      if (name.rfind("meta/optimizer/", 0) == 0) saved = name.substr(15);
    mismatch("'" + file + "' holds the state of optimizer '" + saved + "', this one is '" +
             opt.inner().name() + "'");
  }
  size_t in_file = 0;
  for (const auto& [name, t] : first) in_file += name.rfind("model/", 0) == 0 ? 1 : 0;
  if (in_file != model.size())
    mismatch("'" + file + "' holds " + std::to_string(in_file) + " model tensors, the model " +
             std::to_string(model.size()));
  for (const auto& [name, t] : model) {
    auto it = first.find("model/" + name);
    if (it == first.end()) mismatch("'" + file + "' has no model tensor '" + name + "'");
    if (it->second.shape() != t.shape())
      mismatch("'" + file + "': model tensor '" + name + "' has shape " +
               shape_to_string(it->second.shape()) + ", the model " + shape_to_string(t.shape()));
  }
}

// This rank's slice of one slot, assembled from every file's pieces that overlap it.
Tensor assemble(const std::vector<Entries>& files, const StateSlice& s, const std::string& slot) {
  Tensor out = Tensor::zeros({s.length});
  const std::string key = kSlicePrefix + std::to_string(s.index) + "." + slot + "@";
  int64_t covered = 0;
  for (const Entries& entries : files) {
    for (auto it = entries.lower_bound(key); it != entries.end(); ++it) {
      if (it->first.rfind(key, 0) != 0) break;
      const int64_t at = std::stoll(it->first.substr(key.size()));
      const int64_t from = std::max(at, s.param_offset);
      const int64_t to = std::min(at + it->second.numel(), s.param_offset + s.length);
      if (from >= to) continue;
      std::memcpy(out.data<float>() + (from - s.param_offset),
                  it->second.data<float>() + (from - at),
                  static_cast<size_t>(to - from) * sizeof(float));
      covered += to - from;
    }
  }
  if (covered != s.length)
    mismatch("the shard files cover " + std::to_string(covered) + " of the " +
             std::to_string(s.length) + " elements [" + std::to_string(s.param_offset) + ", " +
             std::to_string(s.param_offset + s.length) + ") of '" + slot + "' of parameter " +
             std::to_string(s.index) + " (an incomplete or mixed set of shard files)");
  return out;
}

}  // namespace

std::string shard_file(const std::string& path, int rank, int shards) {
  return path + ".shard" + std::to_string(rank) + "-of-" + std::to_string(shards);
}

void save_sharded_checkpoint(const std::string& path, const NamedTensors& model,
                             ShardedOptimizer& opt) {
  const int rank = opt.shard_rank(), shards = opt.shard_count();
  on_every_rank("save", opt.options().distributed.process_set, [&] {
    NamedTensors entries;
    entries.emplace_back("meta/shard", int64_tensor({rank, shards}));
    entries.emplace_back("meta/sizes", int64_tensor(parameter_sizes(opt)));
    entries.emplace_back("meta/optimizer/" + opt.inner().name(), int64_tensor({1}));
    entries.emplace_back("optim/step", *counter(opt, "step"));
    entries.emplace_back("optim/param_steps", *counter(opt, "param_steps"));
    for (const StateSlice& s : opt.state_slices()) {
      for (size_t k = 0; k < s.slots.size(); ++k) {
        entries.emplace_back(kSlicePrefix + std::to_string(s.index) + "." + opt.slot_names()[k] +
                                 "@" + std::to_string(s.param_offset),
                             s.slots[k]);
      }
    }
    if (rank == 0)
      for (const auto& [name, t] : model) entries.emplace_back("model/" + name, t);
    save_tensors(shard_file(path, rank, shards), entries);
  });
}

void load_sharded_checkpoint(const std::string& path, int saved_shards, const NamedTensors& model,
                             ShardedOptimizer& opt) {
  if (saved_shards < 1)
    throw Error(Status::InvalidArgument("load_sharded_checkpoint: saved_shards must be >= 1, got " +
                                        std::to_string(saved_shards)));
  // Everything is read and checked into `staged` first: a failure on any rank leaves every
  // rank's model and optimizer as they were.
  std::vector<StateSlice> slices = opt.state_slices();
  std::vector<std::vector<Tensor>> staged(slices.size());
  Entries first;
  on_every_rank("load", opt.options().distributed.process_set, [&] {
    std::vector<Entries> files = read_shards(path, saved_shards);
    check_model_and_optimizer(files[0], shard_file(path, 0, saved_shards), model, opt);
    for (const char* key : {"optim/step", "optim/param_steps"})
      if (files[0].at(key).shape() != counter(opt, key + 6)->shape())
        mismatch(std::string("'") + key + "' has another shape than the optimizer's");
    for (size_t i = 0; i < slices.size(); ++i)
      for (const std::string& slot : opt.slot_names())
        staged[i].push_back(assemble(files, slices[i], slot));
    first = std::move(files[0]);
  });
  for (const auto& [name, t] : model) Tensor(t).copy_(first.at("model/" + name));
  counter(opt, "step")->copy_(first.at("optim/step"));
  counter(opt, "param_steps")->copy_(first.at("optim/param_steps"));
  for (size_t i = 0; i < slices.size(); ++i)
    for (size_t k = 0; k < staged[i].size(); ++k) slices[i].slots[k].copy_(staged[i][k]);
}

namespace {

// The checks of an unsharded checkpoint (save_checkpoint's entries) against the model and the
// sharded optimizer: every name present with the expected shape or size.
void check_unsharded(const Entries& file, const std::string& path, const NamedTensors& model,
                     ShardedOptimizer& opt) {
  auto entry = [&](const std::string& name) -> const Tensor& {
    auto it = file.find(name);
    if (it == file.end())
      mismatch("'" + path + "' has no entry '" + name + "' (a checkpoint of another model or " +
               "optimizer?)");
    return it->second;
  };
  for (const auto& [name, t] : model)
    if (entry("model/" + name).shape() != t.shape())
      mismatch("'" + path + "': model tensor '" + name + "' has shape " +
               shape_to_string(entry("model/" + name).shape()) + ", the model " +
               shape_to_string(t.shape()));
  for (const char* key : {"optim/step", "optim/param_steps"})
    if (entry(key).shape() != counter(opt, key + 6)->shape())
      mismatch("'" + path + "': '" + key + "' has another shape than the optimizer's");
  const std::vector<int64_t> sizes = parameter_sizes(opt);
  for (size_t i = 0; i < sizes.size(); ++i)
    for (const std::string& slot : opt.slot_names()) {
      const std::string name = "optim/param." + std::to_string(i) + "." + slot;
      if (entry(name).numel() != sizes[i])
        mismatch("'" + path + "': '" + name + "' has " + std::to_string(entry(name).numel()) +
                 " elements, parameter " + std::to_string(i) + " has " + std::to_string(sizes[i]));
    }
}

}  // namespace

void load_unsharded_checkpoint(const std::string& path, const NamedTensors& model,
                               ShardedOptimizer& opt) {
  std::vector<StateSlice> slices = opt.state_slices();
  Entries file;
  on_every_rank("load", opt.options().distributed.process_set, [&] {
    for (auto& [name, t] : load_tensors(path)) file[name] = t;
    check_unsharded(file, path, model, opt);
  });
  for (const auto& [name, t] : model) Tensor(t).copy_(file.at("model/" + name));
  counter(opt, "step")->copy_(file.at("optim/step"));
  counter(opt, "param_steps")->copy_(file.at("optim/param_steps"));
  // copy_ goes through the host when the slices are on a CUDA device.
  for (StateSlice& s : slices)
    for (size_t k = 0; k < s.slots.size(); ++k) {
      const Tensor& whole =
          file.at("optim/param." + std::to_string(s.index) + "." + opt.slot_names()[k]);
      s.slots[k].copy_(whole.reshape({-1}).slice(s.param_offset, s.param_offset + s.length));
    }
}

void consolidate_checkpoint(const std::string& path, const NamedTensors& model,
                            ShardedOptimizer& opt) {
  const ProcessSet& set = opt.options().distributed.process_set;
  const std::vector<Tensor> params = opt.inner().parameters();
  // Whole-parameter state, zeros except this rank's slices; summing over the set assembles it.
  NamedTensors entries;
  for (const auto& [name, t] : model) entries.emplace_back("model/" + name, t);
  entries.emplace_back("optim/step", *counter(opt, "step"));
  entries.emplace_back("optim/param_steps", *counter(opt, "param_steps"));
  std::vector<std::vector<Tensor>> full(params.size());
  for (const Tensor& p : params)
    for (size_t k = 0; k < opt.slot_names().size(); ++k)
      full[&p - params.data()].push_back(Tensor::zeros(p.shape()));
  // The host copy of each slice (copied from the device when the slices are on CUDA).
  for (const StateSlice& s : opt.state_slices())
    for (size_t k = 0; k < s.slots.size(); ++k)
      full[static_cast<size_t>(s.index)][k]
          .reshape({-1})
          .slice(s.param_offset, s.param_offset + s.length)
          .copy_(s.slots[k]);
  for (size_t i = 0; i < full.size(); ++i) {
    for (size_t k = 0; k < full[i].size(); ++k) {
      if (set.size() > 1) {
        Status status =
            allreduce("zero.ckpt.consolidate." + std::to_string(i) + "." + std::to_string(k),
                      view_of_tensor(full[i][k]), {.process_set = set});
        if (!status.ok()) throw Error(status);
      }
      entries.emplace_back("optim/param." + std::to_string(i) + "." + opt.slot_names()[k],
                           full[i][k]);
    }
  }
  on_every_rank("consolidate", set, [&] {
    if (opt.shard_rank() == 0) save_tensors(path, entries);
  });
}

}  // namespace kolo::fw
