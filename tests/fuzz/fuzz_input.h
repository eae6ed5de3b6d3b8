// Helpers shared by the fuzz targets: what each target does with the bytes libFuzzer gives it.
//
// A finding is anything that is not a clean rejection: a crash, a sanitizer report, an
// exception other than the component's own error type, or a broken property (FUZZ_CHECK),
// which aborts so that libFuzzer saves the input.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

namespace kolo::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The bytes as a file the readers can open by path: an anonymous memory file, named through
// /proc/self/fd, so no file is left behind whatever happens. Closed by the destructor.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(::memfd_create("kolo-fuzz", MFD_CLOEXEC)) {
    FUZZ_CHECK(fd_ >= 0);
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      FUZZ_CHECK(n > 0);
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace kolo::fuzz
