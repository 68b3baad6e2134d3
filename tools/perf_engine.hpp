// tools/perf_engine.hpp - the measuring engine of remora-perf. It receives a
// validated Config (remora_perf.cpp owns the command line) and runs one role.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace remora::perf {

enum class Role { none, server, client };

enum class Op {
  write,
  read,
  write_flush_visibility,
  write_flush_persistent,
  atomic_write,
  send,
};

struct Config {
  Role role = Role::none;
  std::string host;                 ///< client: the server
  std::uint16_t port = 0;           ///< server: 0 = any free port (printed)
  bool port_set = false;
  std::string provider = "tcp";
  std::string address;              ///< local address; empty: server 0.0.0.0,
                                    ///< client the one routing to host
  bool busy_poll = false;           ///< FabricOptions::busy_poll (target agents spin)
  Op op = Op::write;
  bool op_set = false;
  std::vector<std::size_t> sizes;
  unsigned qd = 16;
  bool qd_set = false;
  std::uint64_t iters = 0;          ///< 0: calibrated to ~1.5 s per size
  bool json = false;
  std::size_t size_max = kDefaultSizeMax;  ///< server: largest buffer a client may ask for
  bool size_max_set = false;
  bool help = false;

  static constexpr std::size_t kDefaultSizeMax = std::size_t{1} << 30;
};

/// A failure at run time; main prints it and exits 1.
class PerfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::string_view kEngine = "remora";
inline constexpr std::size_t kMaxSize = std::size_t{1} << 30;
inline constexpr unsigned kMaxQd = 4096;
inline constexpr std::uint64_t kMaxIters = 100'000'000;

std::string_view op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);
/// Operations measured one at a time (latency); they run at qd 1.
bool op_is_latency(Op op);
/// What a completion of `op` means in Remora (the JSON "completion" key, as
/// in remora-bench-raw): "delivery" (data placed at the target), "default"
/// (reads: data is here) or "commit" (persistent flush).
std::string_view completion_name(Op op);

/// Listens, accepts one connection and serves it until the client leaves.
void run_server(const Config& cfg);
/// Connects, measures every size in turn, prints the results, disconnects.
void run_client(const Config& cfg);
/// Async-signal-safe: removes files the server created (the watchdog calls
/// it before ending the process).
void emergency_cleanup() noexcept;

}  // namespace remora::perf
