// FileStore: a Store over a directory that every rank can see (a local tmp dir for tests, or a
// shared file system). Each key is one file whose name encodes the key ("k_" + percent-encoding
// of bytes outside [A-Za-z0-9._-]); set writes a temporary file and renames it over the key's
// file, so readers see either the old or the new value, never a torn one. add takes an
// exclusive flock(2) on the key's lock file ("l_" + encoded key) around its read-modify-write.
// wait/get poll the directory with a backoff from 1 ms to 50 ms.
// Thread- and process-safe. Encoded key names longer than 240 bytes are InvalidArgument (file
// systems limit a name to 255 bytes). File system failures are IoError naming the path.
#pragma once

#include <memory>
#include <string>

#include "rendezvous/store.h"

namespace kolo {

class FileStore : public Store {
 public:
  // Uses (and creates, with parents) directory dir. The directory is not removed afterwards.
  static Result<std::unique_ptr<FileStore>> open(const std::string& dir);

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Result<bool> check(const std::string& key) override;

  const std::string& dir() const { return dir_; }

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  Result<std::string> key_path(std::string_view op, const std::string& key) const;
  Status write_atomically(const std::string& path, const std::string& value);

  const std::string dir_;
};

}  // namespace kolo
