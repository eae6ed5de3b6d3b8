#include "framework/memory_stats.h"

#include <atomic>

namespace kolo::fw {
namespace {

struct Counters {
  std::array<std::atomic<int64_t>, kNumMemoryCategories> current{};
  std::array<std::atomic<int64_t>, kNumMemoryCategories> peak{};
  std::atomic<int64_t> total_current{0};
  std::atomic<int64_t> total_peak{0};
};

Counters& counters(DeviceKind kind) {
  static Counters per_kind[2];
  return per_kind[kind == DeviceKind::kCpu ? 0 : 1];
}

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

thread_local MemoryCategory t_category = MemoryCategory::kOther;

}  // namespace

std::string_view memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kOther:
      return "other";
    case MemoryCategory::kParameters:
      return "parameters";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer state";
    case MemoryCategory::kCommunication:
      return "communication";
  }
  return "?";
}

MemoryStats memory_stats(DeviceKind kind) {
  Counters& c = counters(kind);
  MemoryStats out;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    out.current[i] = c.current[i].load(std::memory_order_relaxed);
    out.peak[i] = c.peak[i].load(std::memory_order_relaxed);
  }
  out.total_current = c.total_current.load(std::memory_order_relaxed);
  out.total_peak = c.total_peak.load(std::memory_order_relaxed);
  return out;
}

void reset_memory_peaks(DeviceKind kind) {
  Counters& c = counters(kind);
  for (int i = 0; i < kNumMemoryCategories; ++i)
    c.peak[i].store(c.current[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  c.total_peak.store(c.total_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(t_category) {
  t_category = category;
}
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }

namespace memory_stats_detail {

MemoryCategory current_category() { return t_category; }

void add(DeviceKind kind, MemoryCategory category, int64_t bytes) {
  Counters& c = counters(kind);
  const auto i = static_cast<size_t>(category);
  const int64_t now = c.current[i].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  const int64_t total = c.total_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (bytes > 0) {
    raise_to(c.peak[i], now);
    raise_to(c.total_peak, total);
  }
}

void move(DeviceKind kind, MemoryCategory from, MemoryCategory to, int64_t bytes) {
  if (from == to || bytes == 0) return;
  Counters& c = counters(kind);
  c.current[static_cast<size_t>(from)].fetch_sub(bytes, std::memory_order_relaxed);
  const auto i = static_cast<size_t>(to);
  raise_to(c.peak[i], c.current[i].fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

}  // namespace memory_stats_detail
}  // namespace kolo::fw
