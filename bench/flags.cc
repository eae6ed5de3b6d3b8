#include "bench/flags.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "kolo/units.h"

namespace kolo::bench {

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr size_t kHelpColumns = 100;

bool is_help(std::string_view word) { return word == "-h" || word == "--help"; }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string quoted(std::string_view text) {
  // Appended piecewise: "'" + std::string(text) + "'" trips GCC 12's -Wrestrict.
  std::string out = "'";
  out += text;
  out += '\'';
  return out;
}

Status invalid(const Flag& flag, std::string_view value) {
  return Status::InvalidArgument(flag.name + " " + quoted(value) + " is invalid: expected " +
                                 accepted_form(flag));
}

// Stores `value` into the flag's target, or says why it is not accepted.
Status store(const Flag& flag, std::string_view value) {
  switch (flag.kind) {
    case FlagKind::kSwitch:
      *flag.switch_target = true;
      return Status::Ok();
    case FlagKind::kInt: {
      int64_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < flag.min || n > flag.max)
        return invalid(flag, value);
      *flag.int_target = static_cast<int>(n);
      return Status::Ok();
    }
    case FlagKind::kSize: {
      Result<uint64_t> bytes = parse_size(value);
      if (!bytes.ok()) return bytes.status().with_context(flag.name);
      if (*bytes < static_cast<uint64_t>(flag.min) || *bytes > static_cast<uint64_t>(flag.max))
        return invalid(flag, value);
      *flag.size_target = *bytes;
      return Status::Ok();
    }
    case FlagKind::kChoice:
      return flag.choose(value) ? Status::Ok() : invalid(flag, value);
    case FlagKind::kText:
      *flag.text_target = std::string(value);
      return Status::Ok();
  }
  return Status::Internal("flag " + flag.name + " has no kind");
}

}  // namespace

namespace {

// The fields every kind has; the factories add their target and range.
Flag make_flag(std::string name, FlagKind kind, std::string value_name, std::string help,
               std::string default_text) {
  Flag f;
  f.name = std::move(name);
  f.kind = kind;
  f.value_name = std::move(value_name);
  f.help = std::move(help);
  f.default_text = std::move(default_text);
  return f;
}

}  // namespace

Flag switch_flag(std::string name, bool* target, std::string help) {
  Flag f = make_flag(std::move(name), FlagKind::kSwitch, "", std::move(help), "");
  f.switch_target = target;
  return f;
}

Flag int_flag(std::string name, std::string value_name, int* target, int min, int max,
              std::string help) {
  Flag f = make_flag(std::move(name), FlagKind::kInt, std::move(value_name), std::move(help),
                     std::to_string(*target));
  f.min = min;
  f.max = max;
  f.int_target = target;
  return f;
}

Flag size_flag(std::string name, uint64_t* target, uint64_t min, std::string help) {
  Flag f =
      make_flag(std::move(name), FlagKind::kSize, "SIZE", std::move(help), format_size(*target));
  f.min = static_cast<int64_t>(std::min<uint64_t>(min, kInt64Max));
  f.max = kInt64Max;
  f.size_target = target;
  return f;
}

Flag text_flag(std::string name, std::string value_name, std::string* target, std::string help) {
  Flag f =
      make_flag(std::move(name), FlagKind::kText, std::move(value_name), std::move(help), *target);
  f.text_target = target;
  return f;
}

Flag choice_flag(std::string name, std::string value_name, std::vector<std::string> choices,
                 std::function<bool(std::string_view)> choose, std::string default_text,
                 std::string help) {
  Flag f = make_flag(std::move(name), FlagKind::kChoice, std::move(value_name), std::move(help),
                     std::move(default_text));
  f.choices = std::move(choices);
  f.choose = std::move(choose);
  return f;
}

