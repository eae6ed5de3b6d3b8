#include "timeline/trace_event.h"

#include <charconv>
#include <cmath>
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

void append_event_json(std::string& out, const TraceEvent& event, int pid) {
  out += "{\"name\":";
  if (event.kind == EventKind::kThreadName) {
    out += "\"thread_name\"";
  } else {
    append_json_string(out, event.name);
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
    append_json_string(out, event.name);
    for (const auto& [key, value] : event.args) {
      out += ',';
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += "}}";
    return;
  }
  out += ",\"ts\":";
  append_ts_us(out, event.ts_ns);
  if (event.kind == EventKind::kComplete) {
    out += ",\"dur\":";
    append_ts_us(out, event.dur_ns);
  }
  if (event.kind == EventKind::kInstant) out += ",\"s\":\"t\"";
  if (event.kind == EventKind::kGlobalInstant) out += ",\"s\":\"g\"";
  if (!event.args.empty()) {
    out += ",\"args\":{";
    bool first = true;
    for (const auto& [key, value] : event.args) {
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
