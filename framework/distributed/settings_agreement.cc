#include "framework/distributed/settings_agreement.h"

#include <algorithm>
#include <sstream>

#include "kolo/kolo.h"

namespace kolo::fw {
namespace {

// "name=value" lines; names and values are the optimizers' own (no newline in either).
std::string encode(const OptimizerSettings& settings) {
  std::string out;
  for (const auto& [name, value] : settings) out += name + "=" + value + "\n";
  return out;
}

OptimizerSettings decode(const std::string& bytes) {
  OptimizerSettings out;
  std::istringstream lines(bytes);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFloat16:
      return "fp16";
    case Compression::kBFloat16:
      return "bf16";
  }
  return "?";
}

std::string value_of(const OptimizerSettings& settings, const std::string& name) {
  for (const auto& [key, value] : settings)
    if (key == name) return value;
  return "(none)";
}

}  // namespace

OptimizerSettings shared_settings(std::string sharding, std::string optimizer,
                                  const DistributedOptions& options,
                                  const std::vector<int64_t>& numels) {
  std::string sizes;
  for (size_t i = 0; i < numels.size(); ++i) {
    if (i) sizes += ',';
    sizes += std::to_string(numels[i]);
  }
  return {{"sharding", std::move(sharding)},
          {"optimizer", std::move(optimizer)},
          {"bucket_bytes", std::to_string(options.bucket_bytes)},
          {"backward_passes_per_step", std::to_string(options.backward_passes_per_step)},
          {"weight_by_sample_count", options.weight_by_sample_count ? "true" : "false"},
          {"compression", compression_name(options.compression)},
          {"parameter sizes", std::move(sizes)}};
}

void agree_on_settings(std::string_view who, const ProcessSet& set, const OptimizerSettings& mine) {
  if (set.size() <= 1) return;
  auto gathered = allgather_object("kolo.optimizer.__settings__", encode(mine), set);
  if (!gathered.ok()) throw Error(gathered.status());
  std::vector<OptimizerSettings> all;
  for (const std::string& bytes : *gathered) all.push_back(decode(bytes));
  // Every rank walks the same list (the union of names, in first-seen order over ranks), so
  // every rank names the same first difference.
  std::vector<std::string> names;
  for (const OptimizerSettings& settings : all)
    for (const auto& [name, value] : settings)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  for (const std::string& name : names) {
    std::string values;
    bool differ = false;
    for (size_t r = 0; r < all.size(); ++r) {
      const std::string value = value_of(all[r], name);
      differ = differ || value != value_of(all[0], name);
      values += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + value;
    }
    if (differ)
      throw Error(Status::Mismatch(std::string(who) + ": ranks of " + set.to_string() +
                                   " disagree on the optimizer setting '" + name + "' (" + values +
                                   "); every rank must construct its optimizer alike"));
  }
}

}  // namespace kolo::fw
