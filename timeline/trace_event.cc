#include "timeline/trace_event.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

namespace kolo::timeline_detail {
namespace {

// Writes `v` in the shortest form that reads back to the same value (valid JSON for finite v).
void append_double(std::string& out, double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, ec == std::errc() ? end : buf);
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, ec == std::errc() ? end : buf);
}

const char* phase_letter(EventKind kind) {
  switch (kind) {
    case EventKind::kComplete:
      return "X";
    case EventKind::kInstant:
    case EventKind::kGlobalInstant:
      return "i";
    case EventKind::kThreadName:
      return "M";
    case EventKind::kCounter:
      return "C";
  }
  return "i";
}

}  // namespace

// "ts", "dur" for a span, "s" for an instant's scope.
static void append_timed_fields(std::string& out, EventKind kind, int64_t ts_ns, int64_t dur_ns) {
  out += ",\"ts\":";
  append_ts_us(out, ts_ns);
  if (kind == EventKind::kComplete) {
    out += ",\"dur\":";
    append_ts_us(out, dur_ns);
  }
  if (kind == EventKind::kInstant) out += ",\"s\":\"t\"";
  if (kind == EventKind::kGlobalInstant) out += ",\"s\":\"g\"";
}

void append_json_string(std::string& out, std::string_view text) {
  // Phase names, arg keys and most tensor names are plain printable ASCII and need no escaping;
  // they are copied as they are. Anything else goes through nlohmann's serializer, whose
  // `replace` handler turns invalid UTF-8 (tensor names come from users) into U+FFFD instead of
  // throwing on the writer thread.
  bool plain = true;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (plain) {
    out += '"';
    out += text;
    out += '"';
    return;
  }
  out += nlohmann::json(std::string(text))
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void append_arg_value(std::string& out, std::string_view value) {
  const char* first = value.data();
  const char* last = value.data() + value.size();
  if (!value.empty()) {
    int64_t i = 0;
    auto ri = std::from_chars(first, last, i);
    if (ri.ec == std::errc() && ri.ptr == last) {
      append_int(out, i);
      return;
    }
    double d = 0;
    auto rd = std::from_chars(first, last, d);
    // from_chars also accepts "inf" and "nan", which JSON cannot carry: those stay strings.
    if (rd.ec == std::errc() && rd.ptr == last && std::isfinite(d)) {
      append_double(out, d);
      return;
    }
  }
  append_json_string(out, value);
}

void append_ts_us(std::string& out, int64_t ts_ns) {
  if (ts_ns < 0) {  // cannot happen with a steady clock; kept exact rather than asserted
    out += '-';
    ts_ns = -ts_ns;
  }
  append_int(out, ts_ns / 1000);
  int frac = static_cast<int>(ts_ns % 1000);
  char digits[4] = {'.', static_cast<char>('0' + frac / 100),
                    static_cast<char>('0' + frac / 10 % 10), static_cast<char>('0' + frac % 10)};
  out.append(digits, 4);
}

// Note [Packed events]
// A span used to be queued as a struct of std::strings and a vector of string pairs, built by
// the recording thread and freed by the writer: several allocations per event, each freed on
// another thread (glibc then takes its arena lock), which was most of a span's cost on the
// caller. Now an event is a fixed-size record plus its name and args copied into the batch's
// one text buffer, each string preceded by its length (so any bytes, NUL included, survive);
// the writer reads them in place. A span's end args are merged into its begin's as string
// views while packing (no copy of either list), with add_args' rule: a key already there takes
// the new value in its place, a new key goes last.
char* PackedEvents::put_view(char* at, std::string_view s) {
  const auto size = static_cast<uint32_t>(s.size());
  std::memcpy(at, &size, sizeof(size));
  std::memcpy(at + sizeof(size), s.data(), s.size());
  return at + sizeof(size) + s.size();
}

void PackedEvents::push(EventKind kind, int tid, int64_t ts_ns, int64_t dur_ns,
                        std::string_view name, const TimelineArgs& args,
                        std::initializer_list<const TimelineArgs*> overrides) {
  scratch_.clear();
  for (const auto& [key, value] : args) scratch_.emplace_back(key, value);
  for (const TimelineArgs* more : overrides) {
    for (const auto& [key, value] : *more) {
      auto it = std::find_if(scratch_.begin(), scratch_.end(),
                             [&k = key](const auto& kv) { return kv.first == k; });
      if (it != scratch_.end()) {
        it->second = value;
      } else {
        scratch_.emplace_back(key, value);
      }
    }
  }
  events_.push_back(Record{kind, tid, ts_ns, dur_ns, text_.size(),
                           static_cast<uint32_t>(name.size()),
                           static_cast<uint32_t>(scratch_.size())});
  // One resize for the whole event, then plain copies (no capacity check per piece).
  size_t bytes = name.size();
  for (const auto& [key, value] : scratch_)
    bytes += 2 * sizeof(uint32_t) + key.size() + value.size();
  const size_t start = text_.size();
  text_.resize(start + bytes);
  char* at = text_.data() + start;
  std::memcpy(at, name.data(), name.size());
  at += name.size();
  for (const auto& [key, value] : scratch_) at = put_view(put_view(at, key), value);
}

void PackedEvents::clear() {
  events_.clear();
  text_.clear();
}

void PackedEvents::reserve(size_t events, size_t text_bytes) {
  events_.reserve(events);
  text_.reserve(text_bytes);
}

void PackedEvents::swap(PackedEvents& other) noexcept {
  events_.swap(other.events_);
  text_.swap(other.text_);
}

void PackedEvents::append_json(std::string& out, size_t i, int pid) {
  const Record& event = events_[i];
  const char* p = text_.data() + event.text;
  const std::string_view name(p, event.name_size);
  p += event.name_size;
  auto next = [&p] {
    uint32_t size;
    std::memcpy(&size, p, sizeof(size));
    std::string_view s(p + sizeof(size), size);
    p += sizeof(size) + size;
    return s;
  };
  scratch_.clear();
  for (uint32_t a = 0; a < event.num_args; ++a) {
    std::string_view key = next();
    scratch_.emplace_back(key, next());
  }
  out += "{\"name\":";
  if (event.kind == EventKind::kThreadName) {
    out += "\"thread_name\"";
  } else {
    append_json_string(out, name);
  }
  out += ",\"ph\":\"";
  out += phase_letter(event.kind);
  out += "\",\"pid\":";
  append_int(out, pid);
  out += ",\"tid\":";
  append_int(out, event.tid);
  if (event.kind == EventKind::kThreadName) {
    // The track's name is a label, never a number, even when a tensor is called "42". "ts"
    // although metadata has no time: speedscope rejects a file with any event lacking it.
    // A sibling row's args also name its tensor (Note [Timeline rows]), a string as well.
    out += ",\"ts\":0,\"args\":{\"name\":";
    append_json_string(out, name);
    for (const auto& [key, value] : scratch_) {
      out += ',';
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += "}}";
    return;
  }
  append_timed_fields(out, event.kind, event.ts_ns, event.dur_ns);
  if (!scratch_.empty()) {
    out += ",\"args\":{";
    bool first = true;
    for (const auto& [key, value] : scratch_) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, key);
      out += ':';
      append_arg_value(out, value);
    }
    out += '}';
  }
  out += '}';
}

}  // namespace kolo::timeline_detail
