// remora-perf: perftest-style benchmark of Remora (the command line; the
// engine is perf_engine.cpp). Same command line and output as the raw
// libfabric baseline bench/raw_fabric_perf.cpp (remora-bench-raw).
//
//   remora-perf --server --port P [--provider NAME] [--address A] [--busy-poll] [--size-max BYTES]
//   remora-perf --client HOST --port P --op OP --size BYTES[,BYTES...] [--qd N] [--iters N]
//               [--json] [--provider NAME] [--address A] [--busy-poll]
//
// Exit status: 0 success, 1 run-time error, 2 bad command line, 3 watchdog.
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "cli.hpp"
#include "perf_engine.hpp"

namespace {

using remora::perf::Config;
using remora::perf::Op;
using remora::perf::Role;
using remora::tools::Option;
using remora::tools::UsageError;
using remora::tools::parse_u64;

constexpr std::string_view kProgram = "remora-perf";

std::vector<std::size_t> parse_sizes(std::string_view list) {
  std::vector<std::size_t> out;
  while (true) {
    const auto comma = list.find(',');
    out.push_back(remora::tools::parse_size("--size", list.substr(0, comma), remora::perf::kMaxSize));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

// ---- the option table ---------------------------------------------------------

constexpr std::array<Option<Config>, 14> kOptions{{
    {"--server", "", "run the target: serve one connection until it closes",
     [](Config& c, std::string_view) {
       if (c.role == Role::client) throw UsageError("--server and --client are exclusive");
       c.role = Role::server;
     }},
    {"--client", "HOST", "run the initiator against the server at HOST",
     [](Config& c, std::string_view v) {
       if (c.role == Role::server) throw UsageError("--server and --client are exclusive");
       if (v.empty()) throw UsageError("--client: empty host");
       c.role = Role::client;
       c.host = v;
     }},
    {"--port", "P", "TCP port of the server (server: 0 picks a free one)",
     [](Config& c, std::string_view v) {
       const auto p = parse_u64("--port", v);
       if (p > 65535) throw UsageError("--port: must be 0..65535");
       c.port = static_cast<std::uint16_t>(p);
       c.port_set = true;
     }},
    {"--address", "A",
     "local address: the server listens on it (default 0.0.0.0);\n"
     "the client binds to it (default: the one routing to HOST)",
     [](Config& c, std::string_view v) {
       if (v.empty()) throw UsageError("--address: empty address");
       c.address = v;
     }},
    {"--provider", "NAME", "libfabric provider (default tcp)",
     [](Config& c, std::string_view v) {
       if (v.empty()) throw UsageError("--provider: empty name");
       c.provider = v;
     }},
    {"--busy-poll", "",
     "target agents spin instead of sleeping (FabricOptions::\n"
     "busy_poll); the client always busy-polls its queue",
     [](Config& c, std::string_view) { c.busy_poll = true; }},
    {"--size-max", "BYTES", "server: largest buffer a client may ask for (default 1g)",
     [](Config& c, std::string_view v) {
       c.size_max = remora::tools::parse_size("--size-max", v, remora::perf::kMaxSize);
       c.size_max_set = true;
     }},
    {"--op", "OP",
     "write | read | send | write_flush_visibility |\n"
     "write_flush_persistent | atomic_write",
     [](Config& c, std::string_view v) {
       const auto op = remora::perf::op_from_name(v);
       if (!op) throw UsageError("--op: unknown operation '" + std::string(v) + "'");
       c.op = *op;
       c.op_set = true;
     }},
    {"--size", "BYTES[,BYTES...]", "message sizes (suffix k, m, g), run in sequence\n"
     "on one connection",
     [](Config& c, std::string_view v) { c.sizes = parse_sizes(v); }},
    {"--qd", "N", "operations outstanding (default 16; latency ops force 1)",
     [](Config& c, std::string_view v) {
       const auto q = parse_u64("--qd", v);
       if (q == 0 || q > remora::perf::kMaxQd)
         throw UsageError("--qd: must be 1.." + std::to_string(remora::perf::kMaxQd));
       c.qd = static_cast<unsigned>(q);
       c.qd_set = true;
     }},
    {"--iters", "N",
     "measured operations per size (default: calibrated to\n"
     "1.5-2 s, at least 1000 for latency ops)",
     [](Config& c, std::string_view v) {
       const auto n = parse_u64("--iters", v);
       if (n == 0 || n > remora::perf::kMaxIters)
         throw UsageError("--iters: must be 1.." + std::to_string(remora::perf::kMaxIters));
       c.iters = n;
     }},
    {"--json", "", "print one JSON object per size instead of the table",
     [](Config& c, std::string_view) { c.json = true; }},
    {"--completion", "delivery",
     "accepted for remora-bench-raw compatibility: Remora writes\n"
     "and sends always complete at delivery",
     [](Config&, std::string_view v) {
       if (v == "delivery") return;
       if (v == "default")
         throw UsageError("--completion default: Remora has no such mode (its writes and sends always complete "
                          "at delivery); only remora-bench-raw has it");
       throw UsageError("--completion: must be 'default' or 'delivery'");
     }},
    {"--help", "", "show this help", [](Config& c, std::string_view) { c.help = true; }},
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
  if (c.help) return;
  if (c.role == Role::none) throw UsageError("one of --server or --client HOST is required");
  if (!c.port_set) throw UsageError("--port is required");
  if (c.role == Role::server) {
    if (c.op_set || !c.sizes.empty() || c.qd_set || c.iters != 0 || c.json)
      throw UsageError("--op, --size, --qd, --iters and --json are client options");
    return;
  }
  if (c.size_max_set) throw UsageError("--size-max is a server option");
  if (c.port == 0) throw UsageError("--port: the client needs the server's port (1..65535)");
  if (!c.op_set) throw UsageError("--op is required with --client");
  if (c.sizes.empty()) throw UsageError("--size is required with --client");
  if (c.op == Op::atomic_write && std::any_of(c.sizes.begin(), c.sizes.end(), [](std::size_t s) { return s != 8; }))
    throw UsageError("atomic_write is an 8-byte operation: use --size 8");
  if (remora::perf::op_is_latency(c.op)) c.qd = 1;
}

// ---- watchdog -----------------------------------------------------------------

std::chrono::seconds watchdog_limit() {
  for (const char* name : {"REMORA_PERF_WATCHDOG_S", "REMORA_BENCH_WATCHDOG_S"}) {
    const char* env = std::getenv(name);
    if (env == nullptr) continue;
    const std::string_view v(env);
    std::uint64_t secs = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), secs);
    if (ec == std::errc{} && p == v.data() + v.size() && secs > 0) return std::chrono::seconds(secs);
  }
  return std::chrono::seconds(900);
}

// Ends the process if the run is not over in time: no benchmark may hang.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : thread_([this, limit] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "%s: error: watchdog: still running after %lld s, giving up\n", kProgram.data(),
                         static_cast<long long>(limit.count()));
            std::fflush(stderr);
            remora::perf::emergency_cleanup();
            std::_Exit(3);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

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
    Watchdog watchdog(watchdog_limit());
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
