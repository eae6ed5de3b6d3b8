// --json FILE, which every kolo-bench subcommand takes: the rows it prints, as a JSON array of
// objects (one per printed row, numbers unrounded) written by rank 0 after the run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/flags.h"
#include "kolo/status.h"

namespace kolo::bench {

// The --json flag, storing the file name into `path` (empty: no file).
Flag json_flag(std::string* path);

// Writes `rows` to `path` (created or truncated). IoError naming the path when it cannot.
Status write_json_rows(const std::string& path, const nlohmann::json& rows);

}  // namespace kolo::bench
