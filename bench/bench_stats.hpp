// bench/bench_stats.hpp - the small measurement helpers the same-host
// benchmarks share (remora-bench-samehost, remora-bench-ucx-user): the
// median and a percentile of samples, this process's CPU time, and the two
// number formats of their JSON and table output.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_time.hpp"

namespace remora::bench {

/// The median of `v` (0 when empty).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The `p` quantile of `v` (0 <= p <= 1; nearest rank; 0 when empty).
/// Reorders `v`.
inline double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

/// User + system CPU seconds this process used so far, and the host's
/// CPU time a hypervisor stole (tools/cpu_time.hpp).
using tools::cpu_seconds;
using tools::host_ticks;
using tools::steal_percent;

/// One timed repetition: its operations, seconds, this process's CPU
/// seconds, and the host's CPU time a hypervisor stole meanwhile, in percent
/// (negative: not known).
struct Batch {
  std::uint64_t ops = 0;
  double seconds = 0, cpu = 0, steal_pct = -1;
};

/// Adds repetition `b` to a row of `size`-byte operations: its GB/s, CPU
/// microseconds per operation, stolen share (when known) and operations
/// (members gbps, cpu_us_per_op, steal_pct, ops).
template <class Row>
void add_batch(Row& r, const Batch& b) {
  r.gbps.push_back(static_cast<double>(b.ops) * static_cast<double>(r.size) / b.seconds / 1e9);
  r.cpu_us_per_op.push_back(b.cpu / static_cast<double>(b.ops) * 1e6);
  if (b.steal_pct >= 0) r.steal_pct.push_back(b.steal_pct);
  r.ops += b.ops;
}

/// "what: strerror(errno)".
inline std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

/// `v` with 6 decimals (JSON) and with 3, or `decimals`, (tables).
inline std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}
inline std::string fixed(double v, int decimals = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace remora::bench
