// tools/perf_cli.hpp - the command line that remora-perf (tools/) and its raw
// libfabric baseline remora-bench-raw (bench/) share: the operations, the
// limits, the options both accept (table rows for tools/cli.hpp) and the
// checks of a configuration. Each tool keeps its own table, usage text and
// the options only it has.
//
// Header-only and standard library only: remora-bench-raw includes it and
// must not link Remora.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"

namespace remora::perf {

enum class Role { none, server, client };

/// The measured operations. remora-perf sends the value in its connection
/// request (and checks it against `send`, the last): append only.
enum class Op {
  write,
  read,
  write_flush_visibility,
  write_flush_persistent,
  atomic_write,
  send,
};

inline constexpr std::size_t kMaxSize = std::size_t{1} << 30;  ///< largest --size (1 GiB)
inline constexpr unsigned kMaxQd = 4096;
inline constexpr std::uint64_t kMaxIters = 100'000'000;
inline constexpr std::size_t kAllMinSize = 2;                     ///< -a: first size (as perftest)
inline constexpr std::size_t kAllMaxSize = std::size_t{8} << 20;  ///< -a: default last size (8 MiB)
inline constexpr double kMaxDuration = 86400;                     ///< largest -D, seconds

namespace detail {
struct OpName {
  std::string_view name;
  Op op;
};
inline constexpr std::array<OpName, 6> kOps{{
    {"write", Op::write},
    {"read", Op::read},
    {"write_flush_visibility", Op::write_flush_visibility},
    {"write_flush_persistent", Op::write_flush_persistent},
    {"atomic_write", Op::atomic_write},
    {"send", Op::send},
}};
}  // namespace detail

inline std::string_view op_name(Op op) {
  for (const auto& o : detail::kOps)
    if (o.op == op) return o.name;
  return "?";
}

inline std::optional<Op> op_from_name(std::string_view name) {
  for (const auto& o : detail::kOps)
    if (o.name == name) return o.op;
  return std::nullopt;
}

/// Operations measured one at a time (latency); they run at qd 1.
inline constexpr bool op_is_latency(Op op) {
  return op == Op::write_flush_visibility || op == Op::write_flush_persistent || op == Op::atomic_write;
}

/// What a completion of `op` means (the "completion" of the table header and
/// of the JSON): "delivery" (the data reached the target memory), "default"
/// (reads: the data is here; writes and sends with `plain_post`: the data
/// left the buffer) or "commit" (persistent flush). Remora writes and sends
/// always complete at delivery; only remora-bench-raw has `plain_post`
/// (--completion default).
inline constexpr std::string_view completion_name(Op op, bool plain_post = false) {
  switch (op) {
    case Op::write:
    case Op::send: return plain_post ? "default" : "delivery";
    case Op::read: return "default";
    case Op::write_flush_persistent: return "commit";
    case Op::write_flush_visibility:
    case Op::atomic_write: return "delivery";
  }
  return "?";
}

/// The warm-up before a measured run of `iters` operations (so that both
/// tools do the same work for the same --iters).
inline constexpr std::uint64_t warmup_iters(std::uint64_t iters) {
  return std::clamp<std::uint64_t>(iters / 10, 16, 200);
}

/// The warm-up before a run of `duration` seconds (-D): a quarter of it, at
/// most 0.3 s.
inline double warmup_seconds(double duration) { return std::min(0.3, duration / 4); }

/// -a: every power of two from kAllMinSize to `max`.
inline std::vector<std::size_t> all_sizes(std::size_t max) {
  std::vector<std::size_t> out;
  for (std::size_t s = kAllMinSize; s <= max; s *= 2) out.push_back(s);
  return out;
}

/// What the shared options set. Each tool's Config derives from it.
struct CommonConfig {
  Role role = Role::none;
  std::string host;  ///< client: the server
  std::uint16_t port = 0;
  bool port_set = false;
  std::string provider = "tcp";
  std::string address;  ///< local address (empty: see listen_address)
  bool busy_poll = false;
  bool wait = false;  ///< client: sleep on the completion queue's fd, not busy-poll
  Op op = Op::write;
  bool op_set = false;
  std::vector<std::size_t> sizes;
  bool all = false;                   ///< -a: sizes = all_sizes(all_max)
  std::size_t all_max = kAllMaxSize;  ///< --all-max
  bool all_max_set = false;
  unsigned qd = 16;
  bool qd_set = false;
  std::uint64_t iters = 0;  ///< 0: the tool's default
  double duration = 0;      ///< -D seconds per size; 0: by iterations
  bool report_gbits = false;
  bool json = false;
  bool help = false;
  // remora-perf only (remora-bench-raw has neither option); here so that
  // the shared JSON settings can name them.
  unsigned connections = 1;
  bool bidirectional = false;

