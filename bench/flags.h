// The command-line parser of every kolo-bench subcommand. A subcommand declares its flags
// (kind, accepted range or names, help) bound to the fields of its options struct, whose
// initial values are the defaults; the parser fills the fields, writes the help text and names
// the flag, the value and the accepted form in every error. Sizes are read by parse_size
// (kolo/units.h), so "64MiB" means the same here as in every KOLO_* variable.
//
// Not thread-safe; a Flag holds pointers into the options it fills, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/status.h"

namespace kolo::bench {

enum class FlagKind {
  kSwitch,  // no value: present means true
  kInt,     // a decimal integer within [min, max]
  kSize,    // bytes with an optional unit (parse_size) within [min, max]
  kChoice,  // one of a list of names
  kText,    // any text, e.g. a file name
};

struct Flag {
  std::string name;  // "--iters" or "-n"
  FlagKind kind = FlagKind::kSwitch;
  std::string value_name;  // "N", "SIZE", "FILE" in the help; empty for switches
  std::string help;
  std::string default_text;  // shown in the help; empty: no default shown
  int64_t min = 0;           // kInt, kSize
  int64_t max = 0;
  std::vector<std::string> choices;  // kChoice: the accepted names, in the help and errors
  // Where the value goes; the one that matches `kind` is set.
  bool* switch_target = nullptr;
  int* int_target = nullptr;
  uint64_t* size_target = nullptr;
  std::string* text_target = nullptr;
  std::function<bool(std::string_view)> choose;  // kChoice: stores the value; false if unknown
};

// Factories: the current value of the target is the default shown in the help.
Flag switch_flag(std::string name, bool* target, std::string help);
Flag int_flag(std::string name, std::string value_name, int* target, int min, int max,
              std::string help);
Flag size_flag(std::string name, uint64_t* target, uint64_t min, std::string help);
Flag text_flag(std::string name, std::string value_name, std::string* target, std::string help);
// `choose` stores the value it accepts, which may include aliases beyond `choices` (e.g.
// parse_dtype's "f32"), and returns false for anything else.
Flag choice_flag(std::string name, std::string value_name, std::vector<std::string> choices,
                 std::function<bool(std::string_view)> choose, std::string default_text,
                 std::string help);
// A choice read by an existing parser such as parse_dtype (nullopt: not accepted).
template <typename T>
Flag enum_flag(std::string name, std::string value_name, std::vector<std::string> choices,
               std::optional<T> (*parse)(std::string_view), T* target, std::string default_text,
               std::string help) {
  auto choose = [parse, target](std::string_view text) {
    const std::optional<T> value = parse(text);
    if (value) *target = *value;
    return value.has_value();
  };
  return choice_flag(std::move(name), std::move(value_name), std::move(choices), choose,
                     std::move(default_text), std::move(help));
}

inline constexpr int kIntMax = std::numeric_limits<int>::max();

// The accepted form of a flag's value as the help and the errors state it, e.g. "an integer
// >= 1", "an integer in [0, 100]", "one of tcp, mpi".
std::string accepted_form(const Flag& flag);

// What the command line asked for.
enum class Parsed { kRun, kHelp };

// Parses `args` (the words after the subcommand's name). kHelp when any word is -h or --help
// (nothing is stored then). Otherwise stores each flag's value and returns kRun, or
// InvalidArgument, with nothing run, for: an unknown flag, a word that is not a flag, a flag
// given twice, a missing value, a value that is malformed or out of range (the message names
// the flag, the value and the accepted form). Targets may be partly written on error.
Result<Parsed> parse_flags(std::span<const Flag> flags, std::span<char* const> args);

// One subcommand's command line, for parsing and for its help.
struct CommandLine {
  std::string command;  // "latency": the help says "usage: kolo-bench latency [options]"
  std::string about;    // what the command measures, lines ending in '\n'

  std::vector<Flag> flags;  // -h/--help is implied
  std::string notes;        // after the options (may be empty)
  // Checks across flags after they are all parsed (e.g. -b <= -e); may be empty.
  std::function<Status()> check;
};

// The help text of one subcommand: usage, about, one line per flag with its accepted form and
// default, notes.
std::string command_help(const CommandLine& line);

// Parses argv (argv[0] is the subcommand's name) and runs `run` with the options filled.
// --help prints command_help() to stdout and returns 0; a parse or check error prints
// "kolo-bench <command>: <message>" to stderr and returns 2; otherwise `run`'s error is printed
// the same way and returns 1, success 0.
int run_command(const CommandLine& line, int argc, char** argv, const std::function<Status()>& run);

}  // namespace kolo::bench
