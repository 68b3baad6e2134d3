// bench/bench_stats.hpp - the small measurement helpers the same-host
// benchmarks share (remora-bench-samehost, remora-bench-ucx-user): the
// median and a percentile of samples, this process's CPU time, and the two
// number formats of their JSON and table output.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
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
