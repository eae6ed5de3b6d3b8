// LinePrefixer: turns a child's byte stream into whole lines, each written with the rank's
// prefix ("[2] ") in a single write(2), so lines from different ranks never interleave
// mid-line. Partial lines wait for their newline; a line longer than kMaxLine is cut into
// pieces of that size, each prefixed (a runaway line must not grow memory without bound).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kolo::kolorun {

class LinePrefixer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // fd: where lines go (1 or 2). Not owned.
  LinePrefixer(std::string prefix, int fd) : prefix_(std::move(prefix)), fd_(fd) {}

  // Writes every complete line in data; keeps the rest for later.
  void feed(std::string_view data);
  // Writes a pending partial line (with a newline added): the stream ended.
  void finish();

 private:
  void emit(std::string_view line);  // line without its '\n'

  std::string prefix_;
  int fd_;
  std::string pending_;
};

// Writes all of data to fd, retrying on EINTR and short writes. Errors (e.g. a closed pipe on
// our stdout) are ignored: kolorun keeps supervising even if nobody reads its output.
void write_all(int fd, std::string_view data);

}  // namespace kolo::kolorun
