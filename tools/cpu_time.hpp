// tools/cpu_time.hpp - this process's CPU time, for the tools and
// benchmarks that report CPU per operation (remora-perf, remora-bench-raw,
// bench/bench_stats.hpp's users). Knows nothing of Remora.
#pragma once

#include <sys/resource.h>

namespace remora::tools {

/// User + system CPU seconds this process (all its threads) used so far
/// (getrusage(RUSAGE_SELF); 0 if it fails).
inline double cpu_seconds() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace remora::tools
