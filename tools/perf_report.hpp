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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

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
  double seconds = 0;                 ///< first post to last completion
  std::vector<std::uint64_t> lat_ns;  ///< per operation, post to completion
};

struct Summary {
  double gbps = 0;  ///< 1e9 bytes per second
  double mops = 0;  ///< 1e6 operations per second
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
    s.gbps = static_cast<double>(m.size) * static_cast<double>(m.iters) / m.seconds / 1e9;
    s.mops = static_cast<double>(m.iters) / m.seconds / 1e6;
  }
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

/// The table's two header lines.
inline std::string table_header(const RunLabel& run, unsigned qd) {
  std::string out =
      detail::format("# engine %.*s  op %.*s  completion %.*s  qd %u\n", static_cast<int>(run.engine.size()),
                     run.engine.data(), static_cast<int>(run.op.size()), run.op.data(),
                     static_cast<int>(run.completion.size()), run.completion.data(), qd);
  out += detail::format("%12s %10s %10s %12s %12s %12s\n", "size", "GB/s", "Mops", "lat p50 us", "lat p99 us",
                        "lat p99.9 us");
  return out;
}

/// One row of the table, with its newline.
inline std::string table_row(const Measurement& m, const Summary& s) {
  return detail::format("%12zu %10.3f %10.4f %12.2f %12.2f %12.2f\n", m.size, s.gbps, s.mops, s.p50_us, s.p99_us,
                        s.p999_us);
}

/// One JSON object, with its newline.
inline std::string json_line(const RunLabel& run, const Measurement& m, const Summary& s) {
  return detail::format(
      "{\"op\":\"%.*s\",\"size\":%zu,\"iters\":%llu,\"qd\":%u,\"gbps\":%.6f,\"mops\":%.6f,"
      "\"lat_p50_us\":%.3f,\"lat_p99_us\":%.3f,\"lat_p999_us\":%.3f,\"engine\":\"%.*s\","
      "\"completion\":\"%.*s\"}\n",
      static_cast<int>(run.op.size()), run.op.data(), m.size, static_cast<unsigned long long>(m.iters), m.qd, s.gbps,
      s.mops, s.p50_us, s.p99_us, s.p999_us, static_cast<int>(run.engine.size()), run.engine.data(),
      static_cast<int>(run.completion.size()), run.completion.data());
}

/// A client's output on stdout: the table (a header, then a row per size as
/// each size finishes), or with `json` one JSON object per size and line.
class Report {
 public:
  Report(const RunLabel& run, unsigned qd, bool json) : run_(run), qd_(qd), json_(json) {}

  /// Before the first size: the table header (nothing with JSON).
  void begin() const {
    if (!json_) print(table_header(run_, qd_));
  }

  /// Summarizes `m` (sorting its latencies) and prints its line.
  void add(Measurement& m) const {
    const Summary s = summarize(m);
    print(json_ ? json_line(run_, m, s) : table_row(m, s));
  }

 private:
  static void print(const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }

  RunLabel run_;
  unsigned qd_;
  bool json_;
};

/// The progress line of a long run, on stderr.
inline void print_progress(std::string_view program, std::string_view op, std::size_t size, std::uint64_t done,
                           std::uint64_t total, double seconds) {
  std::fprintf(stderr, "%.*s: %.*s size %zu: %llu/%llu ops (%.0f%%), %.1f s\n", static_cast<int>(program.size()),
               program.data(), static_cast<int>(op.size()), op.data(), size, static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total), 100.0 * static_cast<double>(done) / static_cast<double>(total),
               seconds);
}

}  // namespace remora::perf
