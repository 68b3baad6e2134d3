// tools/perf_report.hpp - the results of remora-perf (tools/) and of its raw
// libfabric baseline remora-bench-raw (bench/): one measurement per size,
// its statistics (throughput; nearest-rank latency percentiles) and the two
// output formats, the table and the JSON lines that bench/compare.sh and
// tools/smoke.sh parse. Both tools print through Report, so their outputs
// cannot drift apart.
//
// Header-only and standard library only: remora-bench-raw includes it and
// must not link Remora.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "cpu_time.hpp"
#include "perf_cli.hpp"

namespace remora::perf {

/// The clock of every timestamp, in nanoseconds.
inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

/// One size's measured run.
struct Measurement {
  std::size_t size = 0;
  std::uint64_t iters = 0;
  unsigned qd = 0;
  double seconds = 0;  ///< first post to last completion
  /// User + system CPU of this process (all its threads) over the same
  /// loop; negative when not measured.
  double cpu_seconds = -1;
  /// The host's CPU time stolen by a hypervisor over the same loop, in
  /// percent of all its CPUs' time (tools::steal_percent); negative when not
  /// known.
  double steal_pct = -1;
  std::vector<std::uint64_t> lat_ns;  ///< per operation, post to completion
  /// Bidirectional runs: what the other side (the server) did at the same
  /// time, in the same units. Its rate adds to this side's.
  bool has_peer = false;
  std::uint64_t peer_iters = 0;
  double peer_seconds = 0;
};

struct Summary {
  double gbps = 0;         ///< 1e9 bytes per second (both directions when bidirectional)
  double mops = 0;         ///< 1e6 operations per second (idem)
  double gbits = 0;        ///< gbps in 1e9 bits per second
  double client_gbps = 0;  ///< this side's share of gbps
  double server_gbps = 0;  ///< the peer's share (bidirectional), else 0
  double p50_us = 0;
  double p99_us = 0;
  double p999_us = 0;
};

/// The nearest-rank `q` quantile (0 < q <= 1) of sorted nanoseconds, in
/// microseconds; 0 for no samples.
inline double percentile_us(const std::vector<std::uint64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

/// Sorts m.lat_ns and computes the summary.
inline Summary summarize(Measurement& m) {
  std::sort(m.lat_ns.begin(), m.lat_ns.end());
  Summary s;
  if (m.seconds > 0) {
    s.client_gbps = static_cast<double>(m.size) * static_cast<double>(m.iters) / m.seconds / 1e9;
    s.mops = static_cast<double>(m.iters) / m.seconds / 1e6;
  }
  if (m.has_peer && m.peer_seconds > 0) {
    s.server_gbps = static_cast<double>(m.size) * static_cast<double>(m.peer_iters) / m.peer_seconds / 1e9;
    s.mops += static_cast<double>(m.peer_iters) / m.peer_seconds / 1e6;
  }
  s.gbps = s.client_gbps + s.server_gbps;
  s.gbits = s.gbps * 8;
  s.p50_us = percentile_us(m.lat_ns, 0.50);
  s.p99_us = percentile_us(m.lat_ns, 0.99);
  s.p999_us = percentile_us(m.lat_ns, 0.999);
  return s;
}

namespace detail {
template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return std::string(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}
}  // namespace detail

/// What the lines of a run name: the engine ("remora", "raw-libfabric"), the
/// operation and what its completion meant (completion_name).
struct RunLabel {
  std::string_view engine;
  std::string_view op;
  std::string_view completion;
};

/// A JSON object built key by key (the "settings" of a run).
class JsonObject {
 public:
  // Strings are built with append(), not "literal" + std::string: GCC 12 at
  // -O3 reports a false -Wrestrict in the inlined operator+ (a warning, an
  // error here).
  JsonObject& str(std::string_view key, std::string_view v) {
    std::string quoted(1, '"');
    quoted.append(tools::json_escape(v)).push_back('"');
    return raw(key, quoted);
  }
  JsonObject& num(std::string_view key, double v) {
    return raw(key, std::isfinite(v) ? detail::format("%.6g", v) : std::string("null"));
  }
  JsonObject& integer(std::string_view key, std::uint64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  JsonObject& null(std::string_view key) { return raw(key, "null"); }
  JsonObject& sizes(std::string_view key, const std::vector<std::size_t>& v) {
    std::string list = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i != 0) list.push_back(',');
      list.append(std::to_string(v[i]));
    }
    list.push_back(']');
    return raw(key, list);
  }
  /// `json` must be a JSON value.
  JsonObject& raw(std::string_view key, const std::string& json) {
    if (!body_.empty()) body_ += ',';
    body_.push_back('"');
    body_.append(tools::json_escape(key)).append("\":").append(json);
    return *this;
  }
  std::string text() const { return "{" + body_ + "}"; }
  /// The members without the braces, to splice into another object.
  const std::string& members() const { return body_; }

 private:
  std::string body_;
};

/// This machine's host name ("?" when unknown).
inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

/// Online CPUs.
inline unsigned cpu_count() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : std::thread::hardware_concurrency();
}