  /// The server's address: --address, else every interface.
  std::string listen_address() const { return address.empty() ? "0.0.0.0" : address; }
};

/// Rows of an option table (tools::Option<C>, C derived from CommonConfig)
/// for the options both tools accept. Where the tools describe an option
/// differently, the row takes the help text.
namespace options {

using tools::Option;
using tools::UsageError;

template <class C>
constexpr Option<C> server() {
  return {"--server", "", "run the target: serve one client until it leaves", [](C& c, std::string_view) {
            if (c.role == Role::client) throw UsageError("--server and --client are exclusive");
            c.role = Role::server;
          }};
}

template <class C>
constexpr Option<C> client() {
  return {"--client", "HOST", "run the initiator against the server at HOST", [](C& c, std::string_view v) {
            if (c.role == Role::server) throw UsageError("--server and --client are exclusive");
            if (v.empty()) throw UsageError("--client: empty host");
            c.role = Role::client;
            c.host = v;
          }};
}

/// --port; with kAllowZero, 0 is accepted (a server picking a free port).
template <class C, bool kAllowZero>
constexpr Option<C> port(std::string_view help) {
  return {"--port", "P", help, [](C& c, std::string_view v) {
            const auto p = tools::parse_u64("--port", v);
            if ((p == 0 && !kAllowZero) || p > 65535)
              throw UsageError(std::string("--port: must be ") + (kAllowZero ? "0" : "1") + "..65535");
            c.port = static_cast<std::uint16_t>(p);
            c.port_set = true;
          }};
}

template <class C>
constexpr Option<C> address(std::string_view help) {
  return {"--address", "A", help, [](C& c, std::string_view v) {
            if (v.empty()) throw UsageError("--address: empty address");
            c.address = v;
          }};
}

template <class C>
constexpr Option<C> provider() {
  return {"--provider", "NAME", "libfabric provider (default tcp)", [](C& c, std::string_view v) {
            if (v.empty()) throw UsageError("--provider: empty name");
            c.provider = v;
          }};
}

template <class C>
constexpr Option<C> busy_poll(std::string_view help) {
  return {"--busy-poll", "", help, [](C& c, std::string_view) { c.busy_poll = true; }};
}

template <class C>
constexpr Option<C> wait(std::string_view help) {
  return {"--wait", "", help, [](C& c, std::string_view) { c.wait = true; }};
}

template <class C>
constexpr Option<C> op() {
  return {"--op", "OP",
          "write | read | send | write_flush_visibility |\n"
          "write_flush_persistent | atomic_write",
          [](C& c, std::string_view v) {
            const auto op = op_from_name(v);
            if (!op) throw UsageError("--op: unknown operation '" + std::string(v) + "'");
            c.op = *op;
            c.op_set = true;
          }};
}

template <class C>
constexpr Option<C> sizes(std::string_view help) {
  return {"--size", "BYTES[,BYTES...]", help,
          [](C& c, std::string_view v) { c.sizes = tools::parse_size_list("--size", v, kMaxSize); }};
}

template <class C>
constexpr Option<C> all() {
  return {"-a|--all", "",
          "every power-of-two size from 2 bytes to 8 MiB (or\n"
          "--all-max), one result per size; instead of --size",
          [](C& c, std::string_view) { c.all = true; }};
}

template <class C>
constexpr Option<C> all_max() {
  return {"--all-max", "BYTES", "with -a: the largest size (default 8m)", [](C& c, std::string_view v) {
            c.all_max = tools::parse_size("--all-max", v, kMaxSize);
            if (c.all_max < kAllMinSize) throw UsageError("--all-max: at least 2 bytes");
            c.all_max_set = true;
          }};
}

template <class C>
constexpr Option<C> duration() {
  return {"-D|--duration", "SECONDS",
          "run each size for SECONDS (decimals allowed) instead of\n"
          "a number of operations; exclusive with --iters",
          [](C& c, std::string_view v) {
            const std::string text(v);
            char* end = nullptr;
            const double d = std::strtod(text.c_str(), &end);
            if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(d))
              throw UsageError("-D: not a number: '" + text + "'");
            if (d < 0.01 || d > kMaxDuration)
              throw UsageError("-D: must be between 0.01 and " + std::to_string(static_cast<int>(kMaxDuration)) +
                               " seconds");
            c.duration = d;
          }};
}

template <class C>
constexpr Option<C> report_gbits() {
  return {"--report_gbits", "",
          "bandwidth in Gb/s (1e9 bits per second) instead of GB/s\n"
          "in the table and the plot (JSON has both)",
          [](C& c, std::string_view) { c.report_gbits = true; }};
}

template <class C>
constexpr Option<C> qd() {
  return {"--qd", "N",
          "operations outstanding per connection (default 16;\n"
          "latency ops force 1)",
          [](C& c, std::string_view v) {
            const auto q = tools::parse_u64("--qd", v);
            if (q == 0 || q > kMaxQd) throw UsageError("--qd: must be 1.." + std::to_string(kMaxQd));
            c.qd = static_cast<unsigned>(q);
            c.qd_set = true;
          }};
}

template <class C>
constexpr Option<C> iters(std::string_view help) {
  return {"--iters", "N", help, [](C& c, std::string_view v) {
            const auto n = tools::parse_u64("--iters", v);
            if (n == 0 || n > kMaxIters) throw UsageError("--iters: must be 1.." + std::to_string(kMaxIters));
            c.iters = n;
          }};
}

template <class C>
constexpr Option<C> json() {
  return {"--json", "",
          "print one JSON object per size instead of the table\n"
          "(the results and every effective setting)",
          [](C& c, std::string_view) { c.json = true; }};
}

template <class C>
constexpr Option<C> help() {
  return {"--help", "", "show this help", [](C& c, std::string_view) { c.help = true; }};
}

}  // namespace options

