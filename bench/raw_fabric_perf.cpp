// remora-bench-raw: the raw libfabric baseline that remora-perf is compared
// against. Same command line and output as remora-perf; every operation is
// posted directly with libfabric calls (see bench/README.md).
#include "raw/engine.hpp"
#include "raw/fabric.hpp"
#include "raw/options.hpp"
#include "watchdog.hpp"  // tools/

#include <cstdio>
#include <exception>
#include <string_view>

namespace {

constexpr std::string_view kProgram = "remora-bench-raw";

}  // namespace

int main(int argc, char** argv) {
  rbench::Config cfg;
  try {
    cfg = rbench::parse_command_line(argc, argv);
  } catch (const rbench::UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", kProgram.data(), e.what());
    return 2;
  }
  if (cfg.help) {
    std::fputs(rbench::usage_text(kProgram).c_str(), stdout);
    return 0;
  }
  try {
    // Ends the process if the run is not over in time, so that no
    // benchmark can hang forever.
    remora::tools::Watchdog watchdog(remora::tools::watchdog_limit({"REMORA_BENCH_WATCHDOG_S"}), kProgram);
    if (cfg.role == rbench::Role::server)
      rbench::run_server(cfg);
    else
      rbench::run_client(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
    return 1;
  }
  return 0;
}
