#include "bench/json_rows.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace kolo::bench {

Flag json_flag(std::string* path) {
  return text_flag("--json", "FILE", path, "write every row as a JSON array of objects (rank 0)");
}

Status write_json_rows(const std::string& path, const nlohmann::json& rows) {
  std::ofstream out(path);
  out << rows.dump(2) << "\n";
  out.close();
  if (!out) return Status::IoError("--json: cannot write '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace kolo::bench
