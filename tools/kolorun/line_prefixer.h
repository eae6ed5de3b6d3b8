// LinePrefixer: turns a child's byte stream into whole lines, each written with the rank's
// prefix ("[2] ") into one OutputSink, whole, so lines from different ranks never interleave
// mid-line. Partial lines wait for their newline; a line longer than kMaxLine is cut into
// pieces of that size, each prefixed (a runaway line must not grow memory without bound).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tools/kolorun/output_sink.h"

namespace kolo::kolorun {

class LinePrefixer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // sink: where lines go (kolorun's stdout or stderr). Not owned; must outlive this.
  LinePrefixer(std::string prefix, OutputSink& sink) : prefix_(std::move(prefix)), sink_(sink) {}

  // Writes every complete line in data; keeps the rest for later.
  void feed(std::string_view data);
  // Writes a pending partial line (with a newline added): the stream ended.
  void finish();

 private:
  void emit(std::string_view line);  // line without its '\n'

  std::string prefix_;
  OutputSink& sink_;
  std::string pending_;
};

}  // namespace kolo::kolorun
