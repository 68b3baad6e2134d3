// Command line of remora-bench-raw: the same options as remora-perf. The
// options both tools share, the operations and the checks are in
// tools/perf_cli.hpp (header-only, no Remora); this header adds what only
// the baseline has (--completion, its default iteration counts). The engine
// (client.cpp, server.cpp) receives a validated Config.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "perf_cli.hpp"

namespace rbench {

using remora::perf::Op;
using remora::perf::op_is_latency;
using remora::perf::op_name;
using remora::perf::Role;
using remora::tools::UsageError;  // a bad command line: main prints it, exits 2

inline constexpr std::string_view kEngine = "raw-libfabric";

// --completion: what a write (or send) completion must mean.
enum class Completion {
  delivery,  // FI_DELIVERY_COMPLETE: the data reached the target memory
  standard,  // "default": plain post, completion = the data left the buffer
};

// CommonConfig::address is the server's listen address (listen_address());
// the client accepts it and does not use it.
struct Config : remora::perf::CommonConfig {
  Completion completion = Completion::delivery;
};

// Parses argv into a Config and validates it. Throws UsageError.
Config parse_command_line(int argc, const char* const* argv);

// The usage text, generated from the option table.
std::string usage_text(std::string_view program);

// What a completion of cfg.op means ("delivery", "default" or "commit").
std::string_view completion_name(const Config& cfg);

// Default iteration count when --iters is not given.
std::uint64_t default_iters(Op op, std::size_t size);

}  // namespace rbench