/// The settings both tools record in their JSON (each adds its own after):
/// the tool and its versions, the machine, and every effective option of a
/// client run.
struct RunSettings {
  std::string_view tool;          ///< "remora-perf", "remora-bench-raw"
  std::string_view engine;        ///< RunLabel::engine
  std::string_view version;       ///< the Remora project version the tool was built from
  std::string libfabric_version;  ///< fi_version() at run time, "major.minor"
  std::string local_address;      ///< the client's address, empty when not chosen
  std::string_view completion;    ///< completion_name
  std::string_view target_mode;   ///< the server's: "busy-poll" or "asleep"
};

inline JsonObject common_settings(const CommonConfig& c, const RunSettings& r) {
  JsonObject o;
  o.str("tool", r.tool).str("engine", r.engine).str("remora_version", r.version);
  o.str("libfabric_version", r.libfabric_version);
  o.str("host", host_name()).integer("cpus", cpu_count());
  char when[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::gmtime_r(&now, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  o.str("started", when);
  o.str("provider", c.provider).str("server", c.host).integer("port", c.port);
  if (r.local_address.empty())
    o.null("address");
  else
    o.str("address", r.local_address);
  o.str("op", op_name(c.op)).sizes("sizes", c.sizes).boolean("all_sizes", c.all);
  o.integer("qd", c.qd);
  o.str("client_wait", c.wait ? "fd" : "busy-poll");
  if (c.duration != 0) {
    o.str("run_by", "duration").null("iters").num("duration_s", c.duration);
    o.num("warmup_s", warmup_seconds(c.duration));
  } else if (c.iters != 0) {
    o.str("run_by", "iterations").integer("iters", c.iters).null("duration_s");
    o.integer("warmup_iters", warmup_iters(c.iters));
  } else {
    o.str("run_by", "default").null("iters").null("duration_s");
  }
  o.str("completion", r.completion).str("target_mode", r.target_mode).str("client_mode", "busy-poll");
  o.integer("connections", c.connections).boolean("bidirectional", c.bidirectional);
  o.str("bandwidth_unit", c.report_gbits ? "Gb/s" : "GB/s");
  return o;
}

/// The table's two header lines.
inline std::string table_header(const RunLabel& run, unsigned qd, bool gbits = false) {
  std::string out =
      detail::format("# engine %.*s  op %.*s  completion %.*s  qd %u\n", static_cast<int>(run.engine.size()),
                     run.engine.data(), static_cast<int>(run.op.size()), run.op.data(),
                     static_cast<int>(run.completion.size()), run.completion.data(), qd);
  out += detail::format("%12s %10s %10s %12s %12s %12s\n", "size", gbits ? "Gb/s" : "GB/s", "Mops", "lat p50 us",
                        "lat p99 us", "lat p99.9 us");
  return out;
}

/// One row of the table, with its newline.
inline std::string table_row(const Measurement& m, const Summary& s, bool gbits = false) {
  return detail::format("%12zu %10.3f %10.4f %12.2f %12.2f %12.2f\n", m.size, gbits ? s.gbits : s.gbps, s.mops,
                        s.p50_us, s.p99_us, s.p999_us);
}

/// One JSON object, with its newline. "gbps" is always GB/s (1e9 bytes per
/// second), "gbits" the same in Gb/s; `extra` (members, may be empty) and
/// `settings` (an object, may be empty) follow the results.
inline std::string json_line(const RunLabel& run, const Measurement& m, const Summary& s, const std::string& extra = {},
                             const std::string& settings = {}) {
  std::string out = detail::format(
      "{\"op\":\"%.*s\",\"size\":%zu,\"iters\":%llu,\"qd\":%u,\"gbps\":%.6f,\"gbits\":%.6f,\"mops\":%.6f,"
      "\"lat_p50_us\":%.3f,\"lat_p99_us\":%.3f,\"lat_p999_us\":%.3f,\"seconds\":%.6f,\"engine\":\"%.*s\","
      "\"completion\":\"%.*s\"",
      static_cast<int>(run.op.size()), run.op.data(), m.size, static_cast<unsigned long long>(m.iters), m.qd, s.gbps,
      s.gbits, s.mops, s.p50_us, s.p99_us, s.p999_us, m.seconds, static_cast<int>(run.engine.size()), run.engine.data(),
      static_cast<int>(run.completion.size()), run.completion.data());
  if (m.cpu_seconds >= 0 && m.iters > 0)
    out += detail::format(",\"cpu_us_per_op\":%.3f", m.cpu_seconds / static_cast<double>(m.iters) * 1e6);
  if (m.steal_pct >= 0) out += detail::format(",\"steal_pct\":%.1f", m.steal_pct);
  if (m.has_peer) {
    out += detail::format(",\"client_gbps\":%.6f,\"server_gbps\":%.6f,\"server_iters\":%llu,\"server_seconds\":%.6f",
                          s.client_gbps, s.server_gbps, static_cast<unsigned long long>(m.peer_iters), m.peer_seconds);
  }
  if (!extra.empty()) out += "," + extra;
  if (!settings.empty()) out += ",\"settings\":" + settings;
  return out + "}\n";
}

/// One printed result: what a plot needs of it.
struct Row {
  std::size_t size = 0;
  Summary summary;
};

/// A client's output on stdout: the table (a header, then a row per size as
/// each size finishes), or with `json` one JSON object per size and line.
class Report {
 public:
  Report(const RunLabel& run, unsigned qd, bool json, bool gbits = false)
      : run_(run), qd_(qd), json_(json), gbits_(gbits) {}

  /// What every JSON line carries besides its results: the settings object
  /// (JsonObject::text()) and extra result members (JsonObject::members()).
  void set_settings(std::string settings) { settings_ = std::move(settings); }
  void set_extra(std::string members) { extra_ = std::move(members); }

  /// Before the first size: the table header (nothing with JSON).
  void begin() const {
    if (!json_) print(table_header(run_, qd_, gbits_));
  }

  /// A comment line of the table ("# " + text); nothing with JSON.
  void note(const std::string& text) const {
    if (!json_) print("# " + text + "\n");
  }

  /// Summarizes `m` (sorting its latencies) and prints its line.
  void add(Measurement& m) {
    const Summary s = summarize(m);
    rows_.push_back({m.size, s});
    print(json_ ? json_line(run_, m, s, extra_, settings_) : table_row(m, s, gbits_));
  }

  const std::vector<Row>& rows() const { return rows_; }

 private:
  static void print(const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }

  RunLabel run_;
  unsigned qd_;
  bool json_;
  bool gbits_;
  std::string settings_;
  std::string extra_;
  std::vector<Row> rows_;
};

/// The progress line of a long run, on stderr: by operations, or with
/// `duration` (seconds, -D) non-zero by time.
inline void print_progress(std::string_view program, std::string_view op, std::size_t size, std::uint64_t done,
                           std::uint64_t total, double seconds, double duration = 0) {
  if (duration > 0) {
    std::fprintf(stderr, "%.*s: %.*s size %zu: %llu ops, %.1f/%.1f s (%.0f%%)\n", static_cast<int>(program.size()),
                 program.data(), static_cast<int>(op.size()), op.data(), size, static_cast<unsigned long long>(done),
                 seconds, duration, std::min(100.0, 100.0 * seconds / duration));
    return;
  }
  std::fprintf(stderr, "%.*s: %.*s size %zu: %llu/%llu ops (%.0f%%), %.1f s\n", static_cast<int>(program.size()),
               program.data(), static_cast<int>(op.size()), op.data(), size, static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total), 100.0 * static_cast<double>(done) / static_cast<double>(total),
               seconds);
}

}  // namespace remora::perf
