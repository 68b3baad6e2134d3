// tools/cli.hpp - the small command-line machinery shared by the Remora
// tools: an option table (one per tool), a parser driven by it, the usage
// text generated from it, and a few value parsers. Knows nothing of Remora.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace remora::tools {

/// A bad command line. The tool prints the message and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One row of a tool's option table. `apply` stores the (already split off)
/// value in the tool's configuration and throws UsageError on a bad one.
template <class Config>
struct Option {
  /// The option's name with its dashes ("--size"), or its aliases joined
  /// by '|' ("-a|--all", perftest's short forms): every alias is accepted
  /// and the help shows them all.
  std::string_view name;
  std::string_view metavar;  ///< value placeholder; empty for a flag
  std::string_view help;     ///< may contain '\n' for continuation lines
  void (*apply)(Config&, std::string_view value);
};

/// True when `arg` is `name` or one of its '|'-separated aliases.
inline bool option_matches(std::string_view name, std::string_view arg) {
  while (true) {
    const auto bar = name.find('|');
    if (name.substr(0, bar) == arg) return true;
    if (bar == std::string_view::npos) return false;
    name.remove_prefix(bar + 1);
  }
}

/// Parses argv with `table`. Accepts "--name value", "--name=value" and "-h"
/// for "--help". Throws UsageError.
template <class Config>
void parse_options(std::span<const Option<Config>> table, int argc, const char* const* argv, Config& config) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::optional<std::string_view> inline_value;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg == "-h") arg = "--help";
    const Option<Config>* opt = nullptr;
    for (const auto& o : table)
      if (option_matches(o.name, arg)) opt = &o;
    if (opt == nullptr) throw UsageError("unknown option '" + std::string(arg) + "'");
    std::string_view value;
    if (!opt->metavar.empty()) {
      if (inline_value) {
        value = *inline_value;
      } else {
        if (i + 1 >= argc) throw UsageError(std::string(arg) + " needs a value (" + std::string(opt->metavar) + ")");
        value = argv[++i];
      }
    } else if (inline_value) {
      throw UsageError(std::string(arg) + " takes no value");
    }
    opt->apply(config, value);
  }
}

/// The "options:" part of a usage text, one entry per table row.
template <class Config>
std::string options_help(std::span<const Option<Config>> table) {
  constexpr std::size_t kColumn = 30;
  std::string out;
  for (const auto& o : table) {
    std::string head(2, ' ');
    for (const char c : o.name) {
      if (c == '|')
        head += ", ";
      else
        head += c;
    }
    if (!o.metavar.empty()) {
      head += ' ';
      head.append(o.metavar);
    }
    out += head;
    if (head.size() + 2 <= kColumn)
      out += std::string(kColumn - head.size(), ' ');
    else
      out += "\n" + std::string(kColumn, ' ');
    for (char c : o.help) {
      out += c;
      if (c == '\n') out += std::string(kColumn, ' ');
    }
    out += '\n';
  }
  return out;
}

/// A decimal unsigned number, nothing else.
inline std::uint64_t parse_u64(std::string_view option, std::string_view text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || p != end)
    throw UsageError(std::string(option) + ": not a number: '" + std::string(text) + "'");
  return v;
}

/// A number of seconds (a decimal, "0.3"), between `lo` and `hi`.
inline double parse_seconds(std::string_view option, std::string_view text, double lo, double hi) {
  const std::string s(text);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(d >= lo && d <= hi)) {
    char range[96];
    std::snprintf(range, sizeof range, ": seconds between %g and %g", lo, hi);
    throw UsageError(std::string(option) + range);
  }
  return d;
}

/// A byte count: digits with an optional binary suffix k, m or g (either
/// case), between 1 and `max`.
inline std::size_t parse_size(std::string_view option, std::string_view text, std::size_t max) {
  std::uint64_t mult = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K': mult = std::uint64_t{1} << 10; break;
      case 'm':
      case 'M': mult = std::uint64_t{1} << 20; break;
      case 'g':
      case 'G': mult = std::uint64_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) text.remove_suffix(1);
  }
  const std::uint64_t v = parse_u64(option, text);
  if (v == 0 || v > max / mult)
    throw UsageError(std::string(option) + ": sizes must be between 1 and " + std::to_string(max) + " bytes");
  return static_cast<std::size_t>(v * mult);
}

/// A comma-separated list of byte counts ("8,4k,1m"), each as parse_size.
inline std::vector<std::size_t> parse_size_list(std::string_view option, std::string_view list, std::size_t max) {
  std::vector<std::size_t> out;
  while (true) {
    const auto comma = list.find(',');
    out.push_back(parse_size(option, list.substr(0, comma), max));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

/// `s` as the body of a JSON string (without the quotes).
inline std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += ch;
        }
    }
  }
  return out;
}

}  // namespace remora::tools
