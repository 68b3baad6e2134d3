// remora-perf: perftest-style benchmark of Remora (the command line; the
// engine is perf_engine.cpp). Same command line and output as the raw
// libfabric baseline bench/raw_fabric_perf.cpp (remora-bench-raw): the
// options both have, the statistics and the output are shared with it
// (perf_cli.hpp, perf_report.hpp, watchdog.hpp).
//
//   remora-perf --server --port P [--provider NAME] [--address A] [--busy-poll] [--size-max BYTES]
//   remora-perf --client HOST --port P --op OP --size BYTES[,BYTES...] [--qd N] [--iters N]
//               [--json] [--provider NAME] [--address A] [--busy-poll]
//
// Exit status: 0 success, 1 run-time error, 2 bad command line, 3 watchdog.
#include <array>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "cli.hpp"
#include "perf_cli.hpp"
#include "perf_engine.hpp"
#include "watchdog.hpp"

namespace {

using remora::perf::Config;
using remora::perf::Role;
using remora::tools::Option;
using remora::tools::UsageError;
namespace opt = remora::perf::options;

constexpr std::string_view kProgram = "remora-perf";

// ---- the option table ---------------------------------------------------------

constexpr std::array<Option<Config>, 14> kOptions{{
    opt::server<Config>(),
    opt::client<Config>(),
    opt::port<Config, true>("TCP port of the server (server: 0 picks a free one)"),
    opt::address<Config>("local address: the server listens on it (default 0.0.0.0);\n"
                         "the client binds to it (default: the one routing to HOST)"),
    opt::provider<Config>(),
    opt::busy_poll<Config>("target agents spin instead of sleeping (FabricOptions::\n"
                           "busy_poll); the client always busy-polls its queue"),
    {"--size-max", "BYTES", "server: largest buffer a client may ask for (default 1g)",
     [](Config& c, std::string_view v) {
       c.size_max = remora::tools::parse_size("--size-max", v, remora::perf::kMaxSize);
       c.size_max_set = true;
     }},
    opt::op<Config>(),
    opt::sizes<Config>("message sizes (suffix k, m, g), run in sequence\n"
                       "on one connection"),
    opt::qd<Config>(),
    opt::iters<Config>("measured operations per size (default: calibrated to\n"
                       "1.5-2 s, at least 1000 for latency ops)"),
    opt::json<Config>(),
    {"--completion", "delivery",
     "accepted for remora-bench-raw compatibility: Remora writes\n"
     "and sends always complete at delivery",
     [](Config&, std::string_view v) {
       if (v == "delivery") return;
       if (v == "default")
         throw UsageError(
             "--completion default: Remora has no such mode (its writes and sends always complete "
             "at delivery); only remora-bench-raw has it");
       throw UsageError("--completion: must be 'default' or 'delivery'");
     }},
    opt::help<Config>(),
}};

std::string usage() {
  std::string out;
  out += "usage:\n";
  out += "  remora-perf --server --port P [--provider NAME] [--address A] [--busy-poll]\n";
  out += "              [--size-max BYTES]\n";
  out += "  remora-perf --client HOST --port P --op OP --size BYTES[,BYTES...] [--qd N] [--iters N]\n";
  out += "              [--json] [--provider NAME] [--address A] [--busy-poll]\n\n";
  out +=
      "perftest-style benchmark of Remora (engine \"remora\"); same command line and output as\n"
      "remora-bench-raw. The server registers a buffer (and, for write_flush_persistent, a\n"
      "file-backed persistent region under $TMPDIR or /tmp) and leaves everything but receives\n"
      "to its target agent. Latencies are per operation, post to completion, in microseconds.\n"
      "write_flush_*: a write of SIZE then a flush of the same range, timed to the flush's\n"
      "completion. atomic_write: 8-byte atomic writes (--size 8).\n\n"
      "environment: REMORA_PERF_WATCHDOG_S (or REMORA_BENCH_WATCHDOG_S): give up after that\n"
      "many seconds (default 900).\n\noptions:\n";
  out += remora::tools::options_help<Config>(kOptions);
  return out;
}

void validate(Config& c) {
  if (!remora::perf::validate_role(c)) return;
  if (c.size_max_set) throw UsageError("--size-max is a server option");
  if (c.port == 0) throw UsageError("--port: the client needs the server's port (1..65535)");
  remora::perf::validate_client(c);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    remora::tools::parse_options<Config>(kOptions, argc, argv, cfg);
    validate(cfg);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", kProgram.data(), e.what());
    return 2;
  }
  if (cfg.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    remora::tools::Watchdog watchdog(
        remora::tools::watchdog_limit({"REMORA_PERF_WATCHDOG_S", "REMORA_BENCH_WATCHDOG_S"}), kProgram,
        remora::perf::emergency_cleanup);
    if (cfg.role == Role::server)
      remora::perf::run_server(cfg);
    else
      remora::perf::run_client(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
    return 1;
  }
  return 0;
}