/// The checks of a parsed configuration, in two halves so that a tool can
/// add its own in between. validate_role: --help, the role, --port, and no
/// client option on a server; true when `c` is a client's, to be checked
/// further.
inline bool validate_role(const CommonConfig& c) {
  if (c.help) return false;
  if (c.role == Role::none) throw tools::UsageError("one of --server or --client HOST is required");
  if (!c.port_set) throw tools::UsageError("--port is required");
  if (c.role == Role::server) {
    if (c.op_set || !c.sizes.empty() || c.all || c.all_max_set || c.qd_set || c.iters != 0 || c.duration != 0 ||
        c.report_gbits || c.json)
      throw tools::UsageError(
          "--op, --size, -a, --all-max, --qd, --iters, -D, --report_gbits and --json are client options");
    return false;
  }
  return true;
}

/// The client's half: --op and --size given and consistent; latency
/// operations run at qd 1.
inline void validate_client(CommonConfig& c) {
  if (!c.op_set) throw tools::UsageError("--op is required with --client");
  if (c.all && !c.sizes.empty()) throw tools::UsageError("-a and --size are exclusive");
  if (c.all_max_set && !c.all) throw tools::UsageError("--all-max goes with -a");
  if (c.all) c.sizes = all_sizes(c.all_max);
  if (c.sizes.empty()) throw tools::UsageError("--size (or -a) is required with --client");
  if (c.iters != 0 && c.duration != 0) throw tools::UsageError("--iters and -D are exclusive");
  if (c.op == Op::atomic_write && std::any_of(c.sizes.begin(), c.sizes.end(), [](std::size_t s) { return s != 8; }))
    throw tools::UsageError("atomic_write is an 8-byte operation: use --size 8 (not -a)");
  if (op_is_latency(c.op)) c.qd = 1;
}

}  // namespace remora::perf
