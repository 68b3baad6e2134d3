// tools/perf_engine.hpp - the measuring engine of remora-perf. It receives a
// validated Config (remora_perf.cpp owns the command line) and runs one role.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "perf_cli.hpp"

namespace remora::perf {

/// remora-perf's configuration: the options it shares with remora-bench-raw
/// (perf_cli.hpp) and its own.
struct Config : CommonConfig {
  // CommonConfig::address: empty means 0.0.0.0 for the server and, for the
  // client, the local address routing to host. CommonConfig::iters 0: the
  // client calibrates each size to ~1.5 s. CommonConfig::port 0 (server):
  // any free port, printed.
  std::size_t size_max = kDefaultSizeMax;  ///< server: largest buffer a client may ask for
  bool size_max_set = false;
  bool connections_set = false;
  bool shared_target = false;          ///< server: the target buffer from ProtectionZone::allocate
  std::size_t target_span = 0;         ///< server: the target buffer's length, when above the client's size
  std::string plot;                    ///< --plot: the SVG to write
  std::vector<std::string> plot_json;  ///< --plot-json FILE[=LABEL]: plot these instead of running
  std::string plot_title;              ///< --plot-title

  static constexpr std::size_t kDefaultSizeMax = std::size_t{1} << 30;
  static constexpr unsigned kMaxConnections = 1024;
};

/// A failure at run time; main prints it and exits 1.
class PerfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::string_view kEngine = "remora";

/// Listens, accepts one connection and serves it until the client leaves.
void run_server(const Config& cfg);
/// Connects, measures every size in turn, prints the results (and writes
/// the --plot), disconnects.
void run_client(const Config& cfg);
/// Async-signal-safe: removes files the server created (the watchdog calls
/// it before ending the process).
void emergency_cleanup() noexcept;

}  // namespace remora::perf
