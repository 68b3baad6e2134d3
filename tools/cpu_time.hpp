// tools/cpu_time.hpp - this process's CPU time, for the tools and
// benchmarks that report CPU per operation (remora-perf, remora-bench-raw,
// bench/bench_stats.hpp's users), and the host's CPU time stolen by a
// hypervisor, which they report next to their figures. Knows nothing of
// Remora.
#pragma once

#include <sys/resource.h>

#include <cstdio>
#include <string_view>

namespace remora::tools {

/// User + system CPU seconds this process (all its threads) used so far
/// (getrusage(RUSAGE_SELF); 0 if it fails).
inline double cpu_seconds() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// The host's CPU time so far, in clock ticks summed over its CPUs, as the
/// first line of /proc/stat counts it: all of it (user, nice, system, idle,
/// iowait, irq, softirq, steal) and the part a hypervisor gave to other
/// guests while this one had work for the CPU (steal). On a shared virtual
/// machine that part swings from run to run and takes the CPUs a
/// measurement was counting on; both are 0 when not known.
struct HostTicks {
  unsigned long long total = 0, steal = 0;
};

/// The ticks of /proc/stat's text `stat` (its "cpu " line); zeros when the
/// line is missing or has fewer than the eight fields above (kernels before
/// 2.6.11 had no steal).
inline HostTicks parse_host_ticks(std::string_view stat) {
  constexpr std::string_view kLine = "cpu ";
  if (stat.substr(0, kLine.size()) != kLine) return {};
  unsigned long long f[8] = {};
  std::size_t at = kLine.size();
  for (unsigned long long& v : f) {
    while (at < stat.size() && stat[at] == ' ') ++at;
    if (at >= stat.size() || stat[at] < '0' || stat[at] > '9') return {};
    for (; at < stat.size() && stat[at] >= '0' && stat[at] <= '9'; ++at) v = v * 10 + (stat[at] - '0');
  }
  HostTicks t;
  for (unsigned long long v : f) t.total += v;
  t.steal = f[7];
  return t;
}

/// parse_host_ticks of this host's /proc/stat now.
inline HostTicks host_ticks() {
  char buf[512];
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (f == nullptr) return {};
  const std::size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  return parse_host_ticks(std::string_view(buf, n));
}

/// The percentage of the host's CPU time stolen between two readings (0 to
/// 100 of all its CPUs' time); negative when not known (no /proc/stat, or no
/// tick passed).
inline double steal_percent(const HostTicks& before, const HostTicks& after) {
  if (after.total <= before.total || after.steal < before.steal) return -1;
  return 100.0 * static_cast<double>(after.steal - before.steal) / static_cast<double>(after.total - before.total);
}

}  // namespace remora::tools