std::string accepted_form(const Flag& flag) {
  switch (flag.kind) {
    case FlagKind::kSwitch:
      return "no value";
    case FlagKind::kInt:
      if (flag.max == kIntMax) return "an integer >= " + std::to_string(flag.min);
      return "an integer in [" + std::to_string(flag.min) + ", " + std::to_string(flag.max) + "]";
    case FlagKind::kSize:
      return "a size such as 4096, 64KiB or 1.5MB, at least " +
             format_size(static_cast<uint64_t>(flag.min));
    case FlagKind::kChoice:
      return "one of " + join(flag.choices);
    case FlagKind::kText:
      return "a value";
  }
  return "";
}

Result<Parsed> parse_flags(std::span<const Flag> flags, std::span<char* const> args) {
  if (std::any_of(args.begin(), args.end(), [](const char* w) { return is_help(w); }))
    return Parsed::kHelp;
  std::vector<bool> seen(flags.size(), false);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view word = args[i];
    auto it =
        std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == word; });
    if (it == flags.end()) {
      if (word.starts_with("-"))
        return Status::InvalidArgument("unknown option " + quoted(word) + " (see --help)");
      return Status::InvalidArgument("unexpected argument " + quoted(word) +
                                     ": every value follows its option (see --help)");
    }
    const Flag& flag = *it;
    const size_t index = static_cast<size_t>(it - flags.begin());
    if (seen[index]) return Status::InvalidArgument(flag.name + " is given twice");
    seen[index] = true;
    if (flag.kind == FlagKind::kSwitch) {
      KOLO_RETURN_IF_ERROR(store(flag, ""));
      continue;
    }
    if (i + 1 >= args.size())
      return Status::InvalidArgument(flag.name + " needs a value: " + accepted_form(flag));
    KOLO_RETURN_IF_ERROR(store(flag, args[++i]));
  }
  return Parsed::kRun;
}

std::string command_help(const CommandLine& line) {
  auto label = [](const Flag& f) {
    return f.value_name.empty() ? f.name : f.name + " " + f.value_name;
  };
  size_t width = std::string("-h, --help").size();
  for (const Flag& f : line.flags) width = std::max(width, label(f).size());
  // A flag's description is its help, its accepted form and its default: pieces that start a
  // new line of the column rather than pass kHelpColumns, and are never split.
  auto row = [&](const std::string& left, const std::vector<std::string>& pieces) {
    const std::string indent(width + 4, ' ');
    std::string out = "  " + left + std::string(width - left.size() + 2, ' ') + pieces[0];
    size_t column = out.size();
    for (size_t i = 1; i < pieces.size(); ++i) {
      std::string piece = pieces[i];
      if (column + piece.size() > kHelpColumns) {
        piece.erase(0, piece.find_first_not_of("; "));
        out += "\n" + indent;
        column = indent.size();
      }
      out += piece;
      column += piece.size();
    }
    return out + "\n";
  };
  std::string out = "usage: kolo-bench " + line.command + " [options]\n" + line.about;
  out += "options:\n";
  for (const Flag& f : line.flags) {
    std::vector<std::string> pieces = {f.help};
    if (f.kind != FlagKind::kSwitch && f.kind != FlagKind::kText)
      pieces.push_back(" (" + accepted_form(f) + ")");
    if (!f.default_text.empty()) pieces.push_back("; default " + f.default_text);
    out += row(label(f), pieces);
  }
  out += row("-h, --help", {"print this help and exit without running"});
  return out + line.notes;
}

int run_command(const CommandLine& line, int argc, char** argv,
                const std::function<Status()>& run) {
  const std::span<char* const> args(argv + 1, argc > 1 ? argc - 1 : 0);
  Result<Parsed> parsed = parse_flags(line.flags, args);
  Status status = parsed.status();
  if (status.ok() && *parsed == Parsed::kHelp) {
    std::fputs(command_help(line).c_str(), stdout);
    return 0;
  }
  if (status.ok() && line.check) status = line.check();
  if (!status.ok()) {
    std::fprintf(stderr, "kolo-bench %s: %s\n", line.command.c_str(), status.message().c_str());
    return 2;
  }
  status = run();
  if (!status.ok()) {
    std::fprintf(stderr, "kolo-bench %s: %s\n", line.command.c_str(), status.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kolo::bench
